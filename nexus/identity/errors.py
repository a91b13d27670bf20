"""Identity's domain errors."""

from __future__ import annotations

from nexus.contracts.errors import BadRequest, NotFound, Unauthorized


class AuthenticationFailed(Unauthorized):
    """Wrong username or password, locked or inactive user: one error, so no enumeration."""

    default_code = "INVALID_LOGIN"

    def __init__(self) -> None:
        super().__init__("authentication failure")


class InvalidToken(Unauthorized):
    default_code = "INVALID_SESSION_ID"

    def __init__(self, message: str = "Session expired or invalid") -> None:
        super().__init__(message)


class UnknownUser(NotFound):
    default_code = "NOT_FOUND"


class InvalidIdentityInput(BadRequest):
    default_code = "INVALID_FIELD"
