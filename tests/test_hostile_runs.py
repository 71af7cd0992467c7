"""Whole runs with damaged or hostile content: reported per artifact, the rest still analysed.

Also the "never execute" half of issue 7 as code checks: no eval/unpickling/unsafe YAML in
the package, and log text that tries to rewrite the terminal or inject HTML/Markdown is
neutralised in every output format of the real CLI.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import REPO, RUNS
from text_checks import CONTROL, outside_fences

import autopsy
from autopsy.cli import main
from autopsy.model import ParseStatus

DAY = 86_400.0


def _age(root: Path, seconds: float) -> None:
    """Make every file look written ``seconds`` ago (damage in old files is not 'in progress')."""
    t = time.time() - seconds
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            os.utime(Path(dirpath) / name, (t, t))


def _damaged_run(tmp_path: Path) -> Path:
    """The real nan_loss run, plus one damaged artifact of every kind taken from the healthy run."""
    run = tmp_path / "run"
    shutil.copytree(RUNS / "nan_loss", run)
    ckpt_src = RUNS / "healthy" / "outputs" / "checkpoint-200"
    ckpt = run / "checkpoint-200"
    shutil.copytree(ckpt_src, ckpt)
    st = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(st[: len(st) // 2])
    opt = (ckpt / "optimizer.pt").read_bytes()
    (ckpt / "optimizer.pt").write_bytes(opt[: len(opt) - 100])
    ts = (ckpt / "trainer_state.json").read_bytes()
    (ckpt / "trainer_state.json").write_bytes(ts[: len(ts) * 2 // 3])
    events = next((RUNS / "healthy").rglob("events.out.tfevents.*")).read_bytes()
    (run / "tb2").mkdir()
    (run / "tb2" / "events.out.tfevents.2.host").write_bytes(events[: len(events) - 7])
    (run / "tb2" / "events.out.tfevents.3.host").write_bytes(b"")
    (run / "configs").mkdir()
    (run / "configs" / "train.yaml").write_text("learning_rate: 1e-3\nbroken: [unclosed\n  - : : x\n")
    (run / "notes.log").write_bytes(random.Random(7).randbytes(4096))
    (run / "worker.err").write_text(
        "Traceback (most recent call last):\n  File \"w.py\", line 3, in <module>\n"
        "ValueError: worker died\n", encoding="utf-16")
    _age(run, DAY)
    return run


def test_each_damaged_artifact_is_reported_and_the_rest_analysed(tmp_path: Path) -> None:
    run = _damaged_run(tmp_path)
    report = autopsy.analyze(run)
    arts = {a.path: a for a in report.artifacts}

    expect = {
        "checkpoint-200/model.safetensors": (ParseStatus.TRUNCATED, "missing"),
        "checkpoint-200/optimizer.pt": (ParseStatus.TRUNCATED, "zip"),
        "checkpoint-200/trainer_state.json": (ParseStatus.TRUNCATED, "invalid JSON"),
        "tb2/events.out.tfevents.2.host": (ParseStatus.TRUNCATED, "cut short"),
        "configs/train.yaml": (ParseStatus.TRUNCATED, "invalid YAML"),
    }
    for path, (status, words) in expect.items():
        a = arts[path]
        assert a.status is status, (path, a)
        assert a.note and words in a.note, (path, a.note)
    assert arts["notes.log"].status is ParseStatus.SKIPPED and "binary" in (arts["notes.log"].note or "")
    assert arts["tb2/events.out.tfevents.3.host"].status is ParseStatus.OK  # empty: nothing to read, not damage
    assert arts["worker.err"].status is ParseStatus.OK and "UTF-16" in (arts["worker.err"].note or "")

    rules = {f.rule for f in report.findings}
    assert "loss.nonfinite" in rules  # the run's real failure is still found
    assert "checkpoint.corrupt" in rules  # and the damaged checkpoint is a finding of its own
    lr = autopsy.load_run(run)
    assert any(t.exc_type == "ValueError" for t in lr.all_tracebacks)  # the UTF-16 log was read
    assert "configs/train.yaml" in {e.path for e in lr.config_entries if e.key == "learning_rate"}
    assert len(lr.scalars[lr.scalars["path"] == "tb2/events.out.tfevents.2.host"]) > 0  # kept before the cut

    text = CliRunner().invoke(main, ["analyze", str(run), "--no-color"]).output
    for path in expect:
        assert path in text, path


def test_a_run_being_written_is_in_progress_not_corrupt(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUNS / "healthy", run)
    _age(run, DAY)
    ckpt = run / "outputs" / "checkpoint-250"
    shutil.copytree(run / "outputs" / "checkpoint-200", ckpt)
    (ckpt / "trainer_state.json").unlink()  # the Trainer writes it last
    st = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(st[:1000])
    opt = (ckpt / "optimizer.pt").read_bytes()
    (ckpt / "optimizer.pt").write_bytes(opt[:5000])
    log = run / "train.log"
    log.write_bytes(log.read_bytes() + b"{'loss': 2.1, 'grad_norm': 0.9, 'learning_ra")  # mid-line
    events = next(run.rglob("events.out.tfevents.*"))
    events.write_bytes(events.read_bytes() + b"\x20\x00\x00\x00\x00\x00\x00\x00")  # a record begun
    report = autopsy.analyze(run)
    arts = {a.path: a for a in report.artifacts}
    for path in ("outputs/checkpoint-250/model.safetensors", "outputs/checkpoint-250/optimizer.pt",
                 str(events.relative_to(run))):
        assert arts[path].status is ParseStatus.IN_PROGRESS, arts[path]
        assert "still being written" in (arts[path].note or "")
    assert arts["train.log"].status is ParseStatus.OK
    cp = next(c for c in autopsy.load_run(run).checkpoint_list if c.path.endswith("checkpoint-250"))
    assert cp.in_progress and not cp.valid
    assert "checkpoint.corrupt" not in {f.rule for f in report.findings}
    assert report.run.latest_valid_checkpoint and report.run.latest_valid_checkpoint.endswith("checkpoint-200")


# ---------------------------------------------------------------- output neutralisation

HOSTILE_MESSAGE = ("boom \x1b]0;PWNED-TITLE\x07\x1b[2J\x1b]52;c;Y2xpcGJvYXJk\x07 <script>alert(1)</script> "
                   "<img src=x onerror=alert(2)> ``` ](javascript:alert(3)) \u202egnp.exe\u202c\r\x08")


@pytest.fixture
def hostile_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    tb = ("Traceback (most recent call last):\n"
          '  File "train.py", line 9, in <module>\n'
          "    main()\n"
          f"RuntimeError: {HOSTILE_MESSAGE}\n")
    (run / "train.log").write_text("step 1 | loss 2.0\n" + tb + "```\n<script>x</script>\n```\n")
    (run / "evil\x1b]0;T\x07<b>.log").write_text(tb)
    return run


def _cli(run: Path, fmt: str) -> str:
    result = CliRunner().invoke(main, ["analyze", str(run), "--format", fmt, "--no-color"])
    assert result.exit_code in (0, 1), result.output
    return result.output


def test_terminal_output_carries_no_escape_sequences(hostile_run: Path) -> None:
    out = _cli(hostile_run, "text")
    assert "RuntimeError" in out
    assert "\x1b" not in out and not CONTROL.search(out)
    assert "PWNED-TITLE" not in out and "Y2xpcGJvYXJk" not in out  # OSC payloads go with their sequence


def test_markdown_cannot_carry_html_or_break_fences(hostile_run: Path) -> None:
    md = _cli(hostile_run, "md")
    assert "RuntimeError" in md and "\x1b" not in md
    prose = "\n".join(outside_fences(md))
    assert not re.search(r"<\s*(script|img|b)\b", prose, re.I), prose
    assert not re.search(r"(?<!\\)\]\(javascript:", prose)  # "](" only escaped: never a link


def test_html_json_sarif_junit_are_encoded(hostile_run: Path) -> None:
    html = _cli(hostile_run, "html")
    assert "<script>alert(1)" not in html and "<img src=x" not in html and "\x1b" not in html
    assert "&lt;script&gt;alert(1)" in html
    data = json.loads(_cli(hostile_run, "json"))
    blob = json.dumps(data)
    assert "RuntimeError" in blob
    sarif = json.loads(_cli(hostile_run, "sarif"))
    assert sarif["runs"][0]["results"]
    assert "\x1b" not in json.dumps(sarif, ensure_ascii=False)
    ET.fromstring(_cli(hostile_run, "junit").encode())  # well-formed XML despite control bytes


def test_jsonl_lines_stay_one_record_each(hostile_run: Path) -> None:
    lines = [ln for ln in _cli(hostile_run, "jsonl").splitlines() if ln.strip()]
    assert len(lines) == 1 and json.loads(lines[0])


# --------------------------------------------------------------------- never execute

_FORBIDDEN = [
    (re.compile(r"(?<![\w.])eval\s*\("), "eval("),
    (re.compile(r"(?<![\w.])exec\s*\("), "exec("),
    (re.compile(r"pickle\.(?:load|loads|Unpickler)\b"), "pickle.load"),
    (re.compile(r"\b(?:cPickle|dill|joblib|marshal)\.load"), "other unpicklers"),
    (re.compile(r"torch\.load\b"), "torch.load"),
    (re.compile(r"numpy\.load\b|np\.load\b"), "numpy.load (allow_pickle)"),
    (re.compile(r"literal_eval"), "ast.literal_eval"),
    (re.compile(r"yaml\.(?:load|load_all|full_load|unsafe_load)\s*\("), "yaml.load without SafeLoader"),
    (re.compile(r"yaml\.(?:Loader|FullLoader|UnsafeLoader)\b"), "unsafe YAML loaders"),
    (re.compile(r"subprocess|os\.system|os\.popen"), "running programs"),
]


def _code_lines() -> list[tuple[str, int, str]]:
    out = []
    for path in sorted((REPO / "autopsy").rglob("*.py")):
        for no, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if code.strip():
                out.append((str(path.relative_to(REPO)), no, code))
    return out


# The only modules allowed to run programs: ``autopsy watch``'s wrapper mode launches the command
# the user typed after ``--``, and ``--notify-cmd`` runs the command the user gave. Nothing from a
# run ever reaches a command line there (the finding goes to the notifier's stdin as JSON).
_RUNS_USER_COMMANDS = {"autopsy/watch/wrapper.py", "autopsy/watch/notify.py"}


def test_package_never_evaluates_unpickles_or_loads_unsafe_yaml() -> None:
    lines = _code_lines()
    assert len(lines) > 1000  # the scan really read the package
    found = [f"{p}:{n}: {why}: {code.strip()}" for p, n, code in lines for rx, why in _FORBIDDEN
             if rx.search(code) and not _is_docstring_mention(code) and not _safe_yaml_call(code, p)
             and not (why == "running programs" and p in _RUNS_USER_COMMANDS)]
    assert not found, "\n".join(found)


def test_only_the_watch_wrapper_and_notifier_run_programs() -> None:
    running = {p for p, _, code in _code_lines() if re.search(r"subprocess|os\.system|os\.popen", code)
               and not _is_docstring_mention(code)}
    assert running == _RUNS_USER_COMMANDS, running
    notify = (REPO / "autopsy/watch/notify.py").read_text()
    assert "input=body" in notify  # the finding reaches the user's command on stdin, not in its arguments


def _safe_yaml_call(code: str, path: str) -> bool:
    """``yaml.load(text, Loader=X)`` where X is a safe loader, directly or by a module-level name."""
    m = re.search(r"yaml\.(?:load|compose)(?:_all)?\s*\(.*Loader\s*=\s*([\w.]+)(\(\))?", code)
    if not m:
        return False
    name = m.group(1)
    if name.endswith(("SafeLoader", "CSafeLoader")):
        return True
    src = (REPO / path).read_text()
    if m.group(2):  # Loader=factory(): the factory's body must subclass SafeLoader and name no other loader
        body = re.search(rf"^def {re.escape(name)}\(.*?(?=^\S)", src, re.M | re.S)
        text = body.group(0) if body else ""
        return "(yaml.SafeLoader)" in text and not re.search(r"\b(?:Full|Unsafe|yaml\.)Loader\b", text)
    d = re.search(rf"^{re.escape(name)}\s*=\s*(.+)$", src, re.M)
    unsafe = re.search(r"\b(Full|Unsafe)?Loader\b(?<!SafeLoader)", d.group(1)) if d else None
    return bool(d) and "SafeLoader" in d.group(1) and not unsafe  # type: ignore[union-attr]


def _is_docstring_mention(code: str) -> bool:
    # prose such as "autopsy never calls torch.load" inside a docstring or string literal
    stripped = code.strip()
    return (stripped.startswith(("\"", "'", "``")) or bool(re.match(r"^[rRbBuUfF]{1,2}[\"']", stripped))
            or bool(re.match(r"^[A-Za-z ,;:()`'\"-]+$", stripped)))


def test_yaml_is_only_composed_with_the_safe_loader() -> None:
    uses = [(p, n, c) for p, n, c in _code_lines() if re.search(r"yaml\.(?:compose|safe_load|load|parse)", c)]
    assert uses, "autopsy reads YAML somewhere"
    for p, n, code in uses:
        assert "safe_load" in code or "SafeLoader" in code or _safe_yaml_call(code, p), f"{p}:{n}: {code.strip()}"


def test_hf_dict_lines_are_parsed_without_eval(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import ast
    import builtins

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("log text was evaluated")

    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    monkeypatch.setattr(ast, "literal_eval", refuse)
    from autopsy.parsers.logs import scan_text

    marker = tmp_path / "EVAL_PWNED"
    scan = scan_text("{'loss': 2.5, 'epoch': __import__('os').system('touch " + str(marker) + "')}\n"
                     "{'loss': nan, 'grad_norm': inf, 'learning_rate': 1e-05, 'epoch': 0.1}\n")
    assert not marker.exists()
    assert any(p.tag == "grad_norm" for p in scan.series)


# ------------------------------------------------------------------- CLI size option


def test_max_bytes_per_file_is_documented_with_its_default() -> None:
    out = CliRunner().invoke(main, ["analyze", "--help"]).output
    flat = " ".join(out.split())
    assert "--max-bytes-per-file SIZE" in flat
    own = flat[flat.index("--max-bytes-per-file"):flat.index("--no-color")]
    m = re.search(r"default (\w+)", own)
    assert m, own
    from autopsy.cli import parse_size
    from autopsy.run import DEFAULT_MAX_BYTES_PER_FILE

    assert parse_size(m.group(1)) == DEFAULT_MAX_BYTES_PER_FILE  # the help tells the real default


def test_max_bytes_per_file_from_the_cli_reports_partial_reads(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUNS / "healthy", run)
    _age(run, DAY)
    log = run / "train.log"
    size = log.stat().st_size
    result = CliRunner().invoke(main, ["analyze", str(run), "--format", "json", "--max-bytes-per-file", "1K"])
    assert result.exit_code in (0, 1), result.output
    data = json.loads(result.output)
    arts = {a["path"]: a for a in data["artifacts"]}
    assert arts["train.log"]["status"] == "truncated"
    assert "read only the first " in arts["train.log"]["note"]
    assert f"bytes of {size:,} (byte ranges 0-" in arts["train.log"]["note"]  # head and tail of a 1K budget
    text = CliRunner().invoke(main, ["analyze", str(run), "--max-bytes-per-file", "1K", "--no-color"]).output
    assert "train.log (truncated): read only the first " in text and f"bytes of {size:,}" in text
    bad = CliRunner().invoke(main, ["analyze", str(run), "--max-bytes-per-file", "lots"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
