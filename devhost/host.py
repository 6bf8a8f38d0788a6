"""devhost: loads the function app, indexes it, and serves it like the Functions host.

One asyncio loop runs the HTTP server (HTTP triggers, the Durable management API, /admin), the
timer, blob and Service Bus triggers; the durable engine (``devhost.durable``) runs its own worker
pools. Sync user code runs on a thread pool, async user code on the loop, as in the Python worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from aiohttp import web

from devhost.durable.api import DurableBackend
from devhost.http_server import HttpTriggers, Keys, RouteError
from devhost.indexing import DURABLE_TRIGGERS, FunctionSpec, IndexingError, index_app, load_app
from devhost.invoker import Invoker
from devhost.management import RPC_PREFIX, WEBHOOK_PREFIX, DurableEndpoints, Handler, ManagementApi
from devhost.settings import AppSettings, DurableKnobs, SettingsError, load_durable_knobs
from devhost.state import HostState

log = logging.getLogger("devhost")

VERSION = "4.0.0-devhost"
FUNCTION_KEY_SETTING = "DEVHOST_FUNCTION_KEY"
MASTER_KEY_SETTING = "DEVHOST_MASTER_KEY"
DURABLE_KEY_SETTING = "DEVHOST_DURABLE_KEY"
BLOB_POLL_SETTING = "DEVHOST_BLOB_POLL_SECONDS"
RPC_OVER_HTTP_SETTING = "DEVHOST_RPC_OVER_HTTP"


class HostError(Exception):
    """devhost cannot start: the message says what to fix."""


@dataclass(frozen=True)
class EngineConfig:
    """What devhost hands the durable engine."""

    functions: list[Any]  # azure.functions Function objects of the durable triggers
    data_dir: Path
    task_hub: str
    max_activities: int
    max_orchestrators: int
    virtual_clock: bool


BackendFactory = Callable[[EngineConfig], DurableBackend]


def default_backend_factory(cfg: EngineConfig) -> DurableBackend:
    from devhost.durable.clock import Clock, RealClock, VirtualClock
    from devhost.durable.engine import DurableEngine

    clock: Clock = VirtualClock() if cfg.virtual_clock else RealClock()
    return DurableEngine(
        cfg.functions,
        str(cfg.data_dir / "durable.sqlite3"),
        clock=clock,
        activity_workers=cfg.max_activities,
        orchestrator_workers=cfg.max_orchestrators,
        task_hub=cfg.task_hub,
    )


@dataclass
class HostOptions:
    app: str = "function_app:app"
    root: Path = field(default_factory=Path.cwd)
    host: str = "127.0.0.1"
    port: int = 7071
    data_dir: Path | None = None
    virtual_clock: bool = False
    max_activities: int | None = None
    max_orchestrators: int | None = None
    with_azurite: bool = False
    # Settings that win over local.settings.json and the environment (tests, embedding).
    settings_overrides: dict[str, str] = field(default_factory=dict)


class DevHost:
    def __init__(
        self,
        options: HostOptions,
        *,
        backend_factory: BackendFactory | None = None,
        bus: Any = None,
    ) -> None:
        self.options = options
        self.backend_factory = backend_factory or default_backend_factory
        self.state_name = "Initialized"
        self.started_at = time.monotonic()
        self.stop_event = asyncio.Event()
        self._bus = bus
        self._tasks: list[asyncio.Task[None]] = []
        self._runner: web.AppRunner | None = None
        self._azurite: Any = None
        self.backend: DurableBackend | None = None
        self.specs: list[FunctionSpec] = []
        self.triggers: list[Any] = []
        self.port = options.port
        self.user_pool = ThreadPoolExecutor(
            max_workers=int(
                os.environ.get("PYTHON_THREADPOOL_THREAD_COUNT") or min(32, (os.cpu_count() or 1) + 4)
            ),
            thread_name_prefix="devhost-user",
        )
        self.io_pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="devhost-io")
        self.host_state: HostState | None = None
        self._shortcut: Any = None
        self._saved_env: dict[str, str | None] = {}
        self._owned_bus = False
        self._binding_cache: tuple[DurableEndpoints, str] | None = None
        self._bus_lock = threading.Lock()

    # ------------------------------------------------------------------ start-up

    @property
    def root(self) -> Path:
        return self.options.root.resolve()

    @property
    def data_dir(self) -> Path:
        d = self.options.data_dir or (self.root / ".weft" / "devhost")
        return d if d.is_absolute() else self.root / d

    def _knobs(self, settings: AppSettings) -> DurableKnobs:
        knobs = load_durable_knobs(self.root, settings)
        return DurableKnobs(
            knobs.hub_name,
            self.options.max_activities or knobs.max_concurrent_activities,
            self.options.max_orchestrators or knobs.max_concurrent_orchestrators,
        )

    def _route_prefix(self) -> str:
        path = self.root / "host.json"
        if not path.exists():
            return "api"
        doc = json.loads(path.read_text(encoding="utf-8"))
        http = doc.get("extensions", {}).get("http", {}) if isinstance(doc, dict) else {}
        return str(http.get("routePrefix", "api")) if isinstance(http, dict) else "api"

    async def start(self) -> None:
        try:
            await self._start()
        except (IndexingError, SettingsError, RouteError, ValueError) as exc:
            await self.stop()
            raise HostError(str(exc)) from exc
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        self.settings = AppSettings.load(self.root)
        self.settings.export_to_environ()
        # App code reads os.environ, so overrides are visible there while this host runs; stop()
        # restores the previous values (tests run many hosts in one process).
        self.settings.values.update(self.options.settings_overrides)
        for key, value in self.options.settings_overrides.items():
            self._saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value
        if self.options.with_azurite:
            from devhost.azurite import AzuriteProcess

            self._azurite = AzuriteProcess(self.root)
            await asyncio.get_running_loop().run_in_executor(None, self._azurite.start)
        knobs = self._knobs(self.settings)
        app = load_app(self.options.app)
        self.specs = index_app(app)
        self.keys = Keys(self.settings.get(FUNCTION_KEY_SETTING), self.settings.get(MASTER_KEY_SETTING))
        for s in self.specs:
            level = str(s.trigger.get("authLevel", "")).upper()
            if s.trigger_type == "httpTrigger" and level in ("FUNCTION", "ADMIN"):
                needed = (
                    MASTER_KEY_SETTING
                    if level == "ADMIN"
                    else f"{FUNCTION_KEY_SETTING} or {MASTER_KEY_SETTING}"
                )
                if not (self.keys.master_key or (level == "FUNCTION" and self.keys.function_key)):
                    raise HostError(
                        f"function {s.name!r} has authLevel {level}: set {needed} in local.settings.json"
                    )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.host_state = HostState(self.data_dir / "devhost.sqlite3")
        from devhost.outputs import OutputBinder

        invoker = Invoker(
            self.user_pool,
            client_binding=self._client_binding,
            outputs=OutputBinder(self._get_bus, self.settings.resolve),
        )

        durable = [s for s in self.specs if s.trigger_type in DURABLE_TRIGGERS]
        self.orchestrators = {s.durable_name for s in self.specs if s.trigger_type == "orchestrationTrigger"}
        needs_client = any(s.binding_of_type("durableClient") for s in self.specs)
        if durable or needs_client:
            self.backend = self.backend_factory(
                EngineConfig(
                    functions=[s.source for s in durable],
                    data_dir=self.data_dir,
                    task_hub=knobs.hub_name,
                    max_activities=knobs.max_concurrent_activities,
                    max_orchestrators=knobs.max_concurrent_orchestrators,
                    virtual_clock=self.options.virtual_clock,
                )
            )
        self._build_triggers(invoker)

        web_app = web.Application(client_max_size=100 * 1024 * 1024)
        self.endpoints = DurableEndpoints(
            origin=f"http://{self.options.host}:{self.options.port}",
            task_hub=knobs.hub_name,
            system_key=self.settings.get(DURABLE_KEY_SETTING) or None,
        )
        self.http = HttpTriggers(self.specs, invoker, self.keys, self._client_binding, self._route_prefix())
        web_app.router.add_get("/admin/host/status", self._status)
        web_app.router.add_get("/admin/host/ping", self._ping)
        web_app.router.add_post("/admin/host/ping", self._ping)
        if self.backend is not None:
            self.management = ManagementApi(
                self.backend, self.endpoints, lambda: self.orchestrators, self.io_pool
            )
            web_app.add_routes(self.management.routes(RPC_PREFIX))
            web_app.add_routes(self.management.routes(WEBHOOK_PREFIX, guard=self._webhook_guard))
        web_app.router.add_route("*", "/{tail:.*}", self.http.handle)

        self._runner = web.AppRunner(web_app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.options.host, self.options.port, backlog=1024)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        self.endpoints = DurableEndpoints(
            origin=f"http://{self.options.host}:{self.port}",
            task_hub=knobs.hub_name,
            system_key=self.endpoints.system_key,
        )
        if self.backend is not None:
            self.management.endpoints = self.endpoints
            if (self.settings.get(RPC_OVER_HTTP_SETTING) or "").lower() not in ("1", "true"):
                from devhost.rpc_shortcut import RpcShortcut

                self._shortcut = RpcShortcut(self._rpc_base_url, self.management.routes(RPC_PREFIX))
                self._shortcut.install()
            self.backend.start()
        for t in self.triggers:
            self._tasks.append(asyncio.create_task(self._run_trigger(t), name=f"trigger:{t.spec.name}"))
        self.state_name = "Running"
        log.info(
            json.dumps(
                {
                    "evt": "host.started",
                    "url": f"http://{self.options.host}:{self.port}",
                    "functions": sorted(s.name for s in self.specs),
                    "taskHub": knobs.hub_name,
                    "maxConcurrentActivityFunctions": knobs.max_concurrent_activities,
                    "maxConcurrentOrchestratorFunctions": knobs.max_concurrent_orchestrators,
                    "virtualClock": self.options.virtual_clock,
                }
            )
        )

    def _tz(self) -> Any:
        name = self.settings.get("WEBSITE_TIME_ZONE") or self.settings.get("TZ")
        if not name:
            return UTC
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise HostError(f"WEBSITE_TIME_ZONE={name!r} is not a known IANA time zone") from exc

    def _build_triggers(self, invoker: Invoker) -> None:
        from devhost.triggers.blob import BlobTrigger, connection_string
        from devhost.triggers.servicebus import ServiceBusTrigger, entity_of
        from devhost.triggers.timer import TimerTrigger

        assert self.host_state is not None
        sb_calls = self._service_bus_concurrency()
        for s in self.specs:
            if s.trigger_type == "timerTrigger":
                sched = self.settings.resolve(str(s.trigger.get("schedule", "")))
                self.triggers.append(TimerTrigger(s, sched, self._tz(), invoker, state=self.host_state))
            elif s.trigger_type == "blobTrigger":
                conn = s.trigger.get("connection")
                cs = connection_string(self.settings.get, self.settings.resolve(str(conn)) if conn else None)
                poll = float(self.settings.get(BLOB_POLL_SETTING) or 1.0)
                threshold = int(self._extension("blobs").get("poisonBlobThreshold") or 5)
                self.triggers.append(
                    BlobTrigger(s, cs, invoker, self.io_pool, poll_seconds=poll, max_dequeue=threshold)
                )
            elif s.trigger_type == "serviceBusTrigger":
                bus = self._get_bus()
                entity = entity_of(s, self.settings.resolve)
                sb_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"devhost-sb-{s.name}")
                self.triggers.append(
                    ServiceBusTrigger(s, entity, bus, invoker, sb_pool, max_concurrent_calls=sb_calls)
                )

    def _get_bus(self) -> Any:
        with self._bus_lock:
            if self._bus is None:
                from shared.adapters.factory import build_bus
                from shared.settings import WeftSettings

                # Built from the settings of this host run (the app's own singleton may be stale).
                self._bus = build_bus(WeftSettings())
                self._owned_bus = True
            return self._bus

    def _extension(self, name: str) -> dict[str, Any]:
        path = self.root / "host.json"
        if not path.exists():
            return {}
        doc = json.loads(path.read_text(encoding="utf-8"))
        section = doc.get("extensions", {}).get(name, {}) if isinstance(doc, dict) else {}
        return section if isinstance(section, dict) else {}

    def _service_bus_concurrency(self) -> int:
        return int(self._extension("serviceBus").get("maxConcurrentCalls") or 16)

    async def _run_trigger(self, trigger: Any) -> None:
        try:
            await trigger.run(self.stop_event)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("trigger for %s stopped with an error", trigger.spec.name)

    # ------------------------------------------------------------------ admin

    def _authorized_admin(self, request: web.Request) -> bool:
        return self.keys.allows(
            "ADMIN", request.query.get("code") or request.headers.get("x-functions-key")
        ) or (not self.keys.master_key)

    async def _status(self, request: web.Request) -> web.Response:
        if not self._authorized_admin(request):
            return web.Response(status=401)
        body = {
            "id": "devhost",
            "state": self.state_name,
            "version": VERSION,
            "versionDetails": f"devhost {VERSION} (azure-functions, azure-functions-durable 1.x protocol)",
            "processUptime": int((time.monotonic() - self.started_at) * 1000),
            "functions": sorted(s.name for s in self.specs),
            "taskHub": self.endpoints.task_hub,
        }
        return web.json_response(body)

    async def _ping(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.state_name == "Running" else 503)

    def _webhook_guard(self, handler: Handler) -> Handler:
        """The public webhooks need the durabletask system key (or the master key) when one is set."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            key = self.endpoints.system_key
            presented = request.query.get("code") or request.headers.get("x-functions-key")
            if key and presented not in (key, self.keys.master_key):
                return web.Response(status=401)
            return await handler(request)

        return guarded

    def _rpc_base_url(self) -> str:
        return self.endpoints.rpc_base_url

    def _client_binding(self) -> str:
        # The binding only changes with the endpoints (once, when the port is known).
        cached = self._binding_cache
        if cached is None or cached[0] is not self.endpoints:
            cached = self._binding_cache = (self.endpoints, self.endpoints.client_binding())
        return cached[1]

    # ------------------------------------------------------------------ stop

    async def stop(self, *, graceful: bool = True) -> None:
        if self.state_name in ("Stopping", "Stopped"):
            return
        self.state_name = "Stopping"
        self.stop_event.set()
        if self._runner is not None:
            # Stops accepting connections and lets in-flight requests finish.
            await self._runner.cleanup()
            self._runner = None
        if self._shortcut is not None:
            self._shortcut.uninstall()
            self._shortcut = None
        if self._tasks:
            # Triggers finish their current invocation; a poll stuck on an unreachable service is cut short.
            _done, pending = await asyncio.wait(self._tasks, timeout=10 if graceful else 0.1)
            for t in pending:
                t.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(*pending, return_exceptions=True)
        if self.backend is not None:
            backend = self.backend
            await asyncio.get_running_loop().run_in_executor(None, lambda: backend.stop(graceful=graceful))
        for t in self.triggers:
            ex = getattr(t, "executor", None)
            if isinstance(ex, ThreadPoolExecutor) and ex is not self.io_pool:
                ex.shutdown(wait=False, cancel_futures=True)
        if self._owned_bus and self._bus is not None:
            with contextlib.suppress(Exception):
                self._bus.close()
        # The SDK client keeps one module-global aiohttp session, bound to this loop.
        http_utils = sys.modules.get("azure.durable_functions.models.utils.http_utils")
        if http_utils is not None:
            with contextlib.suppress(Exception):
                await http_utils._close_session()
        self.user_pool.shutdown(wait=graceful, cancel_futures=not graceful)
        self.io_pool.shutdown(wait=False, cancel_futures=True)
        if self.host_state is not None:
            self.host_state.close()
        if self._azurite is not None:
            self._azurite.stop()
        for key, old in self._saved_env.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
        self._saved_env = {}
        self.state_name = "Stopped"
        log.info(json.dumps({"evt": "host.stopped"}))

    async def serve_forever(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.stop_event.set)
        await self.start()
        await self.stop_event.wait()
        log.info(json.dumps({"evt": "host.stopping", "reason": "signal"}))
        await self.stop(graceful=True)
