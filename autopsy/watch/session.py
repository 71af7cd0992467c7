"""One ``autopsy watch`` session: the watcher, its outputs and alerts, and wrapper mode's command.

Outputs: in ``terminal`` format each warning is one escaped line on stderr and, when stderr
is a terminal, a status line is redrawn under them; in ``jsonl`` format every event is one
JSON line on stdout. Alerts (:class:`~autopsy.watch.notify.Notifier`) get each new warning.
When a watched command exits, the post-mortem of the run is printed (terminal report, or a
``report`` event) and the exit status is the command's own (or 1 per ``fail_on``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from autopsy.model import Report, Severity
from autopsy.watch.notify import Notifier
from autopsy.watch.render import event_line, json_line, status_dict, status_line
from autopsy.watch.watcher import Watcher, WatchEvent
from autopsy.watch.wrapper import Child, shell_code


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class Session:
    def __init__(self, run_dir: str, *, fmt: str = "terminal", interval: float = 10.0, notify_cmd: str | None = None,
                 webhook: str | None = None, fail_on: str = "none", select: Sequence[str] | None = None,
                 ignore: Sequence[str] | None = None, rules_dirs: Sequence[str] = (),
                 out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.run_dir = run_dir
        self.fmt = fmt
        self.interval = interval
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.fail_on = None if fail_on.lower() == "none" else Severity.parse(fail_on)
        self.select, self.ignore, self.rules_dirs = select, ignore, rules_dirs
        from autopsy.engine.loader import load_catalog
        from autopsy.engine.runner import select_cards

        self.catalog = load_catalog(rules_dirs)
        select_cards(self.catalog.cards.values(), select, ignore, aliases=self.catalog.aliases)  # ValueError: typo
        self.notifier = Notifier(command=notify_cmd, webhook=webhook, on_problem=self._problem)
        self.live_status = fmt == "terminal" and _isatty(self.err)
        self._status_shown = False
        self._last_status: dict[str, Any] | None = None
        self.watcher: Watcher | None = None
        self.worst: Severity | None = None

    # ------------------------------------------------------------------ modes

    def run_once(self) -> int:
        w = self._watcher()
        w.poll()
        self._status(force=True)
        self._close()
        return self._code(None)

    def run_forever(self) -> int:
        w = self._watcher()
        try:
            w.run(self.interval, sleep=self._sleep)
        except KeyboardInterrupt:
            pass
        self._close()
        return self._code(None)

    def run_command(self, argv: list[str], log_path: str | None) -> int:
        stream = self.err if self.fmt == "jsonl" else self.out  # jsonl: stdout is the event stream
        passthrough = getattr(stream, "buffer", None)
        if log_path is None:
            self._say("the command's output is shown but not logged (give --log PATH to keep it and watch it)")
        self._flush_status()
        child = Child(argv, log_path=Path(log_path) if log_path else None, passthrough=passthrough)
        self._event({"event": "start", "pid": child.pid, "command": argv, "log": log_path})
        returncode: int | None = None
        try:
            while returncode is None:
                if self.watcher is None and os.path.isdir(self.run_dir):
                    self._watcher(extra_logs=[log_path] if log_path else [])
                if self.watcher is not None:
                    self.watcher.poll()
                    self._status()
                returncode = self._wait(child, self.interval)
        except KeyboardInterrupt:
            # The terminal's Ctrl-C went to the command too (same process group): let it stop
            # on its own; a second Ctrl-C terminates it.
            self._say("waiting for the command to stop (Ctrl-C again to terminate it)")
            try:
                returncode = child.wait()
            except KeyboardInterrupt:
                child.terminate()
                returncode = child.wait()
        child.wait()
        code = shell_code(returncode)
        if child.write_error:
            self._say(child.write_error)
        report = None
        if self.watcher is None and os.path.isdir(self.run_dir):
            self._watcher(extra_logs=[log_path] if log_path else [])
        if self.watcher is not None:
            self.watcher.poll()
            report = self.watcher.post_mortem(display_path=self.run_dir)
            self._report(report)
        else:
            self._say(f"{self.run_dir} never appeared: no post-mortem")
        self._event({"event": "exit", "command_status": code})
        self._close()
        if code != 0:
            return code
        return self._code(report)

    # ------------------------------------------------------------------ pieces

    def _watcher(self, extra_logs: Sequence[str] = ()) -> Watcher:
        self.watcher = Watcher(self.run_dir, on_event=self._on_event, select=self.select, ignore=self.ignore,
                               catalog=self.catalog, extra_logs=extra_logs)
        return self.watcher

    def _wait(self, child: Child, seconds: float) -> int | None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            code = child.poll()
            if code is not None:
                return code
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        return child.poll()

    def _sleep(self, seconds: float) -> None:
        self._status()
        time.sleep(seconds)

    def _on_event(self, e: WatchEvent) -> None:
        if e.finding is not None and (self.worst is None or e.finding.severity > self.worst):
            self.worst = e.finding.severity
        if self.fmt == "jsonl":
            self._event(e.to_dict())
        else:
            self._flush_status()
            self.err.write(event_line(e) + "\n")
            self.err.flush()
        if e.kind == "warning" and e.finding is not None:
            self.notifier.send({"event": "warning", "run": self.run_dir, **_finding_payload(e)})

    def _status(self, force: bool = False) -> None:
        w = self.watcher
        if w is None:
            return
        if self.fmt == "jsonl":
            st = status_dict(w.status)
            key = {k: v for k, v in st.items() if k not in ("polls", "bytes_read", "idle_seconds", "forecast_seconds")}
            if force or key != self._last_status:
                self._last_status = key
                self._event({"event": "status", **st})
        elif self.live_status:
            self.err.write("\r\x1b[2K" + status_line(w.status, self.run_dir))
            self.err.flush()
            self._status_shown = True
        elif force:
            self.err.write(status_line(w.status, self.run_dir) + "\n")

    def _flush_status(self) -> None:
        if self._status_shown:
            self.err.write("\r\x1b[2K")
            self._status_shown = False

    def _report(self, report: Report) -> None:
        if self.fmt == "jsonl":
            self._event({"event": "report", "report": report.to_dict()})
            return
        from autopsy.report.terminal import render_terminal

        self._flush_status()
        self.err.write("\n" + render_terminal(report) + "\n")
        self.err.flush()
        for f in report.findings:
            if self.worst is None or f.severity > self.worst:
                self.worst = f.severity

    def _event(self, obj: dict[str, Any]) -> None:
        if self.fmt != "jsonl":
            return
        obj.setdefault("time", round(time.time(), 3))
        self.out.write(json_line(obj) + "\n")
        self.out.flush()

    def _say(self, text: str) -> None:
        if self.fmt == "jsonl":
            self._event({"event": "notice", "text": text})
        else:
            from autopsy.report.sanitize import strip_terminal

            self._flush_status()
            self.err.write(strip_terminal(f"autopsy watch: {text}", one_line=True) + "\n")
            self.err.flush()

    def _problem(self, text: str) -> None:  # called from the notifier's thread
        self._say(text)

    def _close(self) -> None:
        self.notifier.close()
        self._flush_status()
        self.err.flush()

    def _code(self, report: Report | None) -> int:
        if self.fail_on is None:
            return 0
        return 1 if self.worst is not None and self.worst >= self.fail_on else 0


def _finding_payload(e: WatchEvent) -> dict[str, Any]:
    d = e.to_dict()
    d.pop("event", None)
    return d
