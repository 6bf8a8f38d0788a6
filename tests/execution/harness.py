"""The execution tests' harness: Weft on devhost's durable engine, in-process (devhost.weft_runtime)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from devhost.weft_runtime import WeftRuntime, run_weft

Harness = WeftRuntime


@contextmanager
def run_harness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, virtual: bool = True
) -> Iterator[Harness]:
    # monkeypatch keeps the environment clean for the next test even if run_weft is interrupted.
    monkeypatch.setenv("WEFT_DATA_DIR", str(tmp_path / "data"))
    with run_weft(tmp_path, virtual=virtual) as runtime:
        yield runtime
