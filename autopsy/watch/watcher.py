"""The watch loop: follow a run directory as it grows and warn while there is time to act.

Each :meth:`Watcher.poll` costs what arrived since the previous one: logs are read from
their saved offsets and fed to live scanners (:mod:`live_log`), their new series points to
the early-warning detectors (:mod:`series_watch`), the checkpoints listed by name and size
(:mod:`checkpoints`) for the disk-fill forecast. The whole rule catalog runs on the run as
it is now (:mod:`live_run`) at the first poll, when a log line matches a rule pattern for the
first time (once a traceback being written is whole), and every ``evaluate_every_s`` seconds
if anything changed; the checkpoint rules alone right after each save. A full evaluation's cost
grows with the series kept (not with the log), so periodic ones are spaced further apart when
they are costly: at most ``evaluate_budget`` of one core (0.5%) goes to them.

Every warning is emitted once per fingerprint (rule id + normalised key, the post-mortem's
own) and again as an ``update`` when its severity rises or its message changes (at most
once per ``update_every_s``). Nothing is ever written into the run directory.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autopsy.discover import classify, rank_from_path
from autopsy.engine.loader import Catalog, load_catalog
from autopsy.engine.runner import select_cards
from autopsy.model import ArtifactKind, Finding, OutcomeKind, Report, Severity
from autopsy.parsers.log_match import compile_patterns
from autopsy.run import LoadOptions, RunError
from autopsy.watch import early
from autopsy.watch.checkpoints import CheckpointWatch, Forecast
from autopsy.watch.live_log import LiveLog
from autopsy.watch.live_run import LiveRun, evaluate
from autopsy.watch.progress import Progress
from autopsy.watch.series_watch import SeriesWatch, relevant_tag
from autopsy.watch.tail import TailChange

VolumeFn = Callable[[Path], tuple[int, int]]  # directory -> (total bytes, free bytes) of its volume
MAX_LOGS = 256
MAX_WALK = 50_000
# Facts that change at every poll (how long, how far, how fast): a change in these alone is not news.
VOLATILE_FACTS = frozenset({"idle_seconds", "empty_seconds", "forecast_seconds", "step_now", "lead_steps",
                            "steps_per_second", "volume_free_bytes", "last_step", "n_points"})
_CONFIG_KEYS = ("vocab_size", "learning_rate", "warmup_steps", "max_steps")


def disk_volume(path: Path) -> tuple[int, int]:
    """(total, free) bytes of the volume holding ``path`` (``statvfs``; free for unprivileged users)."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


@dataclass(frozen=True)
class WatchEvent:
    """One thing the watcher reports: a new ``warning``, an ``update`` of one, or a ``notice``
    (a log rotated, truncated or vanished; an evaluation that failed)."""

    kind: str
    time: float
    finding: Finding | None = None
    text: str | None = None

    def to_dict(self) -> dict[str, Any]:
        from autopsy.report.json_report import finding_to_dict

        d: dict[str, Any] = {"event": self.kind, "time": round(self.time, 3)}
        if self.finding is not None:
            d["finding"] = finding_to_dict(self.finding)
            d["fingerprint"] = self.finding.fingerprint
        if self.text is not None:
            d["text"] = self.text
        return d


@dataclass
class WatchStatus:
    """What a one-line status shows."""

    step: int | None = None
    max_steps: int | None = None
    steps_per_second: float | None = None
    forecast: Forecast | None = None
    fill_seconds: float | None = None
    warnings: int = 0
    worst: Severity | None = None
    logs: int = 0
    bytes_read: int = 0
    polls: int = 0
    evaluations: int = 0
    idle_seconds: float | None = None


@dataclass
class _Fired:
    finding: Finding
    at: float
    updated: float


class Watcher:
    """Follows one run directory; call :meth:`poll` (a loop does it every few seconds)."""

    def __init__(self, run_dir: str | os.PathLike[str], *, on_finding: Callable[[Finding], Any] | None = None,
                 on_event: Callable[[WatchEvent], Any] | None = None, clock: Callable[[], float] = time.time,
                 volume: VolumeFn = disk_volume, select: Iterable[str] | str | None = None,
                 ignore: Iterable[str] | str | None = None, rules_dirs: Sequence[str | os.PathLike[str]] = (),
                 catalog: Catalog | None = None, evaluate_every_s: float = 600.0, update_every_s: float = 60.0,
                 max_bytes_per_poll: int = 64 << 20, settle_s: float = 30.0, evaluate_budget: float = 0.005,
                 extra_logs: Iterable[str | os.PathLike[str]] = ()) -> None:
        root = Path(run_dir)
        if not root.is_dir():
            raise RunError(f"{run_dir}: no such directory" if not root.exists() else f"{run_dir}: not a directory")
        self.root = root
        self.on_finding = on_finding
        self.on_event = on_event
        self.clock = clock
        self.volume = volume
        self.catalog = catalog if catalog is not None else load_catalog(rules_dirs)
        self.select, self.ignore = select, ignore
        self.cards = select_cards(self.catalog.cards.values(), select, ignore, aliases=self.catalog.aliases)
        self.card_map = {c.id: c for c in self.cards}
        self.compiled = compile_patterns(self.catalog.patterns(self.cards))
        self.evaluate_every_s = evaluate_every_s
        self.update_every_s = update_every_s
        self.settle_s = settle_s
        self.evaluate_budget = evaluate_budget
        self.max_bytes_per_poll = max_bytes_per_poll
        self.logs: dict[str, LiveLog] = {}
        real_root = os.path.realpath(root)
        for extra in extra_logs:  # a log outside the run (wrapper mode's --log): followed under its own name
            if not os.path.realpath(extra).startswith(real_root + os.sep):
                name = os.fspath(extra)
                self.logs[name] = LiveLog(Path(extra), name, self.compiled, max_bytes_per_poll=max_bytes_per_poll)
        self.ckpts = CheckpointWatch(root)
        self.progress = Progress()
        self.series = SeriesWatch(self.card_map)
        self.fired: dict[str, _Fired] = {}
        self.status = WatchStatus()
        self.started = clock()
        self._last_eval: float | None = None
        self._pending_since: float | None = None  # an evaluation is due (a new pattern hit, a new checkpoint)
        self._dirty = False
        self._eval_cpu = 0.0  # CPU seconds of the last full evaluation
        self._noticed: set[str] = set()

    # ------------------------------------------------------------------ public

    @property
    def findings(self) -> list[Finding]:
        """Every warning so far (its latest version), in the order they fired."""
        return [f.finding for f in sorted(self.fired.values(), key=lambda f: f.at)]

    def poll(self) -> list[WatchEvent]:
        """One look at the run directory; returns (and hands to the callbacks) what is new."""
        gc_was_on = gc.isenabled()
        gc.disable()  # as in scan_log: scanning makes no reference cycles, collections only cost time
        try:
            return self._poll()
        finally:
            if gc_was_on:
                gc.enable()

    def _poll(self) -> list[WatchEvent]:
        now = self.clock()
        events: list[WatchEvent] = []
        trigger = False
        for rel in self._find_logs():
            if rel not in self.logs and len(self.logs) < MAX_LOGS:
                self.logs[rel] = LiveLog(self.root / rel, rel, self.compiled, rank=rank_from_path(rel),
                                         max_bytes_per_poll=self.max_bytes_per_poll)
        for rel, ll in self.logs.items():
            got = ll.poll(now)
            if got.change in (TailChange.TRUNCATED, TailChange.REPLACED, TailChange.VANISHED, TailChange.UNREADABLE):
                note = f" ({got.note})" if got.note else ""
                events.append(WatchEvent("notice", now, text=f"{rel}: {got.change}{note}"
                                         + ("; reading it again from the start" if got.change in
                                            (TailChange.TRUNCATED, TailChange.REPLACED) else "")))
            if got.data:
                self._dirty = True
            for key in ll.new_hit_keys():
                if not key.rsplit("/", 1)[-1].startswith("ctx"):
                    trigger = True
            events.extend(self._emit(f, now) for f in self.series.feed(rel, ll.new_points(relevant_tag)))
            if ll.scanner.max_steps_seen:
                self.progress.max_steps = ll.scanner.max_steps_seen
        steps = [ll.last_step for ll in self.logs.values() if ll.last_step is not None]
        self.progress.observe(now, max(steps) if steps else None)
        new, gone = self.ckpts.poll()
        if new or gone:
            self._dirty = True
        for f in early.progress_findings(self, now):
            events.append(self._emit(f, now))
        if trigger and self._pending_since is None:
            self._pending_since = now
        if self._pending_since is not None and self._tracebacks_open() and now - self._pending_since < self.settle_s:
            pass  # a traceback is still being written: evaluate once it is whole (or settle_s later)
        elif self._pending_since is not None or self._last_eval is None or (self._dirty and self._periodic_due(now)):
            events.extend(self.evaluate(now))
        elif new:  # right after a save: the checkpoint rules (retention over the limit, a corrupt save), cheaply
            events.extend(self.evaluate(now, families=("checkpoint",)))
        self.status.polls += 1
        self._refresh_status(now)
        out = [e for e in events if e.kind != "none"]
        for e in out:
            if self.on_event is not None:
                self.on_event(e)
        return out

    def _periodic_due(self, now: float) -> bool:
        """Time for a full evaluation without a trigger: ``evaluate_every_s`` after the last one,
        later when the last one was costly, so that these stay within ``evaluate_budget`` of a core."""
        if self._last_eval is None:
            return True
        return now - self._last_eval >= max(self.evaluate_every_s, self._eval_cpu / self.evaluate_budget)

    def evaluate(self, now: float | None = None, *, families: Sequence[str] | None = None) -> list[WatchEvent]:
        """The catalog (every selected card, or those of ``families``) on the run as it is now;
        its warnings emitted like the early ones."""
        now = self.clock() if now is None else now
        cards = self.cards if families is None else [c for c in self.cards if c.family in families]
        started = time.process_time()
        if families is None:
            self._last_eval, self._dirty, self._pending_since = now, False, None
        self.status.evaluations += 1
        try:
            volume = self._volume()
            opts = LoadOptions(now=now)
            scans = [ll.snapshot(settled=ll.grew_at is None or now - ll.grew_at >= self.settle_s)
                     for ll in self.logs.values()]
            findings, outcomes, run = evaluate(self.root, opts, scans, volume, self.catalog, cards)
            if families is None:
                self._learn_config(run)
        except Exception as exc:  # a bug in one evaluation must not stop the watch
            return [WatchEvent("notice", now, text=f"evaluation failed: {type(exc).__name__}: {exc}")]
        finally:
            if families is None:
                self._eval_cpu = time.process_time() - started
        events = [self._emit(f, now) for f in findings if f.severity >= Severity.WARNING]
        for o in outcomes:  # a broken rule is said once (the post-mortem lists it too), never hidden
            if o.kind is OutcomeKind.RULE_ERROR and o.rule not in self._noticed:
                self._noticed.add(o.rule)
                events.append(WatchEvent("notice", now, text=f"rule {o.rule} failed: {o.reason}"))
        return events

    def post_mortem(self, display_path: str | None = None) -> Report:
        """The full report of the run as it is now, every rule included, as ``autopsy analyze``
        gives it: from the logs already read (nothing is read twice) and the rest read fresh."""
        from autopsy.api import report_of

        now = self.clock()
        scans = [ll.snapshot(settled=True) for ll in self.logs.values()]
        run = LiveRun(self.root, LoadOptions(now=now), scans, self._volume())
        return report_of(run, self.catalog, self.cards, display_path=display_path or os.fspath(self.root),
                         select=self.select, ignore=self.ignore)

    def run(self, interval: float = 10.0, *, stop: Callable[[], bool] | None = None,
            max_polls: int | None = None, sleep: Callable[[float], Any] = time.sleep) -> None:
        """Poll every ``interval`` seconds until ``stop()`` is true or ``max_polls`` polls were made."""
        n = 0
        while True:
            self.poll()
            n += 1
            if (max_polls is not None and n >= max_polls) or (stop is not None and stop()):
                return
            sleep(interval)

    # ------------------------------------------------------------------ internals

    def _find_logs(self) -> list[str]:
        out: list[str] = []
        budget = MAX_WALK
        stack = [(os.fspath(self.root), "", 0)]
        while stack:
            d, rel, depth = stack.pop()
            try:
                entries = list(os.scandir(d))
            except OSError:
                continue
            for e in entries:
                budget -= 1
                if budget < 0:
                    return out
                if e.name.startswith("."):
                    continue
                r = f"{rel}/{e.name}" if rel else e.name
                try:
                    if e.is_dir(follow_symlinks=False):
                        if depth < 4 and not e.name.startswith(("checkpoint", "global_step")):
                            stack.append((e.path, r, depth + 1))
                    elif e.is_file(follow_symlinks=False) and classify(r, None)[0] is ArtifactKind.LOG:
                        out.append(r)
                except OSError:
                    continue
        return sorted(out)

    def _tracebacks_open(self) -> bool:
        return any(ll.scanner.tb.open for ll in self.logs.values())


    def _volume(self) -> tuple[int, int] | None:
        try:
            total, free = self.volume(self.ckpts.volume_dir())
            return int(total), int(free)
        except OSError:
            return None

    def _learn_config(self, run: Any) -> None:
        cfg: dict[str, float] = {}
        for key in _CONFIG_KEYS:
            entry = run.config_value(key)
            if entry is None:
                continue
            try:
                cfg[key] = float(entry.value)
            except (TypeError, ValueError):
                continue
        self.series.config = cfg
        if "max_steps" in cfg and cfg["max_steps"] > 0 and self.progress.max_steps is None:
            self.progress.max_steps = int(cfg["max_steps"])

    def _emit(self, f: Finding, now: float) -> WatchEvent:
        fp = f.fingerprint
        old = self.fired.get(fp)
        if old is None:
            self.fired[fp] = _Fired(f, now, now)
            if self.on_finding is not None:
                self.on_finding(f)
            return WatchEvent("warning", now, f)
        raised = f.severity > old.finding.severity
        changed = _material(f) != _material(old.finding) and now - old.updated >= self.update_every_s
        if not (raised or changed):
            return WatchEvent("none", now)
        self.fired[fp] = _Fired(f, old.at, now)
        return WatchEvent("update", now, f)

    def _refresh_status(self, now: float) -> None:
        st = self.status
        st.step = self.progress.step
        st.max_steps = self.progress.max_steps
        st.steps_per_second = self.progress.rate()
        st.warnings = len(self.fired)
        st.worst = max((f.finding.severity for f in self.fired.values()), default=None)
        st.logs = len(self.logs)
        st.bytes_read = sum(ll.bytes_scanned for ll in self.logs.values())
        st.idle_seconds = None if self.progress.last_change is None else now - self.progress.last_change


def _material(f: Finding) -> tuple[Any, ...]:
    """What makes an update news: severity and the facts other than the ever-moving ones."""
    facts = tuple(sorted((k, repr(v)) for k, v in f.facts.items() if k not in VOLATILE_FACTS))
    return (f.severity, facts)
