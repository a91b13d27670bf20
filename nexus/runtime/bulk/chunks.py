"""A bulk job's chunks as runtime-worker runs them (ADR 0077), as the job's creator.

Ingest: one item saves one stored chunk (`service.CHUNK` rows) with `mutate` (partial
success, in batches of `MAX_BATCH`, validation rules, flows and history as any save) and
stores each row's outcome on the chunk, advances the job's counts, and (the runner) enqueues
the next chunk's item and completes its own, all in one transaction that the item's lease
fences: a crash or a lost lease loses at most that chunk, which runs again from its
uploaded rows. The first chunk checks the upload's header against the object: a column that
is not a field fails the job (`InvalidBatch : Field name not found : X`).

Query: one item runs one page of the query (`run_query`, `PAGE` records, after the records
already written) and stores it as a chunk, so the worker holds one page at a time whatever
the result's size.

The user is re-read for every chunk (an inactive user fails the job, as an object that is
gone does), and so are the user's access and the org's metadata.
"""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.identity import TrustedCall
from nexus.contracts.records import (
    MAX_BATCH,
    ErrorCategory,
    ItemResult,
    MutateItem,
    MutateRequest,
    RecordError,
)
from nexus.identity.api import Directory
from nexus.platform.db.clock import db_now_ms
from nexus.runtime.access.service import AccessCache
from nexus.runtime.bulk.repository import BulkRepository
from nexus.runtime.inbox.repository import InboxRepository
from nexus.runtime.metadata.definitions import FieldDef, ObjectDef
from nexus.runtime.metadata.view import MetadataCache, MetadataView
from nexus.runtime.query.engine import run_query
from nexus.runtime.records.mutate import mutate

WORKLOAD = "runtime-bulk"
#: Records per query page (the query engine's largest page).
PAGE = 2000
#: A CSV value that sets a field to null (Salesforce's convention); an empty one is "not set".
NULL = "#N/A"
TRUE = frozenset({"true", "1", "yes", "y"})
FALSE = frozenset({"false", "0", "no", "n"})
NOT_SETTABLE = ("formula", "auto_number")


async def start(session: AsyncSession, org_id: str, job_id: str) -> None:
    """A job is InProgress from its first chunk's claim (the processing time starts); a
    Bulk API 1.0 batch's item (`<job_id>/<batch_id>`) starts its batch."""
    if "/" in job_id:
        from nexus.runtime.bulk import batches  # noqa: PLC0415 - it builds on this module

        await batches.start(session, org_id, job_id)
        return
    await BulkRepository(session).update_job(
        org_id, job_id, states=("UploadComplete",), state="InProgress", started_at_ms=db_now_ms()
    )


async def fail(session: AsyncSession, org_id: str, job_id: str, error: str) -> None:
    """A chunk kept failing: the job fails (the chunks not saved are its unprocessed rows);
    a Bulk API 1.0 batch's item fails its batch."""
    if "/" in job_id:
        from nexus.runtime.bulk import batches  # noqa: PLC0415 - it builds on this module

        await batches.fail(session, org_id, job_id, error)
        return
    await BulkRepository(session).finish(org_id, job_id, state="Failed", error=error)


async def run_as(session: AsyncSession, job: Any) -> TrustedCall | None:
    user = await InboxRepository(session).active_user(job.org_id, job.user_id)
    if user is None:
        return None
    return TrustedCall(
        org_id=job.org_id,
        user_id=user.user_id,
        session_id="",
        client_id=None,
        scopes=frozenset({"api"}),
        security_epoch=user.security_epoch,
        via="workload_binding",
        workload=WORKLOAD,
    )


async def run_chunk(
    session: AsyncSession,
    *,
    metadata: MetadataCache,
    access_cache: AccessCache,
    org_id: str,
    job_id: str,
) -> bool:
    """Run the job's next chunk; True when work remains after it (the runner enqueues the
    next chunk in this transaction), False once the job ended (or is gone)."""
    if "/" in job_id:
        from nexus.runtime.bulk import batches  # noqa: PLC0415 - it builds on this module

        return await batches.run_chunk(
            session, metadata=metadata, access_cache=access_cache, org_id=org_id, item=job_id
        )
    repo = BulkRepository(session)
    job = await repo.job(org_id, job_id)
    if job is None or job.state != "InProgress":
        return False  # aborted, deleted, or already ended
    caller = await run_as(session, job)
    if caller is None:
        await repo.finish(
            org_id, job_id, state="Failed", error="InvalidUser : the user is inactive"
        )
        return False
    view = await metadata.view(session, org_id)
    access = await access_cache.for_caller(session, caller)
    obj = view.object(job.object_name)
    if obj is None or not access.object(view, obj).read:
        await repo.finish(
            org_id, job_id, state="Failed", error=f"InvalidJob : no object {job.object_name}"
        )
        return False
    if job.kind == "query":
        return await _query_page(session, repo, job, view=view, access=access)
    return await _ingest_chunk(session, repo, job, view=view, access=access, caller=caller)


# ---------------------------------------------------------------------------- ingest


def problem_columns(job: Any, view: MetadataView, obj: ObjectDef, columns: list[str]) -> str:
    """Why the header cannot be saved, or ''."""
    if job.operation in ("delete", "hardDelete"):
        only_id = [c.lower() for c in columns] == ["id"]
        return "" if only_id else f"InvalidBatch : the {job.operation} job's data must hold only Id"
    seen: set[str] = set()
    problem = ""
    for column in columns:
        f = None if column.lower() == "id" else view.field(obj, column)
        if column.lower() == "id":
            seen.add("id")
        elif f is None:
            problem = problem or f"InvalidBatch : Field name not found : {column}"
        elif f.api_name.lower() in seen:
            problem = problem or f"InvalidBatch : Duplicate field name : {column}"
        else:
            seen.add(f.api_name.lower())
    needed = {"update": "id", "upsert": (job.external_id_field or "").lower()}.get(job.operation)
    if not problem and needed is not None and needed not in seen:
        problem = f"InvalidBatch : the {job.operation} job's data needs the column {needed}"
    return problem


#: One column of the upload: the field's API name and its definition (None: Id).
Column = tuple[str, FieldDef | None]


def _value(f: FieldDef, text: str) -> Any:
    if text == NULL:
        return None
    if f.type == "checkbox" and text.lower() in TRUE | FALSE:
        return text.lower() in TRUE
    return text


def _values(fields: list[Column], row: list[str]) -> tuple[str | None, dict[str, Any]]:
    """The row's Id (if it has the column) and the values it sets (an empty value sets
    nothing; `#N/A` sets null)."""
    values: dict[str, Any] = {}
    record_id = None
    for (name, f), text in zip(fields, row, strict=True):
        if f is None:
            record_id = text.strip() or None
        elif text != "" and f.type not in NOT_SETTABLE:
            values[name] = _value(f, text)
    return record_id, values


def _update_item(
    obj: ObjectDef, record_id: str | None, values: dict[str, Any]
) -> MutateItem | RecordError:
    if record_id is None:
        return RecordError(
            category=ErrorCategory.REQUIRED_FIELD_MISSING,
            message="Id not specified in an update call",
            fields=["Id"],
        )
    return MutateItem(op="update", object=obj.api_name, id=record_id, fields=values)


def _item(
    job: Any, obj: ObjectDef, fields: list[Column], row: list[str]
) -> MutateItem | RecordError:
    """The save of one uploaded row, or the row's error when it cannot be asked."""
    if len(row) != len(fields):
        return RecordError(
            category=ErrorCategory.INVALID_FIELD,
            message=f"the row has {len(row)} values for {len(fields)} columns",
        )
    if job.operation in ("delete", "hardDelete"):
        return MutateItem(op="delete", id=row[0].strip())
    record_id, values = _values(fields, row)
    by_id = job.operation == "update" or job.external_id_field == "Id"
    if job.operation == "insert" or (by_id and record_id is None and job.operation == "upsert"):
        return MutateItem(op="create", object=obj.api_name, fields=values)
    if by_id:
        return _update_item(obj, record_id, values)
    external = values.pop(job.external_id_field, None)
    if external in (None, ""):
        return RecordError(
            category=ErrorCategory.REQUIRED_FIELD_MISSING,
            message=f"the external id {job.external_id_field} is empty",
            fields=[job.external_id_field],
        )
    return MutateItem(
        op="upsert",
        object=obj.api_name,
        external_id_field=job.external_id_field,
        external_id=str(external),
        fields=values,
    )


def _outcome(result: ItemResult | RecordError) -> list[Any]:
    """[id, created, error]: error None, or [category, message, fields]."""
    if isinstance(result, RecordError):
        return [None, False, [result.category.value, result.message, result.fields]]
    if result.success:
        return [result.id, result.created, None]
    first = (
        result.errors[0]
        if result.errors
        else RecordError(category=ErrorCategory.CONFLICT, message="the record was not saved")
    )
    return [result.id, False, [first.category.value, first.message, first.fields]]


def _column(view: MetadataView, obj: ObjectDef, name: str) -> Column:
    f = None if name.lower() == "id" else view.field(obj, name)
    return ("Id", None) if f is None else (f.api_name, f)


async def _ingest_chunk(
    session: AsyncSession,
    repo: BulkRepository,
    job: Any,
    *,
    view: MetadataView,
    access: Any,
    caller: TrustedCall,
) -> bool:
    org_id, job_id = job.org_id, job.job_id
    obj = view.object(job.object_name)
    if obj is None:  # pragma: no cover - run_chunk checked it
        return False
    columns = [str(c) for c in orjson.loads(job.columns or "[]")]
    problem = problem_columns(job, view, obj, columns)
    if problem:
        await repo.finish(org_id, job_id, state="Failed", error=problem[:1000])
        return False
    if job.operation == "hardDelete":
        user = await Directory(session).user(org_id, job.user_id)
        if user is None or not user["is_admin"]:
            error = "InvalidUser : hardDelete needs a System Administrator"
            await repo.finish(org_id, job_id, state="Failed", error=error)
            return False
    seq = int(job.next_chunk)
    chunk = await repo.chunk(org_id, job_id, seq)
    if chunk is None:  # every chunk was saved
        await repo.finish(org_id, job_id, state="JobComplete", error=None)
        return False
    rows: list[list[str]] = orjson.loads(chunk.data)
    outcomes = await save_rows(
        session, job, obj, columns, rows, view=view, access=access, caller=caller
    )
    failed = sum(1 for o in outcomes if o[2] is not None)
    await repo.save_outcomes(
        org_id, job_id, seq, outcomes=orjson.dumps(outcomes).decode(), failed=failed
    )
    await repo.advance(org_id, job_id, next_chunk=seq + 1, processed=len(rows), failed=failed)
    if seq + 1 >= int(job.chunks):
        await repo.finish(org_id, job_id, state="JobComplete", error=None)
        return False
    return True


async def save_rows(
    session: AsyncSession,
    job: Any,
    obj: ObjectDef,
    columns: list[str],
    rows: list[list[str]],
    *,
    view: MetadataView,
    access: Any,
    caller: TrustedCall,
) -> list[list[Any]]:
    """Save uploaded rows as the job's operation asks (partial success): each row's
    outcome, `[id, created, error]`."""
    fields = [_column(view, obj, c) for c in columns]
    asked = [_item(job, obj, fields, row) for row in rows]
    outcomes: list[list[Any]] = [[]] * len(asked)
    pending = [(i, a) for i, a in enumerate(asked) if isinstance(a, MutateItem)]
    for i, a in enumerate(asked):
        if isinstance(a, RecordError):
            outcomes[i] = _outcome(a)
    for start in range(0, len(pending), MAX_BATCH):
        batch = pending[start : start + MAX_BATCH]
        answer = await mutate(
            session,
            view=view,
            access=access,
            caller=caller,
            request=MutateRequest(items=[item for _, item in batch], all_or_none=False),
        )
        for (i, _), result in zip(batch, answer.results, strict=True):
            outcomes[i] = _outcome(result)
    if job.operation == "hardDelete":
        ids = [o[0] for o in outcomes if o[2] is None and o[0]]
        await _purge(session, view, obj, job.org_id, ids)
    return outcomes


async def _purge(
    session: AsyncSession, view: MetadataView, obj: ObjectDef, org_id: str, ids: list[str]
) -> None:
    """hardDelete: the records just deleted leave the recycle bin (they cannot be undeleted)."""
    if not ids:
        return
    table = view.table(obj)
    await session.execute(
        delete(table).where(
            table.c.org_id == org_id, table.c.id.in_(ids), table.c.is_deleted.is_(True)
        )
    )


# ---------------------------------------------------------------------------- query


def text_value(value: Any) -> str | None:
    """A result value as CSV text (None: null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    return str(value)


def _get(record: dict[str, Any], key: str) -> Any:
    if key in record:
        return record[key]
    lowered = key.lower()  # the query may spell a name in another case than the record
    return next((v for k, v in record.items() if k.lower() == lowered), None)


def flatten(record: dict[str, Any], paths: list[list[str]]) -> list[str | None]:
    """A result record's values in the query's column order (parent fields by path)."""
    out: list[str | None] = []
    for parts in paths:
        value: Any = record
        for part in parts:
            value = _get(value, part) if isinstance(value, dict) else None
            if value is None:
                break
        out.append(text_value(value))
    return out


async def _query_page(
    session: AsyncSession, repo: BulkRepository, job: Any, *, view: MetadataView, access: Any
) -> bool:
    org_id, job_id = job.org_id, job.job_id
    page = await run_query(
        session,
        view=view,
        access=access,
        soql=job.soql or "",
        include_deleted=job.operation == "queryAll",
        page_size=PAGE,
        start=int(job.records_processed),
    )
    columns = [str(c) for c in orjson.loads(job.columns or "[]")]
    paths = [c.split(".") for c in columns]
    rows = [flatten(r, paths) for r in page.records]
    seq = int(job.chunks)
    if rows:
        await repo.insert_chunks(
            [
                {
                    "org_id": org_id,
                    "job_id": job_id,
                    "seq": seq,
                    "records": len(rows),
                    "data": orjson.dumps(rows).decode(),
                    "outcomes": None,
                    "failed": 0,
                    "done": True,
                }
            ]
        )
        await repo.update_job(
            org_id,
            job_id,
            chunks=seq + 1,
            records_processed=int(job.records_processed) + len(rows),
        )
    if page.done or not rows:
        await repo.finish(org_id, job_id, state="JobComplete", error=None)
        return False
    return True
