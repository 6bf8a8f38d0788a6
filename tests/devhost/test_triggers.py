"""Timer, blob (real Azurite) and Service Bus (embedded bus) triggers on devhost."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from azure.storage.blob import BlobServiceClient

from devhost.host import HostError
from devhost.indexing import index_app
from devhost.invoker import Invoker
from devhost.state import HostState, ScheduleStatus
from devhost.triggers.timer import TimerTrigger
from shared.adapters.embedded_bus import EmbeddedBus, EntityConfig
from shared.ports import OutgoingMessage
from tests.devhost.apps import trigger_apps
from tests.devhost.apps.trigger_apps import CALLS, wait_for
from tests.devhost.harness import RunningHost
from tests.support.azurite import Azurite

APPS = "tests.devhost.apps.trigger_apps"


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    for v in CALLS.values():
        v.clear()


# ---------------------------------------------------------------------------------------- timer


def test_timer_runs_on_startup_and_then_on_schedule(tmp_path: Path) -> None:
    with RunningHost(f"{APPS}:timer_app", tmp_path):
        assert wait_for(lambda: len(CALLS["timer"]) >= 3)
    first = CALLS["timer"][0]
    assert first["past_due"] is False
    # An every-second schedule is not monitored by default (more often than once a minute).
    assert first["status"] == {}


def _timer_spec() -> Any:
    return next(s for s in index_app(trigger_apps.timer_app) if s.trigger_type == "timerTrigger")


def test_monitored_timer_fires_once_past_due_after_downtime(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    state = HostState(tmp_path / "state.sqlite3")
    now = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
    missed = now - timedelta(minutes=5)
    state.put_timer("every_second", ScheduleStatus(missed - timedelta(minutes=1), missed, missed))
    spec = _timer_spec()
    spec = type(spec)(
        **{**spec.__dict__, "trigger": {**spec.trigger, "useMonitor": True, "runOnStartup": False}}
    )
    trig = TimerTrigger(
        spec, "0 0 * * * *", UTC, Invoker(ThreadPoolExecutor(1)), state=state, now=lambda: now
    )

    async def run_briefly() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(trig.run(stop))
        await asyncio.sleep(0.2)
        stop.set()
        await task

    asyncio.run(run_briefly())
    assert [c["past_due"] for c in CALLS["timer"]] == [True]
    status = CALLS["timer"][0]["status"]
    assert status["Last"].startswith(missed.isoformat()[:19])
    saved = state.get_timer("every_second")
    assert saved is not None
    assert saved.next == datetime(2026, 1, 1, 13, 0, tzinfo=UTC)


def test_invalid_schedule_fails_at_startup(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with pytest.raises(ValueError, match=r"every_second.*6 fields"):
        TimerTrigger(
            _timer_spec(),
            "*/5 * * * *",
            UTC,
            Invoker(ThreadPoolExecutor(1)),
            state=HostState(tmp_path / "s.sqlite3"),
        )


# ----------------------------------------------------------------------------------------- blob


@pytest.mark.integration
def test_blob_fires_once_per_version_and_not_again_after_restart(tmp_path: Path, azurite: Azurite) -> None:
    svc = BlobServiceClient.from_connection_string(azurite.connection_string)
    container = svc.get_container_client("incoming")
    if not container.exists():
        container.create_container()
    tag = uuid.uuid4().hex[:8]
    container.upload_blob(f"acme/{tag}-a.txt", b"first", overwrite=True)
    container.upload_blob(f"{tag}-toplevel.txt", b"ignored: does not match {tenant}/{name}", overwrite=True)
    settings = {"BlobConn": azurite.connection_string, "DEVHOST_BLOB_POLL_SECONDS": "0.1"}

    def mine() -> list[dict[str, Any]]:
        return [c for c in CALLS["blob"] if tag in c["name"]]

    with RunningHost(f"{APPS}:blob_app", tmp_path, settings=settings):
        assert wait_for(lambda: len(mine()) == 1)
        container.upload_blob(f"acme/{tag}-a.txt", b"second version", overwrite=True)
        assert wait_for(lambda: len(mine()) == 2)
    got = mine()
    assert got[0]["name"] == f"incoming/acme/{tag}-a.txt"
    assert got[0]["data"] == b"first"
    assert got[0]["length"] == 5
    assert got[0]["uri"].endswith(f"/incoming/acme/{tag}-a.txt")
    assert got[1]["data"] == b"second version"

    with RunningHost(f"{APPS}:blob_app", tmp_path, settings=settings) as h:
        assert h.host is not None
        trig = h.host.triggers[0]
        # Receipts live in azure-webjobs-hosts: a restarted host finds nothing new to fire.
        assert h.run(trig.poll_once()) == 0
        assert [c for c in mine() if c["data"] == b"first"] == [got[0]]
    assert len(mine()) == 2


@pytest.mark.integration
def test_failing_blob_is_retried_then_given_up(tmp_path: Path, azurite: Azurite) -> None:
    svc = BlobServiceClient.from_connection_string(azurite.connection_string)
    container = svc.get_container_client("incoming")
    if not container.exists():
        container.create_container()
    tag = uuid.uuid4().hex[:8]
    container.upload_blob(f"acme/{tag}-bad.txt", b"fail", overwrite=True)
    settings = {"BlobConn": azurite.connection_string, "DEVHOST_BLOB_POLL_SECONDS": "3600"}
    with RunningHost(f"{APPS}:blob_app", tmp_path, settings=settings) as h:
        assert h.host is not None
        trig = h.host.triggers[0]
        for _ in range(10):
            h.run(trig.poll_once())
        receipts = svc.get_container_client("azure-webjobs-hosts")
        names = [b.name for b in receipts.list_blobs(name_starts_with="blobreceipts/") if tag in b.name]
        assert len(names) == 1
        meta = receipts.get_blob_client(names[0]).get_blob_properties().metadata
        assert meta["poison"] == "true"
        assert meta["failures"] == "5"


def test_blob_trigger_without_its_connection_setting_fails_at_startup(tmp_path: Path) -> None:
    with pytest.raises(HostError, match="BlobConn"), RunningHost(f"{APPS}:blob_app", tmp_path):
        pass


# ---------------------------------------------------------------------------------- service bus


def test_service_bus_completes_good_messages_and_dead_letters_poison(tmp_path: Path) -> None:
    bus = EmbeddedBus(
        tmp_path / "bus.sqlite3",
        default_config=EntityConfig(name="", max_delivery_count=3, lock_seconds=30),
        poll_interval_seconds=0.01,
    )
    bus.publish(
        "orders",
        [
            OutgoingMessage("m1", b"one"),
            OutgoingMessage("m2", b"poison"),
            OutgoingMessage("m3", b"three"),
        ],
    )
    settings = {"ORDERS_QUEUE": "orders"}
    with RunningHost(f"{APPS}:sb_app", tmp_path, settings=settings, bus=bus):
        assert wait_for(lambda: len([c for c in CALLS["sb"] if c["id"] == "m2"]) == 3)
        assert wait_for(lambda: {"m1", "m3"} <= {c["id"] for c in CALLS["sb"]})
    dead = bus.peek_dead_letters("orders")
    assert [m.message_id for m in dead] == ["m2"]
    assert dead[0].dead_letter_reason == "MaxDeliveryCountExceeded"
    assert [c["delivery"] for c in CALLS["sb"] if c["id"] == "m2"] == [1, 2, 3]
    assert sorted(c["id"] for c in CALLS["sb"] if c["id"] != "m2") == ["m1", "m3"]
    assert bus.receive("orders", max_messages=10) == []  # completed messages are gone
    # The output binding sent one message per successful invocation, none for the failures.
    shipped = bus.receive("shipped", max_messages=10)
    assert sorted(m.body for m in shipped) == [b"shipped one", b"shipped three"]
    bus.close()
