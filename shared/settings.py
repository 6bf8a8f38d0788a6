"""Weft settings, from the environment (prefix ``WEFT_``), loaded on first use.

Nothing reads the environment at import time: an import-time error would hide every function
from the Functions host. Call :func:`get_settings` inside a function body.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class WeftSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="WEFT_", extra="ignore", frozen=True)

    store: Literal["sqlite", "cosmos"] = "sqlite"
    bus: Literal["embedded", "servicebus"] = "embedded"
    data_dir: str = ".weft/data"
    admin_key: SecretStr | None = None

    # Claim-check blobs: "auto" uses Blob Storage when a connection string or account URL is set
    # (Azurite locally, managed identity in Azure), else files under data_dir/payloads.
    payload_store: Literal["auto", "fs", "blob"] = "auto"
    blob_connection_string: SecretStr | None = None
    blob_account_url: str | None = None
    payload_container: str = "payloads"

    # Cosmos DB (WEFT_STORE=cosmos): the account endpoint with a key (or a whole connection string
    # in WEFT_COSMOS_KEY) locally; without a key, DefaultAzureCredential (managed identity in Azure).
    cosmos_endpoint: str | None = None
    cosmos_key: SecretStr | None = None
    cosmos_database: str = "weft"
    # Dispatched outbox records expire this long after being marked (Cosmos TTL).
    cosmos_outbox_ttl_seconds: int = Field(default=24 * 3600, ge=60)

    # Service Bus (WEFT_BUS=servicebus): a connection string locally, else the namespace
    # (<name>.servicebus.windows.net) with DefaultAzureCredential (managed identity in Azure).
    servicebus_connection: SecretStr | None = None
    servicebus_namespace: str | None = None

    # Payloads bigger than this travel by reference through the PayloadStore (claim check).
    claim_check_threshold_bytes: int = Field(default=64 * 1024, ge=1024)
    max_input_bytes: int = Field(default=1024 * 1024, ge=1024)

    default_max_running_tasks: int = Field(default=100, ge=1)
    default_max_active_executions: int = Field(default=1000, ge=1)
    default_submits_per_second: float = Field(default=50.0, gt=0)

    # Extra modules (comma-separated import paths) whose @handler functions are registered, imported
    # on the first handler lookup; shared.handlers.custom is always imported (docs/handlers.md).
    handler_modules: str = ""


@lru_cache(maxsize=1)
def get_settings() -> WeftSettings:
    return WeftSettings()


def reset_settings_cache() -> None:
    """For tests that change the environment between cases."""
    get_settings.cache_clear()
