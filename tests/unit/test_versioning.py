from __future__ import annotations

import pytest

from shared.definition import WorkflowDefinition
from shared.versioning import (
    canonical_json,
    content_digest,
    decide_version,
    definition_digest,
    definition_document,
)

MINIMAL = {"tasks": [{"id": "a", "handler": "noop"}]}


def test_canonical_json_is_sorted_compact_and_unicode() -> None:
    assert canonical_json({"b": 1, "a": [1, {"d": None, "c": "é"}]}) == '{"a":[1,{"c":"é","d":null}],"b":1}'


def test_canonical_json_refuses_nan() -> None:
    with pytest.raises(ValueError, match="JSON"):
        canonical_json({"x": float("nan")})


def test_digest_ignores_key_order_whitespace_and_spelled_out_defaults() -> None:
    spelled_out = {
        "description": "",
        "onTaskFailure": "failExecution",
        "maxParallelism": 10,
        "tasks": [{"handler": "noop", "id": "a", "dependsOn": [], "params": {}}],
    }
    a = WorkflowDefinition.model_validate(MINIMAL)
    b = WorkflowDefinition.model_validate(spelled_out)
    assert definition_digest(a) == definition_digest(b)
    assert definition_digest(a).startswith("sha256:")
    assert len(definition_digest(a)) == len("sha256:") + 64


def test_digest_changes_with_content() -> None:
    a = WorkflowDefinition.model_validate(MINIMAL)
    b = WorkflowDefinition.model_validate({"tasks": [{"id": "a", "handler": "noop", "params": {"x": 1}}]})
    c = WorkflowDefinition.model_validate({**MINIMAL, "description": "nightly"})
    assert len({definition_digest(a), definition_digest(b), definition_digest(c)}) == 3


def test_digest_is_stable_across_a_store_round_trip() -> None:
    defn = WorkflowDefinition.model_validate(
        {
            "tasks": [
                {"id": "a", "handler": "h", "params": {"n": None, "list": [1, 2.5]}, "timeoutSeconds": 30},
                {"id": "b", "handler": "h", "dependsOn": ["a"], "retry": {"maxAttempts": 5}},
            ],
            "schedule": {"cron": "0 0 * * * *"},
        }
    )
    stored = definition_document(defn)
    assert stored["tasks"][0]["params"] == {"n": None, "list": [1, 2.5]}  # a null param is content
    assert definition_digest(WorkflowDefinition.model_validate(stored)) == definition_digest(defn)


def test_content_digest_is_a_known_sha256() -> None:
    # sha256 of the two bytes "{}", so the algorithm itself is pinned, not just self-consistent.
    assert content_digest({}) == "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"


def test_first_version_is_one() -> None:
    assert decide_version([], "sha256:x").version == 1
    assert decide_version([], "sha256:x").created


def test_new_content_gets_the_next_number() -> None:
    decision = decide_version([(1, "d1"), (2, "d2")], "d3")
    assert (decision.version, decision.created) == (3, True)


def test_identical_content_gets_the_same_version() -> None:
    existing = [(1, "d1"), (2, "d2"), (3, "d3")]
    assert (decide_version(existing, "d2").version, decide_version(existing, "d2").created) == (2, False)
    assert decide_version(existing, "d3").version == 3


def test_publishing_twice_is_idempotent_end_to_end() -> None:
    published: list[tuple[int, str]] = []
    for doc in [MINIMAL, {**MINIMAL, "description": "v2"}, MINIMAL, {**MINIMAL, "description": "v2"}]:
        digest = definition_digest(WorkflowDefinition.model_validate(doc))
        decision = decide_version(published, digest)
        if decision.created:
            published.append((decision.version, digest))
    assert [v for v, _ in published] == [1, 2]


def test_versions_number_from_one() -> None:
    with pytest.raises(ValueError, match="from 1"):
        decide_version([(0, "d")], "x")
