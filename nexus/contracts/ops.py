"""Wire models of the operational endpoints every role serves."""

from typing import Any, Literal

from pydantic import BaseModel, Field


class CheckResult(BaseModel):
    """One readiness check: a database, a migration head, an upstream."""

    name: str
    ok: bool
    detail: str = ""


class Readiness(BaseModel):
    status: Literal["ready", "not_ready"]
    role: str
    checks: list[CheckResult] = Field(default_factory=list)


class VersionInfo(BaseModel):
    version: str
    role: str
    app: str | None = None
    engine_generation: int
    capabilities: list[str]
    route_table_version: str | None = None
    #: an App service: the active release it follows (from its verified Catalog snapshot)
    release: dict[str, Any] | None = None


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    role: str
