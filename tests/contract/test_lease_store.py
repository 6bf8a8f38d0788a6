"""LeaseStore contract: exclusive leases, strictly increasing fencing tokens, fenced writes."""

from __future__ import annotations

import pytest

from shared.errors import StaleFencingTokenError
from shared.ports import LeaseStore
from tests.contract.builders import at


def test_one_holder_at_a_time_and_tokens_increase(lease_store: LeaseStore) -> None:
    a = lease_store.acquire("scheduler", "A", 30, at(0))
    assert a is not None
    assert lease_store.acquire("scheduler", "B", 30, at(10)) is None
    same = lease_store.acquire("scheduler", "A", 30, at(10))
    assert same is not None
    assert same.token == a.token  # re-acquiring while holding extends, keeps the token
    assert same.expires_at == at(40)
    b = lease_store.acquire("scheduler", "B", 30, at(41))  # A's lease expired
    assert b is not None
    assert b.token > a.token
    current = lease_store.get("scheduler")
    assert current is not None
    assert current.holder == "B"
    # Other names are independent.
    other = lease_store.acquire("other", "A", 30, at(41))
    assert other is not None


def test_renew_release_and_lost_lease(lease_store: LeaseStore) -> None:
    a = lease_store.acquire("l", "A", 30, at(0))
    assert a is not None
    renewed = lease_store.renew(a, 30, at(20))
    assert renewed.expires_at == at(50)
    assert renewed.token == a.token
    assert lease_store.acquire("l", "B", 30, at(45)) is None
    b = lease_store.acquire("l", "B", 30, at(51))
    assert b is not None
    with pytest.raises(StaleFencingTokenError):
        lease_store.renew(a, 30, at(52))
    lease_store.release(a)  # releasing a lost lease does not disturb the new holder
    still = lease_store.get("l")
    assert still is not None
    assert still.holder == "B"
    lease_store.release(b)
    assert lease_store.get("l") is None
    c = lease_store.acquire("l", "C", 30, at(53))
    assert c is not None
    assert c.token > b.token  # tokens never repeat, even after a release


def test_stale_token_is_fenced_off(lease_store: LeaseStore) -> None:
    a = lease_store.acquire("sched", "A", 10, at(0))
    assert a is not None
    lease_store.put_fenced("sched", a.token, "schedule:nightly", {"nextFireAt": "t1"})
    b = lease_store.acquire("sched", "B", 10, at(11))
    assert b is not None
    lease_store.check_fence("sched", b.token)
    with pytest.raises(StaleFencingTokenError):
        lease_store.check_fence("sched", a.token)
    # A paused past its lease and woke up: its write must not land.
    with pytest.raises(StaleFencingTokenError):
        lease_store.put_fenced("sched", a.token, "schedule:nightly", {"nextFireAt": "stale"})
    assert lease_store.get_fenced("sched", "schedule:nightly") == {"nextFireAt": "t1"}
    lease_store.put_fenced("sched", b.token, "schedule:nightly", {"nextFireAt": "t2"})
    assert lease_store.get_fenced("sched", "schedule:nightly") == {"nextFireAt": "t2"}
    assert lease_store.get_fenced("sched", "missing") is None
