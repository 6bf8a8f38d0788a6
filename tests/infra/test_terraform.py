"""Every .tf parses (python-hcl2) and follows the Azure Verified Modules layout and conventions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.infra.terraform_model import TF_DIR, load, parse_file, unquote

AVM_FILES = {"terraform.tf", "variables.tf", "locals.tf", "main.tf", "outputs.tf"}


@pytest.mark.parametrize("path", sorted(TF_DIR.glob("*.tf")), ids=lambda p: p.name)
def test_parses(path: Path) -> None:
    assert parse_file(path)


def test_avm_layout() -> None:
    names = {p.name for p in TF_DIR.glob("*.tf")}
    assert names >= AVM_FILES
    assert all(n in AVM_FILES or re.fullmatch(r"main\.[a-z_]+\.tf", n) for n in names), names
    assert (TF_DIR / "terraform.tfvars.example").exists()


def test_providers_are_pinned() -> None:
    (block,) = load().files["terraform.tf"]["terraform"]
    (providers,) = block["required_providers"]
    assert unquote(providers["azurerm"]["version"]).startswith("~> 4.")
    assert unquote(providers["azapi"]["version"]).startswith("~> 2.")


def test_every_variable_is_typed_described_and_validated() -> None:
    variables = load().variables
    assert set(variables) >= {
        "name_prefix",
        "location",
        "environment",
        "cosmos_throughput_mode",
        "durable_backend",
    }
    for name, body in variables.items():
        assert body.get("type"), name
        assert len(unquote(body.get("description", ""))) > 20, name
        assert body.get("validation"), name


def test_tfvars_example_sets_only_declared_variables() -> None:
    example = parse_file(TF_DIR / "terraform.tfvars.example")
    assert {k for k in example if not k.startswith("__")} <= set(load().variables)


def test_outputs() -> None:
    outputs = load().outputs
    assert {"function_app_url", "resource_names", "identity_client_id"} <= set(outputs)
    for name, body in outputs.items():
        assert unquote(body.get("description", "")), name


def test_durable_task_scheduler_option() -> None:
    model = load()
    scheduler = model.resource("azapi_resource.durable_scheduler")
    assert unquote(scheduler["type"]).startswith("Microsoft.DurableTask/schedulers@")
    hub = model.resource("azapi_resource.durable_taskhub")
    assert unquote(hub["type"]).startswith("Microsoft.DurableTask/schedulers/taskHubs@")
    assert "local.task_hub_name" in str(hub["name"])  # the hub WEFT_TASK_HUB names
    extra = model.locals["durable_task_scheduler_app_settings"]
    assert (
        unquote(extra["AzureFunctionsJobHost__extensions__durableTask__storageProvider__type"])
        == "azureManaged"
    )
    # The identity may use the scheduler only with its data role.
    assert ("azapi_resource.durable_scheduler", "Durable Task Data Contributor") in model.identity_grants()
    sku = scheduler["body"]["properties"]["sku"]
    assert unquote(sku["name"]) == "Dedicated"
    assert "var.durable_task_scheduler_capacity" in str(sku["capacity"])


def test_storage_containers_and_messaging_entities() -> None:
    model = load()
    assert {unquote(c) for c in model.locals["blob_containers"]} >= {"incoming", "payloads"}
    queue = model.resource("azurerm_servicebus_queue.submissions")
    assert unquote(queue["name"]) == "submissions"
    assert queue["dead_lettering_on_message_expiration"] is True
    assert "max_delivery_count" in queue
    topic = model.resource("azurerm_servicebus_topic.workflow_events")
    assert unquote(topic["name"]) == "workflow-events"
    assert topic["requires_duplicate_detection"] is True


def test_every_service_bus_entity_the_app_uses_exists() -> None:
    from shared.intake import REJECTED_QUEUE, SUBMISSIONS_QUEUE
    from shared.lifecycle import WORKFLOW_EVENTS_TOPIC

    model = load()
    queues = {
        unquote(body["name"])
        for a, body in model.resources.items()
        if a.startswith("azurerm_servicebus_queue.")
    }
    topics = {
        unquote(body["name"])
        for a, body in model.resources.items()
        if a.startswith("azurerm_servicebus_topic.")
    }
    assert {SUBMISSIONS_QUEUE, REJECTED_QUEUE} <= queues
    assert WORKFLOW_EVENTS_TOPIC in topics
