"""Lazy singletons for the configured backends (``WEFT_STORE``, ``WEFT_BUS``, ``WEFT_PAYLOAD_STORE``).

Nothing is built at import time; the Cosmos and Service Bus modules are imported only when selected,
so a missing optional SDK or a half-configured backend never hides the whole function app.
"""

from __future__ import annotations

import importlib
import logging
import socket
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from shared.adapters.embedded_bus import EmbeddedBus
from shared.adapters.payload_store import BlobPayloadStore, FileSystemPayloadStore
from shared.adapters.sqlite_store import SqliteStore
from shared.ports import (
    Bus,
    DefinitionStore,
    ExecutionStore,
    IdempotencyStore,
    LeaseStore,
    PayloadStore,
    Stores,
    TenantStore,
)
from shared.settings import WeftSettings, get_settings

SQLITE_FILE = "weft.sqlite3"

log = logging.getLogger(__name__)


class _Singletons:
    lock = threading.Lock()
    stores: Stores | None = None
    bus: Bus | None = None
    payloads: PayloadStore | None = None


def sqlite_path(settings: WeftSettings) -> Path:
    return Path(settings.data_dir) / SQLITE_FILE


def build_stores(settings: WeftSettings) -> Stores:
    if settings.store == "cosmos":
        builder: Any = importlib.import_module("shared.adapters.cosmos").build_stores
        stores: Stores = builder(settings)
        return stores
    s = SqliteStore(sqlite_path(settings))
    return Stores(definitions=s, executions=s, idempotency=s, leases=s, tenants=s)


def build_bus(settings: WeftSettings) -> Bus:
    if settings.bus == "servicebus":
        builder: Any = importlib.import_module("shared.adapters.servicebus_bus").build_bus
        bus: Bus = builder(settings)
        return bus
    return EmbeddedBus(sqlite_path(settings))


def build_payload_store(settings: WeftSettings) -> PayloadStore:
    kind = settings.payload_store
    has_blob = settings.blob_connection_string is not None or settings.blob_account_url is not None
    if kind == "auto" and settings.blob_connection_string is not None:
        conn = settings.blob_connection_string.get_secret_value()
        if not local_blob_endpoint_reachable(conn):
            log.warning("the local blob endpoint is not running; claim-check payloads go to the filesystem")
            has_blob = False
    if kind == "blob" or (kind == "auto" and has_blob):
        if settings.blob_connection_string is not None:
            return BlobPayloadStore.from_connection_string(
                settings.blob_connection_string.get_secret_value(), settings.payload_container
            )
        if settings.blob_account_url is None:
            raise ValueError(
                "WEFT_PAYLOAD_STORE=blob needs WEFT_BLOB_CONNECTION_STRING or WEFT_BLOB_ACCOUNT_URL"
            )
        return BlobPayloadStore.from_account_url(settings.blob_account_url, settings.payload_container)
    return FileSystemPayloadStore(Path(settings.data_dir) / "payloads")


def local_blob_endpoint_reachable(connection_string: str, timeout: float = 0.3) -> bool:
    """False only for a loopback blob endpoint (Azurite) with nothing listening; remote: True."""
    parts = dict(p.split("=", 1) for p in connection_string.split(";") if "=" in p)
    if parts.get("UseDevelopmentStorage", "").lower() == "true":
        endpoint = "http://127.0.0.1:10000"
    else:
        endpoint = parts.get("BlobEndpoint", "")
    url = urlsplit(endpoint)
    if url.hostname not in {"127.0.0.1", "localhost", "::1"}:
        return True
    try:
        with socket.create_connection((url.hostname, url.port or 80), timeout=timeout):
            return True
    except OSError:
        return False


def get_stores() -> Stores:
    with _Singletons.lock:
        if _Singletons.stores is None:
            _Singletons.stores = build_stores(get_settings())
        return _Singletons.stores


def get_bus() -> Bus:
    with _Singletons.lock:
        if _Singletons.bus is None:
            _Singletons.bus = build_bus(get_settings())
        return _Singletons.bus


def get_payload_store() -> PayloadStore:
    with _Singletons.lock:
        if _Singletons.payloads is None:
            _Singletons.payloads = build_payload_store(get_settings())
        return _Singletons.payloads


def get_definition_store() -> DefinitionStore:
    return get_stores().definitions


def get_execution_store() -> ExecutionStore:
    return get_stores().executions


def get_idempotency_store() -> IdempotencyStore:
    return get_stores().idempotency


def get_lease_store() -> LeaseStore:
    return get_stores().leases


def get_tenant_store() -> TenantStore:
    return get_stores().tenants


def reset_for_tests() -> None:
    """Forget the singletons (closing what can be closed), e.g. after changing settings."""
    with _Singletons.lock:
        st = _Singletons.stores
        seen: set[int] = set()
        for obj in (
            *((st.definitions, st.executions, st.idempotency, st.leases, st.tenants) if st else ()),
            _Singletons.bus,
            _Singletons.payloads,
        ):
            close = getattr(obj, "close", None)
            if obj is not None and id(obj) not in seen and callable(close):
                seen.add(id(obj))
                close()
        _Singletons.stores = None
        _Singletons.bus = None
        _Singletons.payloads = None
