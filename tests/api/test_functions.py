"""The Functions layer of the API: one anonymous HTTP function per route, and lossless conversions."""

from __future__ import annotations

import json

import azure.functions as func

import function_app
from shared.api.routes import ROUTES
from shared.api.types import ApiResponse
from triggers.api import to_api_request, to_http_response


def test_every_route_is_one_anonymous_http_function_with_a_durable_client() -> None:
    # get_functions() refuses to index twice in one process (devhost indexes the app too).
    function_app.app.functions_bindings = {}
    functions = {f.get_function_name(): f for f in function_app.app.get_functions()}
    for route in ROUTES:
        bindings = functions[str(route.name)].get_bindings_dict()["bindings"]
        http = next(b for b in bindings if b["type"] == "httpTrigger")
        assert http["route"] == route.function_route
        assert [str(m.value) for m in http["methods"]] == [route.method]
        assert str(http["authLevel"].value) == "anonymous"
        assert any(b["type"] == "durableClient" for b in bindings)
    api_functions = {n for n in functions if n.startswith("api_")}
    assert api_functions == {str(r.name) for r in ROUTES}


def test_requests_and_responses_convert_without_loss() -> None:
    req = func.HttpRequest(
        method="post",
        url="http://host/api/v1/tenants/acme/workflows/wf/executions?limit=5",
        headers={"Authorization": "Bearer k", "Idempotency-Key": "abc"},
        params={"limit": "5"},
        route_params={"tenant": "acme", "workflow": "wf"},
        body=b'{"input": 1}',
    )
    api_req = to_api_request(req)
    assert api_req.method == "POST"
    assert api_req.path == "/api/v1/tenants/acme/workflows/wf/executions"
    assert api_req.header("authorization") == "Bearer k"
    assert api_req.header("Idempotency-Key") == "abc"
    assert dict(api_req.query) == {"limit": "5"}
    assert dict(api_req.route_params) == {"tenant": "acme", "workflow": "wf"}
    assert api_req.body == b'{"input": 1}'

    res = to_http_response(
        ApiResponse(
            status=429,
            body={"status": 429, "détail": "ü"},
            headers={"Retry-After": "2"},
            content_type="application/problem+json",
        )
    )
    assert res.status_code == 429
    assert res.headers["Retry-After"] == "2"
    assert res.mimetype == "application/problem+json"
    assert json.loads(res.get_body()) == {"status": 429, "détail": "ü"}
