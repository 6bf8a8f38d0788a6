# mypy: disable-error-code="untyped-decorator"
"""Apps with one non-HTTP trigger each; every invocation is recorded in CALLS for the tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import azure.functions as func

CALLS: dict[str, list[dict[str, Any]]] = {"timer": [], "blob": [], "sb": []}
CHANGED = threading.Condition()


def record(kind: str, item: dict[str, Any]) -> None:
    with CHANGED:
        CALLS[kind].append(item)
        CHANGED.notify_all()


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
    with CHANGED:
        return bool(CHANGED.wait_for(predicate, timeout))


timer_app = func.FunctionApp()


@timer_app.timer_trigger(schedule="* * * * * *", arg_name="timer", run_on_startup=True)
def every_second(timer: func.TimerRequest) -> None:
    record("timer", {"past_due": timer.past_due, "status": getattr(timer, "schedule_status", None)})


blob_app = func.FunctionApp()


@blob_app.blob_trigger(arg_name="blob", path="incoming/{tenant}/{name}", connection="BlobConn")
def on_blob(blob: func.InputStream) -> None:
    data = blob.read()
    if data == b"fail":
        raise RuntimeError("cannot process this blob")
    record("blob", {"name": blob.name, "length": blob.length, "uri": blob.uri, "data": data})


sb_app = func.FunctionApp()


@sb_app.service_bus_queue_trigger(
    arg_name="msg", queue_name="%ORDERS_QUEUE%", connection="ServiceBusConnection"
)
@sb_app.service_bus_queue_output(arg_name="shipped", queue_name="shipped", connection="ServiceBusConnection")
async def on_order(msg: func.ServiceBusMessage, shipped: func.Out[str]) -> None:
    body = msg.get_body()
    record("sb", {"id": msg.message_id, "body": body, "delivery": msg.delivery_count})
    shipped.set(f"shipped {body.decode()}")
    if body == b"poison":
        raise ValueError("this message can never be processed")
