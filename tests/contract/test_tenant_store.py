"""TenantStore contract: tenants with ETags, hashed API keys."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest

from shared.errors import ConcurrencyError, ConflictError, NotFoundError
from shared.ports import TenantStore
from shared.records import (
    ApiKeyRecord,
    Tenant,
    TenantLimits,
    hash_api_key,
    new_api_key,
)
from tests.contract.builders import at


def _tenant(tid: str = "acme") -> Tenant:
    return Tenant(id=tid, display_name=tid.title(), created_at=at(0))


def test_create_get_and_duplicate(tenant_store: TenantStore) -> None:
    created = tenant_store.create_tenant(_tenant())
    assert created.etag
    assert tenant_store.get_tenant("acme") == created
    assert tenant_store.get_tenant("nobody") is None
    with pytest.raises(ConflictError):
        tenant_store.create_tenant(_tenant())


def test_update_limits_with_etag(tenant_store: TenantStore) -> None:
    created = tenant_store.create_tenant(_tenant())
    limits = TenantLimits(max_running_tasks=5, max_active_executions=7, submits_per_second=1.5)
    updated = tenant_store.update_tenant(created.model_copy(update={"limits": limits}))
    assert updated.etag != created.etag
    stored = tenant_store.get_tenant("acme")
    assert stored is not None
    assert stored.limits == limits
    with pytest.raises(ConcurrencyError):
        tenant_store.update_tenant(created.model_copy(update={"display_name": "late"}))
    with pytest.raises(NotFoundError):
        tenant_store.update_tenant(_tenant("ghost").model_copy(update={"etag": "x"}))


def test_list_tenants_paged(tenant_store: TenantStore) -> None:
    for tid in ["t3", "t1", "t2"]:
        tenant_store.create_tenant(_tenant(tid))
    p1 = tenant_store.list_tenants(limit=2)
    p2 = tenant_store.list_tenants(limit=2, continuation=p1.continuation)
    assert [t.id for t in p1.items + p2.items] == ["t1", "t2", "t3"]
    assert p2.continuation is None


def test_api_keys_are_resolved_by_hash_only(tenant_store: TenantStore) -> None:
    tenant_store.create_tenant(_tenant())
    key_id, key = new_api_key()
    record = ApiKeyRecord(
        key_id=key_id, tenant_id="acme", key_hash=hash_api_key(key), name="ci", created_at=at(1)
    )
    tenant_store.add_api_key(record)
    found = tenant_store.resolve_api_key(hash_api_key(key))
    assert found is not None
    assert found.tenant_id == "acme"
    assert key not in found.model_dump_json()  # the key itself is never stored
    assert tenant_store.resolve_api_key(hash_api_key(key + "x")) is None
    with pytest.raises(ConflictError):
        tenant_store.add_api_key(record)
    with pytest.raises(NotFoundError):
        tenant_store.add_api_key(
            record.model_copy(update={"tenant_id": "ghost", "key_id": "k2", "key_hash": "0" * 64})
        )
    assert [k.key_id for k in tenant_store.list_api_keys("acme")] == [key_id]
    revoked = tenant_store.revoke_api_key("acme", key_id, at(5))
    assert revoked.revoked_at == at(5)
    again = tenant_store.resolve_api_key(hash_api_key(key))
    assert again is not None
    assert again.revoked_at == at(5)
    with pytest.raises(NotFoundError):
        tenant_store.revoke_api_key("other", key_id, at(6))


def test_submit_bucket_moves_atomically_and_only_when_the_change_says_so(
    tenant_store: TenantStore,
) -> None:
    seen: list[datetime | None] = []

    def to(value: datetime | None) -> Callable[[datetime | None], datetime | None]:
        def change(tat: datetime | None) -> datetime | None:
            seen.append(tat)
            return value

        return change

    assert tenant_store.update_submit_bucket("acme", to(at(1)))
    assert tenant_store.update_submit_bucket("acme", to(at(2)))
    assert not tenant_store.update_submit_bucket("acme", to(None))  # refused: nothing written
    assert tenant_store.update_submit_bucket("acme", to(at(3)))
    assert seen == [None, at(1), at(2), at(2)]
    # Per tenant, and buckets are not tenants.
    seen.clear()
    assert not tenant_store.update_submit_bucket("other", to(None))
    assert seen == [None]
    assert tenant_store.list_tenants().items == []


def test_concurrent_submit_bucket_updates_are_never_lost(tenant_store: TenantStore) -> None:
    def bump(tat: datetime | None) -> datetime | None:
        return (tat or at(0)) + timedelta(seconds=1)

    with ThreadPoolExecutor(8) as pool:
        written = list(pool.map(lambda _: tenant_store.update_submit_bucket("acme", bump), range(40)))
    assert all(written)
    last: list[datetime | None] = []

    def look(tat: datetime | None) -> None:
        last.append(tat)

    tenant_store.update_submit_bucket("acme", look)
    assert last == [at(40)]
