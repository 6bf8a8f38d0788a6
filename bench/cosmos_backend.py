"""The Cosmos DB backend of bench/store_throughput.py (``--backend cosmos``).

Runs against the local Cosmos-compatible server (tests/support/cosmos_server/launcher.js, patched
@vercel/cosmosdb-server) or, when WEFT_TEST_COSMOS_ENDPOINT is set, against that real account or
emulator, in a throw-away database with the production container layout.

Run directly, it benchmarks the Cosmos backend:

    PYTHONPATH=. .venv/bin/python bench/cosmos_backend.py [--writes 1000] [--threads 1,4]
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from shared.ports import ExecutionStore


@contextmanager
def open_store() -> Iterator[ExecutionStore]:
    from tests.support.cosmos import cosmos_database, cosmos_target

    # The local server's certificate is self-signed; the SDK skips verification for 127.0.0.1.
    warnings.filterwarnings("ignore", message="Unverified HTTPS request")
    with cosmos_target() as target, cosmos_database(target) as (store, _name):
        yield store


if __name__ == "__main__":
    from bench.store_throughput import main

    sys.exit(main(["--backend", "cosmos", *(sys.argv[1:] or ["--writes", "1000"])]))
