"""What the Function App's bindings need from its app settings and from the identity's roles.

Read from ``function_app.app.get_functions()``, so a trigger added later is checked without
anyone editing this file: its ``connection`` must resolve to app settings and roles, and every
``%SETTING%`` it names must be an app setting.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_PERCENT = re.compile(r"%([A-Za-z0-9_.\-:]+)%")

# The host's own storage: leases, timers, blob receipts and Durable's Azure Storage backend.
HOST_STORAGE = "AzureWebJobsStorage"
HOST_STORAGE_ROLES = frozenset(
    {"Storage Blob Data Owner", "Storage Queue Data Contributor", "Storage Table Data Contributor"}
)

# binding type (lower case) -> (default connection, roles any of which suffices, per role need)
# Each inner frozenset is "one of these roles"; all inner sets must be satisfied.
ROLE_NEEDS: Mapping[str, tuple[str, tuple[frozenset[str], ...]]] = {
    "blobtrigger": (
        HOST_STORAGE,
        (frozenset({"Storage Blob Data Owner"}), frozenset({"Storage Queue Data Contributor"})),
    ),
    "blob": (HOST_STORAGE, (frozenset({"Storage Blob Data Owner", "Storage Blob Data Contributor"}),)),
    "queuetrigger": (HOST_STORAGE, (frozenset({"Storage Queue Data Contributor"}),)),
    "queue": (HOST_STORAGE, (frozenset({"Storage Queue Data Contributor"}),)),
    "servicebustrigger": ("AzureWebJobsServiceBus", (frozenset({"Azure Service Bus Data Receiver"}),)),
    "servicebus": ("AzureWebJobsServiceBus", (frozenset({"Azure Service Bus Data Sender"}),)),
    "cosmosdbtrigger": ("CosmosDB", (frozenset({"cosmos:data-contributor"}),)),
    "cosmosdb": ("CosmosDB", (frozenset({"cosmos:data-contributor"}),)),
}

# Bindings that run on the host storage connection whatever they declare.
HOST_STORAGE_TYPES = frozenset(
    {"timertrigger", "orchestrationtrigger", "activitytrigger", "entitytrigger", "durableclient"}
)

# The app setting suffixes that make a connection identity-based, by service.
IDENTITY_ENDPOINT_SUFFIXES = (
    "__accountName",
    "__blobServiceUri",
    "__queueServiceUri",
    "__tableServiceUri",
    "__fullyQualifiedNamespace",
    "__accountEndpoint",
    "__serviceUri",
)


@dataclass(frozen=True)
class ConnectionUse:
    function: str
    binding_type: str
    connection: str


def function_bindings() -> dict[str, list[dict[str, Any]]]:
    """Bindings per function, as the host would index them (function.json shape)."""
    import function_app

    # get_functions() appends to the list it cached on a previous call; start clean.
    function_app.app.functions_bindings = {}
    out: dict[str, list[dict[str, Any]]] = {}
    for fn in function_app.app.get_functions():
        doc = json.loads(fn.get_function_json())
        out[fn.get_function_name()] = list(doc["bindings"])
    return out


def connection_uses(bindings: Mapping[str, Iterable[Mapping[str, Any]]]) -> list[ConnectionUse]:
    uses: list[ConnectionUse] = []
    for function, items in bindings.items():
        for binding in items:
            btype = str(binding.get("type", "")).lower()
            declared = next(
                (
                    str(v)
                    for k, v in binding.items()
                    if k.lower() in {"connection", "connectionstringsetting", "connectionname"} and v
                ),
                None,
            )
            if btype in ROLE_NEEDS:
                uses.append(ConnectionUse(function, btype, declared or ROLE_NEEDS[btype][0]))
            elif btype in HOST_STORAGE_TYPES:
                uses.append(ConnectionUse(function, btype, HOST_STORAGE))
            elif declared:
                uses.append(ConnectionUse(function, btype, declared))
    return uses


def percent_settings(bindings: Mapping[str, Iterable[Mapping[str, Any]]]) -> set[str]:
    """Every ``%NAME%`` in any string of any binding (paths, queue names, schedules, hub names)."""
    found: set[str] = set()

    def walk(value: object) -> None:
        if isinstance(value, str):
            found.update(_PERCENT.findall(value))
        elif isinstance(value, Mapping):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for items in bindings.values():
        for binding in items:
            walk(binding)
    return found


def connection_problems(connection: str, settings: Mapping[str, str]) -> list[str]:
    """Why ``connection`` is not a complete identity-based connection in ``settings`` (empty = fine)."""
    if connection in settings:
        return [f"{connection} is set as a connection string; use {connection}__* identity settings"]
    prefixed = {k for k in settings if k.startswith(f"{connection}__")}
    if not prefixed:
        return [f"connection {connection!r} has no {connection}__* app settings"]
    problems: list[str] = []
    if not any(f"{connection}{suffix}" in settings for suffix in IDENTITY_ENDPOINT_SUFFIXES):
        problems.append(f"{connection} names no service endpoint ({', '.join(IDENTITY_ENDPOINT_SUFFIXES)})")
    if settings.get(f"{connection}__credential", "").lower() != "managedidentity":
        problems.append(f"{connection}__credential must be managedidentity")
    if f"{connection}__clientId" not in settings:
        problems.append(f"{connection}__clientId must name the user-assigned identity")
    return problems
