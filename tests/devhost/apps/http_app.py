# mypy: disable-error-code="untyped-decorator,no-any-return"
"""A small app exercising what devhost's HTTP layer must support."""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.route(route="items/{tenant}/{id:int}", methods=["GET"])
def get_item(req: func.HttpRequest) -> func.HttpResponse:
    body = {
        "tenant": req.route_params["tenant"],
        "id": int(req.route_params["id"]),
        "q": req.params.get("q"),
        "hdr": req.headers.get("x-test"),
        "method": req.method,
    }
    return func.HttpResponse(json.dumps(body), mimetype="application/json")


@app.route(route="items/special/{id:int}", methods=["GET"])
def get_special(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse("special")


@app.route(route="echo", methods=["POST", "PUT"])
async def echo(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(req.get_body(), status_code=201, headers={"x-echo": "yes"})


@app.route(route="fn", auth_level=func.AuthLevel.FUNCTION)
def fn_level(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse("function ok")


@app.route(route="adm", auth_level=func.AuthLevel.ADMIN)
def admin_level(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse("admin ok")


@app.route(route="boom")
def boom(req: func.HttpRequest) -> func.HttpResponse:
    raise RuntimeError("user code failed")


@app.route(route="start/{name}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def start(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    iid = req.params.get("id")
    instance_id = await client.start_new(req.route_params["name"], iid, req.get_json())
    return client.create_check_status_response(req, instance_id)


@app.orchestration_trigger(context_name="context")
def hello_orchestrator(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    result = yield context.call_activity("hello_activity", context.get_input())
    return result


@app.activity_trigger(input_name="name")
def hello_activity(name: str) -> str:
    return f"hello {name}"
