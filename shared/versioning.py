"""Definition versions: a canonical JSON form, its SHA-256 digest, and the next-version rule.

The digest is taken over the *normalised* definition (parsed, defaults filled in, camelCase keys,
sorted, compact), so two documents that mean the same thing (one spells out a default, the other
leaves it out; keys in another order; different whitespace) get the same digest. Versions are
immutable and numbered 1, 2, 3, ...; publishing content whose digest an existing version already
has returns that version instead of creating one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from shared.definition import WorkflowDefinition

DIGEST_PREFIX = "sha256:"


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 text kept as is; NaN and infinity refused (not JSON)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def content_digest(value: Any) -> str:
    return DIGEST_PREFIX + hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def definition_document(definition: WorkflowDefinition) -> dict[str, Any]:
    """The normalised JSON form of a definition: what is stored and what the digest covers."""
    return definition.model_dump(mode="json", by_alias=True, exclude_none=True)


def definition_digest(definition: WorkflowDefinition) -> str:
    return content_digest(definition_document(definition))


@dataclass(frozen=True)
class VersionDecision:
    version: int
    created: bool  # False: identical content was already published as ``version``


def decide_version(existing: Iterable[tuple[int, str]], digest: str) -> VersionDecision:
    """Given the ``(version, digest)`` pairs already published, where does ``digest`` go?

    The version that already has this digest (the highest, should there be several), else one
    more than the highest version so far (1 for the first).
    """
    highest = 0
    match: int | None = None
    for version, existing_digest in existing:
        if version < 1:
            raise ValueError(f"versions number from 1, got {version}")
        highest = max(highest, version)
        if existing_digest == digest and (match is None or version > match):
            match = version
    if match is not None:
        return VersionDecision(version=match, created=False)
    return VersionDecision(version=highest + 1, created=True)
