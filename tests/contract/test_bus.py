"""Bus contract: peek-lock, lock expiry, dead-lettering, scheduling, duplicate detection, topics."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.errors import LockLostError
from shared.ports import DEAD_LETTER_SUFFIX, Bus, OutgoingMessage, ReceivedMessage, subscription_entity
from tests.contract.backends import BusHarness
from tests.contract.builders import uid


def _msg(n: int = 1, **kw: object) -> OutgoingMessage:
    return OutgoingMessage.from_json(uid("m-"), {"n": n}, **kw)  # type: ignore[arg-type]


def _drain(h: BusHarness, entity: str) -> list[int]:
    """Receive and complete until a receive comes back empty."""
    out: list[int] = []
    while got := h.bus.receive(entity, max_messages=50, max_wait_seconds=h.quiet_seconds):
        for m in got:
            h.bus.complete(m)
        out += [m.json()["n"] for m in got]
    return out


def test_send_receive_complete_roundtrip(bus_backend: BusHarness, bus: Bus) -> None:
    q = bus_backend.queue
    # Unique ids: a real namespace remembers ids across runs for its duplicate-detection window.
    message_id = uid("id-")
    sent = OutgoingMessage.from_json(
        message_id,
        {"hello": "world"},
        subject="task",
        correlation_id="ex-1",
        application_properties={"tenantId": "acme", "attempt": 2, "urgent": True},
    )
    bus.publish(q, [sent])
    [got] = bus.receive(q, max_messages=10, max_wait_seconds=5)
    assert got.message_id == message_id
    assert got.json() == {"hello": "world"}
    assert got.subject == "task"
    assert got.correlation_id == "ex-1"
    assert dict(got.application_properties) == {"tenantId": "acme", "attempt": 2, "urgent": True}
    assert got.delivery_count == 1
    assert got.lock_token
    bus.complete(got)
    assert bus.receive(q, max_wait_seconds=bus_backend.quiet_seconds) == []


def test_locked_message_is_invisible_until_abandoned(bus_backend: BusHarness, bus: Bus) -> None:
    q = bus_backend.queue
    bus.publish(q, [_msg(1)])
    [first] = bus.receive(q, max_wait_seconds=5)
    assert bus.receive(q, max_wait_seconds=bus_backend.quiet_seconds) == []
    bus.abandon(first)
    [again] = bus.receive(q, max_wait_seconds=5)
    assert again.message_id == first.message_id
    assert again.delivery_count == 2
    with pytest.raises(LockLostError):
        bus.complete(first)  # the old lock is gone
    bus.complete(again)


def test_lock_expiry_redelivers_and_renew_extends(bus_backend: BusHarness, bus: Bus) -> None:
    q = bus_backend.queue
    bus.publish(q, [_msg(1)])
    [m] = bus.receive(q, max_wait_seconds=5)
    assert m.locked_until is not None
    bus_backend.advance(bus_backend.lock_seconds * 0.6)
    new_until = bus.renew_lock(m)
    assert new_until > m.locked_until
    bus_backend.advance(bus_backend.lock_seconds * 0.6)
    assert bus.receive(q, max_wait_seconds=bus_backend.quiet_seconds) == []  # renewed: still locked
    bus_backend.advance(bus_backend.lock_seconds * 0.6)
    [redelivered] = bus.receive(q, max_wait_seconds=5)
    assert redelivered.message_id == m.message_id
    assert redelivered.delivery_count == 2
    with pytest.raises(LockLostError):
        bus.complete(m)
    bus.complete(redelivered)


def test_dead_letter_with_reason_then_redrive(bus_backend: BusHarness, bus: Bus) -> None:
    q = bus_backend.queue
    bus.publish(q, [_msg(7, application_properties={"tenantId": "acme"})])
    [m] = bus.receive(q, max_wait_seconds=5)
    bus.dead_letter(m, reason="BadInput", description="field x missing")
    assert bus.receive(q, max_wait_seconds=bus_backend.quiet_seconds) == []
    [dl] = bus.peek_dead_letters(q)
    assert dl.message_id == m.message_id
    assert dl.dead_letter_reason == "BadInput"
    assert dl.dead_letter_description == "field x missing"
    assert bus.peek_dead_letters(q) != []  # peeking does not remove
    assert bus.redrive_dead_letters(q) == 1
    assert bus.peek_dead_letters(q) == []
    [back] = bus.receive(q, max_wait_seconds=5)
    assert back.json() == {"n": 7}
    assert dict(back.application_properties)["tenantId"] == "acme"
    assert back.delivery_count == 1
    bus.complete(back)


def test_dead_letter_subqueue_can_be_received_and_completed(bus_backend: BusHarness, bus: Bus) -> None:
    q = bus_backend.queue
    bus.publish(q, [_msg(3)])
    [m] = bus.receive(q, max_wait_seconds=5)
    bus.dead_letter(m, reason="Nope")
    [d] = bus.receive(q + DEAD_LETTER_SUFFIX, max_wait_seconds=5)
    assert d.message_id == m.message_id
    assert d.dead_letter_reason == "Nope"
    bus.complete(d)
    assert bus.peek_dead_letters(q) == []


def test_max_delivery_count_dead_letters(bus_backend: BusHarness, bus: Bus) -> None:
    q = bus_backend.queue
    bus.publish(q, [_msg(1)])
    for attempt in range(1, bus_backend.max_delivery_count + 1):
        [m] = bus.receive(q, max_wait_seconds=5)
        assert m.delivery_count == attempt
        bus.abandon(m)
    assert bus.receive(q, max_wait_seconds=bus_backend.quiet_seconds) == []
    [dl] = bus.peek_dead_letters(q)
    assert dl.message_id == m.message_id
    assert dl.dead_letter_reason == "MaxDeliveryCountExceeded"


def test_scheduled_message_is_not_delivered_before_its_time(bus_backend: BusHarness, bus: Bus) -> None:
    q = bus_backend.queue
    when = bus_backend.now() + timedelta(seconds=bus_backend.lock_seconds)
    bus.publish(q, [_msg(1, scheduled_enqueue_time=when), _msg(2)])
    assert _drain(bus_backend, q) == [2]
    bus_backend.advance(bus_backend.lock_seconds + 1)
    assert _drain(bus_backend, q) == [1]


def test_duplicate_message_id_is_dropped(bus_backend: BusHarness, bus: Bus) -> None:
    q = bus_backend.queue
    same = uid("same-")
    first = OutgoingMessage.from_json(same, {"n": 1})
    bus.publish(q, [first])
    bus.publish(q, [OutgoingMessage.from_json(same, {"n": 2})])
    bus.publish(q, [OutgoingMessage.from_json(uid("other-"), {"n": 3})])
    assert sorted(_drain(bus_backend, q)) == [1, 3]
    # Even after the first copy was consumed, a re-send within the window is dropped.
    bus.publish(q, [first])
    assert _drain(bus_backend, q) == []


def test_topic_fans_out_to_every_subscription(bus_backend: BusHarness, bus: Bus) -> None:
    t = bus_backend.topic
    bus.publish(t, [_msg(1), _msg(2)])
    dup = uid("dup-")
    bus.publish(t, [OutgoingMessage.from_json(dup, {"n": 3}), OutgoingMessage.from_json(dup, {"n": 4})])
    for sub in bus_backend.subscriptions:
        entity = subscription_entity(t, sub)
        assert sorted(_drain(bus_backend, entity)) == [1, 2, 3]
    # Dead-lettering on one subscription leaves the other alone.
    bus.publish(t, [_msg(5)])
    s1, s2 = (subscription_entity(t, s) for s in bus_backend.subscriptions[:2])
    [m] = bus.receive(s1, max_wait_seconds=5)
    bus.dead_letter(m, reason="x")
    assert [d.json()["n"] for d in bus.peek_dead_letters(s1)] == [5]
    assert bus.peek_dead_letters(s2) == []
    assert bus.redrive_dead_letters(s1) == 1
    assert _drain(bus_backend, s1) == [5]
    assert bus.peek_dead_letters(s1) == []


def test_receive_batches_in_order(bus_backend: BusHarness, bus: Bus) -> None:
    q = bus_backend.queue
    bus.publish(q, [_msg(i) for i in range(5)])
    got: list[ReceivedMessage] = []
    while len(got) < 3:  # "up to" max_messages: a broker may hand out fewer per call
        batch = bus.receive(q, max_messages=3 - len(got), max_wait_seconds=5)
        assert batch
        assert len(batch) <= 3 - len(got)
        got += batch
    assert [m.json()["n"] for m in got] == [0, 1, 2]
    for m in got:
        bus.complete(m)
    assert _drain(bus_backend, q) == [3, 4]
