"""Runs the Weft function app's execution machinery on devhost's durable engine, in-process.

Settings point the embedded backends at a temporary folder; the engine gets a virtual clock by
default, so retries, backoffs and timeouts take no wall time.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from devhost.durable.clock import RealClock, VirtualClock
from devhost.durable.engine import DurableEngine
from shared.adapters import factory
from shared.definition import WorkflowDefinition
from shared.execution_messages import ExecutionInput
from shared.names import OrchestratorName
from shared.ports import ExecutionWrite, Stores
from shared.records import Execution, Tenant, TenantLimits
from shared.settings import reset_settings_cache
from shared.versioning import definition_digest


@dataclass
class Harness:
    engine: DurableEngine
    stores: Stores
    clock: VirtualClock | RealClock

    def now(self) -> datetime:
        return self.clock.now() if isinstance(self.clock, VirtualClock) else datetime.now(UTC)

    def tenant(self, tenant_id: str = "acme", *, max_running_tasks: int = 100) -> Tenant:
        existing = self.stores.tenants.get_tenant(tenant_id)
        if existing is not None:
            return existing
        return self.stores.tenants.create_tenant(
            Tenant(
                id=tenant_id,
                display_name=tenant_id,
                limits=TenantLimits(max_running_tasks=max_running_tasks),
                created_at=self.now(),
            )
        )

    def publish(self, definition: dict[str, Any], *, tenant_id: str = "acme", workflow: str = "wf") -> int:
        self.tenant(tenant_id)
        version, _ = self.stores.definitions.publish(
            tenant_id,
            workflow,
            definition_digest(WorkflowDefinition.model_validate(definition)),
            definition,
            self.now(),
        )
        return version.version

    def submit(
        self, definition: dict[str, Any], *, tenant_id: str = "acme", workflow: str = "wf", inp: Any = None
    ) -> str:
        version = self.publish(definition, tenant_id=tenant_id, workflow=workflow)
        execution_id = uuid.uuid4().hex
        self.stores.executions.commit(
            ExecutionWrite(
                execution_id,
                execution=Execution(
                    id=execution_id,
                    tenant_id=tenant_id,
                    workflow=workflow,
                    version=version,
                    input=inp,
                    created_at=self.now(),
                ),
            )
        )
        self.engine.start_instance(
            OrchestratorName.EXECUTION,
            execution_id,
            json.dumps(ExecutionInput(execution_id=execution_id, tenant_id=tenant_id).to_json_dict()),
        )
        return execution_id

    def wait(self, execution_id: str, timeout: float = 60.0) -> dict[str, Any]:
        status = self.engine.wait_for_completion(execution_id, timeout)
        assert status is not None, f"{execution_id} did not finish within {timeout}s"
        return status

    def execution(self, execution_id: str) -> Execution:
        ex = self.stores.executions.get_execution(execution_id)
        assert ex is not None
        return ex


@contextmanager
def run_harness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, virtual: bool = True
) -> Iterator[Harness]:
    monkeypatch.setenv("WEFT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("WEFT_PAYLOAD_STORE", "fs")
    reset_settings_cache()
    factory.reset_for_tests()
    import function_app

    function_app.app.functions_bindings = {}
    clock: VirtualClock | RealClock = VirtualClock() if virtual else RealClock()
    engine = DurableEngine(
        function_app.app.get_functions(),
        str(tmp_path / "durable.sqlite3"),
        clock=clock,
        activity_workers=8,
        orchestrator_workers=4,
    )
    engine.start()
    try:
        yield Harness(engine=engine, stores=factory.get_stores(), clock=clock)
    finally:
        engine.stop(graceful=False, timeout=5)
        factory.reset_for_tests()
        reset_settings_cache()
