"""Backends the contract suite runs against: one list per port.

Each entry is a :class:`Backend` whose ``open(request, tmp_path)`` is a context manager yielding the
harness for one test (fresh state). ``request`` gives access to session fixtures (Azurite, the
Cosmos-compatible server, the AMQP peer) via ``request.getfixturevalue``.

Other backends register themselves from their own modules so nobody edits this file to add one:
``tests/contract/backends_cosmos.py`` and ``tests/contract/backends_servicebus.py`` each define
``register(registry: Registry) -> None`` that appends to ``registry.stores`` / ``registry.buses`` /
``registry.payloads``. A module that is absent is simply not registered.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Generic, TypeVar

import pytest

from shared.adapters.embedded_bus import EmbeddedBus, EntityConfig
from shared.adapters.payload_store import BlobPayloadStore, FileSystemPayloadStore
from shared.adapters.sqlite_store import SqliteStore
from shared.ports import Bus, FaultHook, PayloadStore, Stores

H = TypeVar("H")

#: Entities every bus backend must provide to the suite (a real namespace needs them created).
QUEUE = "contract-q"
TOPIC = "contract-t"
SUBSCRIPTIONS = ("s1", "s2")
MAX_DELIVERY_COUNT = 3


@dataclass
class StoreHarness:
    stores: Stores
    #: Install (or clear, with None) a failure-injection hook on the execution store's commit.
    set_fault_hook: Callable[[FaultHook | None], None]


@dataclass
class BusHarness:
    bus: Bus
    queue: str = QUEUE
    topic: str = TOPIC
    subscriptions: tuple[str, ...] = SUBSCRIPTIONS
    max_delivery_count: int = MAX_DELIVERY_COUNT
    lock_seconds: float = 5.0
    #: Move time forward by this many seconds (a fake clock, or a real sleep on a real broker).
    advance: Callable[[float], None] = lambda _s: None
    #: How long a receive must wait to conclude "nothing more is coming" on this backend.
    quiet_seconds: float = 1.0
    #: The bus's idea of "now" (for scheduling).
    now: Callable[[], datetime] = lambda: datetime.now(UTC)


@dataclass(frozen=True)
class Backend(Generic[H]):
    id: str
    open: Callable[[pytest.FixtureRequest, Path], AbstractContextManager[H]]
    marks: tuple[pytest.MarkDecorator, ...] = ()


@dataclass
class Registry:
    stores: list[Backend[StoreHarness]] = field(default_factory=list)
    buses: list[Backend[BusHarness]] = field(default_factory=list)
    payloads: list[Backend[PayloadStore]] = field(default_factory=list)


class FakeClock:
    def __init__(self, start: datetime | None = None) -> None:
        self.value = start or datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.value

    def advance(self, seconds: float) -> None:
        self.value += timedelta(seconds=seconds)


# ------------------------------------------------------------------------------ embedded ones


@contextmanager
def _sqlite(_request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreHarness]:
    store = SqliteStore(tmp_path / "weft.sqlite3")

    def set_hook(hook: FaultHook | None) -> None:
        store.fault_hook = hook

    try:
        yield StoreHarness(
            stores=Stores(
                definitions=store, executions=store, idempotency=store, leases=store, tenants=store
            ),
            set_fault_hook=set_hook,
        )
    finally:
        store.close()


@contextmanager
def _embedded(_request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BusHarness]:
    clock = FakeClock()
    lock_seconds = 30.0
    entities = [
        EntityConfig(QUEUE, max_delivery_count=MAX_DELIVERY_COUNT, lock_seconds=lock_seconds),
        EntityConfig(
            TOPIC,
            subscriptions=SUBSCRIPTIONS,
            max_delivery_count=MAX_DELIVERY_COUNT,
            lock_seconds=lock_seconds,
        ),
    ]
    bus = EmbeddedBus(tmp_path / "weft.sqlite3", entities, clock=clock, poll_interval_seconds=0.01)
    try:
        yield BusHarness(
            bus=bus, lock_seconds=lock_seconds, advance=clock.advance, now=clock, quiet_seconds=0.05
        )
    finally:
        bus.close()


@contextmanager
def _fs(_request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PayloadStore]:
    yield FileSystemPayloadStore(tmp_path / "payloads")


@contextmanager
def _blob(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PayloadStore]:
    azurite: Any = request.getfixturevalue("azurite")
    store = BlobPayloadStore.from_connection_string(
        azurite.connection_string, f"payloads-{uuid.uuid4().hex[:12]}"
    )
    try:
        yield store
    finally:
        store.close()


REGISTRY = Registry(
    stores=[Backend("sqlite", _sqlite)],
    buses=[Backend("embedded", _embedded)],
    payloads=[Backend("fs", _fs), Backend("blob", _blob, (pytest.mark.integration,))],
)

for _name in ("tests.contract.backends_cosmos", "tests.contract.backends_servicebus"):
    try:
        _module = importlib.import_module(_name)
    except ModuleNotFoundError as exc:
        if exc.name != _name:
            raise
        continue
    _module.register(REGISTRY)
