"""Session handles (`00D<org>!<sealed>`): what they name, and that no edit of one opens."""

from __future__ import annotations

import re

import pytest

from nexus.identity.handles import HandleClaims, SessionHandles, looks_like_handle

ORG = "00D" + "a1B2c3D4e5F6g7H"
SESSION = "0Ak" + "Zy9Xw8Vu7Ts6Rq5"
#: @salesforce/core's `sfdc.accessTokenRegex`, anchored (what `sf org login access-token` takes)
SF_CLI = re.compile(r"^(00D\w{12,15})![.\w]*$")


def test_a_handle_names_its_org_session_and_expiry_in_the_sf_cli_shape() -> None:
    handles = SessionHandles(b"k" * 32)
    token = handles.issue(org_id=ORG, session_id=SESSION, expires_at=1_900_000_000)
    assert SF_CLI.fullmatch(token)
    assert token.startswith(ORG + "!")
    assert SESSION not in token  # opaque: the session id is sealed
    assert looks_like_handle(token)
    assert handles.read(token) == HandleClaims(ORG, SESSION, 1_900_000_000)
    # two handles of one session differ (fresh nonce): a refresh issues a new token
    assert handles.issue(org_id=ORG, session_id=SESSION, expires_at=1_900_000_000) != token


def test_no_edit_of_a_handle_opens() -> None:
    handles = SessionHandles(b"k" * 32)
    token = handles.issue(org_id=ORG, session_id=SESSION, expires_at=1_900_000_000)
    prefix, opaque = token.split("!")
    other_org = "00D" + "B" * 15
    assert handles.read(f"{other_org}!{opaque}") is None
    for i in range(len(opaque)):
        flipped = opaque[:i] + ("A" if opaque[i] != "A" else "B") + opaque[i + 1 :]
        assert handles.read(f"{prefix}!{flipped}") is None, i
    assert handles.read(token[:-1]) is None
    assert SessionHandles(b"j" * 32).read(token) is None  # another deployment's key


@pytest.mark.parametrize(
    "token",
    ["", "eyJhbGciOiJSUzI1NiJ9.e30.sig", f"{ORG}!", f"{ORG}!short", f"{ORG}!{'-' * 80}"],
)
def test_what_is_not_a_handle_is_refused(token: str) -> None:
    assert SessionHandles(b"k" * 32).read(token) is None
