"""HTTP triggers on aiohttp, with the host's routing, auth levels and request/response mapping.

Routes follow the host: ``/<routePrefix>/<route>`` (prefix ``api`` unless host.json
``extensions.http.routePrefix`` says otherwise), case-insensitive, with ``{name}``, ``{name?}``,
``{*rest}`` and constraints ``int``, ``long``, ``alpha``, ``bool``, ``guid``, ``double``/``float``.
A literal route beats a parameterised one. No route, or a method the function does not accept, is 404.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import azure.functions as func
from aiohttp import web

from devhost.indexing import FunctionSpec
from devhost.invoker import Invoker

log = logging.getLogger("devhost.http")

_CONSTRAINTS = {
    "int": r"-?\d+",
    "long": r"-?\d+",
    "alpha": r"[A-Za-z]+",
    "bool": r"(?i:true|false)",
    "guid": r"[0-9A-Fa-f]{8}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{12}",
    "double": r"-?\d+(?:\.\d+)?",
    "float": r"-?\d+(?:\.\d+)?",
    "decimal": r"-?\d+(?:\.\d+)?",
}
_PARAM = re.compile(r"^\{(\*?)([A-Za-z_][A-Za-z0-9_]*)(?::([a-z]+))?(\?)?\}$")


class RouteError(ValueError):
    pass


@dataclass(frozen=True)
class CompiledRoute:
    spec: FunctionSpec
    template: str
    regex: re.Pattern[str]
    methods: frozenset[str] | None
    auth_level: str
    literal_weight: int
    param_count: int


def compile_route(spec: FunctionSpec, prefix: str) -> CompiledRoute:
    trig = spec.trigger
    route = str(trig.get("route") or spec.name).strip("/")
    parts: list[str] = []
    literal = 0
    params = 0
    for seg in route.split("/") if route else []:
        m = _PARAM.match(seg)
        if m is None:
            if "{" in seg or "}" in seg:
                raise RouteError(f"function {spec.name!r}: unsupported route segment {seg!r} in {route!r}")
            parts.append("/" + re.escape(seg))
            literal += len(seg)
            continue
        params += 1
        catch_all, name, constraint, optional = m.groups()
        if constraint and constraint not in _CONSTRAINTS:
            raise RouteError(f"function {spec.name!r}: unknown route constraint {constraint!r} in {route!r}")
        pat = ".*" if catch_all else _CONSTRAINTS.get(constraint or "", r"[^/]+")
        part = f"/(?P<{name}>{pat})"
        parts.append(f"(?:{part})?" if optional or catch_all else part)
    base = "/" + prefix.strip("/") if prefix.strip("/") else ""
    regex = re.compile("^" + re.escape(base) + "".join(parts) + "/?$", re.IGNORECASE)
    methods = trig.get("methods")
    return CompiledRoute(
        spec=spec,
        template=route,
        regex=regex,
        methods=frozenset(str(m).upper() for m in methods) if methods else None,
        auth_level=str(trig.get("authLevel", "FUNCTION")).upper(),
        literal_weight=literal,
        param_count=params,
    )


@dataclass(frozen=True)
class Keys:
    function_key: str | None
    master_key: str | None

    def allows(self, level: str, presented: str | None) -> bool:
        if level == "ANONYMOUS":
            return True
        if not presented:
            return False
        if self.master_key and presented == self.master_key:
            return True
        return level == "FUNCTION" and bool(self.function_key) and presented == self.function_key


def to_func_request(request: web.Request, body: bytes, route_params: dict[str, str]) -> func.HttpRequest:
    headers: dict[str, str] = {}
    for k, v in request.headers.items():
        key = k.lower()
        headers[key] = f"{headers[key]}, {v}" if key in headers else v
    params: dict[str, str] = {}
    for k, v in request.query.items():
        params.setdefault(k, v)
    return func.HttpRequest(
        method=request.method,
        url=str(request.url),
        headers=headers,
        params=params,
        route_params=route_params,
        body=body,
    )


def to_web_response(result: Any) -> web.StreamResponse:
    if result is None:
        return web.Response(status=204)
    if isinstance(result, func.HttpResponse):
        headers = dict(result.headers.items())
        if not any(k.lower() == "content-type" for k in headers):
            ctype = result.mimetype or "text/plain"
            if result.charset and (ctype.startswith("text/") or "json" in ctype):
                ctype += f"; charset={result.charset}"
            headers["Content-Type"] = ctype
        return web.Response(status=result.status_code, body=result.get_body(), headers=headers)
    if isinstance(result, bytes | bytearray):
        return web.Response(status=200, body=bytes(result), content_type="application/octet-stream")
    if isinstance(result, str):
        return web.Response(status=200, text=result, content_type="text/plain")
    return web.Response(status=200, text=json.dumps(result), content_type="application/json")


class HttpTriggers:
    def __init__(
        self,
        specs: list[FunctionSpec],
        invoker: Invoker,
        keys: Keys,
        client_binding: Callable[[], str],
        route_prefix: str = "api",
    ) -> None:
        self.invoker = invoker
        self.keys = keys
        self.client_binding = client_binding
        self.route_prefix = route_prefix
        routes = [compile_route(s, route_prefix) for s in specs if s.trigger_type == "httpTrigger"]
        # ASP.NET routing prefers more literal text and fewer parameters.
        self.routes = sorted(routes, key=lambda r: (-r.literal_weight, r.param_count))

    def match(self, path: str, method: str) -> tuple[CompiledRoute, dict[str, str]] | None:
        for r in self.routes:
            m = r.regex.match(path)
            if m and (r.methods is None or method.upper() in r.methods):
                return r, {k: v for k, v in m.groupdict().items() if v is not None}
        return None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        found = self.match(request.path, request.method)
        if found is None:
            return web.Response(status=404)
        route, route_params = found
        presented = request.query.get("code") or request.headers.get("x-functions-key")
        if not self.keys.allows(route.auth_level, presented):
            return web.Response(status=401)
        body = await request.read()
        spec = route.spec
        trig_name = str(spec.trigger["name"])
        kwargs: dict[str, Any] = {trig_name: to_func_request(request, body, route_params)}
        client = spec.binding_of_type("durableClient")
        if client is not None:
            kwargs[str(client["name"])] = self.client_binding()
        try:
            result = await self.invoker.invoke(spec, kwargs)
        except Exception:
            log.exception("function %s failed", spec.name)
            return web.Response(status=500)
        return to_web_response(result)
