"""`Mutate`: a bounded batch of create / update / delete / undelete / upsert items.

One unit of work, one metadata view, one caller access. Every item gets its own result; with
`all_or_none` the first failure rolls the whole batch back. Items with an idempotency key that
succeeded before return their original result and have no second effect.
Checks run per object group on the whole batch (see `RecordStore`): no per-record queries.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.errors import BadRequest
from nexus.contracts.identity import TrustedCall
from nexus.contracts.records import (
    MAX_BATCH,
    ErrorCategory,
    ErrorReason,
    ItemResult,
    MutateItem,
    MutateRequest,
    MutateResponse,
    RecordError,
)
from nexus.platform.db.clock import read_now_ms
from nexus.platform.ids import new_id, to_18
from nexus.platform.observability import get_logger
from nexus.runtime.access.service import CallerAccess
from nexus.runtime.formula.compiler import Formula
from nexus.runtime.formula.nodes import Context
from nexus.runtime.metadata.definitions import SYSTEM_FIELDS, FieldDef, ObjectDef
from nexus.runtime.metadata.view import MetadataView
from nexus.runtime.outbox.after_save import Saved, enqueue_after_save, has_after_save
from nexus.runtime.query.engine import load_parent_paths
from nexus.runtime.records.coercion import InvalidValue, coerce
from nexus.runtime.records.compose import with_composed_names
from nexus.runtime.records.read import own_formula_values
from nexus.runtime.records.store import RecordStore
from nexus.runtime.schema.spec import column_name
from nexus.runtime.search.index import index_changes

log = get_logger(__name__)
#: The database clock, once per mutation: built once, through `fast_sql` (an integer back).


class AllOrNoneRolledBack(Exception):
    """Raised inside the unit of work so it rolls back; carries the per-item results."""

    def __init__(self, response: MutateResponse) -> None:
        super().__init__("all-or-none batch rolled back")
        self.response = response


def _err(category: ErrorCategory, message: str, *fields: str) -> RecordError:
    return RecordError(category=category, message=message, fields=list(fields))


#: The system fields (any case) -> their api name: Runtime sets them, a caller never does.
_SYSTEM = {name.lower(): name for name in SYSTEM_FIELDS}


def _read_only(name: str, message: str) -> RecordError:
    return RecordError(
        category=ErrorCategory.INVALID_FIELD,
        message=message,
        fields=[name],
        reason=ErrorReason.READ_ONLY_FIELD,
    )


@dataclass
class _Work:
    index: int
    item: MutateItem
    obj: ObjectDef | None = None
    record_id: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    errors: list[RecordError] = field(default_factory=list)
    result: ItemResult | None = None
    digest: str = ""
    saved: dict[str, Any] | None = None  # every column as saved, for after-save flows
    prior: Any = None  # the row before an update

    @property
    def definition(self) -> ObjectDef:
        if self.obj is None:  # pragma: no cover - items without an object fail before use
            raise RuntimeError("item has no resolved object")
        return self.obj

    def fail(self, error: RecordError) -> None:
        self.errors.append(error)

    @property
    def failed(self) -> bool:
        return bool(self.errors)


@dataclass
class _Context:
    session: AsyncSession
    view: MetadataView
    access: CallerAccess
    caller: TrustedCall
    store: RecordStore
    now_ms: int

    @cached_property
    def now(self) -> datetime:
        return datetime.fromtimestamp(self.now_ms / 1000, tz=UTC).replace(tzinfo=None)

    def audit(self) -> dict[str, Any]:
        return {
            "last_modified_by_id": self.caller.user_id,
            "last_modified_date": self.now,
            "system_modstamp": self.now,
        }


async def mutate(
    session: AsyncSession,
    *,
    view: MetadataView,
    access: CallerAccess,
    caller: TrustedCall,
    request: MutateRequest,
    flow_depth: int = 0,
) -> MutateResponse:
    """`flow_depth` > 0: the save of an after-save action (see `outbox.queue.MAX_FLOW_DEPTH`)."""
    if len(request.items) > MAX_BATCH:
        raise BadRequest(
            f"a batch has at most {MAX_BATCH} items ({len(request.items)} given)",
            code=ErrorCategory.LIMIT_EXCEEDED.value,
        )
    store = RecordStore(session, caller.org_id)
    now_ms = await read_now_ms(await store.connection())
    ctx = _Context(session, view, access, caller, store, now_ms)
    work = [_Work(index=i, item=item) for i, item in enumerate(request.items)]
    await _replay(ctx, work)
    pending = [w for w in work if w.result is None]
    _resolve_objects(ctx, pending)
    await _resolve_upserts(ctx, [w for w in pending if not w.failed and w.item.op == "upsert"])
    creates = [w for w in pending if not w.failed and w.item.op == "create"]
    updates = [w for w in pending if not w.failed and w.item.op == "update"]
    deletes = [w for w in pending if not w.failed and w.item.op == "delete"]
    undeletes = [w for w in pending if not w.failed and w.item.op == "undelete"]
    await _create(ctx, creates)
    await _update(ctx, updates)
    await _delete(ctx, deletes)
    await _undelete(ctx, undeletes)
    results = []
    remembered = []
    for w in work:
        if w.result is None:
            w.result = (
                ItemResult(id=w.record_id, success=False, errors=w.errors)
                if w.failed
                else ItemResult(
                    id=w.record_id,
                    success=True,
                    created=w.item.op == "create",
                    row_version=w.values.get("__row_version"),
                )
            )
            if w.result.success and w.item.idempotency_key:
                remembered.append(
                    (w.item.idempotency_key, w.digest, w.result.model_dump(mode="json"))
                )
        results.append(w.result)
    response = MutateResponse(results=results)
    if request.all_or_none and any(not r.success for r in results):
        raise AllOrNoneRolledBack(_rolled_back(response))
    await ctx.store.remember(remembered, ctx.now_ms)
    saved = [Saved(w.definition, w.saved, w.prior) for w in work if w.saved and not w.failed]
    if saved:  # into the outbox in this transaction: no commit, no item
        await enqueue_after_save(
            ctx.session,
            view=view,
            user_id=caller.user_id,
            now=ctx.now,
            saved=saved,
            depth=flow_depth,
        )
    return response


def _rolled_back(response: MutateResponse) -> MutateResponse:
    rolled = _err(
        ErrorCategory.CONFLICT, "not applied: another item of this all-or-none batch failed"
    )
    return MutateResponse(
        results=[
            r if not r.success else ItemResult(id=None, success=False, errors=[rolled])
            for r in response.results
        ]
    )


async def _replay(ctx: _Context, work: list[_Work]) -> None:
    keyed = [w for w in work if w.item.idempotency_key]
    for w in keyed:
        w.digest = hashlib.sha256(
            json.dumps(
                w.item.model_dump(mode="json", exclude={"idempotency_key"}),
                sort_keys=True,
                default=str,
            ).encode()
        ).hexdigest()
    prior = await ctx.store.idempotent_results(w.item.idempotency_key or "" for w in keyed)
    for w in keyed:
        found = prior.get(w.item.idempotency_key or "")
        if found is None:
            continue
        digest, stored = found
        if digest != w.digest:
            w.result = ItemResult(
                success=False,
                errors=[
                    _err(
                        ErrorCategory.CONFLICT,
                        "this idempotency key was used for a different request",
                    )
                ],
            )
        else:
            w.result = ItemResult.model_validate_json(stored)


def _resolve_objects(ctx: _Context, work: list[_Work]) -> None:
    for w in work:
        item = w.item
        if item.op in ("create", "upsert"):
            obj = ctx.view.object(item.object or "")
            if obj is None or not ctx.access.object(ctx.view, obj).read:
                w.fail(_err(ErrorCategory.NOT_FOUND, f"no object named {item.object!r}"))
                continue
            w.obj = obj
            continue
        try:
            w.record_id = to_18(item.id or "")
        except ValueError:
            malformed = _err(ErrorCategory.NOT_FOUND, "malformed record id", "Id")
            w.fail(malformed.model_copy(update={"reason": ErrorReason.MALFORMED_ID}))
            continue
        obj = ctx.view.object_by_prefix(w.record_id)
        if obj is None or (item.object and item.object.lower() != obj.api_name.lower()):
            w.fail(_err(ErrorCategory.NOT_FOUND, "no such record"))
            continue
        w.obj = obj


async def _resolve_upserts(ctx: _Context, work: list[_Work]) -> None:
    """An upsert becomes an update of the matching record, or a create."""
    groups: dict[tuple[str, str], list[_Work]] = defaultdict(list)
    for w in work:
        ext = ctx.view.field(w.definition, w.item.external_id_field or "")
        if ext is None or not (ext.external_id or ext.unique):
            w.fail(
                _err(
                    ErrorCategory.INVALID_FIELD,
                    "upsert needs an external id field",
                    w.item.external_id_field or "",
                )
            )
            continue
        groups[(w.definition.api_name.lower(), ext.api_name)].append(w)
    for (object_key, field_name), members in groups.items():
        obj = ctx.view.objects[object_key]
        ext = ctx.view.field(obj, field_name)
        if ext is None:  # pragma: no cover - checked when grouping
            continue
        try:
            wanted = {id(w): coerce(ext, w.item.external_id) for w in members}
        except InvalidValue as exc:
            for w in members:
                w.fail(exc.error)
            continue
        table = ctx.view.table(obj)
        found = await ctx.store.existing_values(table, column_name(ext.api_name), wanted.values())
        seen = await ctx.store.visible_ids(
            table, found.values(), ctx.access.row_predicate(ctx.view, obj, "read")
        )
        for w in members:
            match = found.get(wanted[id(w)])
            if match not in seen:  # a record the caller cannot see is as if absent (ADR 0069)
                match = None
            fields = {**w.item.fields, ext.api_name: w.item.external_id}
            op = "update" if match else "create"
            w.item = w.item.model_copy(update={"op": op, "id": match, "fields": fields})
            w.record_id = match


@dataclass
class _Fields:
    """What `_values` needs about one object's fields, worked out once per object group of a
    batch instead of once per item and field: the field a name resolves to, its column and
    the caller's access to it, and (creates) the defaults of the fields an item leaves out."""

    ctx: _Context
    obj: ObjectDef
    resolved: dict[str, tuple[FieldDef, str, bool, bool] | None] = field(default_factory=dict)

    def get(self, name: str) -> tuple[FieldDef, str, bool, bool] | None:
        """(definition, column, readable, editable), or None for no such field."""
        if name in self.resolved:
            return self.resolved[name]
        definition = self.ctx.view.field(self.obj, name)
        found = None
        if definition is not None:
            readable, editable = self.ctx.access.field(self.ctx.view, self.obj, definition)
            found = (definition, column_name(definition.api_name), readable, editable)
        self.resolved[name] = found
        return found

    @cached_property
    def defaults(self) -> list[tuple[str, Any]]:
        """(column, default value) of every field with one (values are immutable: shared)."""
        chosen = []
        for definition in self.obj.all_fields():
            default = _default(definition)
            if default is not None:
                chosen.append((column_name(definition.api_name), default))
        return chosen


def _values(w: _Work, fields: _Fields, *, creating: bool) -> None:
    """Coerce and authorize the item's field values into column values."""
    obj = w.definition
    for name, raw in w.item.fields.items():
        system = _SYSTEM.get(name.lower())
        if system is not None:
            w.fail(_read_only(system, f"{system} is set by the system and cannot be written"))
            continue
        found = fields.get(name)
        if found is None:
            w.fail(_err(ErrorCategory.INVALID_FIELD, f"no field {name!r} on {obj.api_name}", name))
            continue
        definition, column, readable, editable = found
        if not editable:
            message = f"{definition.api_name} is not writable for you"
            if readable:  # a field the caller cannot read is not confirmed as read-only
                w.fail(_read_only(definition.api_name, message))
            else:
                w.fail(_err(ErrorCategory.INVALID_FIELD, message, definition.api_name))
            continue
        try:
            w.values[column] = coerce(definition, raw)
        except InvalidValue as exc:
            w.fail(exc.error)
    if creating:
        for column, default in fields.defaults:
            if column not in w.values:
                w.values[column] = default


async def _apply_logic(ctx: _Context, obj: ObjectDef, batch: list[tuple[_Work, Any]]) -> None:
    """Before-save flows (in order, once each: no recursion), then required fields, then
    every active validation rule, all failures reported together. Parent paths the formulas
    read are loaded once per batch, again for validation if flows may have moved a lookup."""
    key = obj.api_name.lower()
    flows = ctx.view.before_save_flows.get(key, ())
    rules = ctx.view.validation_rules.get(key, ())
    contexts = [(w, old, _formula_context(ctx, w, old)) for w, old in batch]
    flow_formulas = [f.entry for f in flows if f.entry] + [u for f in flows for _, u in f.updates]
    await _load_parents(ctx, obj, [c for _, _, c in contexts], flow_formulas)
    for w, old, formula_ctx in contexts:
        _run_flows(ctx, w, old, formula_ctx)
    live = [(w, old, c) for w, old, c in contexts if not w.failed]
    await _load_parents(ctx, obj, [c for _, _, c in live], [r.formula for r in rules])
    required = with_composed_names(obj, live, _required(obj))
    for w, old, formula_ctx in live:
        _check_required(w, old, formula_ctx, required)
        for rule in rules:
            if rule.formula.evaluate(formula_ctx):
                fields = [rule.definition.error_field] if rule.definition.error_field else []
                w.fail(_err(ErrorCategory.VALIDATION_RULE, rule.definition.error_message, *fields))


def _formula_context(ctx: _Context, w: _Work, old: Any | None) -> Context:
    obj = w.definition
    values: dict[str, Any] = {}
    prior: dict[str, Any] | None = None
    if old is not None:
        prior = own_formula_values(obj, old)
        values.update(prior)
    else:  # what the insert will set
        values.update(
            ownerid=ctx.caller.user_id,
            createdbyid=ctx.caller.user_id,
            lastmodifiedbyid=ctx.caller.user_id,
            createddate=ctx.now,
            lastmodifieddate=ctx.now,
        )
    values.update(w.values)
    return Context(values=values, prior=prior, is_new=old is None, now=ctx.now)


async def _load_parents(
    ctx: _Context, obj: ObjectDef, contexts: list[Context], formulas: list[Formula]
) -> None:
    paths = {p for formula in formulas for p in formula.paths if "." in p}
    if paths and contexts:
        values = [c.values for c in contexts]
        await load_parent_paths(ctx.session, ctx.view, obj, values, paths)


def _run_flows(ctx: _Context, w: _Work, old: Any | None, formula_ctx: Context) -> None:
    key = w.definition.api_name.lower()
    values = formula_ctx.values
    event = "create" if old is None else "update"
    for flow in ctx.view.before_save_flows.get(key, ()):
        if flow.definition.trigger not in (event, "create_or_update"):
            continue
        if flow.entry is not None and not flow.entry.evaluate(formula_ctx):
            continue
        for target, formula in flow.updates:
            column = column_name(target.api_name)
            result = formula.evaluate(formula_ctx)
            try:
                stored = result if isinstance(result, datetime) else coerce(target, result)
            except InvalidValue as exc:
                w.fail(exc.error)
                continue
            w.values[column] = stored
            values[column] = stored


def _required(obj: ObjectDef) -> list[tuple[FieldDef, str]]:
    """The fields a record of `obj` must have a value in, with their columns."""
    return [
        (definition, column_name(definition.api_name))
        for definition in obj.all_fields()
        if definition.required or (definition.api_name == "Name" and definition.type == "text")
    ]


def _check_required(
    w: _Work, old: Any | None, formula_ctx: Context, required: list[tuple[FieldDef, str]]
) -> None:
    for definition, column in required:
        missing = formula_ctx.values.get(column) is None and (old is None or column in w.values)
        if missing:
            w.fail(
                _err(
                    ErrorCategory.REQUIRED_FIELD_MISSING,
                    f"required field missing: {definition.api_name}",
                    definition.api_name,
                )
            )


def _default(definition: FieldDef) -> Any:
    if definition.type == "picklist" and definition.values:
        chosen = next((v.value for v in definition.values if v.default), None)
        if chosen is not None:
            return chosen
    if definition.type == "checkbox":
        return bool(definition.default_value)
    if definition.default_value is not None:
        try:
            return coerce(definition, definition.default_value)
        except InvalidValue:
            return None
    return None


async def _check_references(ctx: _Context, obj: ObjectDef, work: list[_Work]) -> None:
    for definition in obj.fields:
        if definition.type not in ("lookup", "master_detail"):
            continue
        column = column_name(definition.api_name)
        target = ctx.view.object(definition.reference_to or "")
        ids = {w.values[column] for w in work if w.values.get(column)}
        if target is None or not ids:
            continue
        visible = await ctx.store.visible_ids(
            ctx.view.table(target), ids, ctx.access.row_predicate(ctx.view, target, "read")
        )
        for w in work:
            value = w.values.get(column)
            if value and (value not in visible or value[:3] != target.key_prefix):
                w.fail(
                    _err(
                        ErrorCategory.INVALID_FIELD,
                        f"{definition.api_name}: no {target.api_name} record with id {value}",
                        definition.api_name,
                    )
                )


async def _check_unique(
    ctx: _Context, obj: ObjectDef, work: list[_Work], prior: dict[str, Any] | None = None
) -> None:
    """Unique and external id values: not held by another record, not twice in the batch.
    `prior` (updates: the rows before, by id): a value the record holds already is held by
    it alone (the unique index says so), so it is not looked up again."""
    table = ctx.view.table(obj)
    for definition in obj.all_fields():
        if not (definition.unique or definition.external_id):
            continue
        column = column_name(definition.api_name)
        candidates = [w for w in work if w.values.get(column) is not None]
        kept = {w.index for w in candidates if _holds(prior, w, column)}
        existing = await ctx.store.existing_values(
            table, column, (w.values[column] for w in candidates if w.index not in kept)
        )
        seen: dict[Any, int] = {}
        for w in candidates:
            value = w.values[column]
            holder = w.record_id if w.index in kept else existing.get(value)
            if (holder is not None and holder != w.record_id) or value in seen:
                w.fail(
                    _err(
                        ErrorCategory.DUPLICATE_VALUE,
                        f"duplicate value for {definition.api_name}",
                        definition.api_name,
                    )
                )
            seen[value] = w.index


def _holds(prior: dict[str, Any] | None, w: _Work, column: str) -> bool:
    """Whether the record already holds the value the item sets in `column`."""
    row = None if prior is None else prior.get(w.record_id or "")
    return row is not None and row[column] == w.values[column]


def _by_object(work: list[_Work]) -> dict[str, tuple[ObjectDef, list[_Work]]]:
    groups: dict[str, tuple[ObjectDef, list[_Work]]] = {}
    for w in work:
        groups.setdefault(w.definition.api_name.lower(), (w.definition, []))[1].append(w)
    return groups


def _format_number(pattern: str, number: int) -> str:
    match = re.search(r"\{(0+)\}", pattern)
    width = len(match.group(1)) if match else 1
    return re.sub(r"\{0+\}", str(number).zfill(width), pattern, count=1)


async def _create(ctx: _Context, work: list[_Work]) -> None:
    for obj, members in _by_object(work).values():
        if not ctx.access.object(ctx.view, obj).create:
            for w in members:
                w.fail(_err(ErrorCategory.INSUFFICIENT_ACCESS, f"you cannot create {obj.api_name}"))
            continue
        fields = _Fields(ctx, obj)
        for w in members:
            _values(w, fields, creating=True)
        await _apply_logic(ctx, obj, [(w, None) for w in members if not w.failed])
        await _check_references(ctx, obj, [w for w in members if not w.failed])
        await _check_unique(ctx, obj, [w for w in members if not w.failed])
        valid = [w for w in members if not w.failed]
        if not valid:
            continue
        if obj.name_field.type == "auto_number":
            first = await ctx.store.allocate_numbers(obj.api_name, "Name", len(valid))
            for offset, w in enumerate(valid):
                w.values["name"] = _format_number(obj.name_field.format or "{0}", first + offset)
        rows = []
        for w in valid:
            w.record_id = new_id(obj.key_prefix)
            rows.append(
                {
                    **w.values,
                    "org_id": ctx.caller.org_id,
                    "id": w.record_id,
                    "owner_id": ctx.caller.user_id,
                    "created_by_id": ctx.caller.user_id,
                    "created_date": ctx.now,
                    **ctx.audit(),
                    "is_deleted": False,
                    "row_version": 1,
                }
            )
            w.values["__row_version"] = 1
        await ctx.store.insert(ctx.view.table(obj), rows)
        if has_after_save(ctx.view, obj):
            blank = dict.fromkeys(ctx.view.table(obj).c.keys())
            for w, row in zip(valid, rows, strict=True):
                w.saved = blank | row
        await index_changes(
            await ctx.store.connection(),
            org_id=ctx.caller.org_id,
            obj=obj,
            changes=[(r["id"], None, r) for r in rows],
        )


async def _load_for_change(
    ctx: _Context, obj: ObjectDef, members: list[_Work], mode: str
) -> dict[str, Any]:
    table = ctx.view.table(obj)
    await ctx.store.lock(table, (w.record_id or "" for w in members))
    return await ctx.store.rows(
        table,
        (w.record_id or "" for w in members),
        flags={
            "may_read": ctx.access.row_predicate(ctx.view, obj, "read"),
            "may_change": ctx.access.row_predicate(ctx.view, obj, mode),  # type: ignore[arg-type]
        },
    )


def _gate(
    ctx: _Context, obj: ObjectDef, w: _Work, row: Any, *, allowed: bool, deleted_ok: bool
) -> bool:
    """Common existence / visibility / permission / version checks for changes."""
    if row is None or not row["may_read"]:
        if row is not None:
            log.info("records.concealed", object=obj.api_name, record_id=w.record_id)
        w.fail(_err(ErrorCategory.NOT_FOUND, "no such record"))
        return False
    if bool(row["is_deleted"]) != deleted_ok:
        w.fail(
            _err(
                ErrorCategory.ENTITY_IS_DELETED
                if row["is_deleted"]
                else ErrorCategory.INVALID_FIELD,
                "the record is deleted" if row["is_deleted"] else "the record is not deleted",
            )
        )
        return False
    if not allowed or not row["may_change"]:
        w.fail(_err(ErrorCategory.INSUFFICIENT_ACCESS, "insufficient access rights on the record"))
        return False
    if w.item.row_version is not None and w.item.row_version != row["row_version"]:
        w.fail(_err(ErrorCategory.CONFLICT, "the record was changed by someone else"))
        return False
    return True


async def _update(ctx: _Context, work: list[_Work]) -> None:
    for obj, members in _by_object(work).values():
        rows = await _load_for_change(ctx, obj, members, "edit")
        may_edit = ctx.access.object(ctx.view, obj).edit
        gated = []
        fields = _Fields(ctx, obj)
        for w in members:
            row = rows.get(w.record_id or "")
            if _gate(ctx, obj, w, row, allowed=may_edit, deleted_ok=False):
                _values(w, fields, creating=False)
                if not w.failed:
                    gated.append((w, row))
        await _apply_logic(ctx, obj, gated)
        live = [w for w in members if not w.failed]
        await _check_references(ctx, obj, live)
        await _check_unique(ctx, obj, live, rows)
        live = [w for w in members if not w.failed]
        by_columns: dict[tuple[str, ...], list[_Work]] = defaultdict(list)
        for w in live:
            by_columns[tuple(sorted(w.values))].append(w)
        table = ctx.view.table(obj)
        history = []
        for columns, group in by_columns.items():
            payload = [
                {
                    **w.values,
                    **ctx.audit(),
                    "id": w.record_id,
                    "row_version": rows[w.record_id or ""]["row_version"],
                }
                for w in group
            ]
            changed = await ctx.store.update_rows(table, payload, [*columns, *ctx.audit()])
            if changed != len(group):  # the rows are locked: someone broke the lock protocol
                raise RuntimeError(f"{obj.api_name}: {changed} of {len(group)} rows updated")
            for w in group:
                if not w.failed:
                    old = rows[w.record_id or ""]
                    w.values["__row_version"] = int(old["row_version"]) + 1
                    history += _history(ctx, obj, w, old)
                    if has_after_save(ctx.view, obj):
                        w.prior = old
                        w.saved = {**old, **w.values, **ctx.audit()}
        await ctx.store.record_history(history)
        await index_changes(
            await ctx.store.connection(),
            org_id=ctx.caller.org_id,
            obj=obj,
            changes=[
                (w.record_id or "", rows[w.record_id or ""], w.values) for w in live if not w.failed
            ],
        )


def _history(ctx: _Context, obj: ObjectDef, w: _Work, old: Any) -> list[dict[str, Any]]:
    out = []
    for definition in obj.fields:
        column = column_name(definition.api_name)
        if definition.track_history and column in w.values and w.values[column] != old[column]:
            out.append(
                {
                    "org_id": ctx.caller.org_id,
                    "history_id": str(uuid.uuid4()),
                    "object_name": obj.api_name,
                    "record_id": w.record_id,
                    "field_name": definition.api_name,
                    "old_value": None if old[column] is None else str(old[column]),
                    "new_value": None if w.values[column] is None else str(w.values[column]),
                    "changed_by_id": ctx.caller.user_id,
                    "changed_at_ms": ctx.now_ms,
                }
            )
    return out


async def _delete(ctx: _Context, work: list[_Work]) -> None:
    for obj, members in _by_object(work).values():
        rows = await _load_for_change(ctx, obj, members, "delete")
        may_delete = ctx.access.object(ctx.view, obj).delete
        live = [
            w
            for w in members
            if _gate(ctx, obj, w, rows.get(w.record_id or ""), allowed=may_delete, deleted_ok=False)
        ]
        ids = {w.record_id or "" for w in live}
        for child, reference in ctx.view.children(obj):
            if reference.type == "lookup" and reference.on_delete == "restrict":
                blocked = await ctx.store.referencing(
                    ctx.view.table(child), column_name(reference.api_name), ids
                )
                for w in live:
                    if w.record_id in blocked:
                        w.fail(
                            _err(
                                ErrorCategory.CONFLICT,
                                f"referenced by {len(blocked[w.record_id or ''])} {child.api_name} "
                                "record(s); delete them first",
                            )
                        )
        ids = {w.record_id or "" for w in live if not w.failed}
        await _cascade(ctx, obj, ids, deleted=True)
        await ctx.store.set_deleted(ctx.view.table(obj), ids, deleted=True, values=ctx.audit())


async def _cascade(
    ctx: _Context, obj: ObjectDef, ids: set[str], *, deleted: bool, depth: int = 0
) -> None:
    if not ids or depth > 3:
        return
    for child, reference in ctx.view.children(obj):
        table = ctx.view.table(child)
        column = column_name(reference.api_name)
        if reference.type == "master_detail":
            linked = await _linked(ctx, child, column, ids, deleted=not deleted)
            await _cascade(ctx, child, linked, deleted=deleted, depth=depth + 1)
            await ctx.store.set_deleted(table, linked, deleted=deleted, values=ctx.audit())
        elif deleted and reference.on_delete != "restrict":
            await ctx.store.clear_references(table, column, ids, ctx.audit())


async def _linked(
    ctx: _Context, child: ObjectDef, column: str, ids: set[str], *, deleted: bool
) -> set[str]:
    table = ctx.view.table(child)
    stmt = select(table.c.id).where(
        table.c.org_id == ctx.caller.org_id,
        table.c[column].in_(sorted(ids)),
        table.c.is_deleted.is_(deleted),
    )
    return {str(i) for i in (await ctx.session.execute(stmt)).scalars()}


async def _undelete(ctx: _Context, work: list[_Work]) -> None:
    for obj, members in _by_object(work).values():
        rows = await _load_for_change(ctx, obj, members, "delete")
        may_delete = ctx.access.object(ctx.view, obj).delete
        live = [
            w
            for w in members
            if _gate(ctx, obj, w, rows.get(w.record_id or ""), allowed=may_delete, deleted_ok=True)
        ]
        ids = {w.record_id or "" for w in live}
        await ctx.store.set_deleted(ctx.view.table(obj), ids, deleted=False, values=ctx.audit())
        await _cascade(ctx, obj, ids, deleted=False)
