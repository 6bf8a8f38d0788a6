"""The embedded store: every store port on one SQLite file (the default backend, ``WEFT_STORE=sqlite``).

Each record is kept as its JSON document plus the few columns its queries filter and sort on, so
the shapes match the Cosmos documents of docs/data-model.md. An :class:`ExecutionWrite` is one
SQLite transaction, which is what makes it all-or-nothing.
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pydantic import BaseModel

from shared.adapters.sqlite_db import SqliteDatabase, decode_token, encode_token, from_ts, ts
from shared.errors import ConcurrencyError, ConflictError, NotFoundError, StaleFencingTokenError, WeftError
from shared.ports import MAX_WRITE_ITEMS, CommitResult, ExecutionWrite, FaultHook, Page
from shared.records import (
    ApiKeyRecord,
    AttemptRecord,
    DeadLetter,
    DeadLetterResolution,
    DeadLetterStatus,
    Execution,
    ExecutionEvent,
    Lease,
    OutboxRecord,
    SubmissionRecord,
    TaskRun,
    Tenant,
    WorkflowDraft,
    WorkflowSummary,
    WorkflowVersion,
)
from shared.states import EXECUTION_MACHINE, ExecutionStatus

M = TypeVar("M", bound=BaseModel)

SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (id TEXT PRIMARY KEY, etag TEXT NOT NULL, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS submit_buckets (tenant_id TEXT PRIMARY KEY, tat TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS api_keys (
  key_hash TEXT PRIMARY KEY, key_id TEXT NOT NULL UNIQUE, tenant_id TEXT NOT NULL, doc TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS api_keys_tenant ON api_keys (tenant_id, key_id);
CREATE TABLE IF NOT EXISTS drafts (
  tenant_id TEXT NOT NULL, workflow TEXT NOT NULL, etag TEXT NOT NULL, doc TEXT NOT NULL,
  PRIMARY KEY (tenant_id, workflow));
CREATE TABLE IF NOT EXISTS workflows (
  tenant_id TEXT NOT NULL, workflow TEXT NOT NULL, latest_version INTEGER, latest_digest TEXT,
  has_draft INTEGER NOT NULL DEFAULT 0, updated_at TEXT NOT NULL, PRIMARY KEY (tenant_id, workflow));
CREATE TABLE IF NOT EXISTS versions (
  tenant_id TEXT NOT NULL, workflow TEXT NOT NULL, version INTEGER NOT NULL, doc TEXT NOT NULL,
  PRIMARY KEY (tenant_id, workflow, version));
CREATE TABLE IF NOT EXISTS executions (
  id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, workflow TEXT NOT NULL, status TEXT NOT NULL,
  created_at TEXT NOT NULL, etag TEXT NOT NULL, doc TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS executions_tenant ON executions (tenant_id, created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS executions_tenant_status
  ON executions (tenant_id, status, created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS executions_tenant_workflow
  ON executions (tenant_id, workflow, created_at DESC, id DESC);
CREATE TABLE IF NOT EXISTS exec_counters (execution_id TEXT PRIMARY KEY, seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS task_runs (
  execution_id TEXT NOT NULL, task_id TEXT NOT NULL, etag TEXT NOT NULL, doc TEXT NOT NULL,
  PRIMARY KEY (execution_id, task_id));
CREATE TABLE IF NOT EXISTS events (
  execution_id TEXT NOT NULL, seq INTEGER NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (execution_id, seq));
CREATE TABLE IF NOT EXISTS outbox (
  id TEXT PRIMARY KEY, execution_id TEXT NOT NULL, seq INTEGER NOT NULL, dispatched_at TEXT,
  claimed_by TEXT, claimed_until TEXT, doc TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (dispatched_at, execution_id, seq);
CREATE TABLE IF NOT EXISTS dead_letters (
  id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, execution_id TEXT NOT NULL, status TEXT NOT NULL,
  created_at TEXT NOT NULL, etag TEXT NOT NULL, doc TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS dead_letters_tenant ON dead_letters (tenant_id, created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS dead_letters_tenant_status
  ON dead_letters (tenant_id, status, created_at DESC, id DESC);
CREATE TABLE IF NOT EXISTS submissions (
  tenant_id TEXT NOT NULL, key TEXT NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (tenant_id, key));
CREATE TABLE IF NOT EXISTS attempts (
  execution_id TEXT NOT NULL, task_id TEXT NOT NULL, attempt INTEGER NOT NULL, doc TEXT NOT NULL,
  PRIMARY KEY (execution_id, task_id, attempt));
CREATE TABLE IF NOT EXISTS leases (
  name TEXT PRIMARY KEY, holder TEXT, token INTEGER NOT NULL, expires_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS fenced (
  name TEXT NOT NULL, key TEXT NOT NULL, token INTEGER NOT NULL, value TEXT NOT NULL,
  PRIMARY KEY (name, key));
"""

_TERMINAL = [str(s) for s in EXECUTION_MACHINE.terminal]


def _etag() -> str:
    return uuid.uuid4().hex


def _dump(model: BaseModel) -> str:
    return model.model_dump_json(by_alias=True)


def _load(cls: type[M], doc: str) -> M:
    return cls.model_validate_json(doc)


def _page(items: list[M], limit: int, key: Any) -> Page[M]:
    if len(items) > limit:
        items = items[:limit]
        return Page(items=items, continuation=encode_token(key(items[-1])))
    return Page(items=items)


class SqliteStore:
    """Implements DefinitionStore, ExecutionStore, IdempotencyStore, LeaseStore and TenantStore."""

    def __init__(self, path: str | os.PathLike[str], *, fault_hook: FaultHook | None = None) -> None:
        self.db = SqliteDatabase(path, SCHEMA)
        #: Failure injection (tests only): called with a step name after each item of a commit.
        self.fault_hook = fault_hook

    def close(self) -> None:
        self.db.close()

    def _fault(self, step: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(step)

    # ------------------------------------------------------------------------------ tenants

    def create_tenant(self, tenant: Tenant) -> Tenant:
        stored = tenant.model_copy(update={"etag": _etag()})
        try:
            with self.db.write() as c:
                c.execute(
                    "INSERT INTO tenants (id, etag, doc) VALUES (?, ?, ?)",
                    (stored.id, stored.etag, _dump(stored)),
                )
        except sqlite3.IntegrityError as exc:
            raise ConflictError(f"tenant {tenant.id!r} already exists") from exc
        return stored

    def get_tenant(self, tenant_id: str) -> Tenant | None:
        row = self.db.connection().execute("SELECT doc FROM tenants WHERE id = ?", (tenant_id,)).fetchone()
        return _load(Tenant, row["doc"]) if row else None

    def update_tenant(self, tenant: Tenant) -> Tenant:
        stored = tenant.model_copy(update={"etag": _etag()})
        with self.db.write() as c:
            cur = c.execute(
                "UPDATE tenants SET etag = ?, doc = ? WHERE id = ? AND etag = ?",
                (stored.etag, _dump(stored), tenant.id, tenant.etag),
            )
            if cur.rowcount == 0:
                self._missing_or_conflict(c, "SELECT 1 FROM tenants WHERE id = ?", (tenant.id,), "tenant")
        return stored

    def list_tenants(self, *, limit: int = 50, continuation: str | None = None) -> Page[Tenant]:
        after = decode_token(continuation)[0] if continuation else ""
        rows = self.db.connection().execute(
            "SELECT doc FROM tenants WHERE id > ? ORDER BY id LIMIT ?", (after, limit + 1)
        )
        return _page([_load(Tenant, r["doc"]) for r in rows], limit, lambda t: [t.id])

    def add_api_key(self, record: ApiKeyRecord) -> ApiKeyRecord:
        try:
            with self.db.write() as c:
                if c.execute("SELECT 1 FROM tenants WHERE id = ?", (record.tenant_id,)).fetchone() is None:
                    raise NotFoundError(f"tenant {record.tenant_id!r} not found")
                c.execute(
                    "INSERT INTO api_keys (key_hash, key_id, tenant_id, doc) VALUES (?, ?, ?, ?)",
                    (record.key_hash, record.key_id, record.tenant_id, _dump(record)),
                )
        except sqlite3.IntegrityError as exc:
            raise ConflictError("API key already exists") from exc
        return record

    def resolve_api_key(self, key_hash: str) -> ApiKeyRecord | None:
        row = (
            self.db.connection()
            .execute("SELECT doc FROM api_keys WHERE key_hash = ?", (key_hash,))
            .fetchone()
        )
        return _load(ApiKeyRecord, row["doc"]) if row else None

    def update_submit_bucket(
        self, tenant_id: str, change: Callable[[datetime | None], datetime | None]
    ) -> bool:
        # Read and write under the one write lock: no race to lose.
        with self.db.write() as c:
            row = c.execute("SELECT tat FROM submit_buckets WHERE tenant_id = ?", (tenant_id,)).fetchone()
            new = change(from_ts(row["tat"]) if row else None)
            if new is None:
                return False
            c.execute(
                "INSERT INTO submit_buckets (tenant_id, tat) VALUES (?, ?) "
                "ON CONFLICT (tenant_id) DO UPDATE SET tat = excluded.tat",
                (tenant_id, ts(new)),
            )
        return True

    def list_api_keys(self, tenant_id: str) -> list[ApiKeyRecord]:
        rows = self.db.connection().execute(
            "SELECT doc FROM api_keys WHERE tenant_id = ? ORDER BY key_id", (tenant_id,)
        )
        return [_load(ApiKeyRecord, r["doc"]) for r in rows]

    def revoke_api_key(self, tenant_id: str, key_id: str, now: datetime) -> ApiKeyRecord:
        with self.db.write() as c:
            row = c.execute(
                "SELECT doc FROM api_keys WHERE tenant_id = ? AND key_id = ?", (tenant_id, key_id)
            ).fetchone()
            if row is None:
                raise NotFoundError(f"API key {key_id!r} not found")
            rec = _load(ApiKeyRecord, row["doc"])
            if rec.revoked_at is None:
                rec = rec.model_copy(update={"revoked_at": now})
                c.execute("UPDATE api_keys SET doc = ? WHERE key_id = ?", (_dump(rec), key_id))
        return rec

    # -------------------------------------------------------------------------- definitions

    def save_draft(self, draft: WorkflowDraft) -> WorkflowDraft:
        stored = draft.model_copy(update={"etag": _etag()})
        with self.db.write() as c:
            if draft.etag is None:
                try:
                    c.execute(
                        "INSERT INTO drafts (tenant_id, workflow, etag, doc) VALUES (?, ?, ?, ?)",
                        (draft.tenant_id, draft.workflow, stored.etag, _dump(stored)),
                    )
                except sqlite3.IntegrityError as exc:
                    raise ConcurrencyError(f"draft of {draft.workflow!r} already exists") from exc
            else:
                cur = c.execute(
                    "UPDATE drafts SET etag = ?, doc = ? WHERE tenant_id = ? AND workflow = ? AND etag = ?",
                    (stored.etag, _dump(stored), draft.tenant_id, draft.workflow, draft.etag),
                )
                if cur.rowcount == 0:
                    self._missing_or_conflict(
                        c,
                        "SELECT 1 FROM drafts WHERE tenant_id = ? AND workflow = ?",
                        (draft.tenant_id, draft.workflow),
                        "draft",
                    )
            c.execute(
                "INSERT INTO workflows (tenant_id, workflow, has_draft, updated_at) VALUES (?, ?, 1, ?) "
                "ON CONFLICT (tenant_id, workflow) DO UPDATE SET has_draft = 1, "
                "updated_at = excluded.updated_at",
                (draft.tenant_id, draft.workflow, ts(draft.updated_at)),
            )
        return stored

    def get_draft(self, tenant_id: str, workflow: str) -> WorkflowDraft | None:
        row = (
            self.db.connection()
            .execute("SELECT doc FROM drafts WHERE tenant_id = ? AND workflow = ?", (tenant_id, workflow))
            .fetchone()
        )
        return _load(WorkflowDraft, row["doc"]) if row else None

    def publish(
        self, tenant_id: str, workflow: str, digest: str, definition: dict[str, Any], now: datetime
    ) -> tuple[WorkflowVersion, bool]:
        with self.db.write() as c:
            head = c.execute(
                "SELECT latest_version, latest_digest FROM workflows WHERE tenant_id = ? AND workflow = ?",
                (tenant_id, workflow),
            ).fetchone()
            latest = head["latest_version"] if head and head["latest_version"] is not None else 0
            if head and head["latest_digest"] == digest:
                row = c.execute(
                    "SELECT doc FROM versions WHERE tenant_id = ? AND workflow = ? AND version = ?",
                    (tenant_id, workflow, latest),
                ).fetchone()
                return _load(WorkflowVersion, row["doc"]), False
            version = WorkflowVersion(
                tenant_id=tenant_id,
                workflow=workflow,
                version=latest + 1,
                digest=digest,
                definition=definition,
                published_at=now,
            )
            c.execute(
                "INSERT INTO versions (tenant_id, workflow, version, doc) VALUES (?, ?, ?, ?)",
                (tenant_id, workflow, version.version, _dump(version)),
            )
            c.execute(
                "INSERT INTO workflows (tenant_id, workflow, latest_version, latest_digest, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant_id, workflow) DO UPDATE SET "
                "latest_version = excluded.latest_version, latest_digest = excluded.latest_digest, "
                "updated_at = excluded.updated_at",
                (tenant_id, workflow, version.version, digest, ts(now)),
            )
        return version, True

    def get_version(self, tenant_id: str, workflow: str, version: int) -> WorkflowVersion | None:
        row = (
            self.db.connection()
            .execute(
                "SELECT doc FROM versions WHERE tenant_id = ? AND workflow = ? AND version = ?",
                (tenant_id, workflow, version),
            )
            .fetchone()
        )
        return _load(WorkflowVersion, row["doc"]) if row else None

    def latest_version(self, tenant_id: str, workflow: str) -> WorkflowVersion | None:
        row = (
            self.db.connection()
            .execute(
                "SELECT doc FROM versions WHERE tenant_id = ? AND workflow = ? ORDER BY version DESC LIMIT 1",
                (tenant_id, workflow),
            )
            .fetchone()
        )
        return _load(WorkflowVersion, row["doc"]) if row else None

    def list_versions(
        self, tenant_id: str, workflow: str, *, limit: int = 50, continuation: str | None = None
    ) -> Page[WorkflowVersion]:
        before = int(decode_token(continuation)[0]) if continuation else 2**62
        rows = self.db.connection().execute(
            "SELECT doc FROM versions WHERE tenant_id = ? AND workflow = ? AND version < ? "
            "ORDER BY version DESC LIMIT ?",
            (tenant_id, workflow, before, limit + 1),
        )
        return _page([_load(WorkflowVersion, r["doc"]) for r in rows], limit, lambda v: [v.version])

    def list_workflows(
        self, tenant_id: str, *, limit: int = 50, continuation: str | None = None
    ) -> Page[WorkflowSummary]:
        after = decode_token(continuation)[0] if continuation else ""
        rows = self.db.connection().execute(
            "SELECT * FROM workflows WHERE tenant_id = ? AND workflow > ? ORDER BY workflow LIMIT ?",
            (tenant_id, after, limit + 1),
        )
        items = [
            WorkflowSummary(
                tenant_id=r["tenant_id"],
                workflow=r["workflow"],
                latest_version=r["latest_version"],
                latest_digest=r["latest_digest"],
                has_draft=bool(r["has_draft"]),
                updated_at=from_ts(r["updated_at"]),
            )
            for r in rows
        ]
        return _page(items, limit, lambda w: [w.workflow])

    # --------------------------------------------------------------------------- executions

    def commit(self, write: ExecutionWrite) -> CommitResult:
        eid = write.execution_id
        _check_same_execution(write)
        result = CommitResult()
        with self.db.write() as c:
            if write.execution is not None:
                result = CommitResult(execution=self._put_execution(c, write.execution))
                self._fault("execution")
            for run in write.task_runs:
                result.task_runs[run.task_id] = self._put_task_run(c, run)
                self._fault(f"taskRun:{run.task_id}")
            if write.events or write.outbox:
                row = c.execute("SELECT seq FROM exec_counters WHERE execution_id = ?", (eid,)).fetchone()
                seq = row["seq"] if row else 0
                for new in write.events:
                    seq += 1
                    event = ExecutionEvent(execution_id=eid, seq=seq, type=new.type, at=new.at, data=new.data)
                    c.execute(
                        "INSERT INTO events (execution_id, seq, doc) VALUES (?, ?, ?)",
                        (eid, seq, _dump(event)),
                    )
                    result.events.append(event)
                    self._fault("event")
                for rec in write.outbox:
                    seq += 1
                    stored = rec.model_copy(
                        update={"seq": seq, "dispatched_at": None, "claimed_by": None, "claimed_until": None}
                    )
                    try:
                        c.execute(
                            "INSERT INTO outbox (id, execution_id, seq, doc) VALUES (?, ?, ?, ?)",
                            (stored.id, eid, seq, _dump(stored)),
                        )
                    except sqlite3.IntegrityError as exc:
                        raise ConflictError(f"outbox record {rec.id!r} already exists") from exc
                    result.outbox.append(stored)
                    self._fault(f"outbox:{rec.id}")
                c.execute(
                    "INSERT INTO exec_counters (execution_id, seq) VALUES (?, ?) "
                    "ON CONFLICT (execution_id) DO UPDATE SET seq = excluded.seq",
                    (eid, seq),
                )
            for dl in write.dead_letters:
                result.dead_letters.append(self._put_dead_letter(c, dl))
                self._fault(f"deadLetter:{dl.id}")
        return result

    def _put_execution(self, c: sqlite3.Connection, ex: Execution) -> Execution:
        stored = ex.model_copy(update={"etag": _etag()})
        self._put_versioned(
            c,
            "executions",
            key={"id": ex.id},
            values={
                "tenant_id": ex.tenant_id,
                "workflow": ex.workflow,
                "status": str(ex.status),
                "created_at": ts(ex.created_at),
                "etag": stored.etag,
                "doc": _dump(stored),
            },
            expected_etag=ex.etag,
            duplicate=ConflictError(f"execution {ex.id!r} already exists"),
            what="execution",
        )
        return stored

    def _put_task_run(self, c: sqlite3.Connection, run: TaskRun) -> TaskRun:
        stored = run.model_copy(update={"etag": _etag()})
        self._put_versioned(
            c,
            "task_runs",
            key={"execution_id": run.execution_id, "task_id": run.task_id},
            values={"etag": stored.etag, "doc": _dump(stored)},
            expected_etag=run.etag,
            duplicate=ConcurrencyError(f"task run {run.task_id!r} already exists"),
            what="task run",
        )
        return stored

    def _put_dead_letter(self, c: sqlite3.Connection, dl: DeadLetter) -> DeadLetter:
        stored = dl.model_copy(update={"etag": _etag()})
        self._put_versioned(
            c,
            "dead_letters",
            key={"id": dl.id},
            values={
                "tenant_id": dl.tenant_id,
                "execution_id": dl.execution_id,
                "status": str(dl.status),
                "created_at": ts(dl.created_at),
                "etag": stored.etag,
                "doc": _dump(stored),
            },
            expected_etag=dl.etag,
            duplicate=ConcurrencyError(f"dead letter {dl.id!r} already exists"),
            what="dead letter",
        )
        return stored

    def _put_versioned(
        self,
        c: sqlite3.Connection,
        table: str,
        *,
        key: dict[str, Any],
        values: dict[str, Any],
        expected_etag: str | None,
        duplicate: WeftError,
        what: str,
    ) -> None:
        """Create (``expected_etag`` None; ``duplicate`` if the key exists) or replace only while the
        stored etag is still ``expected_etag``. Table and column names are this module's constants."""
        where = " AND ".join(f"{k} = ?" for k in key)
        if expected_etag is None:
            cols = {**values, **key}
            try:
                c.execute(
                    f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",  # noqa: S608
                    tuple(cols.values()),
                )
            except sqlite3.IntegrityError as exc:
                raise duplicate from exc
            return
        sets = ", ".join(f"{k} = ?" for k in values)
        cur = c.execute(
            f"UPDATE {table} SET {sets} WHERE {where} AND etag = ?",  # noqa: S608
            (*values.values(), *key.values(), expected_etag),
        )
        if cur.rowcount == 0:
            self._missing_or_conflict(c, f"SELECT 1 FROM {table} WHERE {where}", tuple(key.values()), what)  # noqa: S608

    @staticmethod
    def _missing_or_conflict(c: sqlite3.Connection, sql: str, params: tuple[Any, ...], what: str) -> None:
        if c.execute(sql, params).fetchone() is None:
            raise NotFoundError(f"{what} not found", details={"key": list(params)})
        raise ConcurrencyError(f"{what} was changed by someone else", details={"key": list(params)})

    def get_execution(self, execution_id: str) -> Execution | None:
        row = (
            self.db.connection()
            .execute("SELECT doc FROM executions WHERE id = ?", (execution_id,))
            .fetchone()
        )
        return _load(Execution, row["doc"]) if row else None

    def list_executions(
        self,
        tenant_id: str,
        *,
        workflow: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 50,
        continuation: str | None = None,
    ) -> Page[Execution]:
        where = ["tenant_id = ?"]
        params: list[Any] = [tenant_id]
        if workflow is not None:
            where.append("workflow = ?")
            params.append(workflow)
        if status is not None:
            where.append("status = ?")
            params.append(str(status))
        if continuation:
            created, last_id = decode_token(continuation)
            where.append("(created_at < ? OR (created_at = ? AND id < ?))")
            params += [created, created, last_id]
        rows = self.db.connection().execute(
            f"SELECT doc FROM executions WHERE {' AND '.join(where)} "  # noqa: S608 - fixed fragments
            "ORDER BY created_at DESC, id DESC LIMIT ?",
            (*params, limit + 1),
        )
        items = [_load(Execution, r["doc"]) for r in rows]
        return _page(items, limit, lambda e: [ts(e.created_at), e.id])

    def count_active_executions(self, tenant_id: str) -> int:
        marks = ",".join("?" * len(_TERMINAL))
        row = (
            self.db.connection()
            .execute(
                f"SELECT COUNT(*) AS n FROM executions WHERE tenant_id = ? AND status NOT IN ({marks})",  # noqa: S608
                (tenant_id, *_TERMINAL),
            )
            .fetchone()
        )
        return int(row["n"])

    def get_task_runs(self, execution_id: str) -> list[TaskRun]:
        rows = self.db.connection().execute(
            "SELECT doc FROM task_runs WHERE execution_id = ? ORDER BY task_id", (execution_id,)
        )
        return [_load(TaskRun, r["doc"]) for r in rows]

    def get_task_run(self, execution_id: str, task_id: str) -> TaskRun | None:
        row = (
            self.db.connection()
            .execute(
                "SELECT doc FROM task_runs WHERE execution_id = ? AND task_id = ?", (execution_id, task_id)
            )
            .fetchone()
        )
        return _load(TaskRun, row["doc"]) if row else None

    def list_events(
        self, execution_id: str, *, after_seq: int = 0, limit: int = 1000
    ) -> list[ExecutionEvent]:
        rows = self.db.connection().execute(
            "SELECT doc FROM events WHERE execution_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (execution_id, after_seq, limit),
        )
        return [_load(ExecutionEvent, r["doc"]) for r in rows]

    # ------------------------------------------------------------------------------- outbox

    def claim_outbox(
        self, owner: str, now: datetime, *, lease_seconds: float = 30.0, limit: int = 100
    ) -> list[OutboxRecord]:
        now_s = ts(now)
        until = now + timedelta(seconds=lease_seconds)
        claimed: list[OutboxRecord] = []
        blocked: set[str] = set()
        with self.db.write() as c:
            rows = c.execute(
                "SELECT id, execution_id, claimed_by, claimed_until, doc FROM outbox "
                "WHERE dispatched_at IS NULL ORDER BY execution_id, seq LIMIT ?",
                (max(limit * 20, 1000),),
            ).fetchall()
            for r in rows:
                if len(claimed) >= limit:
                    break
                eid = r["execution_id"]
                if eid in blocked:
                    continue
                held_by_other = (
                    r["claimed_by"] is not None and r["claimed_by"] != owner and r["claimed_until"] > now_s
                )
                if held_by_other:
                    # Order per execution: nothing after a record another relay is publishing.
                    blocked.add(eid)
                    continue
                rec = _load(OutboxRecord, r["doc"]).model_copy(
                    update={"claimed_by": owner, "claimed_until": until}
                )
                c.execute(
                    "UPDATE outbox SET claimed_by = ?, claimed_until = ?, doc = ? WHERE id = ?",
                    (owner, ts(until), _dump(rec), rec.id),
                )
                claimed.append(rec)
        return claimed

    def release_outbox(self, records: Sequence[OutboxRecord], owner: str) -> None:
        with self.db.write() as c:
            for rec in records:
                row = c.execute(
                    "SELECT doc FROM outbox WHERE id = ? AND claimed_by = ? AND dispatched_at IS NULL",
                    (rec.id, owner),
                ).fetchone()
                if row is None:
                    continue
                free = _load(OutboxRecord, row["doc"]).model_copy(
                    update={"claimed_by": None, "claimed_until": None}
                )
                c.execute(
                    "UPDATE outbox SET claimed_by = NULL, claimed_until = NULL, doc = ? WHERE id = ?",
                    (_dump(free), rec.id),
                )

    def mark_dispatched(self, records: Sequence[OutboxRecord], now: datetime) -> None:
        with self.db.write() as c:
            for rec in records:
                row = c.execute(
                    "SELECT doc FROM outbox WHERE id = ? AND dispatched_at IS NULL", (rec.id,)
                ).fetchone()
                if row is None:
                    continue
                done = _load(OutboxRecord, row["doc"]).model_copy(update={"dispatched_at": now})
                c.execute(
                    "UPDATE outbox SET dispatched_at = ?, doc = ? WHERE id = ?",
                    (ts(now), _dump(done), rec.id),
                )

    def get_outbox_record(self, execution_id: str, record_id: str) -> OutboxRecord | None:
        row = (
            self.db.connection()
            .execute("SELECT doc FROM outbox WHERE id = ? AND execution_id = ?", (record_id, execution_id))
            .fetchone()
        )
        return _load(OutboxRecord, row["doc"]) if row else None

    def purge_dispatched(self, before: datetime) -> int:
        with self.db.write() as c:
            cur = c.execute(
                "DELETE FROM outbox WHERE dispatched_at IS NOT NULL AND dispatched_at < ?", (ts(before),)
            )
            return cur.rowcount

    # ------------------------------------------------------------------------- dead letters

    def get_dead_letter(self, tenant_id: str, dead_letter_id: str) -> DeadLetter | None:
        row = (
            self.db.connection()
            .execute(
                "SELECT doc FROM dead_letters WHERE id = ? AND tenant_id = ?", (dead_letter_id, tenant_id)
            )
            .fetchone()
        )
        return _load(DeadLetter, row["doc"]) if row else None

    def list_dead_letters(
        self,
        tenant_id: str,
        *,
        status: DeadLetterStatus | None = None,
        limit: int = 50,
        continuation: str | None = None,
    ) -> Page[DeadLetter]:
        where = ["tenant_id = ?"]
        params: list[Any] = [tenant_id]
        if status is not None:
            where.append("status = ?")
            params.append(str(status))
        if continuation:
            created, last_id = decode_token(continuation)
            where.append("(created_at < ? OR (created_at = ? AND id < ?))")
            params += [created, created, last_id]
        rows = self.db.connection().execute(
            f"SELECT doc FROM dead_letters WHERE {' AND '.join(where)} "  # noqa: S608 - fixed fragments
            "ORDER BY created_at DESC, id DESC LIMIT ?",
            (*params, limit + 1),
        )
        items = [_load(DeadLetter, r["doc"]) for r in rows]
        return _page(items, limit, lambda d: [ts(d.created_at), d.id])

    def resolve_dead_letter(
        self,
        tenant_id: str,
        dead_letter_id: str,
        *,
        resolution: DeadLetterResolution,
        if_match: str,
        now: datetime,
        resolved_by: str | None = None,
    ) -> DeadLetter:
        with self.db.write() as c:
            row = c.execute(
                "SELECT doc FROM dead_letters WHERE id = ? AND tenant_id = ?", (dead_letter_id, tenant_id)
            ).fetchone()
            if row is None:
                raise NotFoundError(f"dead letter {dead_letter_id!r} not found")
            current = _load(DeadLetter, row["doc"])
            if current.etag != if_match:
                raise ConcurrencyError("dead letter was changed by someone else")
            if current.status == DeadLetterStatus.RESOLVED:
                raise ConflictError("dead letter is already resolved")
            resolved = current.model_copy(
                update={
                    "status": DeadLetterStatus.RESOLVED,
                    "resolution": resolution,
                    "resolved_at": now,
                    "resolved_by": resolved_by,
                }
            )
            return self._put_dead_letter(c, resolved)

    # -------------------------------------------------------------------------- idempotency

    def put_submission(self, record: SubmissionRecord) -> tuple[SubmissionRecord, bool]:
        with self.db.write() as c:
            cur = c.execute(
                "INSERT OR IGNORE INTO submissions (tenant_id, key, doc) VALUES (?, ?, ?)",
                (record.tenant_id, record.key, _dump(record)),
            )
            if cur.rowcount == 1:
                return record, True
            row = c.execute(
                "SELECT doc FROM submissions WHERE tenant_id = ? AND key = ?", (record.tenant_id, record.key)
            ).fetchone()
            return _load(SubmissionRecord, row["doc"]), False

    def get_submission(self, tenant_id: str, key: str) -> SubmissionRecord | None:
        row = (
            self.db.connection()
            .execute("SELECT doc FROM submissions WHERE tenant_id = ? AND key = ?", (tenant_id, key))
            .fetchone()
        )
        return _load(SubmissionRecord, row["doc"]) if row else None

    def record_attempt(self, record: AttemptRecord) -> tuple[AttemptRecord, bool]:
        key = (record.execution_id, record.task_id, record.attempt)
        with self.db.write() as c:
            cur = c.execute(
                "INSERT OR IGNORE INTO attempts (execution_id, task_id, attempt, doc) VALUES (?, ?, ?, ?)",
                (*key, _dump(record)),
            )
            if cur.rowcount == 1:
                return record, True
            row = c.execute(
                "SELECT doc FROM attempts WHERE execution_id = ? AND task_id = ? AND attempt = ?", key
            ).fetchone()
            return _load(AttemptRecord, row["doc"]), False

    def get_attempt(self, execution_id: str, task_id: str, attempt: int) -> AttemptRecord | None:
        row = (
            self.db.connection()
            .execute(
                "SELECT doc FROM attempts WHERE execution_id = ? AND task_id = ? AND attempt = ?",
                (execution_id, task_id, attempt),
            )
            .fetchone()
        )
        return _load(AttemptRecord, row["doc"]) if row else None

    # ------------------------------------------------------------------------------- leases

    def acquire(self, name: str, holder: str, ttl_seconds: float, now: datetime) -> Lease | None:
        expires = now + timedelta(seconds=ttl_seconds)
        with self.db.write() as c:
            row = c.execute("SELECT holder, token, expires_at FROM leases WHERE name = ?", (name,)).fetchone()
            live = row is not None and row["holder"] is not None and row["expires_at"] > ts(now)
            if live and row["holder"] != holder:
                return None
            token = row["token"] if live else (row["token"] + 1 if row else 1)
            c.execute(
                "INSERT INTO leases (name, holder, token, expires_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, token = excluded.token, "
                "expires_at = excluded.expires_at",
                (name, holder, token, ts(expires)),
            )
        return Lease(name=name, holder=holder, token=token, expires_at=expires)

    def renew(self, lease: Lease, ttl_seconds: float, now: datetime) -> Lease:
        expires = now + timedelta(seconds=ttl_seconds)
        with self.db.write() as c:
            cur = c.execute(
                "UPDATE leases SET expires_at = ? WHERE name = ? AND holder = ? AND token = ?",
                (ts(expires), lease.name, lease.holder, lease.token),
            )
            if cur.rowcount == 0:
                raise StaleFencingTokenError(
                    f"lease {lease.name!r} was lost", details={"name": lease.name, "token": lease.token}
                )
        return lease.model_copy(update={"expires_at": expires})

    def release(self, lease: Lease) -> None:
        with self.db.write() as c:
            c.execute(
                "UPDATE leases SET holder = NULL WHERE name = ? AND holder = ? AND token = ?",
                (lease.name, lease.holder, lease.token),
            )

    def get(self, name: str) -> Lease | None:
        row = self.db.connection().execute("SELECT * FROM leases WHERE name = ?", (name,)).fetchone()
        if row is None or row["holder"] is None:
            return None
        return Lease(
            name=name, holder=row["holder"], token=row["token"], expires_at=from_ts(row["expires_at"])
        )

    @staticmethod
    def _check_fence(c: sqlite3.Connection, name: str, token: int) -> None:
        row = c.execute("SELECT token FROM leases WHERE name = ?", (name,)).fetchone()
        current = row["token"] if row else 0
        if token < current:
            raise StaleFencingTokenError(
                f"fencing token {token} of {name!r} is older than {current}",
                details={"name": name, "token": token, "current": current},
            )

    def check_fence(self, name: str, token: int) -> None:
        self._check_fence(self.db.connection(), name, token)

    def put_fenced(self, name: str, token: int, key: str, value: dict[str, Any]) -> None:
        with self.db.write() as c:
            self._check_fence(c, name, token)
            c.execute(
                "INSERT INTO fenced (name, key, token, value) VALUES (?, ?, ?, ?) ON CONFLICT (name, key) "
                "DO UPDATE SET token = excluded.token, value = excluded.value",
                (name, key, token, json.dumps(value)),
            )

    def get_fenced(self, name: str, key: str) -> dict[str, Any] | None:
        row = (
            self.db.connection()
            .execute("SELECT value FROM fenced WHERE name = ? AND key = ?", (name, key))
            .fetchone()
        )
        if row is None:
            return None
        value: dict[str, Any] = json.loads(row["value"])
        return value


def _check_same_execution(write: ExecutionWrite) -> None:
    if write.item_count() > MAX_WRITE_ITEMS:
        raise ValueError(
            f"one atomic write holds at most {MAX_WRITE_ITEMS} items, got {write.item_count()}: "
            "split the task runs over several commits"
        )
    eid = write.execution_id
    ids = [write.execution.id] if write.execution is not None else []
    ids += [r.execution_id for r in write.task_runs]
    ids += [r.execution_id for r in write.outbox]
    ids += [d.execution_id for d in write.dead_letters]
    if any(i != eid for i in ids):
        raise ValueError(f"every item of an ExecutionWrite must belong to execution {eid!r}")
