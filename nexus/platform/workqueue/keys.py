"""A work family is one installation's work in one org: `<org_id>/<installation>`.

The family leads every key of the work tables (the claim, source and target indexes, the
source and target lane rows, the family and queue rows), so the org leads them all: two
orgs' items never share a lane, a queue or a claim range, and a worker scoped to some orgs
(`WorkStore(orgs=...)`) can be fenced to them in the claim itself (ADR 0067). The families
table also holds the org as a column of its own, which is what scoping and fairness read.
"""

from __future__ import annotations

from nexus.platform.ids import fit

SEPARATOR = "/"
FAMILY_MAX = 64
ORG_MAX = 18


def family_key(org_id: str, installation: str) -> str:
    """The family of `installation`'s work in org `org_id`; an installation longer than the
    room the org leaves is shortened stably (`ids.fit`), so every caller, the migration
    included, names one installation's family alike."""
    if not org_id or len(org_id) > ORG_MAX or SEPARATOR in org_id:
        raise ValueError("a work family needs an org id of at most 18 characters, without '/'")
    if not installation or SEPARATOR in installation:
        raise ValueError("a work family's installation is not empty and has no '/'")
    room = FAMILY_MAX - len(org_id) - len(SEPARATOR)
    return f"{org_id}{SEPARATOR}{fit(installation, room, digest=8)}"


def org_of(family: str) -> str:
    """The org a family's work belongs to; ValueError for a key that names none."""
    org, sep, installation = family.partition(SEPARATOR)
    if not sep or not org or not installation:
        raise ValueError("not a work family key (<org_id>/<installation>)")
    return org


def installation_of(family: str) -> str:
    """The installation (pack, or Runtime's own queue) a family's work is for."""
    org_of(family)
    return family.partition(SEPARATOR)[2]
