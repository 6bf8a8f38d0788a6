"""Starts a real Azurite (npm, pinned in package.json) for one test session, on free ports."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.ports import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[2]
ACCOUNT = "devstoreaccount1"
# Azurite's published development key: not a secret.
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@dataclass(frozen=True)
class Azurite:
    blob_port: int
    queue_port: int
    table_port: int

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint=http://127.0.0.1:{self.blob_port}/{ACCOUNT};"
            f"QueueEndpoint=http://127.0.0.1:{self.queue_port}/{ACCOUNT};"
            f"TableEndpoint=http://127.0.0.1:{self.table_port}/{ACCOUNT};"
        )


def azurite_binary() -> str:
    local = ROOT / "node_modules" / ".bin" / "azurite"
    if local.exists():
        return str(local)
    found = shutil.which("azurite")
    if not found:
        raise RuntimeError("Azurite is not installed: run `make deps` (npm install) first")
    return found


@contextmanager
def run_azurite() -> Iterator[Azurite]:
    ports = Azurite(free_port(), free_port(), free_port())
    data = tempfile.mkdtemp(prefix="azurite-", dir=os.environ.get("TMPDIR"))
    proc = subprocess.Popen(
        [
            azurite_binary(),
            "--silent",
            "--skipApiVersionCheck",
            "--disableTelemetry",
            "--loose",
            "--location",
            data,
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(ports.blob_port),
            "--queueHost",
            "127.0.0.1",
            "--queuePort",
            str(ports.queue_port),
            "--tableHost",
            "127.0.0.1",
            "--tablePort",
            str(ports.table_port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_port(ports.blob_port)
        yield ports
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(data, ignore_errors=True)
