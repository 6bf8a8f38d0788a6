"""Builds the Cosmos DB store adapters from settings (imported lazily by shared.adapters.factory)."""

from __future__ import annotations

from shared.adapters.cosmos_store import CosmosStore
from shared.adapters.cosmos_support import get_client
from shared.ports import Stores
from shared.settings import WeftSettings


def build_stores(settings: WeftSettings) -> Stores:
    key = settings.cosmos_key.get_secret_value() if settings.cosmos_key is not None else None
    endpoint = settings.cosmos_endpoint
    if endpoint is None and not (key and key.startswith("AccountEndpoint=")):
        raise ValueError(
            "WEFT_STORE=cosmos needs WEFT_COSMOS_ENDPOINT (or a connection string in WEFT_COSMOS_KEY)"
        )
    store = CosmosStore(
        get_client(endpoint or "", key),
        settings.cosmos_database,
        outbox_ttl_seconds=settings.cosmos_outbox_ttl_seconds,
    )
    return Stores(definitions=store, executions=store, idempotency=store, leases=store, tenants=store)
