"""Runs a DevHost on a background event loop, on a free port, for tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from devhost.host import BackendFactory, DevHost, HostOptions

T = TypeVar("T")


class RunningHost:
    def __init__(
        self,
        app: str,
        root: Path,
        *,
        settings: dict[str, str] | None = None,
        backend_factory: BackendFactory | None = None,
        bus: Any = None,
        data_dir: Path | None = None,
        virtual_clock: bool = False,
    ) -> None:
        self.options = HostOptions(
            app=app,
            root=root,
            port=0,
            data_dir=data_dir or root / "data",
            virtual_clock=virtual_clock,
            settings_overrides=dict(settings or {}),
        )
        self.backend_factory = backend_factory
        self.bus = bus
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.host: DevHost | None = None

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def __enter__(self) -> RunningHost:
        self.thread.start()

        async def make() -> DevHost:
            return DevHost(self.options, backend_factory=self.backend_factory, bus=self.bus)

        self.host = self.run(make())
        try:
            self.run(self.host.start())
        except BaseException:
            self._shutdown_loop()
            raise
        return self

    @property
    def url(self) -> str:
        assert self.host is not None
        return f"http://127.0.0.1:{self.host.port}"

    def call(self, fn: Callable[[], Coroutine[Any, Any, T]], timeout: float = 60) -> T:
        """Run client code on its own loop; the SDK client's module-global aiohttp session is bound to
        one loop, so it is closed before the loop ends."""
        from azure.durable_functions.models.utils import http_utils

        async def wrapped() -> T:
            try:
                return await asyncio.wait_for(fn(), timeout)
            finally:
                await http_utils._close_session()

        return asyncio.run(wrapped())

    def _shutdown_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def __exit__(self, *exc: object) -> None:
        assert self.host is not None
        try:
            self.run(self.host.stop())
        finally:
            self._shutdown_loop()
