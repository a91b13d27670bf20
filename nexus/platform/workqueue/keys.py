"""A work family is one installation's work in one org: `<org_id>/<installation>`.

The family leads every key of the work tables (the claim, source and target indexes, the
source and target lane rows, the family and queue rows), so the org leads them all: two
orgs' items never share a lane, a queue or a claim range, and a worker scoped to some orgs
(`WorkStore(orgs=...)`) can be fenced to them in the claim itself (ADR 0067). The families
table also holds the org as a column of its own, which is what scoping and fairness read.
"""

from __future__ import annotations

SEPARATOR = "/"
FAMILY_MAX = 64
ORG_MAX = 18


def family_key(org_id: str, installation: str) -> str:
    """The family of `installation`'s work in org `org_id`."""
    if not org_id or len(org_id) > ORG_MAX or SEPARATOR in org_id:
        raise ValueError("a work family needs an org id of at most 18 characters, without '/'")
    key = f"{org_id}{SEPARATOR}{installation}"
    if not installation or SEPARATOR in installation or len(key) > FAMILY_MAX:
        raise ValueError(
            f"a work family's installation is 1 to {FAMILY_MAX - len(org_id) - 1} characters,"
            " without '/'"
        )
    return key


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
