"""The Cosmos DB containers in Terraform are the ones docs/data-model.md specifies."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.infra.terraform_model import load, unquote

ROOT = Path(__file__).resolve().parents[2]
DATA_MODEL = ROOT / "docs" / "data-model.md"

_HEADING = re.compile(r"^###\s+`([a-z]+)`\s+—\s+partition key\s+`(/[A-Za-z]+)`", re.MULTILINE)


def documented_containers() -> dict[str, str]:
    return dict(_HEADING.findall(DATA_MODEL.read_text(encoding="utf-8")))


def documented_executions_policy() -> dict[str, Any]:
    text = DATA_MODEL.read_text(encoding="utf-8")
    section = text[text.index("### Indexing policy of `executions`") :]
    block = section[
        section.index("```json") + len("```json") : section.index("```", section.index("```json") + 7)
    ]
    policy: dict[str, Any] = json.loads(block)
    return policy


def _containers() -> dict[str, Any]:
    containers: dict[str, Any] = load().locals["cosmos_containers"]
    return containers


def test_same_containers_and_partition_keys_as_the_data_model() -> None:
    documented = documented_containers()
    assert set(documented) == {"executions", "definitions", "tenants", "leases", "idempotency"}
    deployed = {name: unquote(spec["partition_key"]) for name, spec in _containers().items()}
    assert deployed == documented


def test_executions_indexing_policy_matches_the_data_model() -> None:
    policy = documented_executions_policy()
    spec = _containers()["executions"]
    assert [unquote(p) for p in spec["included_paths"]] == [p["path"] for p in policy["includedPaths"]]
    assert [unquote(p) for p in spec["excluded_paths"]] == [p["path"] for p in policy["excludedPaths"]]
    deployed = [
        [(unquote(i["path"]), unquote(i["order"]).lower()) for i in group]
        for group in spec["composite_indexes"]
    ]
    documented = [[(i["path"], i["order"].lower()) for i in group] for group in policy["compositeIndexes"]]
    assert deployed == documented


@pytest.mark.parametrize("container", ["executions", "idempotency"])
def test_ttl_is_on_where_items_carry_their_own_ttl(container: str) -> None:
    # Dispatched outbox records and idempotency keys set `ttl` per item; that needs TTL enabled
    # on the container (-1 = on, no default expiry). Nothing else may expire by default.
    assert _containers()[container]["default_ttl"] == -1


def test_no_container_expires_items_by_default() -> None:
    for name, spec in _containers().items():
        assert spec["default_ttl"] in (None, -1), name


def test_same_containers_as_the_adapter_creates_locally() -> None:
    """The adapter's executable layout (used by ensure_containers on dev set-ups) and Terraform agree."""
    from shared.adapters.cosmos_support import CONTAINERS

    deployed = _containers()
    assert {spec.id for spec in CONTAINERS} == set(deployed)
    for spec in CONTAINERS:
        tf = deployed[spec.id]
        assert unquote(tf["partition_key"]) == spec.partition_key, spec.id
        assert tf["default_ttl"] == spec.default_ttl, spec.id
        policy = spec.indexing_policy or {"includedPaths": [{"path": "/*"}], "excludedPaths": []}
        assert [unquote(p) for p in tf["included_paths"]] == [p["path"] for p in policy["includedPaths"]]
        assert [unquote(p) for p in tf["excluded_paths"]] == [p["path"] for p in policy["excludedPaths"]]
        composite = [
            [(unquote(i["path"]), unquote(i["order"]).lower()) for i in group]
            for group in tf["composite_indexes"]
        ]
        expected = [[(i["path"], i["order"].lower()) for i in g] for g in policy.get("compositeIndexes", [])]
        assert composite == expected, spec.id
