"""The Durable client as a :class:`shared.submission.DurableStarter`, for sync code on a worker thread.

``submit_execution`` and ``relay_once`` are plain sync functions; the Durable client is async and its
HTTP session is bound to the function's event loop. The trigger runs the plain function on a thread
(``loop.run_in_executor``) and this bridge runs each client call back on the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

import azure.durable_functions as df

log = logging.getLogger(__name__)
T = TypeVar("T")

CALL_TIMEOUT_SECONDS = 30.0


class ClientStarter:
    def __init__(self, client: df.DurableOrchestrationClient, loop: asyncio.AbstractEventLoop) -> None:
        self.client = client
        self.loop = loop

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            coro.close()
            # Blocking the loop on a call that needs the loop would deadlock.
            raise RuntimeError("ClientStarter must be called from a worker thread, not the event loop")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(CALL_TIMEOUT_SECONDS)

    def start_new(self, orchestrator: str, instance_id: str, input: dict[str, Any]) -> None:
        self._run(self._start(orchestrator, instance_id, input))

    async def _exists(self, instance_id: str) -> bool:
        status = await self.client.get_status(instance_id)
        # A missing instance comes back as a status with no runtime status (HTTP 404).
        return status is not None and status.runtime_status is not None

    async def _start(self, orchestrator: str, instance_id: str, input: dict[str, Any]) -> None:
        # Durable's start_new replaces a finished instance with the same id: never call it for an
        # instance that exists in any state.
        if await self._exists(instance_id):
            return
        try:
            await self.client.start_new(orchestrator, instance_id, input)
        except Exception:
            if await self._exists(instance_id):
                return  # a concurrent starter won the race ("already exists")
            raise
