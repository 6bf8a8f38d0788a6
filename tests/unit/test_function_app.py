"""The app must import with an empty environment, and register exactly the names in shared.names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from shared.names import all_function_names

ROOT = Path(__file__).resolve().parents[2]


def test_import_with_empty_environment() -> None:
    # A fresh interpreter with nothing but PATH: an import-time settings read would fail here.
    result = subprocess.run(
        [sys.executable, "-c", "import function_app; print(len(function_app.app.get_functions()))"],
        cwd=ROOT,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip()) > 0


def test_registers_exactly_the_named_functions() -> None:
    import function_app

    function_app.app.functions_bindings = {}
    registered = [f.get_function_name() for f in function_app.app.get_functions()]
    assert len(registered) == len(set(registered)), "duplicate function names"
    assert set(registered) == all_function_names()
