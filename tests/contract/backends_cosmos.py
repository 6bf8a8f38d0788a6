"""Registers the Cosmos DB store adapter with the store contract suite.

``cosmos`` runs every store contract against the ``cosmos_endpoint`` session fixture: the patched
local server (tests/support/cosmos_server/launcher.js) in ``make test``, or the real account or
emulator named by ``WEFT_TEST_COSMOS_ENDPOINT``. Each test gets a database of its own, created with
the production container layout and deleted afterwards, so tests never see each other's tenants.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from azure.cosmos import exceptions

from shared.adapters.cosmos_store import CosmosStore
from shared.adapters.cosmos_support import ensure_containers, get_client
from shared.ports import FaultHook, Stores
from tests.contract.backends import Backend, Registry, StoreHarness
from tests.support.cosmos import CosmosTarget


@contextmanager
def cosmos_database(target: CosmosTarget) -> Iterator[tuple[CosmosStore, str]]:
    client = get_client(target.endpoint, target.key)
    name = f"weft-test-{uuid.uuid4().hex[:12]}"
    database = client.create_database(name)
    try:
        ensure_containers(database)
        yield CosmosStore(client, name), name
    finally:
        with suppress(exceptions.CosmosHttpResponseError):
            client.delete_database(name)


@contextmanager
def _cosmos(request: pytest.FixtureRequest, _tmp_path: Path) -> Iterator[StoreHarness]:
    target: CosmosTarget = request.getfixturevalue("cosmos_endpoint")
    with cosmos_database(target) as (store, _name):

        def set_hook(hook: FaultHook | None) -> None:
            store.fault_hook = hook

        yield StoreHarness(
            stores=Stores(
                definitions=store, executions=store, idempotency=store, leases=store, tenants=store
            ),
            set_fault_hook=set_hook,
        )


def register(registry: Registry) -> None:
    registry.stores.append(Backend("cosmos", _cosmos, (pytest.mark.integration,)))
