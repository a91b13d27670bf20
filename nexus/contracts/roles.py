"""The deployable roles and the logical services they belong to."""

from enum import StrEnum


class Role(StrEnum):
    """One process runs exactly one role (`nexus serve --role=...`)."""

    GATEWAY = "gateway"
    RUNTIME_API = "runtime-api"
    RUNTIME_WORKER = "runtime-worker"
    CATALOG = "catalog"
    INTEGRATION = "integration"
    APP = "app"


#: Workload-token audiences: a signed call names the role it is for.
RUNTIME_AUDIENCE = Role.RUNTIME_API.value
CATALOG_AUDIENCE = Role.CATALOG.value


class LogicalService(StrEnum):
    """A logical service owns one logical database; roles of one service share it."""

    RUNTIME = "runtime"
    CATALOG = "catalog"
    INTEGRATION = "integration"


#: Port offsets from NEXUS_PORT_BASE, in this documented order.
ROLE_PORT_OFFSET: dict[Role, int] = {
    Role.GATEWAY: 0,
    Role.RUNTIME_API: 1,
    Role.RUNTIME_WORKER: 2,
    Role.CATALOG: 3,
    Role.INTEGRATION: 4,
    Role.APP: 5,
}

#: The logical service whose database a role uses (None: the role owns no database).
ROLE_SERVICE: dict[Role, LogicalService | None] = {
    Role.GATEWAY: None,
    Role.RUNTIME_API: LogicalService.RUNTIME,
    Role.RUNTIME_WORKER: LogicalService.RUNTIME,
    Role.CATALOG: LogicalService.CATALOG,
    Role.INTEGRATION: LogicalService.INTEGRATION,
    Role.APP: None,
}

#: Executable L1 Apps that ship an AppService (`--role=app --app=...`).
KNOWN_APPS: tuple[str, ...] = ("sfcrm",)


def upstream_name(role: Role, app: str | None = None) -> str:
    """The name an upstream is known by in the gateway route table (`app:sfcrm`)."""
    if role is Role.APP:
        if not app:
            raise ValueError("the app role needs an app name")
        return f"app:{app}"
    return role.value
