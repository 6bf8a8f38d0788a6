from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.azurite import Azurite, run_azurite


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    with run_azurite() as a:
        yield a
