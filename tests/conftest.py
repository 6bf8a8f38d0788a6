from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.azurite import Azurite, run_azurite
from tests.support.cosmos import CosmosTarget, cosmos_target


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    with run_azurite() as a:
        yield a


@pytest.fixture(scope="session")
def cosmos_endpoint() -> Iterator[CosmosTarget]:
    """The local Cosmos DB stand-in, or the real account/emulator named by WEFT_TEST_COSMOS_ENDPOINT
    (+ WEFT_TEST_COSMOS_KEY, else DefaultAzureCredential); see docs/testing.md."""
    with cosmos_target() as target:
        yield target
