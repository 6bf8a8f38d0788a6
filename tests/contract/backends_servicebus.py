"""Registers the Service Bus adapter with the Bus contract suite.

Two ways to run it, chosen by the environment (see docs/testing.md):

- default (``make test``): ``servicebus-sdk-wiring`` runs the contract against the AMQP 1.0 peer
  in tests/support/amqp_peer.py. That proves the adapter drives azure-servicebus correctly
  (addresses, peek-lock settlement outcomes, dead-letter subqueue, $management operations, error
  mapping). It does NOT prove Service Bus semantics: the peer emulates lock expiry, max delivery
  count, duplicate detection (forever, not a window), scheduling and the re-drive routing rule,
  so those contracts passing here only shows our calls reach the broker as intended.
- ``WEFT_TEST_SERVICEBUS_CONNECTION`` set: ``servicebus`` runs the same contract against that real
  namespace, which must already have the entities in :data:`tests.contract.backends` (QUEUE,
  TOPIC with SUBSCRIPTIONS), configured as docs/testing.md says.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.adapters.servicebus_bus import ServiceBusBus
from tests.contract.backends import (
    MAX_DELIVERY_COUNT,
    QUEUE,
    SUBSCRIPTIONS,
    TOPIC,
    Backend,
    BusHarness,
    Registry,
)
from tests.support.amqp_peer import AmqpPeer, EntitySpec

#: Lock duration the real test entities must be created with (Service Bus's minimum is 5 s).
REAL_LOCK_SECONDS = float(os.environ.get("WEFT_TEST_SERVICEBUS_LOCK_SECONDS", "5"))
#: The peer's lock duration; its clock is advanced by the test, so nothing actually waits.
PEER_LOCK_SECONDS = 30.0

# Short SDK timeouts: a wiring bug must fail in seconds, not after the SDK's 60 s defaults.
_PEER_CLIENT = {"retry_total": 1, "retry_backoff_factor": 0.05, "auth_timeout": 5, "socket_timeout": 0.01}
_REAL_CLIENT = {"retry_total": 3, "auth_timeout": 30}


def peer_entities() -> list[EntitySpec]:
    return [
        EntitySpec(
            QUEUE,
            max_delivery_count=MAX_DELIVERY_COUNT,
            lock_duration_s=PEER_LOCK_SECONDS,
            requires_duplicate_detection=True,
        ),
        EntitySpec(
            TOPIC,
            subscriptions=SUBSCRIPTIONS,
            max_delivery_count=MAX_DELIVERY_COUNT,
            lock_duration_s=PEER_LOCK_SECONDS,
            requires_duplicate_detection=True,
        ),
    ]


def peer_client_kwargs() -> dict[str, Any]:
    return {"min_wait_seconds": 0.05, "operation_timeout_seconds": 5, **_PEER_CLIENT}


_shared: dict[int, ServiceBusBus] = {}


def session_bus(request: pytest.FixtureRequest, peer: AmqpPeer) -> ServiceBusBus:
    """One adapter for the whole session: the SDK spends ~0.5 s opening each sender/receiver
    (it polls its handshake every 50 ms), which per test would make this suite take minutes.
    Each test still starts from an empty peer (``reset``), and every contract test consumes
    what it publishes, so nothing buffered in a cached receiver leaks into the next test."""
    bus = _shared.get(id(peer))
    if bus is None:
        bus = ServiceBusBus.from_connection_string(peer.connection_string, **peer_client_kwargs())
        _shared[id(peer)] = bus

        def close() -> None:
            _shared.pop(id(peer), None)
            bus.close()

        request.config.add_cleanup(close)
    return bus


@contextmanager
def _peer_backed(request: pytest.FixtureRequest, _tmp_path: Path) -> Iterator[BusHarness]:
    peer: AmqpPeer = request.getfixturevalue("amqp_peer")
    peer.reset()
    bus = session_bus(request, peer)

    def now() -> datetime:
        return datetime.now(UTC) + timedelta(milliseconds=peer.now_ms() - int(time.time() * 1000))

    yield BusHarness(
        bus=bus,
        lock_seconds=PEER_LOCK_SECONDS,
        advance=peer.advance,
        now=now,
        quiet_seconds=0.3,
    )


def _purge(bus: ServiceBusBus) -> None:
    """Empty the shared real entities (left-overs of an earlier, failed run)."""
    addresses = [QUEUE, *(f"{TOPIC}/subscriptions/{s}" for s in SUBSCRIPTIONS)]
    for address in [*addresses, *(a + "/$DeadLetterQueue" for a in addresses)]:
        while got := bus.receive(address, max_messages=100, max_wait_seconds=0.5):
            for m in got:
                bus.complete(m)


@contextmanager
def _real(request: pytest.FixtureRequest, _tmp_path: Path) -> Iterator[BusHarness]:
    connection: Any = request.getfixturevalue("servicebus_connection")
    bus = ServiceBusBus.from_connection_string(connection, min_wait_seconds=0.5, **_REAL_CLIENT)
    _purge(bus)
    try:
        # quiet_seconds stays well under the lock: the renew-lock contract checks "still locked"
        # with a quiet receive that must end before the renewed lock does.
        yield BusHarness(bus=bus, lock_seconds=REAL_LOCK_SECONDS, advance=time.sleep, quiet_seconds=1.0)
    finally:
        bus.close()


def register(registry: Registry) -> None:
    if os.environ.get("WEFT_TEST_SERVICEBUS_CONNECTION"):
        registry.buses.append(Backend("servicebus", _real, (pytest.mark.integration, pytest.mark.slow)))
    else:
        registry.buses.append(
            Backend("servicebus-sdk-wiring", _peer_backed, (pytest.mark.integration, pytest.mark.sdk_wiring))
        )
