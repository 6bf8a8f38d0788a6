"""The HTTP-free shapes of the API: a request, a response, the dependencies, the Durable seam.

The Functions layer (``triggers/api.py``) turns ``func.HttpRequest`` into :class:`ApiRequest` and
:class:`ApiResponse` back into ``func.HttpResponse``; everything between is plain Python that tests
call directly with in-memory stores and a fake :class:`DurableControl`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from shared.handlers.registry import names as handler_names
from shared.ports import PayloadStore, Stores
from shared.settings import WeftSettings


class AuthKind(StrEnum):
    NONE = "none"
    ADMIN = "admin"
    TENANT = "tenant"


@dataclass(frozen=True)
class Principal:
    """Who called: the admin, or a tenant's API key (``key_id`` is public, never the key)."""

    admin: bool
    tenant_id: str | None = None
    key_id: str | None = None

    @property
    def name(self) -> str:
        return "admin" if self.admin else f"key:{self.key_id}"


@dataclass(frozen=True)
class ApiRequest:
    method: str
    path: str
    route_params: Mapping[str, str] = field(default_factory=dict)
    query: Mapping[str, str] = field(default_factory=dict)
    #: Lower-case names.
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    principal: Principal | None = None

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def param(self, name: str) -> str:
        return self.route_params[name]


@dataclass(frozen=True)
class ApiResponse:
    status: int
    #: JSON-compatible value, serialised by :meth:`body_bytes`; ``None`` means no body.
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = "application/json"

    def body_bytes(self) -> bytes:
        if self.body is None:
            return b""
        if isinstance(self.body, bytes):
            return self.body
        return json.dumps(self.body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def json(self) -> Any:
        """For tests: the decoded body."""
        return json.loads(self.body_bytes()) if self.body is not None else None


class DurableControl(Protocol):
    """What the API needs from the Durable client; the instance id of an execution is its id.

    Methods are sync and may block (the Functions layer bridges to the async client).
    """

    def start_new(self, orchestrator: str, instance_id: str, input: dict[str, Any]) -> None:
        """As :class:`shared.submission.DurableStarter`: never restarts an existing instance."""
        ...

    def raise_event(self, instance_id: str, name: str, data: Any) -> bool:
        """Deliver an external event; ``False`` when the instance does not exist or has finished."""
        ...

    def running_instances(self, prefix: str) -> list[str]:
        """Ids of instances that have not finished (pending, running, suspended) starting with ``prefix``."""
        ...

    def terminate(self, instance_id: str, reason: str) -> None: ...


def _registry_names() -> Collection[str]:
    return handler_names()


@dataclass(frozen=True)
class ApiDeps:
    stores: Stores
    payloads: PayloadStore
    durable: DurableControl
    clock: Callable[[], datetime]
    #: The admin key (``WEFT_ADMIN_KEY``); ``None`` turns the admin endpoints off (every call 401).
    admin_key: str | None = None
    claim_check_threshold_bytes: int = 64 * 1024
    max_input_bytes: int = 1024 * 1024
    #: Defaults for a tenant created without ``limits``.
    default_max_running_tasks: int = 100
    default_max_active_executions: int = 1000
    default_submits_per_second: float = 50.0
    #: Handler names a definition may use (publish-time check); the registry by default.
    known_handlers: Callable[[], Collection[str]] = _registry_names

    @classmethod
    def from_settings(
        cls,
        stores: Stores,
        payloads: PayloadStore,
        durable: DurableControl,
        clock: Callable[[], datetime],
        settings: WeftSettings,
    ) -> ApiDeps:
        return cls(
            stores=stores,
            payloads=payloads,
            durable=durable,
            clock=clock,
            admin_key=settings.admin_key.get_secret_value() if settings.admin_key else None,
            claim_check_threshold_bytes=settings.claim_check_threshold_bytes,
            max_input_bytes=settings.max_input_bytes,
            default_max_running_tasks=settings.default_max_running_tasks,
            default_max_active_executions=settings.default_max_active_executions,
            default_submits_per_second=settings.default_submits_per_second,
        )
