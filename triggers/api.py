"""The HTTP API: one Functions HTTP function per route of ``shared.api.routes.ROUTES``.

Each function only converts ``func.HttpRequest`` to an :class:`~shared.api.types.ApiRequest`, runs
the pure core (``shared.api.routes.handle``) on a worker thread, and converts the result back.
Routes are ``AuthLevel.ANONYMOUS``: Weft authorises every call itself (``shared/api/auth.py``), so
the same rules hold on devhost and in Azure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

import azure.durable_functions as df
import azure.functions as func

from shared.adapters.factory import get_payload_store, get_stores
from shared.adapters.telemetry import configure_telemetry
from shared.api.routes import ROUTES, Route, handle
from shared.api.types import ApiDeps, ApiRequest, ApiResponse
from shared.settings import get_settings
from triggers.blueprint import bp
from triggers.starter import ClientStarter

#: Store calls block; the API gets its own threads so a burst of submits does not queue behind
#: the loop's small default pool (min(32, cores + 4) threads).
API_THREADS = 32

_FINISHED = {
    df.OrchestrationRuntimeStatus.Completed,
    df.OrchestrationRuntimeStatus.Failed,
    df.OrchestrationRuntimeStatus.Terminated,
    df.OrchestrationRuntimeStatus.Canceled,
}
_LIVE = [
    df.OrchestrationRuntimeStatus.Running,
    df.OrchestrationRuntimeStatus.Pending,
    df.OrchestrationRuntimeStatus.ContinuedAsNew,
    df.OrchestrationRuntimeStatus.Suspended,
]


class ClientControl(ClientStarter):
    """The Durable client as a :class:`shared.api.types.DurableControl` (call from a worker thread)."""

    def raise_event(self, instance_id: str, name: str, data: Any) -> bool:
        return self._run(self._raise(instance_id, name, data))

    def running_instances(self, prefix: str) -> list[str]:
        return self._run(self._query(prefix))

    def terminate(self, instance_id: str, reason: str) -> None:
        self._run(self.client.terminate(instance_id, reason))

    async def _live(self, instance_id: str) -> bool:
        status = await self.client.get_status(instance_id)
        return (
            status is not None
            and status.runtime_status is not None
            and status.runtime_status not in _FINISHED
        )

    async def _raise(self, instance_id: str, name: str, data: Any) -> bool:
        if not await self._live(instance_id):
            return False
        # The SDK's raise_event json.dumps the data and posts that with aiohttp's json=, so the
        # orchestration would receive a JSON *string* (azure-functions-durable-python#295). Post the
        # value once, through the client's own request helper, so the orchestrator gets the object.
        url = self.client._get_raise_event_url(instance_id, name, None, None)
        status, _ = await self.client._post_async_request(
            url,
            {} if data is None else data,
            function_invocation_id=self.client._function_invocation_id,
        )
        if status == 202:
            return True
        if status in (404, 410):  # finished or vanished since the status check
            return False
        raise RuntimeError(f"raising {name!r} on {instance_id} failed with HTTP {status}")

    async def _query(self, prefix: str) -> list[str]:
        statuses = await self.client.get_status_by(runtime_status=_LIVE, instance_id_prefix=prefix)
        return [s.instance_id for s in statuses if s.instance_id and s.instance_id.startswith(prefix)]


@lru_cache(maxsize=1)
def _executor() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=API_THREADS, thread_name_prefix="weft-api")


def to_api_request(req: func.HttpRequest) -> ApiRequest:
    return ApiRequest(
        method=req.method.upper(),
        path=urlsplit(req.url).path,
        route_params=dict(req.route_params or {}),
        query=dict(req.params or {}),
        headers={k.lower(): v for k, v in req.headers.items()},
        body=req.get_body() or b"",
    )


def to_http_response(res: ApiResponse) -> func.HttpResponse:
    return func.HttpResponse(
        body=res.body_bytes(),
        status_code=res.status,
        headers=dict(res.headers),
        mimetype=res.content_type,
        charset="utf-8",
    )


def _deps(client: df.DurableOrchestrationClient, loop: asyncio.AbstractEventLoop) -> ApiDeps:
    return ApiDeps.from_settings(
        get_stores(),
        get_payload_store(),
        ClientControl(client, loop),
        lambda: datetime.now(UTC),
        get_settings(),
    )


async def serve(
    route: Route, req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    loop = asyncio.get_running_loop()
    request = to_api_request(req)

    def run() -> ApiResponse:
        # Inside the thread: building the deps touches settings and stores, which may block.
        configure_telemetry()
        return handle(route, request, _deps(client, loop))

    return to_http_response(await loop.run_in_executor(_executor(), run))


Endpoint = Callable[[func.HttpRequest, df.DurableOrchestrationClient], Awaitable[func.HttpResponse]]


def _register(route: Route) -> Endpoint:
    async def endpoint(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
        return await serve(route, req, client)

    endpoint.__name__ = endpoint.__qualname__ = str(route.name)
    decorated = bp.durable_client_input(client_name="client")(endpoint)
    decorated = bp.route(
        route=route.function_route, methods=[route.method], auth_level=func.AuthLevel.ANONYMOUS
    )(decorated)
    bp.function_name(str(route.name))(decorated)
    return endpoint


ENDPOINTS: dict[str, Endpoint] = {str(r.name): _register(r) for r in ROUTES}
