"""Alerts a person sees, delivered off the watch loop.

:class:`Notifier` owns one worker thread and a bounded queue: :meth:`Notifier.send` never
blocks the loop (a full queue drops the alert and says so once). Each target is tried once
per alert, never retried: a command (``--notify-cmd``, run by the shell with the finding as
JSON on stdin: ``notify-send``, ``curl`` to a chat webhook, a pager) or a webhook
(``--webhook``, an HTTP(S) POST of the same JSON). The first failure of each target is
reported through ``on_problem``; later ones are only counted (:attr:`Notifier.failures`).
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

_STOP = object()


class Notifier:
    """Deliver JSON payloads to a shell command and/or a webhook on a worker thread."""

    def __init__(self, *, command: str | None = None, webhook: str | None = None, timeout_s: float = 10.0,
                 on_problem: Callable[[str], Any] | None = None, max_queue: int = 256) -> None:
        if webhook is not None and not webhook.lower().startswith(("http://", "https://")):
            raise ValueError(f"--webhook {webhook!r}: only http:// and https:// URLs are posted to")
        self.command = command
        self.webhook = webhook
        self.timeout_s = timeout_s
        self.on_problem = on_problem
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=max_queue)
        self.sent = 0
        self.failures: dict[str, int] = {}
        self._reported: set[str] = set()
        self._thread = threading.Thread(target=self._work, name="autopsy-notify", daemon=True)
        self._thread.start()

    @property
    def active(self) -> bool:
        return self.command is not None or self.webhook is not None

    def send(self, payload: dict[str, Any]) -> None:
        """Queue one alert; returns at once."""
        if not self.active:
            return
        try:
            self.queue.put_nowait(payload)
        except queue.Full:
            self._problem("queue", f"notifications are not keeping up: alerts beyond {self.queue.maxsize} "
                                   "waiting ones are dropped")

    def close(self, timeout_s: float = 15.0) -> None:
        """Deliver what is queued (up to ``timeout_s``), then stop the worker."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.queue.put(_STOP, timeout=max(0.01, deadline - time.monotonic()))
                break
            except queue.Full:
                if time.monotonic() >= deadline:
                    break
        self._thread.join(max(0.0, deadline - time.monotonic()))

    # ------------------------------------------------------------------ worker

    def _work(self) -> None:
        while True:
            item = self.queue.get()
            if item is _STOP:
                return
            body = json.dumps(item, ensure_ascii=True, sort_keys=True).encode("ascii")
            if self.command is not None:
                self._run_command(body)
            if self.webhook is not None:
                self._post(body)
            self.sent += 1

    def _run_command(self, body: bytes) -> None:
        assert self.command is not None
        try:
            proc = subprocess.run(self.command, shell=True, input=body, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            self._problem("command", f"--notify-cmd did not finish within {self.timeout_s:g} s (killed)")
            return
        except OSError as exc:
            self._problem("command", f"--notify-cmd could not be run: {exc.strerror or exc}")
            return
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            tail = f": {err[-1][:200]}" if err else ""
            self._problem("command", f"--notify-cmd exited with status {proc.returncode}{tail}")

    def _post(self, body: bytes) -> None:
        assert self.webhook is not None
        req = urllib.request.Request(self.webhook, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "autopsy-watch"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                resp.read(1 << 16)
        except urllib.error.HTTPError as exc:
            self._problem("webhook", f"--webhook answered HTTP {exc.code}")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            self._problem("webhook", f"--webhook failed: {reason}")

    def _problem(self, target: str, message: str) -> None:
        self.failures[target] = self.failures.get(target, 0) + 1
        if target in self._reported:
            return
        self._reported.add(target)
        if self.on_problem is not None:
            self.on_problem(message + " (reported once; later failures are counted, not retried)")
