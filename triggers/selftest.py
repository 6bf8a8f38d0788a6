from __future__ import annotations

import json

import azure.durable_functions as df
import azure.functions as func

from shared.names import OrchestratorName, TriggerName
from triggers.blueprint import bp


@bp.function_name(TriggerName.SELFTEST_START)
@bp.route(route="v1/selftest", methods=["POST"], auth_level=func.AuthLevel.FUNCTION)
@bp.durable_client_input(client_name="client")
async def selftest_start(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    try:
        body = req.get_json() if req.get_body() else {}
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return func.HttpResponse(
            json.dumps(
                {
                    "type": "about:blank",
                    "title": "Bad Request",
                    "status": 400,
                    "detail": "body must be a JSON object",
                }
            ),
            status_code=400,
            mimetype="application/problem+json",
        )
    instance_id = await client.start_new(OrchestratorName.SELFTEST_FANOUT, None, body)
    response: func.HttpResponse = client.create_check_status_response(req, instance_id)
    return response
