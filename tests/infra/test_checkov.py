"""checkov (own venv at .tools/checkov, `make checkov`) finds no failed check in infra/terraform.

Skips live in infra/checkov.yaml and each one is justified in docs/deploy.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKOV = ROOT / ".tools" / "checkov" / "bin" / "checkov"
CONFIG = ROOT / "infra" / "checkov.yaml"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"


def run_checkov(directory: Path) -> list[dict[str, Any]]:
    assert CHECKOV.exists(), f"{CHECKOV} is missing: run `make checkov` (make test does)"
    result = subprocess.run(
        [str(CHECKOV), "-d", str(directory), "--config-file", str(CONFIG), "-o", "json", "--skip-download"],
        cwd=ROOT,
        # No telemetry or guideline downloads: this machine has no route to them anyway.
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"},
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
    )
    # Exit code 1 means failed checks; anything else non-zero is a crash.
    assert result.returncode in (0, 1), result.stderr[-2000:]
    reports = json.loads(result.stdout)
    return reports if isinstance(reports, list) else [reports]


def skipped_ids() -> list[str]:
    return re.findall(
        r"^\s*-\s*(CKV2?_[A-Z0-9]+_\d+)", CONFIG.read_text(encoding="utf-8"), flags=re.MULTILINE
    )


def test_no_failed_checks() -> None:
    (report,) = [r for r in run_checkov(ROOT / "infra" / "terraform") if r["check_type"] == "terraform"]
    failed = [(c["check_id"], c["resource"]) for c in report["results"]["failed_checks"]]
    assert failed == []
    assert report["summary"]["parsing_errors"] == 0
    assert report["summary"]["passed"] > 0


def test_every_skip_is_justified_in_the_deploy_doc() -> None:
    doc = DEPLOY_DOC.read_text(encoding="utf-8")
    ids = skipped_ids()
    assert ids, "no skips parsed from infra/checkov.yaml"
    for check_id in ids:
        rows = [line for line in doc.splitlines() if line.startswith("|") and f"`{check_id}`" in line]
        assert rows, f"{check_id} is skipped but not justified in docs/deploy.md"
        reason = rows[0].split("|")[-2].strip()
        assert len(reason) >= 30, f"{check_id}: the justification is too thin: {reason!r}"


def test_checkov_does_flag_a_bad_configuration(tmp_path: Path) -> None:
    # Proves the run above is not green by construction (e.g. an empty directory or a broken config).
    (tmp_path / "main.tf").write_text(
        """
resource "azurerm_storage_account" "bad" {
  name                      = "badaccount"
  resource_group_name       = "rg"
  location                  = "westeurope"
  account_tier              = "Standard"
  account_replication_type  = "LRS"
  shared_access_key_enabled = true
  min_tls_version           = "TLS1_0"
}
""",
        encoding="utf-8",
    )
    (report,) = run_checkov(tmp_path)
    failed = {c["check_id"] for c in report["results"]["failed_checks"]}
    assert "CKV_AZURE_44" in failed  # minimum TLS 1.2
    assert "CKV2_AZURE_40" in failed  # shared key authorization


@pytest.mark.skipif(shutil.which("terraform") is None, reason="no terraform binary on PATH (fmt check only)")
def test_terraform_fmt() -> None:
    result = subprocess.run(
        ["terraform", "fmt", "-check", "-recursive", "-diff", str(ROOT / "infra" / "terraform")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
