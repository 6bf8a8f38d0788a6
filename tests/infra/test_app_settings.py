"""The Function App's app_settings (infra/terraform/locals.tf) match what the app and its bindings use.

Static: bindings come from ``function_app.app.get_functions()``, settings and roles from the
parsed Terraform. Each detector also has a test that feeds it a broken input, so a green run
means the configuration is right, not that the detector is blind.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from shared.settings import WeftSettings
from tests.infra import bindings as b
from tests.infra.terraform_model import IDENTITY, is_literal, load, references, unquote

# Settings the app needs in Azure (WEFT_STORE=cosmos, WEFT_BUS=servicebus), besides any
# WeftSettings field that has no default. docs/deploy.md, "Settings contract", lists them.
REQUIRED_IN_AZURE = frozenset(
    {
        "FUNCTIONS_WORKER_RUNTIME",
        "AzureWebJobsStorage__accountName",
        "AzureWebJobsStorage__credential",
        "AzureWebJobsStorage__clientId",
        "WEFT_TASK_HUB",
        "WEFT_STORE",
        "WEFT_BUS",
        "WEFT_COSMOS_ENDPOINT",
        "WEFT_COSMOS_DATABASE",
        "WEFT_SERVICEBUS_NAMESPACE",
        "WEFT_PAYLOAD_ACCOUNT_URL",
        "WEFT_PAYLOAD_STORE",
        "WEFT_BLOB_ACCOUNT_URL",
        "WEFT_ADMIN_KEY",
        "AZURE_CLIENT_ID",
        "APPLICATIONINSIGHTS_CONNECTION_STRING",
    }
)

# WEFT_* settings the Function App carries that WeftSettings does not read (yet), and why.
NOT_IN_WEFT_SETTINGS = {
    "WEFT_TASK_HUB": "read by the host through host.json (%WEFT_TASK_HUB%), not by Python",
    "WEFT_PAYLOAD_ACCOUNT_URL": "the brief's name; shared/settings.py reads WEFT_BLOB_ACCOUNT_URL",
}

# Connections the triggers issue builds on (submissions queue, incoming blobs, change feed),
# checked even before their functions exist.
CONTRACT_CONNECTIONS = (
    "AzureWebJobsStorage",
    "ServiceBusConnection",
    "BlobTriggerConnection",
    "CosmosConnection",
)

# Which resource an identity-based connection must point at, and the roles it needs there.
CONNECTION_RESOURCE_TYPES = {
    "azurerm_storage_account",
    "azurerm_servicebus_namespace",
    "azurerm_cosmosdb_account",
}

_SECRET_ATTRIBUTES = re.compile(
    r"\.(primary|secondary)_(access_key|key|connection_string|blob_connection_string)\b"
    r"|\.default_(primary|secondary)_(connection_string|key)\b"
    r"|\.instrumentation_key\b|\.sas\b|random_password\.[a-z0-9_]+\.result"
)
_SECRET_LITERALS = re.compile(
    r"AccountKey=|SharedAccessKey|SharedAccessSignature|[?&]sig=|UseDevelopmentStorage|Password=",
    re.IGNORECASE,
)
# The one connection string allowed: it holds an instrumentation key that only names the
# Application Insights resource; ingestion needs an Entra token because local auth is disabled.
ALLOWED_CONNECTION_STRING_ATTRIBUTE = {"APPLICATIONINSIGHTS_CONNECTION_STRING": ".connection_string"}


# Settings whose only form is a connection string with an account key.
KEY_CONNECTION_SETTINGS = frozenset(
    {"AzureWebJobsStorage", "WEBSITE_CONTENTAZUREFILECONNECTIONSTRING", "AzureWebJobsDashboard"}
)


def secret_problems(settings: dict[str, str]) -> list[str]:
    problems: list[str] = []
    for key, value in settings.items():
        if key in {
            "AzureWebJobsStorage",
            "WEBSITE_CONTENTAZUREFILECONNECTIONSTRING",
            "AzureWebJobsDashboard",
        }:
            problems.append(f"{key} takes a connection string with an account key")
        if _SECRET_ATTRIBUTES.search(value) or _SECRET_LITERALS.search(value):
            problems.append(f"{key} carries a secret: {value}")
        if ".connection_string" in value and ALLOWED_CONNECTION_STRING_ATTRIBUTE.get(key) is None:
            problems.append(f"{key} takes a connection string attribute: {value}")
        if value.startswith("@Microsoft.KeyVault(") is False and "keyvault" in value.lower():
            problems.append(f"{key} mentions Key Vault without being a Key Vault reference")
    return problems


def missing_settings(bindings: dict[str, list[dict[str, Any]]], settings: dict[str, str]) -> list[str]:
    problems: list[str] = []
    for use in b.connection_uses(bindings):
        problems += [
            f"{use.function} ({use.binding_type}): {p}"
            for p in b.connection_problems(use.connection, settings)
        ]
    problems += [
        f"%{name}% is not an app setting" for name in sorted(b.percent_settings(bindings) - settings.keys())
    ]
    return problems


@pytest.fixture(scope="module")
def settings() -> dict[str, str]:
    return load().all_app_settings()


@pytest.fixture(scope="module")
def bindings() -> dict[str, list[dict[str, Any]]]:
    return b.function_bindings()


def test_function_app_uses_the_single_settings_list() -> None:
    app = load().resource("azurerm_linux_function_app.this")
    expr = str(app["app_settings"])
    assert "local.app_settings" in expr
    for name in load().settings_maps():
        assert f"local.{name}" in expr, f"locals.{name} is never merged into the Function App"


def test_every_binding_connection_and_percent_setting_is_set(
    bindings: dict[str, Any], settings: dict[str, str]
) -> None:
    assert bindings, "function_app registers no functions"
    assert missing_settings(bindings, settings) == []


def test_contract_connections_are_identity_based(settings: dict[str, str]) -> None:
    for connection in CONTRACT_CONNECTIONS:
        assert b.connection_problems(connection, settings) == [], connection


def test_required_settings_are_set(settings: dict[str, str]) -> None:
    required = set(REQUIRED_IN_AZURE)
    required |= {f"WEFT_{n.upper()}" for n, f in WeftSettings.model_fields.items() if f.is_required()}
    assert sorted(required - settings.keys()) == []


def test_every_weft_setting_is_read_by_the_app_or_explained(settings: dict[str, str]) -> None:
    # A misspelt WEFT_ name is silently ignored (extra="ignore") and the app falls back to a default.
    fields = {f"WEFT_{n.upper()}" for n in WeftSettings.model_fields}
    unknown = {k for k in settings if k.startswith("WEFT_")} - fields - NOT_IN_WEFT_SETTINGS.keys()
    assert sorted(unknown) == []


def test_secret_weft_settings_are_key_vault_references(settings: dict[str, str]) -> None:
    # WEFT_COSMOS_KEY, WEFT_SERVICEBUS_CONNECTION, WEFT_BLOB_CONNECTION_STRING are for local
    # emulators; in Azure the identity replaces them. A secret the app does need comes from Key Vault.
    fields = WeftSettings.model_fields
    secret_fields = {f"WEFT_{n.upper()}" for n, f in fields.items() if "SecretStr" in str(f.annotation)}
    assert "WEFT_ADMIN_KEY" in secret_fields
    for key in secret_fields & settings.keys():
        assert settings[key].startswith("@Microsoft.KeyVault(SecretUri="), key


def test_literal_weft_settings_validate_against_the_app_settings_model(settings: dict[str, str]) -> None:
    # WEFT_STORE=cosmoss would be ignored by the host and fail at the first request.
    literal = {k: v for k, v in load().base_app_settings().items() if k.startswith("WEFT_") and is_literal(v)}
    parsed = WeftSettings.model_validate({k.removeprefix("WEFT_").lower(): v for k, v in literal.items()})
    assert parsed.store == "cosmos"
    assert parsed.bus == "servicebus"


def test_no_secret_in_app_settings(settings: dict[str, str]) -> None:
    assert secret_problems(settings) == []


def test_key_vault_references_resolve_with_the_user_assigned_identity(settings: dict[str, str]) -> None:
    model = load()
    refs = {k: v for k, v in settings.items() if v.startswith("@Microsoft.KeyVault(")}
    assert "WEFT_ADMIN_KEY" in refs
    app = model.resource("azurerm_linux_function_app.this")
    # Without this the platform resolves references with a system identity the app does not have.
    assert references(app["key_vault_reference_identity_id"]) == {IDENTITY}
    for key, value in refs.items():
        secrets = {r for r in references(value) if r.startswith("azurerm_key_vault_secret.")}
        assert secrets, key
        for secret in secrets:
            vaults = references(model.resource(secret)["key_vault_id"])
            assert all((v, "Key Vault Secrets User") in model.identity_grants() for v in vaults), key


def test_identity_connections_use_the_apps_identity(settings: dict[str, str]) -> None:
    model = load()
    app = model.resource("azurerm_linux_function_app.this")
    assert {r for ident in app["identity"] for r in references(ident["identity_ids"])} == {IDENTITY}
    for key, value in settings.items():
        if key.endswith("__clientId") or key == "AZURE_CLIENT_ID":
            assert references(value) == {IDENTITY}, key
            assert value.endswith(".client_id}"), key


def _connection_resources(connection: str, settings: dict[str, str]) -> set[str]:
    return {
        ref
        for key, value in settings.items()
        if key.startswith(f"{connection}__")
        for ref in references(value)
        if ref.split(".")[0] in CONNECTION_RESOURCE_TYPES
    }


def _granted(model_grants: set[tuple[str, str]], resource: str, role: str) -> bool:
    if role == "cosmos:data-contributor":
        return _cosmos_data_contributor(resource)
    return (resource, role) in model_grants


COSMOS_DATA_CONTRIBUTOR = "/sqlRoleDefinitions/00000000-0000-0000-0000-000000000002"


def _cosmos_data_contributor(account: str) -> bool:
    model = load()
    for address, body in model.resources.items():
        if not address.startswith("azurerm_cosmosdb_sql_role_assignment."):
            continue
        if (
            references(body["principal_id"]) == {IDENTITY}
            and account in references(body["account_name"])
            and unquote(body["role_definition_id"]).endswith(
                "/sqlRoleDefinitions/00000000-0000-0000-0000-000000000002"
            )
        ):
            return True
    return False


def role_problems(bindings: dict[str, list[dict[str, Any]]], settings: dict[str, str]) -> list[str]:
    grants = load().identity_grants()
    problems: list[str] = []
    uses = b.connection_uses(bindings)
    uses.append(b.ConnectionUse("<host>", "host", b.HOST_STORAGE))
    for use in uses:
        resources = _connection_resources(use.connection, settings)
        if not resources:
            problems.append(f"{use.function}: connection {use.connection} points at no known resource")
            continue
        if use.binding_type in b.ROLE_NEEDS:
            needs: tuple[frozenset[str], ...] = b.ROLE_NEEDS[use.binding_type][1]
        else:
            needs = tuple(frozenset({r}) for r in sorted(b.HOST_STORAGE_ROLES))
        for resource in resources:
            for any_of in needs:
                if not any(_granted(grants, resource, role) for role in any_of):
                    problems.append(
                        f"{use.function}: {use.connection} on {resource} needs one of {sorted(any_of)}"
                    )
    return problems


def test_every_identity_connection_has_its_roles(bindings: dict[str, Any], settings: dict[str, str]) -> None:
    assert role_problems(bindings, settings) == []


def test_contract_connections_have_their_roles(settings: dict[str, str]) -> None:
    # What the announced triggers will need, before their code lands.
    planned = {
        "submissions": [
            {"type": "serviceBusTrigger", "connection": "ServiceBusConnection", "queueName": "submissions"}
        ],
        "incoming": [
            {"type": "blobTrigger", "connection": "BlobTriggerConnection", "path": "incoming/{a}/{b}/{c}"}
        ],
        "changefeed": [{"type": "cosmosDBTrigger", "connection": "CosmosConnection"}],
        "events": [
            {"type": "serviceBus", "connection": "ServiceBusConnection", "topicName": "workflow-events"}
        ],
    }
    assert role_problems(planned, settings) == []


def test_app_level_clients_have_their_roles(settings: dict[str, str]) -> None:
    """The SDK clients built from WEFT_* endpoints (DefaultAzureCredential) need data roles too."""
    grants = load().identity_grants()
    for key, needed in {
        "WEFT_PAYLOAD_ACCOUNT_URL": ["Storage Blob Data Owner"],
        "WEFT_BLOB_ACCOUNT_URL": ["Storage Blob Data Owner"],
        "WEFT_SERVICEBUS_NAMESPACE": ["Azure Service Bus Data Sender", "Azure Service Bus Data Receiver"],
        "APPLICATIONINSIGHTS_CONNECTION_STRING": ["Monitoring Metrics Publisher"],
    }.items():
        (resource,) = references(settings[key])
        for role in needed:
            assert (resource, role) in grants, (key, role)
    (cosmos,) = references(settings["WEFT_COSMOS_ENDPOINT"])
    assert _cosmos_data_contributor(cosmos)


def test_data_plane_local_auth_is_off_everywhere() -> None:
    model = load()
    assert model.resource("azurerm_storage_account.this")["shared_access_key_enabled"] is False
    assert model.resource("azurerm_cosmosdb_account.this")["local_authentication_disabled"] is True
    assert model.resource("azurerm_servicebus_namespace.this")["local_auth_enabled"] is False
    assert model.resource("azurerm_application_insights.this")["local_authentication_disabled"] is True
    assert model.resource("azurerm_key_vault.this")["enable_rbac_authorization"] is True
    app = model.resource("azurerm_linux_function_app.this")
    assert app["storage_uses_managed_identity"] is True
    assert app["content_share_force_disabled"] is True  # no Azure Files share (key-based)
    assert "storage_account_access_key" not in app


# --- the detectors catch what they are meant to catch ---------------------------------------


def test_detector_flags_a_missing_connection_and_percent_setting(settings: dict[str, str]) -> None:
    broken = {
        "f": [
            {"type": "serviceBusTrigger", "connection": "NoSuchConnection", "queueName": "%NO_SUCH_QUEUE%"},
            {"type": "blobTrigger", "path": "incoming/{name}"},  # default AzureWebJobsStorage: present
        ]
    }
    problems = missing_settings(broken, settings)
    assert any("NoSuchConnection" in p for p in problems)
    assert any("NO_SUCH_QUEUE" in p for p in problems)
    assert not any("AzureWebJobsStorage" in p for p in problems)


def test_detector_flags_a_connection_string_and_a_key() -> None:
    bad = {
        "AzureWebJobsStorage": "${azurerm_storage_account.this.primary_connection_string}",
        "X": "Endpoint=sb://x/;SharedAccessKeyName=a;SharedAccessKey=b",
        "Y": "${azurerm_cosmosdb_account.this.primary_key}",
        "Z": "${azurerm_servicebus_namespace.this.default_primary_connection_string}",
    }
    problems = secret_problems(bad)
    assert {p.split(" ")[0] for p in problems} >= {"AzureWebJobsStorage", "X", "Y", "Z"}


def test_detector_flags_a_missing_role(settings: dict[str, str]) -> None:
    stripped = {k: v for k, v in settings.items() if not k.startswith("ServiceBusConnection__")}
    stripped["ServiceBusConnection__fullyQualifiedNamespace"] = "${azurerm_storage_account.this.name}.x"
    planned = {"f": [{"type": "serviceBusTrigger", "connection": "ServiceBusConnection"}]}
    assert role_problems(planned, stripped) != []
