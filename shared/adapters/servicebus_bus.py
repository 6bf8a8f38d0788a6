"""The Bus port on Azure Service Bus (azure-servicebus 7.15).

- Publishing uses the outbox record id as ``message_id``, so a namespace with duplicate detection
  drops a re-send after a relay crash between "published" and "marked dispatched".
- ``scheduled_enqueue_time`` goes through ``schedule_messages`` (the broker holds the message).
- Receiving is peek-lock (prefetch 0); settlement goes back through the receiver that locked the
  message, which is why :class:`ReceivedMessage.raw` carries it.
- Re-drive receives from ``<entity>/$DeadLetterQueue``, re-sends body, subject, content type,
  correlation id and application properties to the entity, then completes the dead-lettered copy.
  The re-sent copy gets a new broker ``message_id`` (``<id>.redrive.<dlq sequence number>``):
  re-using the original id inside the duplicate-detection window would make the broker drop it
  silently. The logical id travels in the ``WeftMessageId`` property and is what receivers see,
  and the id is deterministic, so a re-drive that crashes before completing is dropped as a duplicate
  when repeated. Service Bus cannot send to one subscription: a subscription's re-drive goes to the
  topic with ``WeftRedriveTo=<subscription>``, and each subscription needs the SQL rule
  ``WeftRedriveTo IS NULL OR WeftRedriveTo = '<subscription>'`` (docs/testing.md).

One client per process, built lazily: a connection string locally, the fully qualified namespace
with ``DefaultAzureCredential`` (managed identity) in Azure. The SDK's handlers are not thread-safe,
so each cached sender/receiver is used under its own lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from typing import Any

from azure.core.exceptions import ClientAuthenticationError
from azure.identity import DefaultAzureCredential
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusReceiver,
    ServiceBusSender,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import (
    MessageAlreadySettled,
    MessageLockLostError,
    MessageNotFoundError,
    MessageSizeExceededError,
    MessagingEntityDisabledError,
    MessagingEntityNotFoundError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
    ServiceBusError,
)

from shared.errors import (
    LockLostError,
    NotFoundError,
    PayloadTooLargeError,
    TransientError,
    WeftError,
)
from shared.ports import DEAD_LETTER_SUFFIX, OutgoingMessage, PropertyValue, ReceivedMessage
from shared.settings import WeftSettings

#: Application property carrying the logical message id on a re-driven copy.
MESSAGE_ID_PROPERTY = "WeftMessageId"
#: Application property routing a re-driven topic message to one subscription (needs a SQL rule).
REDRIVE_PROPERTY = "WeftRedriveTo"
_BROKER_PROPERTIES = ("DeadLetterReason", "DeadLetterErrorDescription")
_INTERNAL_PROPERTIES = (MESSAGE_ID_PROPERTY, REDRIVE_PROPERTY, *_BROKER_PROPERTIES)
_SUBSCRIPTIONS = "/subscriptions/"


class ServiceBusConfigError(WeftError):
    default_type = "weft.ServiceBusConfiguration"
    default_non_retryable = True


class ServiceBusBus:
    """:class:`shared.ports.Bus` on Azure Service Bus."""

    def __init__(
        self,
        client_factory: Callable[[], ServiceBusClient],
        *,
        min_wait_seconds: float = 0.5,
        operation_timeout_seconds: float | None = None,
    ) -> None:
        """``min_wait_seconds`` is the shortest receive wait used: the SDK cannot receive without
        waiting, and a round trip to a namespace takes tens of milliseconds."""
        self._client_factory = client_factory
        self._client: ServiceBusClient | None = None
        self._lock = threading.Lock()
        self._senders: dict[str, tuple[threading.Lock, ServiceBusSender]] = {}
        self._receivers: dict[str, tuple[threading.Lock, ServiceBusReceiver]] = {}
        self._min_wait = min_wait_seconds
        self._timeout = operation_timeout_seconds

    @classmethod
    def from_connection_string(cls, connection_string: str, **client_kwargs: Any) -> ServiceBusBus:
        own = {
            k: client_kwargs.pop(k)
            for k in ("min_wait_seconds", "operation_timeout_seconds")
            if k in client_kwargs
        }
        return cls(lambda: ServiceBusClient.from_connection_string(connection_string, **client_kwargs), **own)

    @classmethod
    def from_namespace(cls, namespace: str, **client_kwargs: Any) -> ServiceBusBus:
        def build() -> ServiceBusClient:
            fqns = namespace if "." in namespace else f"{namespace}.servicebus.windows.net"
            return ServiceBusClient(fqns, DefaultAzureCredential(), **client_kwargs)

        return cls(build)

    # -------------------------------------------------------------------------------- handlers

    def _get_client(self) -> ServiceBusClient:
        with self._lock:
            if self._client is None:
                self._client = self._client_factory()
            return self._client

    @contextmanager
    def _sender(self, entity: str) -> Iterator[ServiceBusSender]:
        with self._lock:
            entry = self._senders.get(entity)
        if entry is None:
            # One sender address serves a queue or a topic alike: both are just the entity path.
            sender = self._get_client().get_queue_sender(entity)
            with self._lock:
                entry = self._senders.setdefault(entity, (threading.Lock(), sender))
            if entry[1] is not sender:  # another thread cached one first
                _close_quietly(sender)
        lock, sender = entry
        with lock:
            try:
                yield sender
            except ServiceBusError as exc:
                self._evict(self._senders, entity, exc)
                raise

    @contextmanager
    def _receiver(self, address: str) -> Iterator[ServiceBusReceiver]:
        with self._lock:
            entry = self._receivers.get(address)
        if entry is None:
            receiver = self._new_receiver(address)
            with self._lock:
                entry = self._receivers.setdefault(address, (threading.Lock(), receiver))
            if entry[1] is not receiver:  # another thread cached one first
                _close_quietly(receiver)
        lock, receiver = entry
        with lock:
            try:
                yield receiver
            except ServiceBusError as exc:
                self._evict(self._receivers, address, exc)
                raise

    def _new_receiver(self, address: str) -> ServiceBusReceiver:
        entity, dead_letter = _split_dead_letter(address)
        client = self._get_client()
        kwargs: dict[str, Any] = {"receive_mode": ServiceBusReceiveMode.PEEK_LOCK, "prefetch_count": 0}
        if dead_letter:
            kwargs["sub_queue"] = ServiceBusSubQueue.DEAD_LETTER
        if _SUBSCRIPTIONS in entity.lower():
            topic, _, subscription = _split_subscription(entity)
            receiver = client.get_subscription_receiver(topic, subscription, **kwargs)
        else:
            receiver = client.get_queue_receiver(entity, **kwargs)
        # Open now (connection, CBS token, link attach): a lazily opened receiver spends the
        # first receive's short wait on opening and fails with "timed out waiting for the link".
        receiver.__enter__()
        return receiver

    def _evict(self, cache: dict[str, Any], key: str, exc: ServiceBusError) -> None:
        """A handler that hit a connection-level error is rebuilt on next use."""
        if not getattr(exc, "_shutdown_handler", False):
            return
        with self._lock:
            entry = cache.pop(key, None)
        if entry is not None:
            _close_quietly(entry[1])

    # ---------------------------------------------------------------------------------- Bus

    def publish(self, entity: str, messages: Sequence[OutgoingMessage]) -> None:
        if entity.lower().endswith(DEAD_LETTER_SUFFIX.lower()) or _SUBSCRIPTIONS in entity.lower():
            raise ValueError(f"cannot publish to {entity!r}: publish to a queue or a topic")
        with _mapped(entity):
            self._send(entity, [(_to_sdk(m), m.scheduled_enqueue_time) for m in messages])

    def _send(self, entity: str, items: Sequence[tuple[ServiceBusMessage, datetime | None]]) -> None:
        now_items = [m for m, when in items if when is None]
        later = [(m, when) for m, when in items if when is not None]
        with self._sender(entity) as sender:
            if now_items:
                batch = sender.create_message_batch()
                for m in now_items:
                    try:
                        batch.add_message(m)
                    except MessageSizeExceededError:
                        if len(batch) == 0:
                            raise
                        sender.send_messages(batch, timeout=self._timeout)
                        batch = sender.create_message_batch()
                        batch.add_message(m)
                if len(batch):
                    sender.send_messages(batch, timeout=self._timeout)
            for m, when in later:
                sender.schedule_messages(m, when, timeout=self._timeout)

    def receive(
        self, entity: str, *, max_messages: int = 1, max_wait_seconds: float = 0.0
    ) -> list[ReceivedMessage]:
        with _mapped(entity), self._receiver(entity) as receiver:
            got = receiver.receive_messages(
                max_message_count=max_messages, max_wait_time=max(max_wait_seconds, self._min_wait)
            )
            return [_from_sdk(entity, m, receiver) for m in got]

    def _settle(self, message: ReceivedMessage, action: Callable[[ServiceBusReceiver, Any], Any]) -> Any:
        receiver, sdk_message = _raw(message)
        with self._lock:
            entry = self._receivers.get(message.entity)
        if entry is None or entry[1] is not receiver:
            raise LockLostError("the receiver that locked this message is gone", details=_ids(message))
        with _mapped(message.entity, message), entry[0]:
            return action(receiver, sdk_message)

    def complete(self, message: ReceivedMessage) -> None:
        self._settle(message, lambda r, m: r.complete_message(m))

    def abandon(self, message: ReceivedMessage) -> None:
        self._settle(message, lambda r, m: r.abandon_message(m))

    def dead_letter(self, message: ReceivedMessage, reason: str, description: str = "") -> None:
        if message.entity.lower().endswith(DEAD_LETTER_SUFFIX.lower()):
            raise ValueError("a dead-lettered message cannot be dead-lettered again")
        self._settle(
            message,
            lambda r, m: r.dead_letter_message(m, reason=reason, error_description=description),
        )

    def renew_lock(self, message: ReceivedMessage) -> datetime:
        until: datetime = self._settle(message, lambda r, m: r.renew_message_lock(m, timeout=self._timeout))
        return until if until.tzinfo else until.replace(tzinfo=UTC)

    def peek_dead_letters(self, entity: str, *, max_messages: int = 10) -> list[ReceivedMessage]:
        address = entity + DEAD_LETTER_SUFFIX
        with _mapped(address), self._receiver(address) as receiver:
            # sequence_number=1: a cached receiver otherwise continues after its last peek.
            got = receiver.peek_messages(
                max_message_count=max_messages, sequence_number=1, timeout=self._timeout
            )
            return [_from_sdk(address, m, None) for m in got]

    def redrive_dead_letters(self, entity: str, *, max_messages: int = 100) -> int:
        address = entity + DEAD_LETTER_SUFFIX
        target, route = entity, None
        if _SUBSCRIPTIONS in entity.lower():
            target, _, route = _split_subscription(entity)
        moved = 0
        with _mapped(address), self._receiver(address) as receiver:
            while moved < max_messages:
                got = receiver.receive_messages(
                    max_message_count=min(50, max_messages - moved), max_wait_time=self._min_wait
                )
                if not got:
                    break
                for dead in got:
                    self._send(target, [(_redriven_copy(dead, route), None)])
                    receiver.complete_message(dead)
                    moved += 1
        return moved

    def close(self) -> None:
        with self._lock:
            handlers = [e[1] for e in (*self._senders.values(), *self._receivers.values())]
            self._senders.clear()
            self._receivers.clear()
            client, self._client = self._client, None
        # Each handler has its own connection and the SDK's close waits on the broker (drain,
        # detach): close them side by side so shutdown costs one close, not one per entity.
        if handlers:
            with ThreadPoolExecutor(max_workers=min(16, len(handlers))) as pool:
                list(pool.map(_close_quietly, handlers))
        if client is not None:
            _close_quietly(client)


# ------------------------------------------------------------------------------------ build

_process_bus: ServiceBusBus | None = None
_process_lock = threading.Lock()


def build_bus(settings: WeftSettings) -> ServiceBusBus:
    """The process's Service Bus adapter (its client is created on first use, not here)."""
    global _process_bus  # noqa: PLW0603 - one client per process is the point
    with _process_lock:
        if _process_bus is None:
            if settings.servicebus_connection is not None:
                _process_bus = ServiceBusBus.from_connection_string(
                    settings.servicebus_connection.get_secret_value()
                )
            elif settings.servicebus_namespace:
                _process_bus = ServiceBusBus.from_namespace(settings.servicebus_namespace)
            else:
                raise ServiceBusConfigError(
                    "WEFT_BUS=servicebus needs WEFT_SERVICEBUS_CONNECTION or WEFT_SERVICEBUS_NAMESPACE"
                )
        return _process_bus


# ---------------------------------------------------------------------------------- mapping


def _split_dead_letter(address: str) -> tuple[str, bool]:
    if address.lower().endswith(DEAD_LETTER_SUFFIX.lower()):
        return address[: -len(DEAD_LETTER_SUFFIX)], True
    return address, False


def _split_subscription(entity: str) -> tuple[str, str, str]:
    i = entity.lower().index(_SUBSCRIPTIONS)
    return entity[:i], _SUBSCRIPTIONS, entity[i + len(_SUBSCRIPTIONS) :]


def _to_sdk(m: OutgoingMessage) -> ServiceBusMessage:
    return ServiceBusMessage(
        bytes(m.body),
        message_id=m.message_id,
        subject=m.subject,
        content_type=m.content_type,
        correlation_id=m.correlation_id,
        application_properties=dict(m.application_properties) or None,  # type: ignore[arg-type]
    )


def _text(value: Any) -> Any:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _properties(raw: Mapping[Any, Any] | None) -> dict[str, Any]:
    return {str(_text(k)): _text(v) for k, v in (raw or {}).items()}


def _body(m: ServiceBusReceivedMessage) -> bytes:
    body = m.body
    if isinstance(body, bytes | bytearray):
        return bytes(body)
    return b"".join(bytes(part) for part in body)


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _from_sdk(
    entity: str, m: ServiceBusReceivedMessage, receiver: ServiceBusReceiver | None
) -> ReceivedMessage:
    props = _properties(m.application_properties)
    logical_id = props.get(MESSAGE_ID_PROPERTY) or m.message_id or ""
    app: dict[str, PropertyValue] = {k: v for k, v in props.items() if k not in _INTERNAL_PROPERTIES}
    locked = receiver is not None
    return ReceivedMessage(
        entity=entity,
        message_id=str(logical_id),
        body=_body(m),
        lock_token=str(m.lock_token) if locked and m.lock_token else "",
        # The AMQP header counts earlier deliveries; the port counts this one too.
        delivery_count=(m.delivery_count or 0) + (1 if locked else 0),
        locked_until=_aware(m.locked_until_utc) if locked else None,
        enqueued_time=_aware(m.enqueued_time_utc),
        sequence_number=m.sequence_number,
        subject=m.subject,
        content_type=m.content_type,
        correlation_id=str(m.correlation_id) if m.correlation_id is not None else None,
        application_properties=app,
        dead_letter_reason=m.dead_letter_reason,
        dead_letter_description=m.dead_letter_error_description,
        raw=(receiver, m) if locked else None,
    )


def _redriven_copy(dead: ServiceBusReceivedMessage, route: str | None) -> ServiceBusMessage:
    props = _properties(dead.application_properties)
    logical_id = str(props.get(MESSAGE_ID_PROPERTY) or dead.message_id or "")
    app = {k: v for k, v in props.items() if k not in _INTERNAL_PROPERTIES}
    app[MESSAGE_ID_PROPERTY] = logical_id
    if route is not None:
        app[REDRIVE_PROPERTY] = route
    return ServiceBusMessage(
        _body(dead),
        message_id=f"{logical_id}.redrive.{dead.sequence_number}",
        subject=dead.subject,
        content_type=dead.content_type,
        correlation_id=dead.correlation_id,
        application_properties=app,  # type: ignore[arg-type]
    )


def _raw(message: ReceivedMessage) -> tuple[ServiceBusReceiver, ServiceBusReceivedMessage]:
    raw = message.raw
    if not (isinstance(raw, tuple) and len(raw) == 2 and isinstance(raw[1], ServiceBusReceivedMessage)):
        raise ValueError("not a message received under peek-lock from this Service Bus adapter")
    return raw[0], raw[1]


def _ids(message: ReceivedMessage | None) -> dict[str, Any]:
    return {"messageId": message.message_id} if message is not None else {}


@contextmanager
def _mapped(entity: str, message: ReceivedMessage | None = None) -> Iterator[None]:
    """SDK errors onto the Weft taxonomy: lock lost, not found, too large, non-retryable
    configuration/auth problems, and everything the SDK marks retryable as transient."""
    details = {"entity": entity, **_ids(message)}
    try:
        yield
    except (MessageLockLostError, MessageAlreadySettled, MessageNotFoundError) as exc:
        raise LockLostError(f"message lock lost: {exc}", details=details) from exc
    except MessagingEntityNotFoundError as exc:
        raise NotFoundError(f"Service Bus entity not found: {entity}", details=details) from exc
    except MessageSizeExceededError as exc:
        raise PayloadTooLargeError(f"message too large for {entity}", details=details) from exc
    except (ServiceBusAuthenticationError, ServiceBusAuthorizationError, ClientAuthenticationError) as exc:
        raise WeftError(
            f"Service Bus refused the credentials for {entity}: {type(exc).__name__}",
            type="weft.ServiceBusAuth",
            non_retryable=True,
            details=details,
        ) from exc
    except MessagingEntityDisabledError as exc:
        raise WeftError(
            f"Service Bus entity disabled: {entity}",
            type="weft.ServiceBusEntityDisabled",
            non_retryable=True,
            details=details,
        ) from exc
    except ServiceBusError as exc:
        if getattr(exc, "_retryable", False):
            raise TransientError(f"Service Bus: {type(exc).__name__}: {exc}", details=details) from exc
        raise WeftError(
            f"Service Bus: {type(exc).__name__}: {exc}",
            type="weft.ServiceBus",
            non_retryable=True,
            details=details,
        ) from exc
    except TimeoutError as exc:
        raise TransientError(f"Service Bus timed out on {entity}", details=details) from exc


def _close_quietly(handler: Any) -> None:
    # Closing a broken handler must not mask the error that broke it.
    with suppress(Exception):
        handler.close()
