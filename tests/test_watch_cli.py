"""``autopsy watch`` end to end: wrapper mode with a real child, alerts, the jsonl stream.

No test waits on wall-clock thresholds for its verdict: the stall threshold is lowered with
a ``--rules`` card override, and the test acts on the events it reads (it kills the child
when the stall warning arrives), never on a sleep.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from autopsy.cli import main

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "fixtures" / "runs"
ENV = {"NO_COLOR": "1", "AUTOPSY_NO_CACHE": "1"}


def _cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, ["watch", *args], env=ENV, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def _nan_run(tmp_path: Path) -> Path:
    run = tmp_path / "nan_loss"
    shutil.copytree(RUNS / "nan_loss", run)
    return run


def _stall_rules(tmp_path: Path) -> Path:
    """run.stalled with the watch thresholds lowered (the rest of the card as shipped)."""
    card = (ROOT / "rules" / "run" / "stalled.yaml").read_text()
    card = card.replace("watch_min_stall_seconds: 120", "watch_min_stall_seconds: 1")
    card = card.replace("watch_stall_factor: 10 ", "watch_stall_factor: 3 ")
    assert "watch_min_stall_seconds: 1 " in card
    d = tmp_path / "rules" / "run"
    d.mkdir(parents=True)
    (d / "stalled.yaml").write_text(card)
    return tmp_path / "rules"


def test_wrapper_mode_stall_then_kill_then_post_mortem(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("max_steps: 1000\nlearning_rate: 0.001\n")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import time
        for step in range(30):
            print(f"step {step} loss {5.0 - step * 0.01:.4f}")
            time.sleep(0.04)
        print("waiting for the next batch")
        time.sleep(600)
    """))
    log = tmp_path / "train.log"  # outside the run: named by the user, never the run dir
    before = sorted(p.name for p in run.iterdir())
    err_file = open(tmp_path / "stderr.txt", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "autopsy", "watch", str(run), "--log", str(log), "--interval", "0.2",
         "--format", "jsonl", "--rules", str(_stall_rules(tmp_path)), "--", sys.executable, str(script)],
        stdout=subprocess.PIPE, stderr=err_file, text=True, cwd=ROOT,
        env={**os.environ, **ENV, "PYTHONPATH": str(ROOT)})
    events = []
    child_pid = None
    killed = False

    def give_up() -> None:  # a safety net so that a broken watch fails the test instead of hanging it
        if child_pid is not None:
            os.kill(child_pid, signal.SIGKILL)
        proc.kill()

    net = threading.Timer(180, give_up)
    net.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            ev = json.loads(line)
            events.append(ev)
            if ev["event"] == "start":
                child_pid = ev["pid"]
            if ev["event"] == "warning" and ev["finding"]["rule"] == "run.stalled" and not killed:
                assert child_pid is not None
                os.kill(child_pid, signal.SIGTERM)
                killed = True
        code = proc.wait(timeout=120)
    finally:
        net.cancel()
        if proc.poll() is None:
            proc.kill()
        err_file.close()
    assert killed, [e["event"] for e in events] + [(tmp_path / "stderr.txt").read_text()[-2000:]]
    stall = next(e for e in events if e["event"] == "warning" and e["finding"]["rule"] == "run.stalled")
    assert stall["finding"]["facts"]["last_step"] == 29
    assert "waiting for the next batch" in stall["finding"]["message"]  # the last line is the evidence
    kinds = [e["event"] for e in events]
    assert kinds[-2:] == ["report", "exit"]
    assert events[-1]["command_status"] == 128 + signal.SIGTERM
    assert code == 128 + signal.SIGTERM  # the child's status, as a shell reports it
    report = events[-2]["report"]
    assert report["run"]["last_step"] == 29
    assert log.read_text().startswith("step 0 loss 5.0000\n")  # the output went to the named log
    assert sorted(p.name for p in run.iterdir()) == before  # and nothing into the run


def test_wrapper_mode_exit_code_is_the_childs(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    code, out, err = _cli(str(run), "--interval", "0.1", "--", sys.executable, "-c",
                          "print('step 1 loss 2.0'); raise SystemExit(7)")
    assert code == 7
    assert "step 1 loss 2.0" in out  # passed through to the terminal
    assert "not logged" in err  # no --log: said, never chosen silently


def test_once_jsonl_stream(tmp_path: Path) -> None:
    code, out, _err = _cli(str(_nan_run(tmp_path)), "--once", "--format", "jsonl", "--fail-on", "error")
    events = [json.loads(x) for x in out.splitlines()]
    warned = {e["finding"]["rule"] for e in events if e["event"] == "warning"}
    assert "loss.nonfinite" in warned
    assert events[-1]["event"] == "status" and events[-1]["step"] == 59
    assert code == 1  # loss.nonfinite is an error


def test_notify_cmd_gets_each_finding_on_stdin(tmp_path: Path) -> None:
    record = tmp_path / "record.py"
    got = tmp_path / "got.jsonl"
    record.write_text(f"import sys\nopen({str(got)!r}, 'a').write(sys.stdin.read() + '\\n')\n")
    code, _out, _err = _cli(str(_nan_run(tmp_path)), "--once", "--notify-cmd", f"{sys.executable} {record}")
    assert code == 0
    payloads = [json.loads(x) for x in got.read_text().splitlines() if x]
    rules = [p["finding"]["rule"] for p in payloads]
    assert "loss.nonfinite" in rules and len(rules) == len(set(p["fingerprint"] for p in payloads))
    assert all(p["event"] == "warning" for p in payloads)


def test_failing_notifier_is_reported_once(tmp_path: Path) -> None:
    code, _out, err = _cli(str(_nan_run(tmp_path)), "--once", "--notify-cmd", "exit 3")
    assert err.count("--notify-cmd exited with status 3") == 1
    assert code == 0


def test_webhook_posts_json_to_a_local_server(tmp_path: Path) -> None:
    bodies: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            n = int(self.headers.get("Content-Length", "0"))
            bodies.append(self.rfile.read(n))
            assert self.headers.get("Content-Type") == "application/json"
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        code, _out, err = _cli(str(_nan_run(tmp_path)), "--once", "--webhook", url)
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0, err
    rules = [json.loads(b)["finding"]["rule"] for b in bodies]
    assert "loss.nonfinite" in rules


def test_webhook_that_refuses_is_reported_once(tmp_path: Path) -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()  # nothing listens there any more
    code, _out, err = _cli(str(_nan_run(tmp_path)), "--once", "--webhook", f"http://127.0.0.1:{port}/")
    assert err.count("--webhook failed") == 1
    assert code == 0  # an alert that cannot be delivered is said, never the watch's failure


@pytest.mark.parametrize("args,message", [
    (["--log", "x.log"], "give the command after --"),
    (["--webhook", "file:///etc/passwd", "--once"], "only http:// and https://"),
])
def test_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    code, _out, err = _cli(str(tmp_path), *args)
    assert code == 2 and message in err


def test_missing_run_dir_is_a_usage_error(tmp_path: Path) -> None:
    code, _out, err = _cli(str(tmp_path / "nope"), "--once")
    assert code == 2 and "no such directory" in err
