"""The scope model: what a user's token lets a client do, decided in Runtime for every use.

A token carries the scopes its client asked for (among those the client is registered
with); a user's own permissions are decided separately (profiles, sharing, System
Administrator), so a scope only narrows what a token can reach:

    api            the data APIs: the REST dialect, the UI API, imports, metadata deploys
    admin          the admin APIs (Runtime, Catalog and Integration consoles); the user must
                   also be a System Administrator or an operator
    openid         who the user is: ID token, userinfo, the identity URL; nothing else
    refresh_token  the token response carries a refresh token; grants no access itself
    full           every scope above except refresh_token (as on Salesforce)

A token with none of the scopes a use needs is refused with 403 `INSUFFICIENT_SCOPE`
(RFC 6750's insufficient_scope), before any use case runs.
"""

from __future__ import annotations

from collections.abc import Mapping

from nexus.contracts.errors import Forbidden
from nexus.contracts.identity import TrustedCall

API, ADMIN, OPENID = "api", "admin", "openid"

#: Who the user is: userinfo and the identity URL answer any of these.
WHO_AM_I = (OPENID, API, ADMIN)

#: The scopes (any one) a delegated call to each internal Runtime capability needs. A
#: capability missing here cannot be called with a delegation (fail closed at start-up).
DELEGATED: Mapping[str, tuple[str, ...]] = {
    "runtime.records": (API,),
    "runtime.metadata.apply": (API,),
    "identity.read": WHO_AM_I,
    "runtime.operators.check": (ADMIN,),
}


def require_scope(caller: TrustedCall, needs: tuple[str, ...], *, what: str) -> None:
    """403 INSUFFICIENT_SCOPE unless the caller's token holds one of `needs` (or `full`)."""
    if not any(caller.has_scope(scope) for scope in needs):
        raise Forbidden(
            f"{what} needs a token with the {' or '.join(needs)} scope",
            code="INSUFFICIENT_SCOPE",
        )
