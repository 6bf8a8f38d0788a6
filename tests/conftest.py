from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.amqp_peer import AmqpPeer, run_amqp_peer
from tests.support.azurite import Azurite, run_azurite
from tests.support.cosmos import CosmosTarget, cosmos_target


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    with run_azurite() as a:
        yield a


@pytest.fixture(scope="session")
def cosmos_endpoint() -> Iterator[CosmosTarget]:
    """The local Cosmos DB stand-in, or the real account/emulator named by WEFT_TEST_COSMOS_ENDPOINT
    (+ WEFT_TEST_COSMOS_KEY, else DefaultAzureCredential); see docs/testing.md."""
    with cosmos_target() as target:
        yield target


@pytest.fixture(scope="session")
def amqp_peer() -> Iterator[AmqpPeer | None]:
    """The local AMQP 1.0 peer (SDK-wiring only), or None when WEFT_TEST_SERVICEBUS_CONNECTION
    points the Service Bus tests at a real namespace (see docs/testing.md)."""
    if os.environ.get("WEFT_TEST_SERVICEBUS_CONNECTION"):
        yield None
        return
    import tests.contract.backends  # noqa: F401 - it registers backends_servicebus; importing that first is circular
    from tests.contract.backends_servicebus import peer_entities

    with run_amqp_peer(peer_entities()) as peer:
        yield peer


@pytest.fixture(scope="session")
def servicebus_connection(amqp_peer: AmqpPeer | None) -> str:
    real = os.environ.get("WEFT_TEST_SERVICEBUS_CONNECTION")
    if real:
        return real
    assert amqp_peer is not None
    return amqp_peer.connection_string
