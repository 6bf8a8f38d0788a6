"""Starts the local Cosmos DB stand-in (tests/support/cosmos_server/launcher.js) for one test session.

The launcher wraps ``@vercel/cosmosdb-server`` (npm, pinned in package.json) with the patches listed in
docs/testing.md. It serves HTTPS with a self-signed certificate on 127.0.0.1, which the azure-cosmos SDK
does not verify for localhost/127.0.0.1; it accepts any key. Nothing survives a restart.

When ``WEFT_TEST_COSMOS_ENDPOINT`` is set, :func:`cosmos_target` returns that account (or the official
emulator) instead, with ``WEFT_TEST_COSMOS_KEY`` or, without a key, ``DefaultAzureCredential``.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from azure.cosmos import exceptions

from shared.adapters.cosmos_store import CosmosStore
from shared.adapters.cosmos_support import ensure_containers, get_client

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = Path(__file__).resolve().parent / "cosmos_server" / "launcher.js"
# Any key is accepted by the local server; this is the emulator's published well-known key, not a secret.
LOCAL_KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU9DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="


@dataclass(frozen=True)
class CosmosTarget:
    """Where the Cosmos contract tests run: the local stand-in or a real account/emulator."""

    endpoint: str
    key: str | None  # None: authenticate with DefaultAzureCredential
    local: bool


def node_binary() -> str:
    found = shutil.which("node")
    if not found:
        raise RuntimeError("node is not installed: the local Cosmos DB stand-in needs Node 20+")
    return found


@contextmanager
def run_cosmos_server(startup_timeout: float = 30.0) -> Iterator[CosmosTarget]:
    """Start the patched local server on a free port; stop it on exit."""
    if not (ROOT / "node_modules" / "@vercel" / "cosmosdb-server").is_dir():
        raise RuntimeError("@vercel/cosmosdb-server is not installed: run `make deps` (npm install) first")
    # stderr goes to a file, not a pipe nobody drains: a chatty server must never block on it.
    with tempfile.TemporaryFile(mode="w+") as errors:
        proc = subprocess.Popen(
            [node_binary(), str(LAUNCHER), "--port", "0", "--host", "127.0.0.1", "--exit-with-stdin"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        try:
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], startup_timeout)
            line = proc.stdout.readline() if ready else ""
            if not line:
                proc.kill()
                proc.wait(timeout=5)
                errors.seek(0)
                raise RuntimeError(f"the local Cosmos DB server did not start: {errors.read().strip()}")
            port = int(json.loads(line)["port"])
            yield CosmosTarget(endpoint=f"https://127.0.0.1:{port}/", key=LOCAL_KEY, local=True)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()


@contextmanager
def cosmos_target() -> Iterator[CosmosTarget]:
    """The real account when WEFT_TEST_COSMOS_ENDPOINT is set, else the local stand-in."""
    endpoint = os.environ.get("WEFT_TEST_COSMOS_ENDPOINT")
    if endpoint:
        yield CosmosTarget(endpoint=endpoint, key=os.environ.get("WEFT_TEST_COSMOS_KEY") or None, local=False)
        return
    with run_cosmos_server() as target:
        yield target


@contextmanager
def cosmos_database(target: CosmosTarget) -> Iterator[tuple[CosmosStore, str]]:
    client = get_client(target.endpoint, target.key)
    name = f"weft-test-{uuid.uuid4().hex[:12]}"
    database = client.create_database(name)
    try:
        ensure_containers(database)
        yield CosmosStore(client, name), name
    finally:
        with suppress(exceptions.CosmosHttpResponseError):
            client.delete_database(name)
