"""Indexing: what the host would see of function_app.app, and what devhost refuses at startup."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest

from devhost.indexing import IndexingError, connection_settings, index_app
from devhost.settings import AppSettings

ROOT = Path(__file__).resolve().parents[2]


def weft_specs() -> Any:
    import function_app

    return index_app(function_app.app)


def test_every_function_json_as_the_host_indexes_it() -> None:
    specs = weft_specs()
    listing = {s.name: s.function_json for s in specs}
    # The listing is what the worker reports in its metadata response; print it for the CI log.
    print(json.dumps(listing, indent=2, sort_keys=True))
    assert listing
    for name, doc in listing.items():
        assert doc["scriptFile"] == "function_app.py", name
        triggers = [b for b in doc["bindings"] if b["type"].endswith("Trigger")]
        assert len(triggers) == 1, name
        for b in doc["bindings"]:
            assert b["direction"] in ("IN", "OUT", "INOUT"), name
            assert b["name"], name
    orchestrators = [s for s in specs if s.trigger_type == "orchestrationTrigger"]
    assert all(s.trigger["name"] == "context" for s in orchestrators)


def test_every_connection_setting_is_in_the_example_settings() -> None:
    example = json.loads((ROOT / "local.settings.json.example").read_text())["Values"]
    specs = weft_specs()
    for setting, users in connection_settings(specs).items():
        # A connection is a setting of that name, AzureWebJobs<name>, or identity-based <name>__*.
        found = setting in example or f"AzureWebJobs{setting}" in example
        found = found or any(k.startswith(f"{setting}__") for k in example)
        assert found, (
            f"connection setting {setting!r} (used by {sorted(users)}) is missing from "
            "local.settings.json.example"
        )
    # Triggers without a connection use AzureWebJobsStorage, which the host itself needs too.
    assert "AzureWebJobsStorage" in example


def test_every_percent_setting_in_bindings_and_host_json_is_in_the_example() -> None:
    example = AppSettings(json.loads((ROOT / "local.settings.json.example").read_text())["Values"])
    for s in weft_specs():
        for b in s.bindings:
            for value in b.values():
                if isinstance(value, str):
                    example.resolve(value)  # raises SettingsError naming the missing setting
    example.resolve((ROOT / "host.json").read_text())


def test_indexing_twice_works() -> None:
    import function_app

    first = [s.name for s in index_app(function_app.app)]
    assert [s.name for s in index_app(function_app.app)] == first


def test_unknown_trigger_type_fails_with_a_clear_message() -> None:
    app = func.FunctionApp()

    @app.generic_trigger(arg_name="msg", type="kafkaTrigger", topic="t")
    def on_kafka(msg: str) -> None:
        pass

    with pytest.raises(IndexingError, match=r"'on_kafka': trigger type 'kafkaTrigger' is not supported"):
        index_app(app)


def test_unknown_binding_type_fails_with_a_clear_message() -> None:
    app = func.FunctionApp()

    @app.route(route="x")
    @app.queue_output(arg_name="out", queue_name="q", connection="AzureWebJobsStorage")
    def with_queue(req: func.HttpRequest, out: func.Out[str]) -> str:
        return "x"

    with pytest.raises(IndexingError, match=r"'with_queue': binding 'out' of type 'queue' is not supported"):
        index_app(app)


def test_duplicate_function_names_fail() -> None:
    app = func.FunctionApp()

    @app.function_name("Same")
    @app.route(route="a")
    def a(req: func.HttpRequest) -> str:
        return "a"

    @app.function_name("same")
    @app.route(route="b")
    def b(req: func.HttpRequest) -> str:
        return "b"

    with pytest.raises(IndexingError, match="duplicate function name"):
        index_app(app)


def test_orchestrator_context_parameter_must_be_named_context() -> None:
    import azure.durable_functions as df

    app = df.DFApp()

    @app.orchestration_trigger(context_name="ctx")  # type: ignore[untyped-decorator]
    def orch(ctx: Any) -> Any:
        yield None

    with pytest.raises(IndexingError, match="must be named 'context'"):
        index_app(app)


def test_settings_come_from_local_settings_with_the_environment_winning(tmp_path: Path) -> None:
    from devhost.settings import SettingsError, load_durable_knobs

    (tmp_path / "local.settings.json").write_text(
        json.dumps({"IsEncrypted": False, "Values": {"HUB": "filehub", "ONLY_FILE": "f", "Q": "orders"}})
    )
    (tmp_path / "host.json").write_text(
        json.dumps({"version": "2.0", "extensions": {"durableTask": {"hubName": "%HUB%"}}})
    )
    s = AppSettings.load(tmp_path, env={"HUB": "envhub"})
    assert s.get("HUB") == "envhub"
    assert s.get("ONLY_FILE") == "f"
    assert s.resolve("%Q%-dlq") == "orders-dlq"
    assert load_durable_knobs(tmp_path, s).hub_name == "envhub"
    with pytest.raises(SettingsError, match="'MISSING' is not set"):
        s.resolve("%MISSING%")
    (tmp_path / "local.settings.json").write_text("{not json")
    with pytest.raises(SettingsError, match="not valid JSON"):
        AppSettings.load(tmp_path, env={})


def test_parameters_and_bindings_must_match_as_the_worker_requires() -> None:
    app = func.FunctionApp()

    @app.route(route="x")
    def extra_param(req: func.HttpRequest, other: str) -> str:
        return "x"

    with pytest.raises(IndexingError, match=r"'extra_param': parameters \['other'\] are declared in Python"):
        index_app(app)
