"""CSV import jobs (ADR 0040): accept an upload, then run it in chunks as the uploading user.

Accepting parses the CSV, maps its columns to fields the user may edit (given, or matched by
API name or label), and stores the job, its rows and the work item of its first chunk in one
transaction (`queue.py`, ADR 0062). The item's holder takes the next `CHUNK` rows, saves them
with `mutate` (partial success) as the user, deletes the saved rows, keeps only the error of a
failed row (category and field names, or a validation rule's message; never a value), and
advances the job's progress in the same transaction, which also enqueues the next chunk's
item and completes its own (the item's lease token fences the commit): a crash loses at most
the chunk in flight, which the engine runs again. The user's access is re-read for every
chunk; a deactivated user fails the job.
"""

from __future__ import annotations

import csv
import io
import json
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.errors import BadRequest, Forbidden, NotFound
from nexus.contracts.identity import TrustedCall
from nexus.contracts.records import ErrorCategory, MutateItem, MutateRequest, RecordError
from nexus.platform.db.clock import read_now_ms
from nexus.runtime.access.service import AccessCache, CallerAccess
from nexus.runtime.imports.queue import enqueue_chunk
from nexus.runtime.imports.repository import ImportRepository
from nexus.runtime.inbox.repository import InboxRepository
from nexus.runtime.metadata.definitions import FieldDef, ObjectDef
from nexus.runtime.metadata.view import MetadataCache, MetadataView
from nexus.runtime.records.mutate import mutate

CHUNK = 100
#: The doorbell (docs/adr/0055) rung after the commit that accepted a job: the imports
#: worker looks now instead of at its idle poll.
BELL = b"imports"
MAX_ROWS = 50_000
WORKLOAD = "runtime-import"
TRUE = frozenset({"true", "1", "yes", "y"})
FALSE = frozenset({"false", "0", "no", "n"})
#: categories whose message is safe to keep (no values in it)
KEEP_MESSAGE = frozenset({ErrorCategory.VALIDATION_RULE, ErrorCategory.REQUIRED_FIELD_MISSING})


class InvalidImport(BadRequest):
    default_code = "INVALID_IMPORT"


@dataclass(frozen=True)
class Upload:
    object: str
    mode: str  # insert | upsert
    external_id_field: str | None
    mapping: dict[str, str] | None  # CSV column -> field; None: match by name
    csv_text: str


def parse_csv(text: str) -> tuple[list[str], list[list[str]]]:
    try:
        rows = list(csv.reader(io.StringIO(text.removeprefix("\ufeff"))))
    except csv.Error:
        raise InvalidImport("the file is not a readable CSV") from None
    rows = [r for r in rows if any(cell.strip() for cell in r)]
    if len(rows) < 2:
        raise InvalidImport("the CSV needs a header row and at least one data row")
    if len(rows) - 1 > MAX_ROWS:
        raise InvalidImport(f"an import has at most {MAX_ROWS} rows")
    return [h.strip() for h in rows[0]], rows[1:]


def column_mapping(
    header: list[str], editable: list[FieldDef], asked: dict[str, str] | None
) -> dict[str, str]:
    """CSV column -> field API name; columns mapped to nothing are ignored."""
    by_name = {f.api_name.lower(): f.api_name for f in editable}
    if asked is None:
        by_label = {f.label.lower(): f.api_name for f in editable}
        found = {c: by_name.get(c.lower()) or by_label.get(c.lower()) for c in header}
        return {c: f for c, f in found.items() if f}
    problems = {}
    mapping = {}
    for column, field in asked.items():
        if column not in header:
            problems[column] = "no such column in the file"
        elif not field:
            continue
        elif field.lower() not in by_name:
            problems[column] = f"{field} is not a field you can set"
        else:
            mapping[column] = by_name[field.lower()]
    if problems:
        raise InvalidImport("the column mapping is not valid", fields=problems)
    return mapping


def _editable(view: MetadataView, access: CallerAccess, obj: ObjectDef) -> list[FieldDef]:
    return [
        f
        for f in access.readable_fields(view, obj)
        if access.field(view, obj, f)[1] and f.type not in ("formula", "auto_number")
    ]


async def accept(
    session: AsyncSession,
    *,
    view: MetadataView,
    access: CallerAccess,
    caller: TrustedCall,
    upload: Upload,
) -> dict[str, Any]:
    obj = view.object(upload.object)
    if obj is None or not access.object(view, obj).read:
        raise NotFound(f"no object named {upload.object!r}")
    rights = access.object(view, obj)
    if not rights.create or (upload.mode == "upsert" and not rights.edit):
        raise Forbidden(f"you cannot {upload.mode} {obj.plural_label}", code="INSUFFICIENT_ACCESS")
    header, rows = parse_csv(upload.csv_text)
    editable = _editable(view, access, obj)
    mapping = column_mapping(header, editable, upload.mapping)
    if not mapping:
        raise InvalidImport("no column of the file maps to a field")
    external = None
    if upload.mode == "upsert":
        f = view.field(obj, upload.external_id_field or "")
        if f is None or not f.external_id:
            raise InvalidImport("upsert needs an external id field of the object")
        external = f.api_name
        if external not in mapping.values():
            raise InvalidImport(f"no column maps to the external id field {external}")
    positions = {c: header.index(c) for c in mapping}
    job_id = uuid.uuid4().hex
    now = await read_now_ms(session)
    imports = ImportRepository(session)
    await imports.insert_job(
        org_id=caller.org_id,
        job_id=job_id,
        user_id=caller.user_id,
        object_name=obj.api_name,
        mode=upload.mode,
        external_id_field=external,
        mapping=json.dumps(mapping),
        state="queued",
        total=len(rows),
        processed=0,
        succeeded=0,
        failed=0,
        created_at_ms=now,
        updated_at_ms=now,
    )
    values = []
    for number, row in enumerate(rows, start=1):
        fields = {
            field: row[positions[column]].strip()
            for column, field in mapping.items()
            if positions[column] < len(row) and row[positions[column]].strip()
        }
        values.append(
            {
                "org_id": caller.org_id,
                "job_id": job_id,
                "row_no": number,
                "fields": json.dumps(fields),
            }
        )
    await imports.insert_rows(values)
    await enqueue_chunk(session, caller.org_id, job_id)
    return {**await status(session, caller, job_id), "mapping": mapping}


async def _job(session: AsyncSession, caller: TrustedCall, job_id: str) -> Any:
    row = await ImportRepository(session).job(caller.org_id, job_id)
    if row is None or row.user_id != caller.user_id:  # another user's import: not yours to see
        raise NotFound("no such import")
    return row


async def status(session: AsyncSession, caller: TrustedCall, job_id: str) -> dict[str, Any]:
    job = await _job(session, caller, job_id)
    return {
        "id": job.job_id,
        "object": job.object_name,
        "mode": job.mode,
        "state": job.state,
        "total": job.total,
        "processed": job.processed,
        "succeeded": job.succeeded,
        "failed": job.failed,
        "error": job.error,
    }


async def error_rows(
    session: AsyncSession, caller: TrustedCall, job_id: str
) -> list[tuple[int, str]]:
    await _job(session, caller, job_id)
    return await ImportRepository(session).error_rows(caller.org_id, job_id)


# ---------------------------------------------------------------------------- chunks


def _typed(obj_fields: dict[str, FieldDef], fields: dict[str, str]) -> dict[str, Any]:
    """CSV text as the value a field takes (checkboxes; everything else is coerced by the
    save, which reports what it cannot read)."""
    out: dict[str, Any] = {}
    for name, text in fields.items():
        f = obj_fields.get(name.lower())
        if f is not None and f.type == "checkbox" and text.lower() in TRUE | FALSE:
            out[name] = text.lower() in TRUE
        else:
            out[name] = text
    return out


def row_error(errors: list[RecordError]) -> str:
    first = errors[0] if errors else RecordError(category=ErrorCategory.CONFLICT, message="")
    if first.category in KEEP_MESSAGE:
        return first.message[:300]
    names = ", ".join(first.fields)
    return f"{first.category.value}: {names}"[:300] if names else first.category.value


def _items(
    job: Any, obj: ObjectDef, obj_fields: dict[str, FieldDef], rows: list[Any]
) -> tuple[list[tuple[int, MutateItem]], dict[int, str]]:
    """The save of each row, or the row's error when it cannot be asked (no external id)."""
    errors: dict[int, str] = {}
    items: list[tuple[int, MutateItem]] = []
    for row in rows:
        fields = _typed(obj_fields, json.loads(row.fields or "{}"))
        if job.mode != "upsert":
            items.append((row.row_no, MutateItem(op="create", object=obj.api_name, fields=fields)))
            continue
        external = fields.pop(job.external_id_field, None)
        if external in (None, ""):
            errors[row.row_no] = f"REQUIRED_FIELD_MISSING: {job.external_id_field}"
            continue
        item = MutateItem(
            op="upsert",
            object=obj.api_name,
            external_id_field=job.external_id_field,
            external_id=str(external),
            fields=fields,
        )
        items.append((row.row_no, item))
    return items, errors


async def run_chunk(
    session: AsyncSession,
    *,
    metadata: MetadataCache,
    access_cache: AccessCache,
    org_id: str,
    job_id: str,
) -> bool:
    """Save the job's next chunk; True when rows remain after it (the caller enqueues the
    next chunk in this transaction), False once the job is done or failed."""
    imports = ImportRepository(session)
    job = await imports.job(org_id, job_id)
    if job is None or job.state not in ("queued", "running"):
        return False
    run_as = await InboxRepository(session).active_user(org_id, job.user_id)
    if run_as is None:
        await imports.finish(org_id, job_id, state="failed", error="RUN_AS_INACTIVE: user inactive")
        return False
    caller = TrustedCall(
        org_id=org_id,
        user_id=run_as.user_id,
        session_id="",
        client_id=None,
        scopes=frozenset({"api"}),
        security_epoch=run_as.security_epoch,
        via="workload_binding",
        workload=WORKLOAD,
    )
    view = await metadata.view(session, org_id)
    access = await access_cache.for_caller(session, caller)
    obj = view.object(job.object_name)
    if obj is None:
        await imports.finish(org_id, job_id, state="failed", error="NOT_FOUND: no object")
        return False
    rows = await imports.rows_after(org_id, job_id, job.processed, CHUNK)
    if not rows:
        await imports.finish(org_id, job_id, state="done", error=None)
        return False
    items, errors = _items(job, obj, view.fields[obj.api_name.lower()], rows)
    if items:
        answer = await mutate(
            session,
            view=view,
            access=access,
            caller=caller,
            request=MutateRequest(items=[item for _, item in items], all_or_none=False),
        )
        for (number, _), result in zip(items, answer.results, strict=True):
            if not result.success:
                errors[number] = row_error(result.errors)
    numbers = [row.row_no for row in rows]
    saved = [n for n in numbers if n not in errors]
    if saved:
        await imports.delete_rows(org_id, job_id, saved)
    await imports.keep_row_errors(org_id, job_id, errors)
    await imports.advance(
        org_id, job_id, processed=numbers[-1], succeeded=len(saved), failed=len(errors)
    )
    if len(rows) < CHUNK or numbers[-1] >= job.total:  # that was the last chunk
        await imports.finish(org_id, job_id, state="done", error=None)
        return False
    return True


async def start(session: AsyncSession, org_id: str, job_id: str) -> None:
    """A queued job is running once its first chunk is claimed (as the user sees it)."""
    await ImportRepository(session).start(org_id, job_id)


async def fail(session: AsyncSession, org_id: str, job_id: str, error: str) -> None:
    """Fail a job whose chunk kept failing (the rows not processed stay unsaved)."""
    await ImportRepository(session).finish(org_id, job_id, state="failed", error=error[:300])
