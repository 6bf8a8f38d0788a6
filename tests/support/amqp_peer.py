"""A minimal AMQP 1.0 peer that the azure-servicebus SDK can drive, for SDK-wiring tests.

No broker installable on a developer machine speaks Service Bus's AMQP dialect (the SDK always
sends a CBS put-token first; RabbitMQ, ActiveMQ and Proton's example broker never answer it).
This peer, on python-qpid-proton, answers just enough of the dialect to prove that our adapter
drives the SDK correctly:

- SASL ANONYMOUS (what the SDK uses before CBS), ``$cbs`` put-token answered with 200;
- queues, topics fanning out to subscriptions, and each entity's ``$DeadLetterQueue`` subqueue;
- peek-lock settlement: Accepted = complete, Modified = abandon (delivery count + 1, redeliver) or
  defer (kept aside), Released = give back, Rejected = dead-letter (the reason and description
  become the ``DeadLetterReason`` / ``DeadLetterErrorDescription`` application properties);
  the outcome is echoed back, as the SDK checks it;
- lock expiry, max delivery count -> dead-letter subqueue, duplicate detection by message id
  (forever, not within a time window), scheduled enqueue time;
- ``$management``: schedule-message, cancel-scheduled-message, peek-message, renew-lock,
  update-disposition.

It is NOT Service Bus: no sessions, no partitioning, no filters/rules on subscriptions, no TTL or
auto-forwarding, no quotas, no size limits, no transactions, no real authorisation (any token is
accepted), and the error conditions it returns are only the few the adapter maps. Passing against
it proves wiring, not broker semantics; run the same contract against a real namespace for that.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from proton import Condition, Data, Delivery, Endpoint, Handler, Link, Message, symbol, timestamp
from proton.reactor import Container

from tests.support.ports import free_port, wait_for_port

_log = logging.getLogger(__name__)

_DLQ = "$deadletterqueue"
_MGMT = "$management"
_CBS = "$cbs"
_LOCK_LOST = "com.microsoft:message-lock-lost"
_NOT_FOUND = "amqp:not-found"
_TICK_S = 0.02
_DATA_SECTION = 0x75
#: Application property that routes a re-driven topic message to one subscription (see enqueue).
REDRIVE_PROPERTY = "WeftRedriveTo"


@dataclass(frozen=True)
class EntitySpec:
    """One queue, or one topic with its subscriptions, as the peer should serve it."""

    name: str
    subscriptions: tuple[str, ...] = ()  # non-empty makes it a topic
    max_delivery_count: int = 10
    lock_duration_s: float = 30.0
    requires_duplicate_detection: bool = False


@dataclass
class _Stored:
    sequence_number: int
    message: Message
    enqueued_ms: int
    scheduled_ms: int | None = None
    deliveries: int = 0
    locked_until_ms: int | None = None
    lock_token: uuid.UUID | None = None


@dataclass
class _Store:
    """A place messages wait in: a queue, a subscription, or the dead-letter subqueue of one."""

    path: str
    max_delivery_count: int
    lock_duration_s: float
    dead_letter: _Store | None = None
    available: list[_Stored] = field(default_factory=list)
    scheduled: list[_Stored] = field(default_factory=list)
    deferred: dict[int, _Stored] = field(default_factory=dict)
    locked: dict[uuid.UUID, tuple[_Stored, Delivery]] = field(default_factory=dict)

    def put(self, item: _Stored) -> None:
        self.available.append(item)
        self.available.sort(key=lambda s: s.sequence_number)


@dataclass
class _Entity:
    """A send target: a queue (one store) or a topic (one store per subscription)."""

    spec: EntitySpec
    stores: list[_Store]
    seen_message_ids: set[str] = field(default_factory=set)


def _split_batch(payload: bytes) -> list[bytes] | None:
    """The SDK sends a batch as one transfer (message-format 0x80013700, which proton does not
    expose): the first message's properties, then one data section per message, each an encoded
    message. A data section that is itself an encoded message marks a batch; a body that happens
    to be an encoded AMQP message would fool this, which the SDK-wiring tests never send."""
    parts: list[bytes] = []
    pos = 0
    while pos < len(payload):
        data = Data()
        size = data.decode(payload[pos:])
        pos += size
        data.rewind()
        data.next()
        section: Any = data.get_object()
        if int(getattr(section, "descriptor", 0)) != _DATA_SECTION:
            continue
        inner = bytes(section.value)
        if not (inner[:2] == b"\x00\x53" and 0x70 <= inner[2] <= 0x78):
            return None
        parts.append(inner)
    return parts or None


def _props(message: Message) -> dict[str, Any]:
    """Application properties (proton's stubs type them too narrowly)."""
    raw: Any = message.properties
    return dict(raw or {})


def _decode(data: bytes) -> Message:
    m = Message()
    m.decode(data)
    return m


class AmqpPeer:
    """Serves the given entities on 127.0.0.1:<port> from a background thread."""

    def __init__(self, entities: list[EntitySpec], port: int | None = None) -> None:
        self.port = port or free_port()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._sequence = 0
        self._offset_ms = 0
        self._entities: dict[str, _Entity] = {}
        self._stores: dict[str, _Store] = {}
        for spec in entities:
            self.add_entity(spec)
        self.links: set[Link] = set()  # open links; touched on the container thread only
        self._thread: threading.Thread | None = None
        self._container: Container | None = None

    # -- configuration and inspection (any thread) -------------------------------------------

    def now_ms(self) -> int:
        return int(time.time() * 1000) + self._offset_ms

    def advance(self, seconds: float) -> None:
        """Move the peer's clock forward: lock expiry and scheduled delivery happen without a wait."""
        with self._lock:
            self._offset_ms += int(seconds * 1000)
            self.tick()

    def add_entity(self, spec: EntitySpec) -> None:
        with self._lock:
            name = spec.name.lower()
            paths = [f"{name}/subscriptions/{s.lower()}" for s in spec.subscriptions] or [name]
            stores = []
            for path in paths:
                dlq = _Store(f"{path}/{_DLQ}", max_delivery_count=2**31, lock_duration_s=spec.lock_duration_s)
                store = _Store(path, spec.max_delivery_count, spec.lock_duration_s, dead_letter=dlq)
                self._stores[path] = store
                self._stores[dlq.path] = dlq
                stores.append(store)
            self._entities[name] = _Entity(spec, stores)

    def reset(self) -> None:
        """Forget every message and every seen message id (a fresh namespace for the next test)."""
        with self._lock:
            for store in self._stores.values():
                store.available.clear()
                store.scheduled.clear()
                store.deferred.clear()
                store.locked.clear()
            for entity in self._entities.values():
                entity.seen_message_ids.clear()

    def messages(self, path: str) -> list[Message]:
        """Copies of the messages in a store (waiting or locked), as they reached the peer."""
        with self._lock:
            store = self._stores[path.lower()]
            items = sorted(
                [*store.available, *(i for i, _ in store.locked.values())], key=lambda i: i.sequence_number
            )
            return [_decode(i.message.encode()) for i in items]

    def scheduled(self, path: str) -> list[Message]:
        with self._lock:
            return [_decode(i.message.encode()) for i in self._stores[path.lower()].scheduled]

    def count(self, path: str) -> int:
        """Messages waiting (not locked, not scheduled) in a store, e.g. ``q`` or ``q/$DeadLetterQueue``."""
        with self._lock:
            return len(self._stores[path.lower()].available)

    @property
    def connection_string(self) -> str:
        # Lower-case `true` matters: the SDK compares the string, and it is what turns TLS off.
        return (
            f"Endpoint=sb://127.0.0.1:{self.port};SharedAccessKeyName=x;SharedAccessKey=y;"
            "UseDevelopmentEmulator=true"
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        handler = _PeerHandler(self)
        container = Container(handler)
        container.container_id = "weft-amqp-peer"
        self._container = container
        container.listen(f"127.0.0.1:{self.port}")
        container.schedule(_TICK_S, _Tick(self))
        self._thread = threading.Thread(target=self._run, args=(container,), name="amqp-peer", daemon=True)
        self._thread.start()
        wait_for_port(self.port, timeout=10)

    def _run(self, container: Container) -> None:
        container.run()
        if not self._stop.is_set():
            _log.error("the AMQP peer's event loop ended unexpectedly")

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)

    # -- broker logic (container thread) --------------------------------------------------------

    def resolve(self, address: str | None) -> tuple[str, str]:
        """Classify a link address: ('cbs'|'mgmt'|'store'|'entity', path)."""
        path = (
            urlparse(address or "").path.strip("/").lower() if "://" in (address or "") else (address or "")
        )
        path = path.strip("/").lower()
        if path == _CBS:
            return "cbs", path
        if path.endswith("/" + _MGMT):
            return "mgmt", path[: -len(_MGMT) - 1]
        if path in self._entities:
            return "entity", path
        return "store", path

    def _next_sequence(self) -> int:
        self._sequence += 1
        return self._sequence

    def enqueue(self, entity_path: str, message: Message, *, scheduled_ms: int | None = None) -> int | None:
        """Accept one message for an entity; None when duplicate detection drops it."""
        with self._lock:
            entity = self._entities[entity_path]
            if entity.spec.requires_duplicate_detection and message.id is not None:
                if str(message.id) in entity.seen_message_ids:
                    return None
                entity.seen_message_ids.add(str(message.id))
            ann = dict(message.annotations or {})
            when = ann.get(symbol("x-opt-scheduled-enqueue-time"), scheduled_ms)
            sequence = self._next_sequence()
            # A topic delivers to every subscription, except that a message carrying the
            # re-drive property goes to the named one only: the peer's stand-in for the SQL rule
            # docs/testing.md asks each real subscription to have.
            only = _props(message).get(REDRIVE_PROPERTY)
            for store in entity.stores:
                if (
                    only is not None
                    and entity.spec.subscriptions
                    and not store.path.endswith(f"/subscriptions/{str(only).lower()}")
                ):
                    continue
                copy = _decode(message.encode())
                item = _Stored(sequence, copy, enqueued_ms=self.now_ms())
                if when is not None and int(when) > self.now_ms():
                    item.scheduled_ms = int(when)
                    store.scheduled.append(item)
                else:
                    store.put(item)
            return sequence

    def cancel_scheduled(self, entity_path: str, sequence_numbers: list[int]) -> None:
        with self._lock:
            for store in self._entities[entity_path].stores:
                store.scheduled = [s for s in store.scheduled if s.sequence_number not in sequence_numbers]

    def dead_letter(self, store: _Store, item: _Stored, reason: str, description: str) -> None:
        if store.dead_letter is None:  # a dead-lettered message dead-lettered again stays put
            store.put(item)
            return
        props = _props(item.message)
        props["DeadLetterReason"] = reason
        props["DeadLetterErrorDescription"] = description
        item.message.properties = props  # type: ignore[assignment]
        ann = dict(item.message.annotations or {})
        ann[symbol("x-opt-deadletter-source")] = store.path
        item.message.annotations = ann
        item.locked_until_ms = None
        item.lock_token = None
        store.dead_letter.put(item)

    def give_back(self, store: _Store, item: _Stored, *, failed: bool) -> None:
        """Abandon or lock expiry (failed=True) or release (failed=False)."""
        item.locked_until_ms = None
        item.lock_token = None
        if not failed:
            item.deliveries = max(0, item.deliveries - 1)
        if failed and item.deliveries >= store.max_delivery_count:
            self.dead_letter(
                store,
                item,
                "MaxDeliveryCountExceeded",
                f"Message could not be consumed after {store.max_delivery_count} delivery attempts.",
            )
            return
        store.put(item)

    def wire_message(self, item: _Stored, *, locked: bool) -> bytes:
        m = _decode(item.message.encode())
        ann = dict(m.annotations or {})
        ann[symbol("x-opt-sequence-number")] = item.sequence_number
        ann[symbol("x-opt-enqueued-time")] = timestamp(item.enqueued_ms)
        if item.scheduled_ms is not None:
            ann[symbol("x-opt-scheduled-enqueue-time")] = timestamp(item.scheduled_ms)
        if locked and item.locked_until_ms is not None:
            ann[symbol("x-opt-locked-until")] = timestamp(item.locked_until_ms)
        m.annotations = ann
        # Header delivery-count is the number of earlier deliveries, as the broker reports it.
        m.delivery_count = max(0, item.deliveries - (1 if locked else 0))
        m.durable = True  # proton omits an all-default header; Service Bus always sends one
        return bytes(m.encode())

    def pump(self, link: Link) -> None:
        """Send waiting messages on a peer sender link while the client gives credit."""
        kind, path = self.resolve(link.source.address)
        with self._lock:
            store = self._stores.get(path) if kind in ("store", "entity") else None
            if store is None:
                return
            while link.credit > 0 and store.available:
                item = store.available.pop(0)
                item.deliveries += 1
                token = uuid.uuid4()
                item.lock_token = token
                item.locked_until_ms = self.now_ms() + int(store.lock_duration_s * 1000)
                # The SDK reads the lock token from the delivery tag as UUID(bytes_le=tag).
                dlv = link.delivery(token.bytes_le)  # type: ignore[arg-type]
                link.send(self.wire_message(item, locked=True))
                link.advance()
                dlv.context = (store, token)
                store.locked[token] = (item, dlv)
            if link.drain_mode and link.credit > 0:
                link.drained()

    def tick(self) -> None:
        now = self.now_ms()
        with self._lock:
            for store in self._stores.values():
                due = [s for s in store.scheduled if s.scheduled_ms is not None and s.scheduled_ms <= now]
                if due:
                    store.scheduled = [s for s in store.scheduled if s not in due]
                    for item in due:
                        item.enqueued_ms = now
                        store.put(item)
                for token, (item, _dlv) in list(store.locked.items()):
                    if item.locked_until_ms is not None and item.locked_until_ms <= now:
                        del store.locked[token]
                        self.give_back(store, item, failed=True)

    def settle(self, dlv: Delivery) -> None:
        """The client settled a delivery we sent: apply it and echo the outcome."""
        store, token = dlv.context
        state = dlv.remote_state
        with self._lock:
            entry = store.locked.pop(token, None)
            if entry is None:
                dlv.local.condition = Condition(_LOCK_LOST, "The lock on the message has expired.")
                dlv.update(Delivery.REJECTED)
                dlv.settle()
                return
            item = entry[0]
            if state == Delivery.ACCEPTED:
                pass
            elif state == Delivery.MODIFIED and dlv.remote.undeliverable:
                store.deferred[item.sequence_number] = item
            elif state == Delivery.MODIFIED:
                self.give_back(store, item, failed=True)
            elif state == Delivery.RELEASED:
                self.give_back(store, item, failed=False)
            elif state == Delivery.REJECTED:
                info = dict(getattr(dlv.remote.condition, "info", None) or {})
                self.dead_letter(
                    store,
                    item,
                    str(info.get(symbol("DeadLetterReason"), info.get("DeadLetterReason")) or ""),
                    str(
                        info.get(symbol("DeadLetterErrorDescription"), info.get("DeadLetterErrorDescription"))
                        or ""
                    ),
                )
            else:
                store.locked[token] = entry  # not a terminal outcome
                return
        dlv.update(state)
        dlv.settle()

    def release_link(self, link: Link) -> None:
        """A receiver link went away: its locked messages become available again (lock kept
        until expiry would be closer to Service Bus, but slows tests for no wiring value)."""
        with self._lock:
            for store in self._stores.values():
                for token, (item, dlv) in list(store.locked.items()):
                    if dlv.link == link:
                        del store.locked[token]
                        self.give_back(store, item, failed=False)

    # -- $management --------------------------------------------------------------------------

    def management(self, entity_path: str, request: Message) -> tuple[int, str, Any]:
        op = str(_props(request).get("operation", ""))
        body = request.body if isinstance(request.body, dict) else {}
        body = {str(k): v for k, v in body.items()}
        with self._lock:
            if op == "com.microsoft:schedule-message":
                if entity_path not in self._entities:
                    return 404, "entity not found", None
                sequence_numbers: list[int] = []
                for raw_entry in body.get("messages", []):
                    entry = {str(k): v for k, v in raw_entry.items()}
                    msg = _decode(bytes(entry["message"]))
                    seq = self.enqueue(entity_path, msg)
                    # Service Bus returns a number for a duplicate too; it is never delivered.
                    sequence_numbers.append(seq if seq is not None else self._next_sequence())
                return 200, "OK", {"sequence-numbers": sequence_numbers}
            if op == "com.microsoft:cancel-scheduled-message":
                self.cancel_scheduled(entity_path, [int(s) for s in body.get("sequence-numbers", [])])
                return 200, "OK", {}
            store = self._stores.get(entity_path)
            if store is None:
                return 404, "entity not found", None
            if op == "com.microsoft:peek-message":
                start = int(body.get("from-sequence-number", 0))
                limit = int(body.get("message-count", 1))
                items = sorted(
                    [*store.available, *store.scheduled, *(i for i, _ in store.locked.values())],
                    key=lambda s: s.sequence_number,
                )
                chosen = [i for i in items if i.sequence_number >= start][:limit]
                if not chosen:
                    return 204, "No messages", None
                return (
                    200,
                    "OK",
                    {"messages": [{"message": self.wire_message(i, locked=False)} for i in chosen]},
                )
            if op == "com.microsoft:renew-lock":
                expirations = []
                for token in body.get("lock-tokens", []):
                    held = store.locked.get(uuid.UUID(str(token)))
                    if held is None:
                        return 410, "lock lost", _LOCK_LOST
                    held[0].locked_until_ms = self.now_ms() + int(store.lock_duration_s * 1000)
                    expirations.append(timestamp(held[0].locked_until_ms))
                return 200, "OK", {"expirations": expirations}
            if op == "com.microsoft:update-disposition":
                status = str(body.get("disposition-status", ""))
                for token in body.get("lock-tokens", []):
                    held = store.locked.pop(uuid.UUID(str(token)), None)
                    if held is None:
                        return 410, "lock lost", _LOCK_LOST
                    item, dlv = held
                    dlv.settle()
                    if status == "abandoned":
                        self.give_back(store, item, failed=True)
                    elif status == "suspended":
                        self.dead_letter(
                            store,
                            item,
                            str(body.get("deadletter-reason", "")),
                            str(body.get("deadletter-description", "")),
                        )
                    elif status == "defered":
                        store.deferred[item.sequence_number] = item
                return 200, "OK", {}
        return 501, f"operation {op!r} is not emulated", None


def _guarded(method: Callable[..., None]) -> Callable[..., None]:
    """An exception escaping a proton handler ends the event loop, and a silently dead peer
    leaves the SDK hanging in a socket read: log it and keep serving instead."""

    @functools.wraps(method)
    def run(*args: Any) -> None:
        try:
            method(*args)
        except Exception:
            _log.exception("AMQP peer: %s failed", method.__name__)

    return run


class _Tick(Handler):
    def __init__(self, peer: AmqpPeer) -> None:
        self.peer = peer

    def on_timer_task(self, event: Any) -> None:
        container = event.container
        if self.peer._stop.is_set():
            container.stop()
            return
        try:
            self.peer.tick()
            for link in [lk for lk in self.peer.links if lk.is_sender]:
                self.peer.pump(link)
        except Exception:
            _log.exception("AMQP peer: tick failed")
        container.schedule(_TICK_S, self)


class _PeerHandler(Handler):
    def __init__(self, peer: AmqpPeer) -> None:
        self.peer = peer
        self.links = peer.links

    @_guarded
    def on_connection_bound(self, event: Any) -> None:
        sasl = event.transport.sasl()
        sasl.allow_insecure_mechs = True
        sasl.allowed_mechs("ANONYMOUS PLAIN")
        sasl.done(sasl.OK)

    @_guarded
    def on_connection_remote_open(self, event: Any) -> None:
        conn = event.connection
        if conn.state & Endpoint.LOCAL_UNINIT:
            conn.container = "weft-amqp-peer"
            conn.open()

    @_guarded
    def on_session_remote_open(self, event: Any) -> None:
        if event.session.state & Endpoint.LOCAL_UNINIT:
            event.session.open()

    @_guarded
    def on_link_remote_open(self, event: Any) -> None:
        link = event.link
        if not link.state & Endpoint.LOCAL_UNINIT:
            return
        if link.is_sender:
            address = link.remote_source.address
            link.source.address = address
            link.target.address = link.remote_target.address
            link.snd_settle_mode = Link.SND_UNSETTLED
            link.rcv_settle_mode = link.remote_rcv_settle_mode
        else:
            address = link.remote_target.address
            link.target.address = address
            link.source.address = link.remote_source.address
        kind, path = self.peer.resolve(address)
        known = (
            kind == "cbs"
            or (kind == "mgmt" and (path in self.peer._stores or path in self.peer._entities))
            or (kind == "entity" and link.is_receiver)
            or (kind == "store" and link.is_sender and path in self.peer._stores)
            or (kind == "entity" and link.is_sender and path in self.peer._stores)
        )
        link.open()
        if not known:
            link.condition = Condition(_NOT_FOUND, f"The messaging entity '{path}' could not be found.")
            link.close()
            return
        self.links.add(link)
        if link.is_receiver:
            link.flow(100)

    @_guarded
    def on_link_remote_close(self, event: Any) -> None:
        link = event.link
        self.links.discard(link)
        if link.is_sender:
            self.peer.release_link(link)
        if not link.state & Endpoint.LOCAL_CLOSED:
            link.close()

    @_guarded
    def on_session_remote_close(self, event: Any) -> None:
        if not event.session.state & Endpoint.LOCAL_CLOSED:
            event.session.close()

    @_guarded
    def on_connection_remote_close(self, event: Any) -> None:
        if not event.connection.state & Endpoint.LOCAL_CLOSED:
            event.connection.close()

    @_guarded
    def on_transport_closed(self, event: Any) -> None:
        conn = event.connection
        if conn is None:
            return
        for link in [lk for lk in self.links if lk.connection == conn]:
            self.links.discard(link)
            if link.is_sender:
                self.peer.release_link(link)

    @_guarded
    def on_link_flow(self, event: Any) -> None:
        link = event.link
        if link.is_sender and link in self.links:
            self.peer.pump(link)

    @_guarded
    def on_delivery(self, event: Any) -> None:
        dlv = event.delivery
        link = dlv.link
        if link.is_sender:
            if dlv.updated and getattr(dlv, "context", None) is not None and not dlv.local_state:
                self.peer.settle(dlv)
            return
        if not dlv.readable or dlv.partial:
            return
        payload = bytes(link.recv(dlv.pending))
        link.advance()
        self._incoming(link, dlv, payload)
        link.flow(1)

    def _incoming(self, link: Link, dlv: Delivery, payload: bytes) -> None:
        kind, path = self.peer.resolve(link.target.address)
        if kind == "entity":
            parts = _split_batch(payload) or [payload]
            for part in parts:
                self.peer.enqueue(path, _decode(part))
            for sender in [lk for lk in self.links if lk.is_sender]:
                self.peer.pump(sender)
            dlv.update(Delivery.ACCEPTED)
            dlv.settle()
            return
        request = _decode(payload)
        dlv.update(Delivery.ACCEPTED)
        dlv.settle()
        if kind == "cbs":
            status, description, body, condition = 200, "OK", None, None
        elif kind == "mgmt":
            status, description, result = self.peer.management(path, request)
            body, condition = (result, None) if status < 300 else (None, result)
        else:
            return
        reply = Message(
            correlation_id=request.id,
            properties={
                "status-code": status,
                "status-description": description,
                "statusCode": status,
                "statusDescription": description,
                **({"errorCondition": symbol(condition)} if isinstance(condition, str) else {}),
            },
            body=body,
        )
        for sender in self.links:
            if (
                sender.is_sender
                and sender.connection == link.connection
                and self.peer.resolve(sender.source.address) == (kind, path)
            ):
                sender.delivery(uuid.uuid4().bytes)  # type: ignore[arg-type]
                sender.send(reply.encode())
                sender.advance()
                return
        _log.warning("no reply link for %s %s", kind, path)


@contextmanager
def run_amqp_peer(entities: list[EntitySpec]) -> Iterator[AmqpPeer]:
    peer = AmqpPeer(entities)
    peer.start()
    try:
        yield peer
    finally:
        peer.stop()
