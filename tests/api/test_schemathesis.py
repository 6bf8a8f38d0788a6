"""The OpenAPI document against the running API: valid, and a bounded schemathesis run on devhost
finds no 5xx, no undocumented status, content type or header, and no body that breaks its schema."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.http_support import ADMIN, DAG, Client, running_weft
from tests.devhost.harness import RunningHost
from tests.support.azurite import Azurite

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
        "negative_data_rejection",
    ]
)
# Bounded for CI; raise them locally to search harder (e.g. 200 examples, other seeds).
MAX_EXAMPLES = os.environ.get("WEFT_SCHEMATHESIS_MAX_EXAMPLES", "20")
SEED = os.environ.get("WEFT_SCHEMATHESIS_SEED", "1")


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory, azurite: Azurite) -> Iterator[RunningHost]:
    with running_weft(tmp_path_factory.mktemp("api-schemathesis"), azurite) as h:
        yield h


def test_served_document_is_valid_openapi_3_1(host: RunningHost) -> None:
    from openapi_spec_validator import validate

    r = httpx.get(f"{host.url}/api/v1/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    validate(doc)
    assert doc["openapi"] == "3.1.0"
    # Every route of the table is documented with its method.
    from shared.api.routes import ROUTES

    assert {(r.path, r.method.lower()) for r in ROUTES} == {
        (path, method) for path, ops in doc["paths"].items() for method in ops
    }


def _schemathesis(host: RunningHost, tmp_path: Path, key: str, tags: str, mode: str) -> None:
    config = tmp_path / f"schemathesis-{mode}-{len(tags)}.toml"
    # Valid data goes to the tenant and workflow that exist, so requests reach the handlers. Not in
    # negative mode: a pinned value would replace the invalid one schemathesis thinks it sent.
    pins = '[parameters]\n"path.tenant" = "st"\n"path.workflow" = "wf"\n' if mode == "positive" else ""
    config.write_text(pins)
    cmd = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config),
        "run",
        f"{host.url}/api/v1/openapi.json",
        "--checks",
        # Negative mode sends path values with a newline; devhost's aiohttp catch-all route does not
        # match those and answers its own text/plain 404, before any Weft code runs.
        CHECKS if mode == "positive" else CHECKS.replace("content_type_conformance,", ""),
        "--max-examples",
        MAX_EXAMPLES,
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--include-tag-regex",
        tags,
        "--header",
        f"Authorization: Bearer {key}",
        "--generation-database",
        "none",
        "--seed",
        SEED,
        # One worker: schemathesis parses lambda sources with ast from several threads, which
        # CPython 3.11 can fail on ("AST constructor recursion depth mismatch").
        "--workers",
        "1",
        "--no-color",
        "--request-timeout",
        "30",
        "--mode",
        mode,
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False)
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-5000:]


def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    host: RunningHost, tmp_path: Path
) -> None:
    api = Client(host.url)
    key = api.tenant("st", submitsPerSecond=1000, maxActiveExecutions=100000)
    api.publish("st", key, DAG)
    for mode in ("positive", "negative"):
        _schemathesis(host, tmp_path, key, "workflows|executions|dead-letters", mode)
        _schemathesis(host, tmp_path, ADMIN, "platform", mode)
