"""The server-rendered login and consent page of the authorization endpoint (no scripts)."""

from __future__ import annotations

from html import escape

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;background:#f3f5f9;margin:0;
display:flex;min-height:100vh;align-items:center;justify-content:center;color:#1b2430}
main{background:#fff;padding:2rem 2.25rem;border-radius:12px;box-shadow:0 2px 16px #0002;
width:22rem}
h1{font-size:1.3rem;margin:0 0 .25rem}p{color:#4b5563;margin:.25rem 0 1rem}
label{display:block;font-size:.85rem;margin:.75rem 0 .25rem;color:#374151}
input[type=text],input[type=password]{width:100%;box-sizing:border-box;padding:.6rem;
border:1px solid #cbd5e1;border-radius:8px;font-size:1rem}
.error{background:#fee2e2;color:#991b1b;padding:.6rem;border-radius:8px;margin:.5rem 0}
.scopes{font-size:.85rem;color:#374151}.actions{display:flex;gap:.5rem;margin-top:1.25rem}
button{flex:1;padding:.65rem;border-radius:8px;border:0;font-size:1rem;cursor:pointer}
.allow{background:#2563eb;color:#fff}.deny{background:#e5e7eb;color:#111827}
"""

PASSED_THROUGH = (
    "response_type",
    "client_id",
    "redirect_uri",
    "scope",
    "state",
    "code_challenge",
    "code_challenge_method",
    "nonce",
)


def render_login(
    *, client_name: str, scopes: list[str], params: dict[str, str], error: str | None = None
) -> str:
    hidden = "".join(
        f'<input type="hidden" name="{name}" value="{escape(params[name])}">'
        for name in PASSED_THROUGH
        if params.get(name)
    )
    problem = f'<div class="error" role="alert">{escape(error)}</div>' if error else ""
    scope_text = ", ".join(escape(s) for s in scopes) or "basic access"
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>Sign in · Nexus</title><style>{_STYLE}</style></head><body><main>
<h1>Sign in to Nexus</h1><p><strong>{escape(client_name)}</strong> wants to access your data.</p>
{problem}<form method="post" action="/services/oauth2/authorize" autocomplete="on">{hidden}
<label for="username">Username</label>
<input id="username" name="username" type="text" autocomplete="username" required autofocus>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<p class="scopes">Access requested: {scope_text}</p>
<div class="actions"><button class="allow" type="submit" name="decision" value="allow">
Sign in and allow</button><button class="deny" type="submit" name="decision" value="deny"
formnovalidate>Deny</button></div></form></main></body></html>"""


def render_error(message: str) -> str:
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>Sign-in error · Nexus</title><style>{_STYLE}</style></head><body><main>
<h1>This sign-in link is not valid</h1><div class="error" role="alert">{escape(message)}</div>
<p>Return to the application and start again.</p></main></body></html>"""
