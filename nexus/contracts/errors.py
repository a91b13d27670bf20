"""The one error envelope every Nexus role speaks, and the error tree behind it.

    NexusError (code, message, status, fields)
    +-- BadRequest             400  malformed input
    +-- Unauthorized           401  missing or invalid credentials
    +-- Forbidden              403  authenticated, not allowed (decided only in Runtime)
    +-- NotFound               404
    +-- Conflict               409  a concurrent writer won, a version moved
    +-- PayloadTooLarge        413  above an admission limit
    +-- ServiceUnavailable     503  not ready, draining, dependency not ready
    +-- UpstreamError          502  an upstream role could not be reached or broke the protocol
    +-- UpstreamTimeout        504  an upstream role did not answer within its deadline

Driver and HTTP-client exceptions are translated into these at the boundary where they are
raised; a 500 always means a bug.
"""

from typing import Any, ClassVar

from pydantic import BaseModel


class ErrorBody(BaseModel):
    """The JSON body of every error response produced by Nexus itself."""

    code: str
    message: str
    request_id: str | None = None
    fields: dict[str, str] | None = None


class NexusError(Exception):
    status: ClassVar[int] = 500
    default_code: ClassVar[str] = "INTERNAL_ERROR"

    def __init__(
        self, message: str, *, code: str | None = None, fields: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code or self.default_code
        self.message = message
        self.fields = fields

    def body(self, request_id: str | None = None) -> dict[str, Any]:
        return ErrorBody(
            code=self.code, message=self.message, request_id=request_id, fields=self.fields
        ).model_dump(exclude_none=True)


class BadRequest(NexusError):
    status = 400
    default_code = "BAD_REQUEST"


class Unauthorized(NexusError):
    status = 401
    default_code = "UNAUTHORIZED"


class Forbidden(NexusError):
    status = 403
    default_code = "FORBIDDEN"


class NotFound(NexusError):
    status = 404
    default_code = "NOT_FOUND"


class MethodNotAllowed(NexusError):
    status = 405
    default_code = "METHOD_NOT_ALLOWED"


class Conflict(NexusError):
    status = 409
    default_code = "CONFLICT"


class PayloadTooLarge(NexusError):
    status = 413
    default_code = "PAYLOAD_TOO_LARGE"


class ServiceUnavailable(NexusError):
    status = 503
    default_code = "SERVICE_UNAVAILABLE"


class UpstreamError(NexusError):
    status = 502
    default_code = "UPSTREAM_UNAVAILABLE"


class UpstreamTimeout(NexusError):
    status = 504
    default_code = "UPSTREAM_TIMEOUT"
