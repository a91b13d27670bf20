"""A serving process's WAL checkpoints run on a thread of their own, not inside COMMITs
(ADR 0057): with them enabled, commits leave a full WAL alone and the thread copies it into
the database file; a file that goes away is forgotten, never created again."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from nexus.platform.db.engine import create_engine
from nexus.platform.db.sqlite import checkpoints as sqlite_checkpoints

pytestmark = pytest.mark.asyncio
ROWS = 3000  # ~1,100 pages of WAL: past SQLite's own 1,000-page autocheckpoint


@pytest.fixture
def checkpoints() -> Iterator[None]:
    yield
    sqlite_checkpoints.disable()


@contextlib.asynccontextmanager
async def _written(path: Path) -> AsyncIterator[None]:
    """Rows written in many commits, as a serving role makes them; the engine stays open
    meanwhile (the last connection's close checkpoints the WAL itself)."""
    engine = create_engine(f"sqlite+aiosqlite:///{path}", application_name="test")
    try:
        async with engine.begin() as conn:
            page = await conn.execute(text("PRAGMA wal_autocheckpoint"))
            assert page.scalar_one() == sqlite_checkpoints.SAFETY_NET_PAGES
            await conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)"))
        for start in range(0, ROWS, 300):
            async with engine.begin() as conn:
                await conn.execute(
                    text("INSERT INTO t (body) VALUES (:body)"),
                    [{"body": os.urandom(600).hex()} for _ in range(start, start + 300)],
                )
        yield
    finally:
        await engine.dispose()


def _size(path: Path | str) -> int:
    return os.stat(path).st_size


def _exists(path: Path) -> bool:
    return os.path.exists(path)


def _remove(database: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)


async def _eventually(condition: object, seconds: float = 5.0) -> bool:
    for _ in range(int(seconds / 0.05)):
        if condition():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.05)
    return False


async def test_commits_leave_the_checkpoint_to_the_thread(
    tmp_path: Path, checkpoints: None
) -> None:
    sqlite_checkpoints.enable(interval_s=0.05)
    database = tmp_path / "db.sqlite3"
    async with _written(database):
        # the rows reach the database file itself, by the thread (no commit crossed the
        # raised limit, and every connection is still open)
        assert await _eventually(lambda: _size(database) > ROWS * 1200)


async def test_no_commit_checkpoints_while_the_thread_is_on(
    tmp_path: Path, checkpoints: None
) -> None:
    sqlite_checkpoints.enable(interval_s=60)  # the thread will not look during this test
    database = tmp_path / "db.sqlite3"
    async with _written(database):
        assert _size(database) < ROWS * 1200 < _size(f"{database}-wal")


async def test_a_removed_database_is_forgotten_not_created_again(
    tmp_path: Path, checkpoints: None
) -> None:
    sqlite_checkpoints.enable(interval_s=0.05)
    database = tmp_path / "db.sqlite3"
    async with _written(database):
        assert await _eventually(lambda: _size(database) > ROWS * 1200)
    _remove(database)
    await asyncio.sleep(0.3)  # several intervals
    assert not _exists(database)


async def test_without_the_thread_sqlite_checkpoints_as_before(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite3"
    engine = create_engine(f"sqlite+aiosqlite:///{database}", application_name="test")
    try:
        async with engine.connect() as conn:
            page = await conn.execute(text("PRAGMA wal_autocheckpoint"))
            assert page.scalar_one() == 1000
    finally:
        await engine.dispose()
