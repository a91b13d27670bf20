"""Durable private files: written whole (0600, fsynced) under a temporary name, then put in
place in one step, so a reader never sees half a file and a crash leaves none."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def write_private(path: Path, data: bytes, *, replace: bool) -> bool:
    """Write `data` to `path`. With `replace` an existing file is replaced atomically;
    without, an existing file is kept (first writer wins). True when this call wrote it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    if replace:
        tmp.replace(path)
        return True
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True
