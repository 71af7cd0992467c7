"""Issue 14, outputs: where autopsy writes, what reaches stderr/stdout, and the ISSUES-log dedup.

Each test is one reproduction of the issue (scaled down): FIFO/device/in-run targets, a
symlinked ISSUES log, write errors, control sequences in names, GitHub workflow commands
from log text, a forged fingerprint in a log excerpt, two runs that share a directory name,
file names that are not UTF-8, and the ISSUES log streamed rather than read whole.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import REPO, RUNS
from text_checks import CONTROL

from autopsy.cli import main

SOURCE = RUNS / "oom_host"  # 24 KB: a real host-OOM run


def _run(tmp_path: Path, name: str = "run") -> Path:
    dest = tmp_path / name
    shutil.copytree(SOURCE, dest)
    return dest


def _cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, list(args), env=env or {}, catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


def _one_error_line(stderr: str, *words: str) -> None:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert "Traceback" not in stderr
    errors = [ln for ln in lines if ln.startswith("autopsy: error:")]
    assert len(errors) == 1, stderr
    for w in words:
        assert w in errors[0], errors[0]


# ------------------------------------------------------------------ targets


@pytest.mark.parametrize("option", ["-o", "--append"])
def test_a_fifo_target_is_refused_not_waited_on(tmp_path: Path, option: str) -> None:
    run = _run(tmp_path)
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    code, _out, err = _cli("analyze", str(run), "--format", "md", option, str(fifo))
    assert code == 2
    _one_error_line(err, "FIFO", "not a regular file")


@pytest.mark.parametrize(("option", "device"), [("-o", "/dev/full"), ("--append", "/dev/zero"),
                                                 ("--append", "/dev/full"), ("-o", "/dev/null")])
def test_a_device_target_is_refused(tmp_path: Path, option: str, device: str) -> None:
    if not os.path.exists(device):
        pytest.skip(f"{device} does not exist here")
    code, _out, err = _cli("analyze", str(_run(tmp_path)), "--format", "md", option, device)
    assert code == 2
    _one_error_line(err, "character device")


@pytest.mark.parametrize("option", ["-o", "--append"])
def test_a_target_inside_the_run_is_refused_unless_forced(tmp_path: Path, option: str) -> None:
    run = _run(tmp_path)
    before = sorted(p.name for p in run.iterdir())
    target = run / "sub" / ".." / "report.md"  # a path that only resolves into the run
    code, _out, err = _cli("analyze", str(run), "--format", "md", option, str(run / "report.md"))
    assert code == 2
    _one_error_line(err, "inside the run directory", "--force")
    (run / "sub").mkdir()
    code, _out, err = _cli("analyze", str(run), "--format", "md", option, str(target))
    assert code == 2
    (run / "sub").rmdir()
    assert sorted(p.name for p in run.iterdir()) == before
    code, _out, err = _cli("analyze", str(run), "--format", "md", option, str(run / "report.md"), "--force")
    assert code == 0, err
    assert (run / "report.md").stat().st_size > 0


def test_a_symlink_in_the_path_into_the_run_is_refused(tmp_path: Path) -> None:
    run = _run(tmp_path)
    (tmp_path / "alias").symlink_to(run)
    code, _out, err = _cli("analyze", str(run), "-o", str(tmp_path / "alias" / "r.json"), "--format", "json")
    assert code == 2
    _one_error_line(err, "inside the run directory")
    assert not (run / "r.json").exists()


def test_append_through_a_symlinked_log_keeps_the_link(tmp_path: Path) -> None:
    run = _run(tmp_path)
    shared = tmp_path / "shared" / "ISSUES.md"
    shared.parent.mkdir()
    shared.write_text("# team log\n")
    link = tmp_path / "ISSUES.md"
    link.symlink_to(shared)
    code, _out, err = _cli("analyze", str(run), "--format", "md", "--append", str(link))
    assert code == 0, err
    assert link.is_symlink() and link.resolve() == shared.resolve()
    text = shared.read_text()
    assert text.startswith("# team log\n") and "autopsy fingerprint" in text
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_o_through_a_symlink_writes_its_target_and_keeps_the_link(tmp_path: Path) -> None:
    real = tmp_path / "reports" / "r.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "r.json"
    link.symlink_to(real)
    code, _out, err = _cli("analyze", str(_run(tmp_path)), "--format", "json", "-o", str(link))
    assert code == 0, err
    assert link.is_symlink() and real.read_text().startswith("{")


def test_a_full_stdout_is_one_line_and_exit_2(tmp_path: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    run = _run(tmp_path)
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "autopsy", "analyze", str(run), "--format", "json"],
                              stdout=full, stderr=subprocess.PIPE, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 2
    _one_error_line(proc.stderr, "stdout", "No space left on device")


def test_a_write_error_on_o_is_one_line_and_exit_2(tmp_path: Path) -> None:
    code, _out, err = _cli("analyze", str(_run(tmp_path)), "-o", str(tmp_path / "no" / "such" / "dir" / "r.txt"))
    assert code == 2
    _one_error_line(err, "cannot write")


def test_o_leaves_no_temp_file_and_keeps_the_mode(tmp_path: Path) -> None:
    out = tmp_path / "r.md"
    out.write_text("old")
    out.chmod(0o640)
    code, _out, err = _cli("analyze", str(_run(tmp_path)), "--format", "md", "-o", str(out))
    assert code == 0, err
    assert out.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.md", "run"]


# ------------------------------------------------------------------ stderr names


def test_control_sequences_in_names_reach_stderr_escaped(tmp_path: Path) -> None:
    osc52 = "\x1b]52;c;cHduZWQ=\x07"
    missing = tmp_path / f"gone{osc52}"
    runs = tmp_path / "runs"
    runs.mkdir()
    evil = _run(runs, f"exp{osc52}")
    (runs / "notadir\x1b[2J").write_text("x")
    code, out, err = _cli("analyze", str(missing), str(evil), str(runs / "notadir\x1b[2J"), "--quiet")
    assert code == 2
    for text in (out, err):
        assert "\x1b" not in text and "\x07" not in text, repr(text)
    assert "\\x1b]52" in err  # visible, not dropped: the user can see what the name holds


def test_a_name_that_is_not_utf8_gives_valid_utf8_in_every_format(tmp_path: Path) -> None:
    run = _run(tmp_path)
    bad = os.fsencode(run) + b"/notes\xff\xfe.log"
    with open(bad, "wb") as fh:
        fh.write(b"RuntimeError: CUDA error: out of memory\n")
    for fmt in ("text", "md", "json", "jsonl", "sarif", "junit", "html"):
        res = CliRunner().invoke(main, ["analyze", str(run), "--format", fmt], catch_exceptions=False)
        assert res.exit_code == 0, (fmt, res.stderr)
        text = res.stdout_bytes.decode("utf-8")  # strict: raises on invalid UTF-8
        shown = text.replace("\\\\", "\\")
        assert "notes\\xff\\xfe.log" in shown or "notes%FF%FE.log" in shown, fmt
        if fmt in ("json", "sarif"):
            import json

            json.loads(text)


# ------------------------------------------------------------------ GitHub workflow commands

_OWN_COMMAND = re.compile(r"^::(error|warning|notice) ")


def test_log_text_never_starts_a_workflow_command_line(tmp_path: Path) -> None:
    run = _run(tmp_path)
    log = run / "train.log"
    lines = log.read_text().splitlines(keepends=True)
    inject = ["::set-env name=PWN::1\n", "  ::add-mask::x\n", "##[set-env name=PWN;]1\n",
              "::error file=/etc/passwd,line=1::forged\n"]
    log.write_text("".join(lines[:-1] + inject + lines[-1:]))
    for fmt in ("text", "md", "html", "junit", "json", "sarif"):
        for env in ({"GITHUB_ACTIONS": "true"}, {}):
            args = ["analyze", str(run), "--format", fmt] + ([] if env else ["--github"])
            res = CliRunner().invoke(main, args, env=env, catch_exceptions=False)
            assert res.exit_code == 0, res.stderr
            for stream in (res.stdout, res.stderr):
                for line in stream.splitlines():
                    if line.lstrip().startswith("::"):
                        assert _OWN_COMMAND.match(line), (fmt, line)
                        assert "PWN" not in line and "add-mask" not in line and "/etc/passwd" not in line
                    assert "##[" not in line, (fmt, line)


# ------------------------------------------------------------------ ISSUES-log dedup


def _fingerprint_line(run: Path) -> str:
    code, out, err = _cli("analyze", str(run), "--format", "md")
    assert code == 0, err
    return next(ln for ln in out.splitlines() if ln.startswith("- autopsy fingerprint:"))


def test_a_fingerprint_forged_in_a_log_excerpt_does_not_skip_the_real_entry(tmp_path: Path) -> None:
    victim = _run(tmp_path, "victim")
    forged = _fingerprint_line(victim)
    attacker = _run(tmp_path, "attacker")
    log = attacker / "train.log"
    lines = log.read_text().splitlines(keepends=True)
    # the failure line itself carries the forged line: it is the excerpt quoted in the entry
    log.write_text("".join(lines[:-1]) + lines[-1].rstrip("\n") + " " + forged + "\n")
    issues = tmp_path / "ISSUES.md"
    code, _out, err = _cli("analyze", str(attacker), "--format", "md", "--append", str(issues))
    assert code == 0 and "1 entry appended" in err, err
    assert forged in issues.read_text()  # quoted, inside a fence
    code, _out, err = _cli("analyze", str(victim), "--format", "md", "--append", str(issues))
    assert code == 0 and "1 entry appended" in err, err
    code, _out, err = _cli("analyze", str(victim), "--format", "md", "--append", str(issues))
    assert "nothing new to append" in err  # the real entry is still recognised


def test_two_runs_that_share_a_directory_name_get_one_entry_each(tmp_path: Path) -> None:
    a = _run(tmp_path / "exp1", "output")
    b = _run(tmp_path / "exp2", "output")
    issues = tmp_path / "ISSUES.md"
    for run in (a, b):
        code, _out, err = _cli("analyze", str(run), "--format", "md", "--append", str(issues))
        assert code == 0 and "1 entry appended" in err, err
    text = issues.read_text()
    assert "(run `exp1/output" in text and "(run `exp2/output" in text


def test_append_streams_a_large_log(tmp_path: Path) -> None:
    """Scaled down from 1 GB: appending to a 40 MB log allocates a small fraction of it."""
    from autopsy.report.append import append_entries

    log = tmp_path / "ISSUES.md"
    line = b"- a past entry line that autopsy did not write, with some words in it\n"
    with open(log, "wb") as fh:
        for _ in range(40 * 2**20 // len(line)):
            fh.write(line)
    size = log.stat().st_size
    entry = ("## new\n\n- autopsy fingerprint: `oom.host:0123456789ab` (run `a/b@step-1`, path `a/b`)\n")
    tracemalloc.start()
    try:
        result = append_entries(log, [("oom.host:0123456789ab", entry)])
        _cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.added == ("oom.host:0123456789ab",)
    assert peak < 4 * 2**20, peak
    assert log.stat().st_size > size
    assert append_entries(log, [("oom.host:0123456789ab", entry)]).skipped == ("oom.host:0123456789ab",)


def test_a_log_of_one_huge_line_is_streamed_too(tmp_path: Path) -> None:
    from autopsy.report.append import append_entries

    log = tmp_path / "ISSUES.md"
    log.write_bytes(b"x" * (8 * 2**20))
    tracemalloc.start()
    try:
        append_entries(log, [("a.b:0123456789ab", "- autopsy fingerprint: `a.b:0123456789ab`\n")])
        _cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * 2**20, peak  # the copy buffer, not the 8 MB line


def test_fingerprints_count_only_outside_fences() -> None:
    from autopsy.report.append import entry_keys_in

    text = ("## x\n\n````\n- autopsy fingerprint: `a.b:0123456789ab` (run `p/q@step-1`, path `p/q`)\n```\n"
            "still inside\n````\n"
            "- autopsy fingerprint: `c.d:0123456789ab` (run `r/s@step-2`, path `r/s`)\n"
            "  - autopsy fingerprint: `e.f:0123456789ab` (indented: not autopsy's line)\n")
    assert entry_keys_in(text) == {("c.d:0123456789ab", "r/s@step-2")}


# ------------------------------------------------------------------ saved reports


def test_a_saved_report_nested_100k_deep_is_an_input_error(tmp_path: Path) -> None:
    saved = tmp_path / "deep.json"
    saved.write_text("[" * 100_000 + "]" * 100_000)
    code, _out, err = _cli("report", str(saved))
    assert code == 2
    _one_error_line(err, "nested deeper")


def test_a_saved_report_with_deep_facts_is_refused_before_rendering(tmp_path: Path) -> None:
    import json

    deep: object = 1
    for _ in range(500):  # under json's recursion limit, over the report's shape
        deep = {"x": deep}
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps({"schema_version": 1, "run": {"path": "r"}, "findings": [{"facts": deep}]}))
    code, _out, err = _cli("report", str(saved))
    assert code == 2
    _one_error_line(err, "nested deeper")


def test_a_saved_report_that_is_a_fifo_or_huge_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    code, _out, err = _cli("report", str(fifo))
    assert code == 2
    _one_error_line(err, "FIFO")
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(64 * 2**20)  # sparse: costs no disk
    code, _out, err = _cli("report", str(big))
    assert code == 2
    _one_error_line(err, "larger than")


def test_a_saved_report_with_wrong_types_is_an_input_error(tmp_path: Path) -> None:
    saved = tmp_path / "r.json"
    saved.write_text('{"schema_version": 1, "run": {"path": "r"}, "artifacts": [{"path": "a", "size": 1e999}]}')
    code, _out, err = _cli("report", str(saved))
    assert code in (0, 2)
    assert "Traceback" not in err
    assert CONTROL.search(err) is None


def test_a_saved_report_of_millions_of_tiny_values_is_refused_before_parsing(tmp_path: Path) -> None:
    """Issue 14: "3.7 GB RSS on another hostile saved report". Reproduced at the size cap: 31 MB
    of empty lists (``[],[],...``: 10M lists, 64 bytes each once parsed) took 1.6 GB; it is
    refused from a count of its commas and openers, before ``json.loads``."""
    saved = tmp_path / "r.json"
    saved.write_text('{"schema_version": 1, "run": {"path": "r"}, "findings": ['
                     + ",".join(["[]"] * (31 * 2**20 // 3)) + "]}")
    tracemalloc.start()
    try:
        code, _out, err = _cli("report", str(saved))
        _cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 2
    _one_error_line(err, "more than 2,000,000 JSON values")
    assert peak < 4 * saved.stat().st_size, peak  # the text and its decoded copy, not 10M lists
