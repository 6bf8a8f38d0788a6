from __future__ import annotations

from typing import Any

from activities.blueprint import bp
from shared.names import ActivityName


def echo(payload: dict[str, Any]) -> dict[str, Any]:
    return dict(payload)


@bp.activity_trigger(input_name="payload", activity=ActivityName.SELFTEST_ECHO)
def selftest_echo(payload: dict[str, Any]) -> dict[str, Any]:
    return echo(payload)
