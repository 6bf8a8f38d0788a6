"""In-process transport for the SDK client's calls to devhost's own ``rpcBaseUrl``.

``DurableOrchestrationClient`` talks to the extension over HTTP on localhost. When user code runs
inside devhost (on the host's event loop) and calls devhost's own RPC endpoint, devhost hands the
request straight to the same management handlers instead of a TCP round trip to itself: same
handlers, same status codes and bodies, no sockets. Calls from any other loop or to any other URL
go over HTTP as before. ``DEVHOST_RPC_OVER_HTTP=1`` turns the shortcut off.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, cast
from urllib.parse import urlsplit

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy, MultiDict, MultiDictProxy
from yarl import URL

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_SDK_MODULE = "azure.durable_functions.models.DurableOrchestrationClient"


class _DirectRequest:
    """The part of ``web.Request`` the management handlers read."""

    def __init__(
        self, method: str, url: str, body: bytes, content_type: str, match_info: dict[str, str]
    ) -> None:
        self.method = method
        self.url = URL(url)
        self.match_info = match_info
        self.query: MultiDictProxy[str] = MultiDictProxy(MultiDict(self.url.query))
        hdrs: CIMultiDict[str] = CIMultiDict()
        if content_type:
            hdrs["Content-Type"] = content_type
        self.headers = CIMultiDictProxy(hdrs)
        self.content_type = content_type or "application/octet-stream"
        self._body = body

    async def text(self) -> str:
        return self._body.decode("utf-8")


def _compile(path: str) -> re.Pattern[str]:
    out = ""
    for part in re.split(r"(\{[^}]+\})", path):
        if part.startswith("{") and part.endswith("}"):
            out += f"(?P<{part[1:-1]}>[^/]+)"
        else:
            out += re.escape(part)
    return re.compile("^" + out + "$")


class RpcShortcut:
    def __init__(self, rpc_base_url: Callable[[], str], routes: list[web.RouteDef]) -> None:
        self._base = rpc_base_url
        self._routes = [(r.method, _compile(r.path), cast(Handler, r.handler)) for r in routes]
        self.loop: asyncio.AbstractEventLoop | None = None
        self._saved: dict[str, Any] = {}
        self.calls = 0

    def _mine(self, url: str) -> bool:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        return loop is self.loop and url.startswith(self._base())

    async def dispatch(self, method: str, url: str, data: Any) -> list[Any]:
        self.calls += 1
        path = urlsplit(url).path
        body = b"" if data is None else json.dumps(data).encode("utf-8")
        for m, regex, handler in self._routes:
            match = regex.match(path)
            if m == method and match:
                req = _DirectRequest(
                    method, url, body, "application/json" if data is not None else "", match.groupdict()
                )
                resp = await handler(cast(web.Request, req))
                raw = resp.body if isinstance(resp, web.Response) else None
                text = raw.decode("utf-8") if isinstance(raw, bytes) else ""
                parsed = json.loads(text) if text else None
                if method == "GET" and parsed is None:
                    parsed = ""
                return [resp.status, parsed]
        return [404, None]

    def install(self) -> None:
        """Route the SDK's module-level request functions through this host when they target it."""
        import importlib

        mod: Any = importlib.import_module(_SDK_MODULE)
        self.loop = asyncio.get_running_loop()
        self._saved = {
            n: getattr(mod, n) for n in ("post_async_request", "get_async_request", "delete_async_request")
        }
        post, get, delete = (
            self._saved[n] for n in ("post_async_request", "get_async_request", "delete_async_request")
        )

        async def post_async_request(url: str, data: Any = None, *args: Any, **kwargs: Any) -> list[Any]:
            if self._mine(url):
                return await self.dispatch("POST", url, data)
            return cast(list[Any], await post(url, data, *args, **kwargs))

        async def get_async_request(url: str, *args: Any, **kwargs: Any) -> list[Any]:
            if self._mine(url):
                return await self.dispatch("GET", url, None)
            return cast(list[Any], await get(url, *args, **kwargs))

        async def delete_async_request(url: str, *args: Any, **kwargs: Any) -> list[Any]:
            if self._mine(url):
                return await self.dispatch("DELETE", url, None)
            return cast(list[Any], await delete(url, *args, **kwargs))

        mod.post_async_request = post_async_request
        mod.get_async_request = get_async_request
        mod.delete_async_request = delete_async_request

    def uninstall(self) -> None:
        if not self._saved:
            return
        import importlib

        mod: Any = importlib.import_module(_SDK_MODULE)
        for name, fn in self._saved.items():
            setattr(mod, name, fn)
        self._saved = {}
        self.loop = None
