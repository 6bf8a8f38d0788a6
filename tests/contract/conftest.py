"""Parametrises every port's contract over every registered backend (see backends.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from shared.ports import (
    Bus,
    DefinitionStore,
    ExecutionStore,
    IdempotencyStore,
    LeaseStore,
    PayloadStore,
    TenantStore,
)
from tests.contract.backends import REGISTRY, Backend, BusHarness, StoreHarness


def _params(backends: Sequence[Backend[Any]]) -> list[Any]:
    return [pytest.param(b, id=b.id, marks=list(b.marks)) for b in backends]


@pytest.fixture(params=_params(REGISTRY.stores))
def store_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreHarness]:
    backend: Backend[StoreHarness] = request.param
    with backend.open(request, tmp_path) as harness:
        yield harness


@pytest.fixture
def definition_store(store_backend: StoreHarness) -> DefinitionStore:
    return store_backend.stores.definitions


@pytest.fixture
def execution_store(store_backend: StoreHarness) -> ExecutionStore:
    return store_backend.stores.executions


@pytest.fixture
def idempotency_store(store_backend: StoreHarness) -> IdempotencyStore:
    return store_backend.stores.idempotency


@pytest.fixture
def lease_store(store_backend: StoreHarness) -> LeaseStore:
    return store_backend.stores.leases


@pytest.fixture
def tenant_store(store_backend: StoreHarness) -> TenantStore:
    return store_backend.stores.tenants


@pytest.fixture(params=_params(REGISTRY.buses))
def bus_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BusHarness]:
    backend: Backend[BusHarness] = request.param
    with backend.open(request, tmp_path) as harness:
        yield harness


@pytest.fixture
def bus(bus_backend: BusHarness) -> Bus:
    return bus_backend.bus


@pytest.fixture(params=_params(REGISTRY.payloads))
def payload_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PayloadStore]:
    backend: Backend[PayloadStore] = request.param
    with backend.open(request, tmp_path) as store:
        yield store
