"""Registers the Cosmos DB store adapter with the store contract suite.

``cosmos`` runs every store contract against the ``cosmos_endpoint`` session fixture: the patched
local server (tests/support/cosmos_server/launcher.js) in ``make test``, or the real account or
emulator named by ``WEFT_TEST_COSMOS_ENDPOINT``. Each test gets a database of its own, created with
the production container layout and deleted afterwards, so tests never see each other's tenants.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from shared.ports import FaultHook, Stores
from tests.contract.backends import Backend, Registry, StoreHarness
from tests.support.cosmos import CosmosTarget, cosmos_database


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
