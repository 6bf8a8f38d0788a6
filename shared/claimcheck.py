"""Claim check: JSON values over the threshold travel as a reference to the PayloadStore.

``offload`` returns the value itself when its compact JSON fits under the threshold
(``settings.claim_check_threshold_bytes``, 64 KB by default), else stores it and returns an envelope
``{"$ref": "<reference>", "size": <bytes>, "sha256": "<hex>"}``. ``resolve`` is the inverse and
checks the digest, so a swapped or truncated blob is an error rather than silent corruption.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from shared.errors import WeftError
from shared.ports import PayloadStore
from shared.records import CLAIM_CHECK_KEY

_ENVELOPE_KEYS = frozenset({CLAIM_CHECK_KEY, "size", "sha256"})


class PayloadIntegrityError(WeftError):
    default_type = "weft.PayloadIntegrity"
    default_non_retryable = True


def encode_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def is_claim_check(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and set(value) == _ENVELOPE_KEYS
        and isinstance(value.get(CLAIM_CHECK_KEY), str)
    )


def offload(store: PayloadStore, value: Any, threshold_bytes: int, *, prefix: str = "") -> Any:
    """``value`` inline if its JSON is at most ``threshold_bytes``, else a claim-check envelope."""
    if is_claim_check(value):
        return value
    data = encode_json(value)
    if len(data) <= threshold_bytes:
        return value
    ref = store.put(data, content_type="application/json", prefix=prefix)
    return {CLAIM_CHECK_KEY: ref, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def resolve(store: PayloadStore, value: Any) -> Any:
    """The inverse of :func:`offload`: values that are not envelopes are returned unchanged."""
    if not is_claim_check(value):
        return value
    data = store.get(value[CLAIM_CHECK_KEY])
    if len(data) != value["size"] or hashlib.sha256(data).hexdigest() != value["sha256"]:
        raise PayloadIntegrityError(
            "claim-check payload does not match its envelope", details={"ref": value[CLAIM_CHECK_KEY]}
        )
    return json.loads(data)
