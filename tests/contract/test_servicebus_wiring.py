"""Service Bus adapter specifics that the shared Bus contract does not cover.

SDK-wiring tests (marker ``sdk_wiring``): they run the adapter against the local AMQP peer and
look at what reached the peer. They prove the adapter drives azure-servicebus as intended, not
how Service Bus behaves; against a real namespace (WEFT_TEST_SERVICEBUS_CONNECTION) they are
skipped, because there is no peer to look into.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters.servicebus_bus import MESSAGE_ID_PROPERTY, ServiceBusBus
from shared.errors import LockLostError, WeftError
from shared.ports import OutgoingMessage
from tests.contract.backends import QUEUE
from tests.contract.backends_servicebus import session_bus
from tests.support.amqp_peer import AmqpPeer

pytestmark = [pytest.mark.integration, pytest.mark.sdk_wiring]


@pytest.fixture
def peer(amqp_peer: AmqpPeer | None) -> AmqpPeer:
    if amqp_peer is None:
        pytest.skip(
            "looks inside the local AMQP peer; WEFT_TEST_SERVICEBUS_CONNECTION selects a real namespace"
        )
    amqp_peer.reset()
    return amqp_peer


@pytest.fixture
def bus(request: pytest.FixtureRequest, peer: AmqpPeer) -> ServiceBusBus:
    # The contract's session-wide adapter: a second adapter's receivers would compete with its
    # receivers, which keep link credit between calls as any prefetch-0 SDK receiver does.
    return session_bus(request, peer)


def test_message_id_and_properties_reach_the_broker(peer: AmqpPeer, bus: ServiceBusBus) -> None:
    bus.publish(
        QUEUE,
        [OutgoingMessage.from_json("outbox-42", {"a": 1}, subject="task", application_properties={"t": "x"})],
    )
    [stored] = peer.messages(QUEUE)
    assert stored.id == "outbox-42"  # the outbox record id is the broker's duplicate-detection key
    assert stored.subject == "task"
    assert stored.content_type == "application/json"
    props: dict[str, object] = dict(stored.properties or {})
    assert props == {"t": "x"}
    [m] = bus.receive(QUEUE, max_wait_seconds=5)  # consume it: the session's receivers outlive the test
    bus.complete(m)


def test_scheduled_publish_uses_schedule_message_and_is_held(peer: AmqpPeer, bus: ServiceBusBus) -> None:
    when = datetime.now(UTC) + timedelta(hours=1)
    bus.publish(QUEUE, [OutgoingMessage.from_json("later", {"n": 1}, scheduled_enqueue_time=when)])
    assert peer.messages(QUEUE) == []
    assert [m.id for m in peer.scheduled(QUEUE)] == ["later"]


def test_redrive_keeps_the_logical_id_but_sends_a_new_broker_id(peer: AmqpPeer, bus: ServiceBusBus) -> None:
    # Re-using the original id would be dropped by duplicate detection inside its window.
    bus.publish(QUEUE, [OutgoingMessage.from_json("orig", {"n": 1})])
    [m] = bus.receive(QUEUE, max_wait_seconds=5)
    bus.dead_letter(m, "Bad")
    assert bus.redrive_dead_letters(QUEUE) == 1
    [stored] = peer.messages(QUEUE)
    assert stored.id != "orig"
    props: dict[str, object] = dict(stored.properties or {})
    assert props[MESSAGE_ID_PROPERTY] == "orig"
    [back] = bus.receive(QUEUE, max_wait_seconds=5)
    assert back.message_id == "orig"
    assert MESSAGE_ID_PROPERTY not in back.application_properties
    bus.complete(back)


def test_a_broker_refusal_surfaces_as_a_weft_error_naming_the_entity(bus: ServiceBusBus) -> None:
    # The peer refuses the link with amqp:not-found as Service Bus does; the SDK reports that to a
    # sender as MessageSendFailed/unknown-error, so only the mapping onto WeftError is wiring.
    # Which class a real namespace's refusal maps to (NotFoundError when the SDK raises
    # MessagingEntityNotFoundError) is for the real-namespace run to show.
    with pytest.raises(WeftError) as err:
        bus.publish("no-such-queue", [OutgoingMessage.from_json("x", {})])
    assert err.value.details["entity"] == "no-such-queue"


def test_renewing_a_lost_lock_is_lock_lost(peer: AmqpPeer, bus: ServiceBusBus) -> None:
    bus.publish(QUEUE, [OutgoingMessage.from_json("r", {})])
    [m] = bus.receive(QUEUE, max_wait_seconds=5)
    peer.advance(3600)  # far past the lock duration
    with pytest.raises(LockLostError):
        bus.renew_lock(m)
