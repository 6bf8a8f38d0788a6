"""Cosmos DB plumbing shared by the store adapters: client, containers, retries, document mapping.

The container layout (ids, partition keys, indexing policy, TTL) is described in docs/data-model.md;
:data:`CONTAINERS` is its executable form, used by :func:`ensure_containers` for local/dev set-up (in
Azure, Terraform creates the containers).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.cosmos import ContainerProxy, CosmosClient, DatabaseProxy, PartitionKey, exceptions
from azure.identity import DefaultAzureCredential
from pydantic import BaseModel

from shared.errors import TransientError

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
R = TypeVar("R")

EXECUTIONS = "executions"
DEFINITIONS = "definitions"
TENANTS = "tenants"
LEASES = "leases"
IDEMPOTENCY = "idempotency"

#: Cosmos system properties and our own bookkeeping fields, removed before a record is validated.
_BOOKKEEPING = {"pk", "docType", "ttl"}

_EXECUTIONS_INDEXING: dict[str, Any] = {
    "indexingMode": "consistent",
    "automatic": True,
    "includedPaths": [
        {"path": f"/{p}/?"}
        for p in (
            "docType",
            "tenantId",
            "workflow",
            "status",
            "createdAt",
            "dispatchedAt",
            "claimedUntil",
            "seq",
            "executionId",
            "taskId",
            "deadLetterId",
        )
    ],
    "excludedPaths": [{"path": "/*"}],
    "compositeIndexes": [
        [
            {"path": "/tenantId", "order": "ascending"},
            {"path": "/createdAt", "order": "descending"},
            {"path": "/id", "order": "descending"},
        ],
        [
            {"path": "/tenantId", "order": "ascending"},
            {"path": "/status", "order": "ascending"},
            {"path": "/createdAt", "order": "descending"},
            {"path": "/id", "order": "descending"},
        ],
        [
            {"path": "/tenantId", "order": "ascending"},
            {"path": "/workflow", "order": "ascending"},
            {"path": "/createdAt", "order": "descending"},
            {"path": "/id", "order": "descending"},
        ],
        [
            {"path": "/tenantId", "order": "ascending"},
            {"path": "/createdAt", "order": "descending"},
            {"path": "/deadLetterId", "order": "descending"},
        ],
    ],
}


@dataclass(frozen=True)
class ContainerSpec:
    id: str
    partition_key: str
    #: -1: TTL on, documents expire only with their own ``ttl``; None: TTL off.
    default_ttl: int | None = None
    indexing_policy: dict[str, Any] | None = None


CONTAINERS: tuple[ContainerSpec, ...] = (
    ContainerSpec(EXECUTIONS, "/pk", default_ttl=-1, indexing_policy=_EXECUTIONS_INDEXING),
    ContainerSpec(DEFINITIONS, "/tenantId"),
    ContainerSpec(TENANTS, "/id"),
    ContainerSpec(LEASES, "/name"),
    ContainerSpec(IDEMPOTENCY, "/pk", default_ttl=-1),
)


def ensure_containers(database: DatabaseProxy) -> None:
    """Create missing containers (local/dev and tests; Terraform owns them in Azure)."""
    for spec in CONTAINERS:
        kwargs: dict[str, Any] = {}
        if spec.default_ttl is not None:
            kwargs["default_ttl"] = spec.default_ttl
        if spec.indexing_policy is not None:
            kwargs["indexing_policy"] = spec.indexing_policy
        database.create_container_if_not_exists(
            id=spec.id, partition_key=PartitionKey(path=spec.partition_key), **kwargs
        )


# ------------------------------------------------------------------------------------ client


def make_client(endpoint: str, key: str | None) -> CosmosClient:
    """A client with a key (local server, emulator, dev) or, without one, DefaultAzureCredential
    (managed identity in Azure). A key that is a whole connection string is accepted too.

    The SDK retries throttled requests itself (honouring x-ms-retry-after-ms); it is capped here so
    a hot partition surfaces to :func:`with_retries` (and from there as a TransientError) instead of
    blocking a Function for the SDK's default 30 s.
    """
    options: dict[str, Any] = {
        "retry_throttle_total": 3,
        "retry_throttle_backoff_max": 5,
        "connection_timeout": 10,
    }
    if key and key.startswith("AccountEndpoint="):
        return CosmosClient.from_connection_string(key, **options)
    if key:
        return CosmosClient(endpoint, credential=key, **options)
    return CosmosClient(endpoint, credential=DefaultAzureCredential(), **options)


_client_lock = threading.Lock()
_clients: dict[tuple[str, str | None], CosmosClient] = {}


def get_client(endpoint: str, key: str | None) -> CosmosClient:
    """Lazy singleton per (endpoint, key): one connection pool per process."""
    with _client_lock:
        client = _clients.get((endpoint, key))
        if client is None:
            client = make_client(endpoint, key)
            _clients[(endpoint, key)] = client
        return client


# ----------------------------------------------------------------------------------- retries


@dataclass
class RetryBudget:
    """Bounds our own retries of throttled (429) and transiently failed requests, on top of the
    SDK's: at most ``attempts`` tries and ``max_total_seconds`` of waiting."""

    attempts: int = 5
    max_total_seconds: float = 10.0
    default_wait_seconds: float = 0.1
    sleep: Callable[[float], None] = field(default=time.sleep)


def retry_after_seconds(exc: exceptions.CosmosHttpResponseError, default: float) -> float:
    headers: Mapping[str, str] = exc.headers or {}
    if not headers and exc.response is not None:
        headers = getattr(exc.response, "headers", {}) or {}
    raw = None
    for name, value in headers.items():
        if name.lower() == "x-ms-retry-after-ms":
            raw = value
            break
    try:
        return float(raw) / 1000.0 if raw is not None else default
    except ValueError:
        return default


def with_retries(fn: Callable[[], R], budget: RetryBudget | None = None) -> R:
    """Run ``fn``; on 429 wait ``x-ms-retry-after-ms`` and retry within the budget, then raise
    :class:`TransientError` (so the caller's retry policy takes over). Connection errors and 503
    are retried the same way with a short backoff."""
    budget = budget or RetryBudget()
    waited = 0.0
    for attempt in range(1, budget.attempts + 1):
        try:
            return fn()
        except exceptions.CosmosHttpResponseError as exc:
            if exc.status_code not in (429, 503):
                raise
            wait = retry_after_seconds(exc, budget.default_wait_seconds * attempt)
            reason = f"HTTP {exc.status_code}"
            cause: Exception = exc
        except (ServiceRequestError, ServiceResponseError) as exc:
            wait = budget.default_wait_seconds * attempt
            reason = type(exc).__name__
            cause = exc
        if attempt == budget.attempts or waited + wait > budget.max_total_seconds:
            raise TransientError(
                f"Cosmos DB is busy ({reason}) after {attempt} attempts",
                details={"retryAfterSeconds": wait},
            ) from cause
        log.debug("cosmos %s, retrying in %.3fs (attempt %d)", reason, wait, attempt)
        budget.sleep(wait)
        waited += wait
    raise AssertionError("unreachable")  # pragma: no cover


# -------------------------------------------------------------------------------- documents


def fixed_ts(value: datetime) -> str:
    """Fixed-width UTC ISO text, so string order (what Cosmos compares) equals time order."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def to_doc(
    record: BaseModel,
    *,
    doc_id: str,
    pk: str | None,
    doc_type: str,
    id_field: str | None = None,
    sortable: tuple[str, ...] = ("createdAt",),
) -> dict[str, Any]:
    """The record's camelCase JSON (nulls kept, so ``IS_NULL`` filters are index-served) with the
    document id, partition key and type; the record's own ``id`` moves to ``id_field`` when the
    document id carries a type prefix; ``etag`` is Cosmos's ``_etag`` and is not stored."""
    doc: dict[str, Any] = record.model_dump(mode="json", by_alias=True)
    doc.pop("etag", None)
    for name in sortable:
        value = getattr(record, _snake(name), None)
        if isinstance(value, datetime):
            doc[name] = fixed_ts(value)
    if id_field is not None:
        doc[id_field] = doc.pop("id")
    doc["id"] = doc_id
    if pk is not None:
        doc["pk"] = pk
    doc["docType"] = doc_type
    return doc


def from_doc(cls: type[M], doc: Mapping[str, Any], *, id_field: str | None = None, etag: bool = True) -> M:
    data = {k: v for k, v in doc.items() if not k.startswith("_") and k not in _BOOKKEEPING}
    if id_field is not None:
        data["id"] = data.pop(id_field)
    elif "id" not in cls.model_fields:
        data.pop("id", None)
    if etag:
        data["etag"] = doc.get("_etag")
    return cls.model_validate(data)


def _snake(camel: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)


def encode_token(values: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


def decode_token(token: str) -> list[Any]:
    try:
        padded = token + "=" * (-len(token) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError("invalid continuation token") from exc
    if not isinstance(values, list):
        raise ValueError("invalid continuation token")
    return values


def params(**values: Any) -> list[dict[str, Any]]:
    return [{"name": f"@{k}", "value": v} for k, v in values.items()]


def container(client: CosmosClient, database: str, name: str) -> ContainerProxy:
    return client.get_database_client(database).get_container_client(name)
