"""SOSL (`FIND {term} [RETURNING ...]`) and the UI's term search over the search index.

Each RETURNING item is compiled by the SOQL compiler (`compile_select`: object permission, FLS on
fields, WHERE and ORDER BY, the caller's row predicate and the deleted filter), then
restricted to the records the index matches and ordered by relevance. Permission logic
lives only in the SOQL compiler; this module adds the text match and the rank.

Statements: one finding which objects have any match, then one per object that has.

Text matching: the term is split into words (letters and digits; a trailing `*` makes a
word a prefix); every word must occur in the same field. Words are quoted into the match
syntax, never passed through, so FTS operators in a term are plain text. Modes:

- `fts5` (SQLite): `MATCH` on the FTS5 table, ranked by bm25.
- `fulltext` (MariaDB/MySQL): `MATCH ... AGAINST (... IN BOOLEAN MODE)`, ranked by relevance.
- `like`: substring `LIKE` per word, ranked exact > starts with > contains. Used on TiDB (no
  FULLTEXT), for words shorter than `MIN_TOKEN` (InnoDB's `innodb_ft_min_token_size`), for
  InnoDB stopwords, and when asked for (`mode="like"`). Short words use it on SQLite too, so
  both backends answer a 2-letter term the same way (substring match).

A match in the Name field counts double.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import (
    ColumnElement,
    Float,
    and_,
    case,
    cast,
    func,
    literal,
    literal_column,
)
from sqlalchemy import select as sql_select
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.platform.db.backend import backend_of
from nexus.runtime.access.service import CallerAccess
from nexus.runtime.metadata.definitions import FieldDef, ObjectDef
from nexus.runtime.metadata.view import MetadataCache, MetadataView
from nexus.runtime.query.engine import Compiler, compile_select, projector
from nexus.runtime.query.parser import Path, Search, Select, SoqlError, parse_sosl
from nexus.runtime.search import models as m
from nexus.runtime.search.index import searchable_fields

Mode = Literal["auto", "like"]
MIN_TOKEN = 3
MAX_TOKENS = 10
DEFAULT_LIMIT = 200
MAX_LIMIT = 2000
MAX_MATCHES = 10_000  # field matches per object considered before access filtering
NAME_WEIGHT = 2.0
#: InnoDB's default full-text stopwords: a required stopword would match nothing.
INNODB_STOPWORDS = frozenset(
    [
        "a",
        "about",
        "an",
        "are",
        "as",
        "at",
        "be",
        "by",
        "com",
        "de",
        "en",
        "for",
        "from",
        "how",
        "i",
        "in",
        "is",
        "it",
        "la",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "what",
        "when",
        "where",
        "who",
        "will",
        "with",
        "und",
        "www",
    ]
)
_TOKEN = re.compile(r"([^\W_]+)(\*?)")
_SCOPES = {"EMAIL": ("email",), "PHONE": ("phone",)}


@dataclass(frozen=True)
class Token:
    text: str
    prefix: bool


def tokens(term: str) -> list[Token]:
    """The words of a term as the index tokenizer sees them (letters and digits)."""
    return [Token(t, bool(star)) for t, star in _TOKEN.findall(term)][:MAX_TOKENS]


def fts5_query(words: list[Token]) -> str:
    """Each word as an FTS5 string (so `OR`, `-`, `(`, `"` are text), ANDed; `word*` prefix."""
    return " ".join(
        '"' + w.text.replace('"', '""') + '"' + ("*" if w.prefix else "") for w in words
    )


def boolean_query(words: list[Token]) -> str:
    """InnoDB boolean mode: every word required (`+word`, `+word*` for a prefix)."""
    return " ".join("+" + re.sub(r"\W", "", w.text) + ("*" if w.prefix else "") for w in words)


def _like_pattern(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def choose_mode(session: AsyncSession, words: list[Token], mode: Mode = "auto") -> str:
    dialect = session.get_bind().dialect
    if mode == "like" or any(len(w.text) < MIN_TOKEN for w in words):
        return "like"
    if backend_of(dialect).full_text == "fts5":
        return "fts5"
    version = " ".join(str(p) for p in (dialect.server_version_info or ()))
    if "tidb" in version.lower() or any(w.text.lower() in INNODB_STOPWORDS for w in words):
        return "like"
    return "fulltext"


def _match(mode: str, words: list[Token]) -> tuple[ColumnElement[bool], ColumnElement[Any]]:
    """(filter, per-row score where higher is better) on `runtime_search_index`."""
    idx = m.search_index
    if mode == "fts5":
        table: ColumnElement[Any] = literal_column("runtime_search_index")
        return table.op("MATCH")(fts5_query(words)), -func.bm25(table)
    if mode == "fulltext":
        matched = idx.c.content.match(boolean_query(words))
        return matched, cast(matched, Float)
    first = words[0].text
    content = func.lower(idx.c.content)
    conditions = [idx.c.content.like(f"%{_like_pattern(w.text)}%", escape="\\") for w in words]
    whole = " ".join(w.text for w in words).lower()
    score = case(
        (content == whole, 3.0),
        (idx.c.content.like(f"{_like_pattern(first)}%", escape="\\"), 2.0),
        else_=1.0,
    )
    return and_(*conditions), score


def _fields(view: MetadataView, access: CallerAccess, obj: ObjectDef, scope: str) -> list[str]:
    """Searchable fields of `obj` the caller may read, narrowed by the IN ... FIELDS scope."""
    chosen: list[FieldDef] = [f for f in searchable_fields(obj) if access.field(view, obj, f)[0]]
    if scope == "NAME":
        chosen = [f for f in chosen if f.api_name == "Name"]
    elif scope in _SCOPES:
        chosen = [f for f in chosen if f.type in _SCOPES[scope]]
    return [f.api_name for f in chosen]


@dataclass
class _Hit:
    rank: float
    spec: int
    position: int
    record: dict[str, Any]


async def run_search(
    session: AsyncSession,
    *,
    view: MetadataView,
    access: CallerAccess,
    search: Search,
    mode: Mode = "auto",
) -> list[dict[str, Any]]:
    """Records matching the search that the caller may read, best match first (or in
    RETURNING order with each item's ORDER BY, when any item has one)."""
    words = tokens(search.term)
    limit = min(search.limit or DEFAULT_LIMIT, MAX_LIMIT)
    if not words:
        return []
    if not search.returning:
        search = every_object(view, access, search)
    dialect = session.get_bind().dialect.name
    compiler = Compiler(view, access, include_deleted=False, dialect=dialect)
    specs = []
    for spec in search.returning:
        obj = compiler.object(spec.object, spec.object_position)
        specs.append((spec, obj, _fields(view, access, obj, search.scope)))
    chosen = choose_mode(session, words, mode)
    matched, score = _match(chosen, words)
    idx = m.search_index
    candidates = {f for _, _, fields in specs for f in fields}
    objects = {obj.api_name for _, obj, fields in specs if fields}
    if not objects:
        return []
    present = set(
        (
            await session.execute(
                sql_select(idx.c.object_name)
                .distinct()
                .where(
                    idx.c.org_id == access.org_id,
                    idx.c.object_name.in_(sorted(objects)),
                    idx.c.field_name.in_(sorted(candidates)),
                    matched,
                )
            )
        ).scalars()
    )
    hits: list[_Hit] = []
    for number, (spec, obj, fields) in enumerate(specs):
        if not fields or obj.api_name not in present:
            continue
        weight = case((idx.c.field_name == "Name", NAME_WEIGHT), else_=literal(1.0))
        # the best MAX_MATCHES field matches, then summed per record (two levels: FTS5's
        # bm25 cannot be evaluated inside an aggregate, and the LIMIT keeps it a subquery)
        scored = (
            sql_select(idx.c.record_id, (score * weight).label("score"))
            .where(
                idx.c.org_id == access.org_id,
                idx.c.object_name == obj.api_name,
                idx.c.field_name.in_(fields),
                matched,
            )
            .order_by(score.desc())
            .limit(MAX_MATCHES)
            .subquery("search_scored")
        )
        matches = (
            sql_select(scored.c.record_id, func.sum(scored.c.score).label("rank"))
            .group_by(scored.c.record_id)
            .subquery("search_hits")
        )
        plan, stmt = compile_select(compiler, spec)
        stmt = stmt.add_columns(matches.c.rank.label("search_rank")).where(
            plan.table.c.id == matches.c.record_id
        )
        if not spec.order:
            stmt = stmt.order_by(None).order_by(matches.c.rank.desc(), plan.table.c.id)
        stmt = stmt.limit(min(spec.limit or limit, limit))
        project = projector(plan)
        for position, row in enumerate(await session.execute(stmt)):
            hits.append(_Hit(float(row[-1] or 0), number, position, project(row)))
    if any(spec.order for spec, _, _ in specs):
        hits.sort(key=lambda h: (h.spec, h.position))
    else:
        hits.sort(key=lambda h: (-h.rank, h.spec, h.position))
    return [h.record for h in hits[:limit]]


def every_object(view: MetadataView, access: CallerAccess, search: Search) -> Search:
    """`FIND {term}` without RETURNING, as Salesforce answers it: the Id of each match in
    every object the caller may read that has a searchable field in the search's scope."""
    chosen = sorted(
        o.api_name
        for o in view.objects.values()
        if access.object(view, o).read and _fields(view, access, o, search.scope)
    )
    returning = tuple(
        Select(
            fields=(Path(("Id",)),), children=(), count=False, object=name, object_position=(1, 1)
        )
        for name in chosen
    )
    return Search(term=search.term, scope=search.scope, returning=returning, limit=search.limit)


def term_search(
    view: MetadataView,
    access: CallerAccess,
    *,
    term: str,
    objects: list[str] | None = None,
    limit: int = 20,
) -> Search:
    """The UI's search box as a `Search`: Id and Name of every readable object with
    searchable fields (or of the given objects, which must be readable)."""
    if objects is None:
        chosen = sorted(
            (
                o.api_name
                for o in view.objects.values()
                if access.object(view, o).read and _fields(view, access, o, "ALL")
            ),
        )
    else:
        chosen = objects
    returning = tuple(
        Select(
            fields=(Path(("Id",)), Path(("Name",))),
            children=(),
            count=False,
            object=name,
            object_position=(1, 1),
        )
        for name in chosen
    )
    return Search(term=term, scope="ALL", returning=returning, limit=limit)


async def search_current(
    session: AsyncSession,
    *,
    cache: MetadataCache,
    access: CallerAccess,
    sosl: str | None = None,
    term: str | None = None,
    objects: list[str] | None = None,
    limit: int = 20,
    mode: Mode = "auto",
) -> list[dict[str, Any]]:
    """The search use case on the org's current metadata: SOSL text, or a plain term."""
    view = await cache.view(session, access.org_id)
    if sosl is not None:
        search = parse_sosl(sosl)
    elif term is not None:
        search = term_search(view, access, term=term, objects=objects, limit=limit)
    else:
        raise SoqlError("give a search or a term", code="MALFORMED_SEARCH")
    return await run_search(session, view=view, access=access, search=search, mode=mode)
