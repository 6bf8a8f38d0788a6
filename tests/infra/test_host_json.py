"""host.json: valid against tests/infra/host.schema.json and tuned as docs/deploy.md explains."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((Path(__file__).with_name("host.schema.json")).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def host() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "host.json").read_text(encoding="utf-8"))
    return data


def schema_errors(doc: object) -> list[str]:
    return [str(e).splitlines()[0] for e in jsonschema_rs.validator_for(SCHEMA).iter_errors(doc)]


_TIMESPAN = re.compile(r"^(?:(\d+)\.)?(\d{2}):(\d{2}):(\d{2}(?:\.\d+)?)$")


def _duration(text: str) -> timedelta:
    """A .NET TimeSpan as host.json writes it: [d.]hh:mm:ss[.fff]."""
    match = _TIMESPAN.match(text)
    assert match, text
    days, hours, minutes, seconds = match.groups()
    return timedelta(days=int(days or 0), hours=int(hours), minutes=int(minutes), seconds=float(seconds))


def test_host_json_is_valid_against_its_schema(host: dict[str, Any]) -> None:
    assert schema_errors(host) == []


def test_pins_the_bundle_range_and_hub_setting(host: dict[str, Any]) -> None:
    assert host["extensionBundle"]["version"] == "[4.*, 5.0.0)"
    assert host["extensions"]["durableTask"]["hubName"] == "%WEFT_TASK_HUB%"


def test_queue_polling_keeps_p95_scheduling_under_one_second(host: dict[str, Any]) -> None:
    # The default maximum backs off to 30 s on an idle queue; a task becoming ready after a
    # quiet spell would wait that long.
    polling = host["extensions"]["durableTask"]["storageProvider"]["maxQueuePollingInterval"]
    assert _duration(polling) <= timedelta(seconds=1)


def test_concurrency_is_limited_and_tracing_on(host: dict[str, Any]) -> None:
    durable = host["extensions"]["durableTask"]
    assert durable["maxConcurrentActivityFunctions"] >= 1
    assert durable["maxConcurrentOrchestratorFunctions"] >= 1
    assert durable["tracing"]["distributedTracingEnabled"] is True
    assert durable["tracing"]["traceInputsAndOutputs"] is False  # tenant payloads stay out of logs


def test_schema_rejects_typos_and_wrong_pins(host: dict[str, Any]) -> None:
    typo = json.loads(json.dumps(host))
    typo["extensions"]["durableTask"]["storageProvider"]["maxQueuePolingInterval"] = "00:00:01"
    assert schema_errors(typo) != []
    wrong = json.loads(json.dumps(host))
    wrong["extensionBundle"]["version"] = "[3.*, 4.0.0)"
    assert schema_errors(wrong) != []
    hub = json.loads(json.dumps(host))
    hub["extensions"]["durableTask"]["hubName"] = "weft"
    assert schema_errors(hub) != []


def test_duration_parser() -> None:
    assert _duration("00:00:01") == timedelta(seconds=1)
    assert _duration("00:30:00") == timedelta(minutes=30)
    assert _duration("1.02:00:00") == timedelta(days=1, hours=2)
