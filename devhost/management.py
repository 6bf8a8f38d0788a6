"""The Durable extension's HTTP management API, served over the devhost engine.

Two mounts serve the same handlers, as in the extension (``HttpApiHandler.cs``):
- ``/durabletask/`` is the local RPC endpoint (``rpcBaseUrl``) that ``DurableOrchestrationClient``
  calls for everything;
- ``/runtime/webhooks/durabletask/`` is the public webhook base behind ``create_check_status_response``
  URLs (``statusQueryGetUri`` and friends).
Status codes follow the extension, because the Python SDK client interprets them (e.g. 410 on
terminate means "already finished", 404 on read entity means "does not exist").
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

from aiohttp import web

from devhost.durable.api import (
    DurableBackend,
    InstanceExistsError,
    InstanceNotFoundError,
    InstanceQuery,
    InvalidStateError,
)

log = logging.getLogger("devhost.management")

RPC_PREFIX = "/durabletask"
WEBHOOK_PREFIX = "/runtime/webhooks/durabletask"
INSTANCE_ID_PLACEHOLDER = "INSTANCEID"
RUNTIME_STATUSES = (
    "Running",
    "Completed",
    "ContinuedAsNew",
    "Failed",
    "Canceled",
    "Terminated",
    "Pending",
    "Suspended",
)
TERMINAL = frozenset({"Completed", "Failed", "Canceled", "Terminated"})
RUNNING_LIKE = frozenset({"Running", "Pending", "ContinuedAsNew", "Suspended"})

T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class DurableEndpoints:
    """Where the management API lives and what the URLs it hands out look like."""

    origin: str  # e.g. http://127.0.0.1:7071
    task_hub: str
    connection: str = "Storage"
    system_key: str | None = None  # the durabletask_extension system key; None = no key needed

    @property
    def base_url(self) -> str:
        return self.origin + WEBHOOK_PREFIX

    @property
    def rpc_base_url(self) -> str:
        return self.origin + RPC_PREFIX + "/"

    @property
    def required_query(self) -> str:
        return urlencode({"code": self.system_key}) if self.system_key else ""

    def management_urls(self, instance_id: str, origin: str | None = None) -> dict[str, str]:
        base = (origin or self.origin) + WEBHOOK_PREFIX
        prefix = f"{base}/instances/{quote(instance_id, safe='')}"
        suffix = urlencode({"taskHub": self.task_hub, "connection": self.connection})
        if self.system_key:
            suffix += "&" + self.required_query
        return {
            "id": instance_id,
            "statusQueryGetUri": f"{prefix}?{suffix}",
            "sendEventPostUri": f"{prefix}/raiseEvent/{{eventName}}?{suffix}",
            "terminatePostUri": f"{prefix}/terminate?reason={{text}}&{suffix}",
            "rewindPostUri": f"{prefix}/rewind?reason={{text}}&{suffix}",
            "purgeHistoryDeleteUri": f"{prefix}?{suffix}",
            "restartPostUri": f"{prefix}/restart?{suffix}",
            "suspendPostUri": f"{prefix}/suspend?reason={{text}}&{suffix}",
            "resumePostUri": f"{prefix}/resume?reason={{text}}&{suffix}",
        }

    def creation_urls(self) -> dict[str, str]:
        prefix = self.base_url + "/orchestrators/{functionName}[/{instanceId}]"
        q = self.required_query
        return {
            "createNewInstancePostUri": f"{prefix}?{q}",
            "createAndWaitOnNewInstancePostUri": (
                f"{prefix}?timeout={{timeoutInSeconds}}&pollingInterval={{intervalInSeconds}}&{q}"
            ),
        }

    def client_binding(self) -> str:
        """The JSON string the extension passes to a ``durableClient`` binding (BindingHelper.cs)."""
        return json.dumps(
            {
                "taskHubName": self.task_hub,
                "creationUrls": self.creation_urls(),
                "managementUrls": self.management_urls(INSTANCE_ID_PLACEHOLDER),
                "baseUrl": self.base_url,
                "requiredQueryStringParameters": self.required_query,
                "rpcBaseUrl": self.rpc_base_url,
                "httpBaseUrl": "",
                "maxGrpcMessageSizeInBytes": 0,
                "grpcHttpClientTimeout": "00:01:40",
            }
        )


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps(body),
        content_type="application/json",
        headers=headers,
    )


def _error(
    status: int, message: str, exc_message: str | None = None, exc_type: str | None = None
) -> web.Response:
    body: dict[str, Any] = {"Message": message}
    if exc_message is not None:
        body["ExceptionMessage"] = exc_message
        body["ExceptionType"] = exc_type or "System.ArgumentException"
    return _json(status, body)


def _bool(q: Any, name: str, default: bool) -> bool:
    v = q.get(name)
    if v is None:
        return default
    low = str(v).strip().lower()
    if low in ("true", "false"):
        return low == "true"
    return default  # bool.TryParse failure keeps the default, as in the extension


def _date(q: Any, name: str) -> datetime | None:
    v = q.get(name)
    if not v:
        return None
    try:
        d = datetime.fromisoformat(str(v).strip().replace(" ", "+"))
    except ValueError:
        return None
    return d if d.tzinfo else d.replace(tzinfo=UTC)


def _statuses(q: Any) -> tuple[str, ...]:
    out: list[str] = []
    for raw in q.getall("runtimeStatus", []):
        for part in str(raw).split(","):
            item = part.strip()
            if item in RUNTIME_STATUSES and item not in out:
                out.append(item)
    return tuple(out)


class ManagementApi:
    def __init__(
        self,
        backend: DurableBackend,
        endpoints: DurableEndpoints,
        orchestrators: Callable[[], set[str]],
        executor: Executor,
    ) -> None:
        self.backend = backend
        self.endpoints = endpoints
        self._orchestrators = orchestrators
        self._executor = executor

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: fn(*args, **kwargs))

    def routes(self, prefix: str, guard: Callable[[Handler], Handler] | None = None) -> list[web.RouteDef]:
        p = prefix
        defs = [
            web.post(p + "/orchestrators/{functionName}", self.start),
            web.post(p + "/orchestrators/{functionName}/{instanceId}", self.start),
            web.get(p + "/instances", self.query),
            web.get(p + "/instances/", self.query),
            web.delete(p + "/instances", self.purge_many),
            web.delete(p + "/instances/", self.purge_many),
            web.get(p + "/instances/{instanceId}", self.status),
            web.delete(p + "/instances/{instanceId}", self.purge),
            web.post(p + "/instances/{instanceId}/raiseEvent/{eventName}", self.raise_event),
            web.post(p + "/instances/{instanceId}/{operation}", self.operation),
            web.get(p + "/entities/{entityName}/{entityKey}", self.read_entity),
            web.post(p + "/entities/{entityName}/{entityKey}", self.signal_entity),
            web.delete(p + "/entities/{entityName}/{entityKey}", self.signal_entity),
            web.get(p + "/entities/{entityName}", self.list_entities),
        ]
        if guard is None:
            return defs
        return [web.route(d.method, d.path, guard(d.handler)) for d in defs]

    def _origin(self, request: web.Request) -> str:
        parts = urlsplit(str(request.url))
        return f"{parts.scheme}://{parts.netloc}"

    def check_status_response(self, request: web.Request, instance_id: str) -> web.Response:
        # The extension builds these links from the incoming request's origin.
        payload = self.endpoints.management_urls(instance_id, self._origin(request))
        del payload["rewindPostUri"]
        return _json(
            202,
            payload,
            {"Location": payload["statusQueryGetUri"], "Retry-After": "10"},
        )

    async def start(self, request: web.Request) -> web.Response:
        name = request.match_info["functionName"]
        instance_id = request.match_info.get("instanceId") or None
        raw = await request.text()
        input_json: str | None = None
        if raw.strip():
            try:
                body = json.loads(raw)
            except ValueError:
                return _error(400, "Invalid JSON content")
            # The SDK client posts json.dumps(input) as a JSON string; the extension keeps that
            # document and hands the orchestrator its string value, which the SDK then decodes. The
            # engine takes the JSON text the orchestrator reads, so one layer comes off here.
            input_json = body if isinstance(body, str) else raw
        known = self._orchestrators()
        if name not in known and name.lower() not in {k.lower() for k in known}:
            msg = (
                f"The function '{name}' doesn't exist, is disabled, or is not an orchestrator function. "
                f"Additional info: the following are the known orchestrator functions: "
                f"{', '.join(sorted(known))}."
            )
            return _error(400, "One or more of the arguments submitted is incorrect", msg)
        name = next((k for k in known if k.lower() == name.lower()), name)
        try:
            iid = await self._call(self.backend.start_instance, name, instance_id, input_json)
        except InstanceExistsError as exc:
            return _error(409, str(exc) or f"An instance with ID '{instance_id}' already exists.")
        except ValueError as exc:  # the engine's ArgumentException equivalents (e.g. unknown function)
            return _error(400, "One or more of the arguments submitted is incorrect", str(exc))
        log.info(json.dumps({"evt": "client.start", "function": name, "instanceId": iid}))
        timeout = request.query.get("timeout")
        interval = request.query.get("pollingInterval")
        if timeout and interval:
            return await self._wait_or_check(request, iid, float(timeout), float(interval))
        return self.check_status_response(request, iid)

    async def _wait_or_check(
        self, request: web.Request, iid: str, timeout: float, interval: float
    ) -> web.Response:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            st = await self._call(self.backend.get_status, iid, show_input=False)
            if st is not None and st.get("runtimeStatus") == "Completed":
                return _json(200, st.get("output"))
            if st is not None and st.get("runtimeStatus") in TERMINAL:
                return _json(200, st)
            if loop.time() >= deadline:
                return self.check_status_response(request, iid)
            await asyncio.sleep(min(interval, max(0.0, deadline - loop.time())))

    async def status(self, request: web.Request) -> web.Response:
        iid = request.match_info["instanceId"]
        q = request.query
        st = await self._call(
            self.backend.get_status,
            iid,
            show_history=_bool(q, "showHistory", False),
            show_history_output=_bool(q, "showHistoryOutput", False),
            show_input=_bool(q, "showInput", True),
        )
        if st is None:
            return web.Response(status=404)
        rs = st.get("runtimeStatus")
        headers: dict[str, str] = {}
        if rs in RUNNING_LIKE:
            code = 202
            headers = {"Location": str(request.url), "Retry-After": "5"}
        elif rs == "Failed":
            code = 500 if _bool(q, "returnInternalServerErrorOnFailure", False) else 200
        elif rs in TERMINAL:
            code = 200
        else:
            code = 500
        return _json(code, st, headers)

    async def query(self, request: web.Request) -> web.Response:
        q = request.query
        top = q.get("top")
        query = InstanceQuery(
            runtime_status=_statuses(q),
            created_from=_date(q, "createdTimeFrom"),
            created_to=_date(q, "createdTimeTo"),
            instance_id_prefix=q.get("instanceIdPrefix") or None,
            top=int(top) if top and top.isdigit() and int(top) > 0 else 100,
            continuation_token=request.headers.get("x-ms-continuation-token") or None,
            show_input=_bool(q, "showInput", False),
        )
        items, token = await self._call(self.backend.query_instances, query)
        return _json(200, items, {"x-ms-continuation-token": token or ""})

    async def purge_many(self, request: web.Request) -> web.Response:
        q = request.query
        created_from = _date(q, "createdTimeFrom")
        if created_from is None:
            return _json(400, "Please provide value for 'createdTimeFrom' parameter.")
        query = InstanceQuery(
            runtime_status=_statuses(q),
            created_from=created_from,
            created_to=_date(q, "createdTimeTo") or datetime.now(UTC),
        )
        n = await self._call(self.backend.purge_many, query)
        if n == 0:
            return web.Response(status=404)
        return _json(200, {"instancesDeleted": n})

    async def purge(self, request: web.Request) -> web.Response:
        iid = request.match_info["instanceId"]
        if not iid.startswith("@"):
            st = await self._call(self.backend.get_status, iid, show_input=False)
            if st is None:
                return web.Response(status=404)
            if st.get("runtimeStatus") not in TERMINAL:
                return _json(
                    412,
                    "Only orchestrations in a terminal state can be purged, but the orchestration with "
                    f"instance ID {iid} has status {st.get('runtimeStatus')}",
                )
        deleted = await self._call(self.backend.purge, iid)
        if not deleted:
            return web.Response(status=404)
        return _json(200, {"instancesDeleted": 1})

    async def _guarded(self, iid: str, op: Callable[[], Awaitable[None]]) -> web.Response:
        st = await self._call(self.backend.get_status, iid, show_input=False)
        if st is None:
            return web.Response(status=404)
        if st.get("runtimeStatus") in TERMINAL:
            return web.Response(status=410)
        try:
            await op()
        except InstanceNotFoundError:
            return web.Response(status=404)
        except InvalidStateError:
            return web.Response(status=410)
        return web.Response(status=202)

    async def operation(self, request: web.Request) -> web.Response:
        iid = request.match_info["instanceId"]
        op = request.match_info["operation"].lower()
        reason = request.query.get("reason")
        if op in ("terminate", "suspend", "resume"):
            fn = {
                "terminate": self.backend.terminate,
                "suspend": self.backend.suspend,
                "resume": self.backend.resume,
            }[op]

            async def run() -> None:
                await self._call(fn, iid, reason)

            log.info(json.dumps({"evt": f"client.{op}", "instanceId": iid}))
            return await self._guarded(iid, run)
        if op == "restart":
            return await self._restart(request, iid)
        if op == "rewind":
            return _error(501, "Rewind is not supported by devhost.")
        return web.Response(status=404)

    async def _restart(self, request: web.Request, iid: str) -> web.Response:
        st = await self._call(self.backend.get_status, iid, show_input=True)
        if st is None:
            return _error(400, "InstanceId does not match a valid orchestration instance.")
        new_id = None if _bool(request.query, "restartWithNewInstanceId", True) else iid
        inp = st.get("input")
        input_json = inp if isinstance(inp, str) or inp is None else json.dumps(inp)
        try:
            nid = await self._call(self.backend.start_instance, str(st["name"]), new_id, input_json)
        except InstanceExistsError:
            return _error(409, "A non-terminal instance with this instance ID already exists.")
        return self.check_status_response(request, nid)

    async def raise_event(self, request: web.Request) -> web.Response:
        iid = request.match_info["instanceId"]
        name = request.match_info["eventName"]
        st = await self._call(self.backend.get_status, iid, show_input=False)
        if st is None:
            return web.Response(status=404)
        if st.get("runtimeStatus") in TERMINAL:
            return web.Response(status=410)
        if request.content_type.lower() != "application/json":
            return _error(400, "Only application/json request content is supported")
        raw = await request.text()
        if raw.strip():
            try:
                json.loads(raw)
            except ValueError:
                return _error(400, "Invalid JSON content")
        data = raw if raw.strip() else None

        async def run() -> None:
            await self._call(self.backend.raise_event, iid, name, data)

        return await self._guarded(iid, run)

    @staticmethod
    def _entity_key(request: web.Request) -> tuple[str, str]:
        key = request.match_info["entityKey"]
        return request.match_info["entityName"], "" if key == "$" else key

    async def read_entity(self, request: web.Request) -> web.Response:
        name, key = self._entity_key(request)
        exists, state = await self._call(self.backend.read_entity, name.lower(), key)
        if not exists:
            return web.Response(status=404)
        return web.Response(
            status=200, text=state if state is not None else "null", content_type="application/json"
        )

    async def signal_entity(self, request: web.Request) -> web.Response:
        name, key = self._entity_key(request)
        op = "delete" if request.method == "DELETE" else request.query.get("op", "")
        raw = await request.text()
        input_json: str | None = None
        if raw:
            if request.content_type.lower() == "application/json":
                try:
                    json.loads(raw)
                except ValueError as exc:
                    return _error(400, f"Could not parse JSON content: {exc}")
                input_json = raw
            else:
                input_json = json.dumps(raw)
        await self._call(self.backend.signal_entity, name.lower(), key, op, input_json)
        return web.Response(status=202)

    async def list_entities(self, request: web.Request) -> web.Response:
        return _error(501, "Listing entities is not supported by devhost; read an entity by name and key.")
