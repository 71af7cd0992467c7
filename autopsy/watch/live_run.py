"""The rule catalog evaluated on what has arrived: a :class:`~autopsy.run.Run` whose logs are
the live scanners' snapshots.

Everything a post-mortem reads besides the logs (checkpoints, configs, trainer_state, event
files, metric files) is small or read from headers, so a :class:`LiveRun` reads those fresh;
the logs, the one input that grows by gigabytes, come from :class:`~autopsy.watch.live_log.LiveLog`
scanners that each poll fed only the new bytes. The volume figures come from the watcher's
free-space function (the volume that holds the checkpoints, or an injected reading in tests).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from autopsy.engine.loader import Catalog
from autopsy.engine.precedence import apply_precedence
from autopsy.engine.runner import run_cards
from autopsy.engine.types import Card
from autopsy.model import Finding, Outcome
from autopsy.parsers.types import DiskUsage, LogScan
from autopsy.run import LoadOptions, Run

# Rules that judge a run that has ended (it stopped without an error, it stalled, it lost work
# since its last checkpoint, its log stayed empty). On a live run they would call every run
# "ended"; the watcher reports stalls and empty logs itself (autopsy.watch.early, same ids),
# and the post-mortem at the end evaluates them all.
POST_MORTEM_ONLY = frozenset({"run.incomplete", "run.stalled", "checkpoint.gap", "log.empty"})


class LiveRun(Run):
    """A Run whose ``logs`` are given (snapshots of live scans) and whose volume is measured by the watcher."""

    def __init__(self, root: Path, options: LoadOptions, scans: Sequence[LogScan],
                 volume: tuple[int, int] | None) -> None:
        super().__init__(root, options)
        self._scans = list(scans)
        self._volume = volume  # (total, free) bytes of the checkpoints' volume, or None

    @cached_property
    def logs(self) -> list[LogScan]:
        scans = self._scans
        if any(scan.steps_inferred for scan in scans):  # as Run.logs: HF dict ordinals aligned to steps
            from autopsy.step_align import align_log_steps, logging_steps_of

            entries = [*self._file_config_entries, *(e for scan in scans for e in scan.config)]
            align_log_steps(scans, self.trainer_states, logging_steps_of(self.trainer_states, entries))
        return scans

    @cached_property
    def disk(self) -> DiskUsage:
        run_bytes = sum(a.size for a in self.discovery.artifacts)
        ckpt_bytes = sum(c.bytes for c in self.checkpoint_list)
        if self._volume is None:
            return DiskUsage(run_bytes, ckpt_bytes, None, None, None)
        total, free = self._volume
        return DiskUsage(run_bytes, ckpt_bytes, total, free, max(0, total - free))


def evaluate(root: Path, options: LoadOptions, scans: Sequence[LogScan], volume: tuple[int, int] | None,
             catalog: Catalog, cards: Sequence[Card]) -> tuple[tuple[Finding, ...], list[Outcome], LiveRun]:
    """Every selected card on the run as it is now: findings ranked as a post-mortem ranks them."""
    run = LiveRun(root, options, scans, volume)
    outcomes = run_cards(run, [c for c in cards if c.id not in POST_MORTEM_ONLY])
    findings = [f for o in outcomes for f in o.findings]
    cards_by_id: Mapping[str, Any] = catalog.cards
    return apply_precedence(findings, cards_by_id), outcomes, run
