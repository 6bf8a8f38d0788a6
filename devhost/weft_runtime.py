"""Weft's execution machinery on devhost's durable engine, in one process (tests and benchmarks).

:func:`run_weft` points the embedded backends at a folder, loads ``function_app`` and starts a
:class:`~devhost.durable.engine.DurableEngine` on it, with a virtual clock by default so retries,
backoffs and timeouts take no wall time. ``WeftRuntime.submit`` writes a queued execution as the
submission path does and starts its orchestration.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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
class WeftRuntime:
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
def run_weft(
    data_dir: Path,
    *,
    virtual: bool = True,
    activity_workers: int = 8,
    orchestrator_workers: int = 4,
) -> Iterator[WeftRuntime]:
    env = {"WEFT_DATA_DIR": str(data_dir / "data"), "WEFT_PAYLOAD_STORE": "fs"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    reset_settings_cache()
    factory.reset_for_tests()
    import function_app

    function_app.app.functions_bindings = {}
    clock: VirtualClock | RealClock = VirtualClock() if virtual else RealClock()
    engine = DurableEngine(
        function_app.app.get_functions(),
        str(data_dir / "durable.sqlite3"),
        clock=clock,
        activity_workers=activity_workers,
        orchestrator_workers=orchestrator_workers,
    )
    engine.start()
    try:
        yield WeftRuntime(engine=engine, stores=factory.get_stores(), clock=clock)
    finally:
        # Graceful: the workers finish their current item before the stores' connections are
        # closed below (closing a connection another thread is using crashes sqlite3).
        engine.stop(graceful=True, timeout=5)
        factory.reset_for_tests()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        reset_settings_cache()
