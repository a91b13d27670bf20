"""Webhook bodies too large for their receipt row: kept as files under the var dir,
content-addressed (`ingress/bodies/<sha[:2]>/<sha>`, fsynced), referenced from receipts as
`var:<relative path>`, and removed once no receipt references them.

Removal (`sweep_orphans`, run by the retention loop) never races an ingest into losing a
body: an ingest that finds its file already there touches it (fresh mtime) instead of
skipping it; the sweep only considers files untouched for `grace_s`, checks that no receipt
references them, then renames the file aside and looks at the mtime again — a file touched
in between is put back (any file at that path holds the same bytes), otherwise it is
deleted. An ingest whose touch finds the file gone writes it anew. Writers' leftover
temporary files and interrupted sweeps' renamed files are removed after the same grace.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.integration.ingress import models as ingress_tables
from nexus.platform.db.engine import reading
from nexus.platform.files import write_private

BODIES = Path("ingress") / "bodies"
SCHEME = "var:"
#: a body file younger than this is never removed (an ingest may be about to reference it)
GRACE_SECONDS = 3600.0


def keep_body(var_dir: Path, sha256: str, body: bytes) -> str:
    """Store `body` (or refresh the file already holding it); returns its reference."""
    relative = BODIES / sha256[:2] / sha256
    path = var_dir / relative
    try:
        os.utime(path)  # already kept: a fresh mtime keeps the sweep away from it
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, body, replace=True)
    return SCHEME + relative.as_posix()


def read_body(var_dir: Path, ref: str) -> bytes:
    """The bytes behind a receipt's reference; ValueError for one outside the var dir."""
    root = var_dir.resolve()
    path = (root / ref.removeprefix(SCHEME)).resolve()
    if not ref.startswith(SCHEME) or not path.is_relative_to(root):
        raise ValueError("the receipt's body reference is not a var-dir file")
    return path.read_bytes()


async def sweep_orphans(
    engine: AsyncEngine, var_dir: Path, *, grace_s: float = GRACE_SECONDS, batch: int = 500
) -> int:
    """Remove body files no receipt references (see the module docstring); returns how
    many were removed."""
    cutoff = time.time() - grace_s
    old_files, leftovers = await asyncio.to_thread(_old_files, var_dir / BODIES, cutoff)
    removed = 0
    for path in leftovers:
        removed += await asyncio.to_thread(_discard, path, cutoff)
    for start in range(0, len(old_files), batch):
        chunk = {SCHEME + p.relative_to(var_dir).as_posix(): p for p in old_files[start:][:batch]}
        receipts = ingress_tables.ingress_receipt
        async with reading(engine) as conn:
            rows = await conn.execute(
                select(receipts.c.body_ref).where(receipts.c.body_ref.in_(sorted(chunk))).distinct()
            )
            referenced = {str(r[0]) for r in rows}
        for ref, path in chunk.items():
            if ref not in referenced:
                removed += await asyncio.to_thread(_discard, path, cutoff, restore=True)
    return removed


def _old_files(root: Path, cutoff: float) -> tuple[list[Path], list[Path]]:
    """(body files untouched since `cutoff`, stale temporary/renamed files)."""
    bodies: list[Path] = []
    leftovers: list[Path] = []
    if not root.is_dir():
        return bodies, leftovers
    for shard in root.iterdir():
        if not shard.is_dir():
            continue
        for path in shard.iterdir():
            try:
                if path.stat().st_mtime >= cutoff:
                    continue
            except FileNotFoundError:
                continue
            (leftovers if path.name.startswith(".") else bodies).append(path)
    return bodies, leftovers


def _discard(path: Path, cutoff: float, *, restore: bool = False) -> bool:
    """Delete `path` unless it was touched since `cutoff` (then, with `restore`, it goes
    back where it was). True when it was deleted."""
    if not restore:
        path.unlink(missing_ok=True)
        return True
    aside = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.gone")
    try:
        path.rename(aside)
    except FileNotFoundError:
        return False  # another sweep took it
    if aside.stat().st_mtime >= cutoff:  # an ingest touched it after we looked: keep it
        aside.replace(path)
        return False
    aside.unlink()
    return True
