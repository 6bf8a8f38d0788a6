"""Backend selection by settings, with lazily built singletons."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.adapters import factory
from shared.adapters.embedded_bus import EmbeddedBus
from shared.adapters.payload_store import BlobPayloadStore, FileSystemPayloadStore
from shared.adapters.sqlite_store import SqliteStore
from shared.settings import reset_settings_cache
from tests.support.ports import free_port


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[pytest.MonkeyPatch]:
    for name in (
        "WEFT_STORE",
        "WEFT_BUS",
        "WEFT_PAYLOAD_STORE",
        "WEFT_BLOB_CONNECTION_STRING",
        "WEFT_BLOB_ACCOUNT_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WEFT_DATA_DIR", str(tmp_path / "data"))
    reset_settings_cache()
    factory.reset_for_tests()
    yield monkeypatch
    factory.reset_for_tests()
    reset_settings_cache()


def test_defaults_are_embedded_and_share_one_file(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stores = factory.get_stores()
    assert isinstance(stores.executions, SqliteStore)
    assert {id(stores.executions), id(stores.tenants), id(factory.get_execution_store())} == {
        id(stores.executions)
    }
    bus = factory.get_bus()
    assert isinstance(bus, EmbeddedBus)
    assert bus is factory.get_bus()
    assert bus.db.path == stores.executions.db.path == tmp_path / "data" / factory.SQLITE_FILE
    payloads = factory.get_payload_store()
    assert isinstance(payloads, FileSystemPayloadStore)
    assert payloads.root == tmp_path / "data" / "payloads"


@pytest.mark.integration
def test_blob_payloads_when_azurite_is_running(env: pytest.MonkeyPatch, azurite: Any) -> None:
    env.setenv("WEFT_BLOB_CONNECTION_STRING", azurite.connection_string)
    store = factory.get_payload_store()
    assert isinstance(store, BlobPayloadStore)
    assert store.get(store.put(b"hello")) == b"hello"


def test_filesystem_when_the_local_blob_endpoint_is_not_running(env: pytest.MonkeyPatch) -> None:
    env.setenv(
        "WEFT_BLOB_CONNECTION_STRING",
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;"
        f"BlobEndpoint=http://127.0.0.1:{free_port()}/devstoreaccount1;",
    )
    assert isinstance(factory.get_payload_store(), FileSystemPayloadStore)


def test_remote_blob_endpoints_are_not_probed(env: pytest.MonkeyPatch) -> None:
    env.setenv(
        "WEFT_BLOB_CONNECTION_STRING",
        "DefaultEndpointsProtocol=https;AccountName=weft;AccountKey=a2V5;EndpointSuffix=core.windows.net",
    )
    assert isinstance(factory.get_payload_store(), BlobPayloadStore)


def test_forced_filesystem_wins_over_a_connection_string(env: pytest.MonkeyPatch) -> None:
    env.setenv("WEFT_PAYLOAD_STORE", "fs")
    env.setenv("WEFT_BLOB_CONNECTION_STRING", "UseDevelopmentStorage=true")
    assert isinstance(factory.get_payload_store(), FileSystemPayloadStore)


def test_blob_without_any_location_is_a_clear_error(env: pytest.MonkeyPatch) -> None:
    env.setenv("WEFT_PAYLOAD_STORE", "blob")
    with pytest.raises(ValueError, match="WEFT_BLOB_CONNECTION_STRING"):
        factory.get_payload_store()


def test_unknown_backend_name_is_rejected(env: pytest.MonkeyPatch) -> None:
    env.setenv("WEFT_STORE", "postgres")
    with pytest.raises(ValueError, match="store"):
        factory.get_stores()
