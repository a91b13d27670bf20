"""Catalog's domain errors."""

from __future__ import annotations

from nexus.contracts.errors import BadRequest, Conflict


class ReleaseInvalid(BadRequest):
    """The release cannot be installed here (dependencies, ownership, additivity, engine)."""

    default_code = "RELEASE_INVALID"


class VersionTaken(Conflict):
    """A version maps to one digest forever: this version was published with other content."""

    default_code = "VERSION_TAKEN"


class AlreadyInstalled(Conflict):
    default_code = "ALREADY_INSTALLED"


class OrgBusy(Conflict):
    """Another release job holds the org's writer lease."""

    default_code = "ORG_BUSY"


class StaleFencingToken(Exception):
    """The job's fencing token is no longer the org's current writer token."""
