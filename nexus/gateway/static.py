"""Static bundles of the route table (`static = "name"` serves `<root>/<name>/dist`).

A bundle is a single-page application's build output: content-hashed files under `assets/`
are cached for a year (`immutable`), everything else is revalidated (`no-cache`), and a path
that names no file and does not look like one falls back to `index.html` (client-side
routing). A bundle that was never built answers 503 with a page that says how to build it.
No App semantics: only files, paths and cache headers.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from urllib.parse import unquote

from starlette.responses import FileResponse, HTMLResponse, Response

from nexus.contracts.errors import NotFound

IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
HASHED_DIR = "assets"
#: The SPA talks only to its own origin; no inline scripts, no framing.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'"
)
_PAGE_HEADERS = {
    "cache-control": REVALIDATE,
    "x-content-type-options": "nosniff",
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "referrer-policy": "same-origin",
}


#: Where an installed wheel carries the built bundles (`setup.py` copies them in).
PACKAGED_BUNDLES = Path(__file__).resolve().parents[1] / "web"


def default_static_root() -> Path:
    """The source tree (where `frontend/` lives) in a checkout, else the bundles the
    installed package carries."""
    source_tree = Path(__file__).resolve().parents[2]
    return source_tree if (source_tree / "pyproject.toml").is_file() else PACKAGED_BUNDLES


def _not_built(name: str) -> Response:
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Not built · Nexus'
        "</title></head><body><main><h1>The web interface is not built</h1>"
        f"<p>The <code>{name}</code> bundle has no build output on this server. Run "
        "<code>make frontend</code> (or <code>make run</code>) and reload.</p></main></body>"
        "</html>"
    )
    return HTMLResponse(body, status_code=503, headers={"cache-control": "no-store"})


class StaticBundle:
    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.dist = (root / name / "dist").resolve()

    def _file(self, relative: str) -> Path | None:
        parts = PurePosixPath(relative).parts
        if any(p in ("..", ".") or p.startswith(".") or "\\" in p for p in parts):
            return None
        candidate = self.dist.joinpath(*parts)
        return candidate if candidate.is_file() else None

    def serve(self, path: str, prefix: str) -> Response:
        """The response for a GET/HEAD of `path` (a path under this bundle's route)."""
        index = self.dist / "index.html"
        if not index.is_file():
            return _not_built(self.name)
        relative = unquote(path[len(prefix) :] if prefix != "/" else path).lstrip("/")
        found = self._file(relative) if relative else None
        if found is not None and found != index:
            hashed = relative.startswith(HASHED_DIR + "/")
            headers = {
                "cache-control": IMMUTABLE if hashed else REVALIDATE,
                "x-content-type-options": "nosniff",
            }
            return FileResponse(found, headers=headers)
        last = PurePosixPath(relative).name
        if relative.startswith(HASHED_DIR + "/") or "." in last:
            raise NotFound(f"no file {path}")
        return FileResponse(index, media_type="text/html", headers=_PAGE_HEADERS)
