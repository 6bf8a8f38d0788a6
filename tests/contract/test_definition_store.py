"""DefinitionStore contract: drafts with ETags, immutable versions, paging."""

from __future__ import annotations

import pytest

from shared.errors import ConcurrencyError, NotFoundError
from shared.ports import DefinitionStore
from shared.records import WorkflowDraft
from tests.contract.builders import at


def _draft(workflow: str = "wf", n: int = 1) -> WorkflowDraft:
    return WorkflowDraft(tenant_id="acme", workflow=workflow, definition={"n": n}, updated_at=at(n))


def test_draft_create_update_and_conflicts(definition_store: DefinitionStore) -> None:
    saved = definition_store.save_draft(_draft())
    assert saved.etag
    assert definition_store.get_draft("acme", "wf") == saved
    with pytest.raises(ConcurrencyError):
        definition_store.save_draft(_draft())  # a second "create" lost the race
    updated = definition_store.save_draft(saved.model_copy(update={"definition": {"n": 2}}))
    assert updated.etag != saved.etag
    with pytest.raises(ConcurrencyError):
        definition_store.save_draft(saved.model_copy(update={"definition": {"n": 3}}))
    stored = definition_store.get_draft("acme", "wf")
    assert stored is not None
    assert stored.definition == {"n": 2}
    assert definition_store.get_draft("other", "wf") is None
    with pytest.raises(NotFoundError):
        definition_store.save_draft(_draft("missing").model_copy(update={"etag": "x"}))


def test_publish_numbers_versions_and_dedupes_identical_digest(definition_store: DefinitionStore) -> None:
    v1, created1 = definition_store.publish("acme", "wf", "d1", {"v": 1}, at(1))
    again, created_again = definition_store.publish("acme", "wf", "d1", {"v": 1}, at(2))
    v2, created2 = definition_store.publish("acme", "wf", "d2", {"v": 2}, at(3))
    back_to_1, created3 = definition_store.publish("acme", "wf", "d1", {"v": 1}, at(4))
    assert (v1.version, created1) == (1, True)
    assert (again, created_again) == (v1, False)
    assert (v2.version, created2) == (2, True)
    # Only the latest digest is deduplicated: going back to old content is a new version.
    assert (back_to_1.version, created3) == (3, True)
    assert definition_store.get_version("acme", "wf", 2) == v2
    assert definition_store.get_version("acme", "wf", 9) is None
    assert definition_store.latest_version("acme", "wf") == back_to_1
    assert definition_store.latest_version("acme", "nope") is None
    assert definition_store.latest_version("other", "wf") is None
    assert v1.definition == {"v": 1}
    assert v1.published_at == at(1)


def test_list_versions_newest_first_paged(definition_store: DefinitionStore) -> None:
    for i in range(5):
        definition_store.publish("acme", "wf", f"d{i}", {"v": i}, at(i))
    p1 = definition_store.list_versions("acme", "wf", limit=2)
    p2 = definition_store.list_versions("acme", "wf", limit=2, continuation=p1.continuation)
    p3 = definition_store.list_versions("acme", "wf", limit=2, continuation=p2.continuation)
    assert [v.version for v in p1.items + p2.items + p3.items] == [5, 4, 3, 2, 1]
    assert p3.continuation is None


def test_list_workflows_paged_by_name(definition_store: DefinitionStore) -> None:
    names = ["alpha", "bravo", "charlie", "delta", "echo"]
    for name in names[:3]:
        definition_store.publish("acme", name, "d", {}, at(1))
    for name in names[3:]:
        definition_store.save_draft(_draft(name))
    definition_store.save_draft(_draft("alpha"))
    definition_store.publish("other", "zulu", "d", {}, at(1))
    seen = []
    token = None
    while True:
        page = definition_store.list_workflows("acme", limit=2, continuation=token)
        seen += page.items
        token = page.continuation
        if token is None:
            break
    assert [w.workflow for w in seen] == names
    by_name = {w.workflow: w for w in seen}
    assert by_name["alpha"].latest_version == 1
    assert by_name["alpha"].has_draft
    assert by_name["bravo"].has_draft is False
    assert by_name["delta"].latest_version is None
    assert by_name["delta"].has_draft
