"""PayloadStore contract and the claim-check threshold."""

from __future__ import annotations

import pytest

from shared.claimcheck import PayloadIntegrityError, is_claim_check, offload, resolve
from shared.errors import NotFoundError
from shared.ports import PayloadStore
from shared.settings import WeftSettings

THRESHOLD = WeftSettings().claim_check_threshold_bytes


def test_put_get_delete(payload_store: PayloadStore) -> None:
    data = bytes(range(256)) * 1000
    ref = payload_store.put(data, prefix="acme")
    assert ref.startswith("acme/")
    assert payload_store.get(ref) == data
    other = payload_store.put(b"x")
    assert other != ref
    payload_store.delete(ref)
    payload_store.delete(ref)  # deleting twice is fine
    with pytest.raises(NotFoundError):
        payload_store.get(ref)


@pytest.mark.parametrize("bad", ["../etc/passwd", "/etc/passwd", "acme/../../x", "a/b/c", ""])
def test_foreign_references_are_not_found(payload_store: PayloadStore, bad: str) -> None:
    with pytest.raises(NotFoundError):
        payload_store.get(bad)


def test_default_threshold_is_64_kib() -> None:
    assert THRESHOLD == 64 * 1024


def test_values_at_the_threshold_stay_inline_and_above_go_by_reference(payload_store: PayloadStore) -> None:
    overhead = len('{"s":""}')
    at_limit = {"s": "a" * (THRESHOLD - overhead)}
    over = {"s": "a" * (THRESHOLD - overhead + 1)}
    assert offload(payload_store, at_limit, THRESHOLD) is at_limit
    envelope = offload(payload_store, over, THRESHOLD, prefix="acme")
    assert is_claim_check(envelope)
    assert envelope["size"] == THRESHOLD + 1
    assert resolve(payload_store, envelope) == over
    assert resolve(payload_store, at_limit) == at_limit
    # offload is idempotent on an envelope.
    assert offload(payload_store, envelope, THRESHOLD) == envelope


def test_multibyte_text_is_measured_in_bytes(payload_store: PayloadStore) -> None:
    value = ["é" * (THRESHOLD // 2)]  # fewer characters than the threshold, more bytes
    assert is_claim_check(offload(payload_store, value, THRESHOLD))


def test_tampered_payload_is_detected(payload_store: PayloadStore) -> None:
    envelope = offload(payload_store, {"s": "b" * THRESHOLD}, THRESHOLD)
    forged = {**envelope, "$ref": payload_store.put(b'{"s":"evil"}')}
    with pytest.raises(PayloadIntegrityError):
        resolve(payload_store, forged)
