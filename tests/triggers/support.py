"""Shared set-up for the trigger tests: SQLite stores in a temp dir, a tenant, a published workflow."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shared.adapters.payload_store import FileSystemPayloadStore
from shared.adapters.sqlite_store import SqliteStore
from shared.definition import WorkflowDefinition
from shared.ports import Stores
from shared.records import Tenant, TenantLimits
from shared.submission import SubmissionDeps
from shared.versioning import definition_digest

T0 = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)

SMALL_DAG: dict[str, Any] = {
    "tasks": [
        {"id": "a", "handler": "noop", "params": {"result": 1}},
        {"id": "b", "handler": "noop", "params": {"result": 2}, "dependsOn": ["a"]},
        {"id": "c", "handler": "noop", "params": {"result": "${{ input.x }}"}, "dependsOn": ["a", "b"]},
    ]
}


@dataclass
class FakeStarter:
    """A DurableStarter that records starts; ``fail`` makes it raise (a lost fast path)."""

    fail: bool = False
    started: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start_new(self, orchestrator: str, instance_id: str, input: dict[str, Any]) -> None:
        with self.lock:
            self.calls += 1
            if self.fail:
                raise ConnectionError("durable endpoint unreachable")
            # As ClientStarter: an existing instance counts as started, never started again.
            self.started.setdefault(instance_id, {"orchestrator": orchestrator, "input": input})


def make_stores(tmp_path: Path) -> Stores:
    s = SqliteStore(tmp_path / "weft.sqlite3")
    return Stores(definitions=s, executions=s, idempotency=s, leases=s, tenants=s)


def add_tenant(stores: Stores, tenant_id: str = "acme", **limits: Any) -> Tenant:
    return stores.tenants.create_tenant(
        Tenant(id=tenant_id, display_name=tenant_id, limits=TenantLimits(**limits), created_at=T0)
    )


def publish(
    stores: Stores, definition: dict[str, Any] | None = None, *, tenant_id: str = "acme", workflow: str = "wf"
) -> int:
    doc = definition or SMALL_DAG
    version, _ = stores.definitions.publish(
        tenant_id, workflow, definition_digest(WorkflowDefinition.model_validate(doc)), doc, T0
    )
    return version.version


def make_deps(
    tmp_path: Path, stores: Stores, starter: FakeStarter | None = None, **kw: Any
) -> SubmissionDeps:
    return SubmissionDeps(
        stores=stores, payloads=FileSystemPayloadStore(tmp_path / "payloads"), starter=starter, **kw
    )
