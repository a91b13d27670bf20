"""The trusted caller context every Runtime use case receives (from the one interceptor)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict

#: A role exchanges a user's credential for a delegation here (identity in runtime-api).
EXCHANGE_PATH = "/internal/v1/identity/exchange"


class TrustedCall(BaseModel):
    """Who is calling, established only by Identity's interceptor, never by a request field."""

    model_config = ConfigDict(frozen=True)

    org_id: str
    user_id: str
    session_id: str
    client_id: str | None
    scopes: frozenset[str]
    security_epoch: int
    #: `workload_binding`: an accepted command running as the user bound to its workload
    via: Literal["access_token", "delegation", "workload_binding"]
    workload: str | None = None  # the calling role, for internal calls
    app_installation_id: str | None = None
    deadline_ms: int | None = None  # epoch milliseconds by which the caller stops waiting
    #: epoch seconds at which the presented access token expires (`via="access_token"`): what
    #: is derived from the token (a delegation) expires no later
    token_expires_at: int | None = None

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes or "full" in self.scopes
