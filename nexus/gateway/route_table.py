"""The static, versioned route table: path prefix -> upstream role (`routes.toml`)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from nexus.contracts.roles import KNOWN_APPS, Role, upstream_name

KNOWN_UPSTREAMS = frozenset(
    [upstream_name(r) for r in Role if r not in (Role.GATEWAY, Role.APP)]
    + [upstream_name(Role.APP, app) for app in KNOWN_APPS]
)

STATIC_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class RouteTableError(Exception):
    """The route table file is invalid; the message names the offending entry."""


class Route(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prefix: str
    #: Exactly one of: the upstream role to proxy to, or the static bundle to serve.
    upstream: str | None = None
    static: str | None = None
    #: Sub-paths (at a segment boundary) this route does not take, e.g. API prefixes that must
    #: stay a 404 rather than fall back to a static bundle's index page.
    except_under: tuple[str, ...] = ()
    strip_prefix: bool = False
    #: Replace the prefix with this path before proxying (`/webhooks/x` -> `/hooks/x`).
    upstream_prefix: str | None = None
    only: tuple[str, ...] | None = None
    methods: tuple[str, ...] | None = None
    #: Sub-paths (after the rewrite) answered only to a caller with the gateway's ops token.
    ops_token_only: tuple[str, ...] = ()
    #: Bodies up to `gateway_large_body_limit_bytes` instead of `gateway_body_limit_bytes`
    #: (an upstream that streams uploads and bounds each endpoint itself).
    large_bodies: bool = False

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not value.startswith("/") or (value != "/" and value.endswith("/")):
            raise ValueError("must start with '/' and not end with '/'")
        return value

    @field_validator("upstream_prefix")
    @classmethod
    def _upstream_prefix(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or value.endswith("/")):
            raise ValueError("must start with '/' and not end with '/'")
        return value

    @model_validator(mode="after")
    def _one_rewrite(self) -> Route:
        if self.strip_prefix and self.upstream_prefix is not None:
            raise ValueError("strip_prefix and upstream_prefix exclude each other")
        if (self.upstream is None) == (self.static is None):
            raise ValueError("a route has exactly one of upstream and static")
        if self.static is not None and (self.strip_prefix or self.upstream_prefix or self.only):
            raise ValueError("a static route takes no strip_prefix, upstream_prefix or only")
        return self

    @field_validator("static")
    @classmethod
    def _static(cls, value: str | None) -> str | None:
        if value is not None and not STATIC_NAME.fullmatch(value):
            raise ValueError("must be a bundle name (letters, digits, '-' and '_')")
        return value

    @field_validator("except_under", "ops_token_only")
    @classmethod
    def _sub_paths(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for prefix in value:
            if not prefix.startswith("/") or prefix.endswith("/"):
                raise ValueError("must start with '/' and not end with '/'")
        return value

    @field_validator("upstream")
    @classmethod
    def _upstream(cls, value: str | None) -> str | None:
        if value is not None and value not in KNOWN_UPSTREAMS:
            raise ValueError(f"unknown upstream (known: {', '.join(sorted(KNOWN_UPSTREAMS))})")
        return value

    @field_validator("methods")
    @classmethod
    def _methods(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return tuple(m.upper() for m in value) if value is not None else None

    def matches(self, path: str) -> bool:
        if any(path == p or path.startswith(p + "/") for p in self.except_under):
            return False
        return self.prefix in ("/", path) or path.startswith(self.prefix + "/")

    def upstream_path(self, path: str) -> str:
        if self.upstream_prefix is not None:
            return self.upstream_prefix + path[len(self.prefix) :]
        if not self.strip_prefix:
            return path
        rest = path[len(self.prefix) :]
        return rest or "/"


class _TableFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: str = Field(min_length=1)
    route: list[Route]


@dataclass(frozen=True)
class RouteTable:
    version: str
    routes: tuple[Route, ...]  # longest prefix first

    def match(self, path: str) -> Route | None:
        for route in self.routes:
            if route.matches(path):
                return route
        return None

    @property
    def upstreams(self) -> list[str]:
        return sorted({r.upstream for r in self.routes if r.upstream is not None})

    @property
    def static_bundles(self) -> list[str]:
        return sorted({r.static for r in self.routes if r.static is not None})


def parse_route_table(text: str, *, source: str = "routes.toml") -> RouteTable:
    try:
        parsed = _TableFile.model_validate(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise RouteTableError(f"{source}: not valid TOML ({exc})") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise RouteTableError(f"{source}: {where}: {first['msg']}") from None
    seen: set[str] = set()
    for route in parsed.route:
        if route.prefix in seen:
            raise RouteTableError(f"{source}: duplicate prefix {route.prefix!r}")
        seen.add(route.prefix)
    ordered = tuple(sorted(parsed.route, key=lambda r: len(r.prefix), reverse=True))
    return RouteTable(version=parsed.version, routes=ordered)


def load_route_table(path: Path | None = None) -> RouteTable:
    """The route table shipped with this build (or an explicit file)."""
    if path is not None:
        return parse_route_table(path.read_text(encoding="utf-8"), source=str(path))
    text = resources.files("nexus.gateway").joinpath("routes.toml").read_text(encoding="utf-8")
    return parse_route_table(text)
