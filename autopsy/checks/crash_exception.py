"""The generic uncaught exception (``crash.exception``) that no more specific rule explains.

It decides "explained" itself, without knowing other rules' findings: an exception whose line
matches a firing pattern of any other loaded card (an OOM, ENOSPC, NCCL, ImportError... line) is
left to that card - for a ``frames_`` pattern only when its frames show that card's activity
(:mod:`tb_causes`) - so precedence then needs no special case. Tracebacks printed under a line
saying they are only logged (dynamo's "WON'T CONVERT", "Exception ignored in"), a launcher's
report of a child's death, stops (KeyboardInterrupt, SystemExit) and exceptions followed by more
training steps are not crashes. Without any traceback, the last line of an uncaught exception
kept alone (a paste, ``tail``) still is one, and so is an exception line whose message goes on
below it to the log's end (torch's "Error(s) in loading state_dict for X:" and its indented,
terminal-wrapped "Missing key(s)" lines).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

import regex

from autopsy.checks.common import (
    CONTEXT_PREFIX,
    evidence_for,
    exception_line,
    final_tracebacks,
    frame_text,
    group,
    project_frame,
    rank_phrase,
    recovered,
    tb_chain,
    where,
)
from autopsy.checks.crash_headless import headless_candidates
from autopsy.checks.hang import ctrl_c_marked, waiting_frame
from autopsy.checks.run_state import after_finish, is_signal_stop, thread_errors_after_finish, went_on_after
from autopsy.checks.tb_causes import FRAMES_PREFIX, frames_text, gate_open, hit_context
from autopsy.engine.types import CheckContext
from autopsy.model import Confidence, Evidence, Finding
from autopsy.parsers.log_tracebacks import CUT_OFF
from autopsy.parsers.types import Hit, PatternSpec, Traceback

# ----------------------------------------------------------------------------- crash.exception

class _Explainer:
    """Another card's firing pattern, compiled on first use (most tracebacks are explained by an early
    one, so the ~250 built-in patterns need not all be compiled), with its rule id when it is gated
    by frames (tb_causes). ``rx`` is None for a pattern that does not compile (it explains nothing)."""

    __slots__ = ("_rx", "flags", "gated_by", "literals", "source")

    def __init__(self, spec: PatternSpec, gated_by: str | None) -> None:
        self.source, self.gated_by = spec.regex, gated_by
        self.flags = regex.IGNORECASE if spec.ignore_case else 0
        self.literals = tuple(lit.lower() for lit in spec.literals) if spec.ignore_case else spec.literals
        self._rx: regex.Pattern[str] | bool | None = False  # False: not compiled yet

    def hinted(self, lines: Sequence[str]) -> bool:
        """One of its prefilter literals is in these lines: likely to match, so tried first."""
        if not self.literals:
            return False
        hay = [ln.lower() for ln in lines] if self.flags else lines
        return any(lit in ln for ln in hay for lit in self.literals)

    @property
    def rx(self) -> regex.Pattern[str] | None:
        if self._rx is False:
            try:
                self._rx = regex.compile(self.source, self.flags)
            except regex.error:
                self._rx = None
        return self._rx  # type: ignore[return-value]


@functools.lru_cache(maxsize=8)
def _explainers(specs: tuple[PatternSpec, ...]) -> tuple[_Explainer, ...]:
    """Other cards' firing patterns, in catalog order."""
    out = []
    for spec in specs:
        rule, _, name = spec.key.rpartition("/")
        if rule == "crash.exception" or name.startswith(CONTEXT_PREFIX) or name.startswith("setup_"):
            continue
        out.append(_Explainer(spec, rule if name.startswith(FRAMES_PREFIX) else None))
    return tuple(out)


def _likely_first(explainers: Sequence[_Explainer], lines: Sequence[str]) -> list[_Explainer]:
    """The explainers whose literals occur in ``lines``, then all the others: only the order changes
    (the question is whether *any* explains), so the first few usually answer it and the rest are
    never compiled; an exception nothing explains still tries every one."""
    hinted = [ex for ex in explainers if ex.hinted(lines)]
    if not hinted:
        return list(explainers)
    first = set(map(id, hinted))
    return hinted + [ex for ex in explainers if id(ex) not in first]


def _explained(tb: Traceback, explainers: Sequence[_Explainer]) -> bool:
    lines = [exception_line(tb), *[f"{tb.exc_type}: {ln}" for ln in tb.message.splitlines()[1:12]],
             *tb.message.splitlines()[:12]]
    if not tb.exc_type:
        # Cut off, or flattened onto one line: the exception text may sit in the last frame's code line.
        lines += [f.code for f in tb.frames[-2:] if f.code]
    elif tb.message == CUT_OFF:
        # IPython's header names the type before the frames ("OutOfMemoryError   Traceback (most recent
        # call last)"); a paste cut before the last line leaves only that header to say what it was.
        lines.append(f"{tb.exc_type}                          Traceback (most recent call last)")
    context: str | None = None
    for ex in _likely_first(explainers, lines):
        rx, gated_by = ex.rx, ex.gated_by
        if rx is not None and any(rx.search(line) for line in lines):
            if gated_by is None:
                return True
            context = frames_text(tb) if context is None else context
            if gate_open(gated_by, context):
                return True
    return False


def _logged(ctx: CheckContext, tb: Traceback, window: int) -> bool:
    """A traceback printed under a line that says it is logged, not raised (dynamo's "WON'T CONVERT",
    CPython's "Exception ignored in"): the program went on."""
    return any(h.path == tb.path and 0 <= tb.line_start - h.lineno <= window
               for h in ctx.hits.get("ctx_logged_traceback", ()))


# Launcher code that re-raises a child's death (torchrun / torch.distributed.launch / accelerate /
# deepspeed launchers, runpy for `python -m torch.distributed.run`): its traceback is the launcher's
# report of a rank failure (dist.rank_failure's evidence), not the exception that killed the rank.
_LAUNCHER_FILE = regex.compile(
    r"(?:/bin/(?:torchrun|accelerate(?:-launch)?|deepspeed)$|/runpy\.py$|<frozen runpy>"
    r"|torch/distributed/(?:run|launch)\.py$|torch/distributed/(?:launcher|elastic)/"
    r"|accelerate/commands/|deepspeed/launcher/|torch/multiprocessing/spawn\.py$"
    r"|/bin/horovodrun$|horovod/run(?:ner)?/)")
_LAUNCHER_EXC = ("", "ChildFailedError", "CalledProcessError", "ProcessRaisedException", "ProcessExitedException")
# horovodrun reports a failed worker with a plain RuntimeError (horovod/runner/gloo_run.py, mpi_run.py)
_LAUNCHER_MESSAGE = regex.compile(r"^Horovod detected that one or more processes exited with non-zero status")


def _launcher_report(tb: Traceback) -> bool:
    """A traceback made only of launcher frames, ending in a child-failure exception or cut off."""
    launcher_exc = tb.exc_type.rsplit(".", 1)[-1] in _LAUNCHER_EXC or bool(_LAUNCHER_MESSAGE.search(tb.message))
    if not launcher_exc or not tb.frames:
        return False
    return all(_LAUNCHER_FILE.search(f.file.replace("\\", "/")) for f in tb.frames)


def _tb_key(tb: Traceback) -> str:
    frame = project_frame(tb)
    where_ = (frame.function or frame.file.rsplit("/", 1)[-1]) if frame is not None else "?"
    return f"{tb.exc_type.rsplit('.', 1)[-1]}:{where_}"


def exception(ctx: CheckContext) -> Iterable[Finding]:
    ignore = set(ctx.params.get("ignore_exception_types", ()))
    min_after = int(ctx.params.get("progress_after_steps", 2))
    explainers = _explainers(tuple(ctx.run.options.patterns))
    groups: dict[str, list[Traceback]] = {}
    finals = final_tracebacks(ctx.run)
    if not finals:
        return _headless(ctx, ignore, min_after, explainers)
    cutoff = thread_errors_after_finish(ctx.run)
    for tb in finals:
        if tb.exc_type.rsplit(".", 1)[-1] in ignore:
            continue
        if any(_explained(t, explainers) for t in tb_chain(tb)) or _launcher_report(tb) \
                or _logged(ctx, tb, int(ctx.params.get("logged_header_window_lines", 3))):
            continue
        if not tb.exc_type and not tb.frames:
            continue  # a bare "Traceback (most recent call last):" header: nothing to report
        if after_finish(cutoff, tb.path, tb.line_start):
            continue  # a background thread's error after training ended (a writer at interpreter exit)
        if any(f.function == "__del__" for f in tb.frames):
            continue  # raised through a finalizer: CPython never propagates it, only prints it ("Exception ignored in")
        if not tb.exc_type and waiting_frame(tb) is not None:
            continue  # a stack dump of a process waiting (py-spy, faulthandler): run.stalled's evidence
        if not tb.exc_type and ctrl_c_marked(ctx.run, tb):
            continue  # a Ctrl-C traceback cut before its KeyboardInterrupt line: a user stop, not a crash
        if is_signal_stop(tb):
            continue  # an outside SIGTERM/SIGINT surfacing ("... killed by signal: Terminated"): run.incomplete's
        if went_on_after(ctx.run, tb.path, tb.line_end, tb.step, min_after):
            continue  # caught and logged; training went on
        groups.setdefault(_tb_key(tb), []).append(tb)
    if not groups:
        return []

    def last_seen(tbs: list[Traceback]) -> tuple[float, int]:
        t = max(tbs, key=lambda x: (x.wall_time or 0.0, x.line_end))
        return (t.wall_time or 0.0, t.line_end)

    ordered = sorted(groups.items(), key=lambda kv: last_seen(kv[1]), reverse=True)
    findings = []
    for key, tbs in ordered[: int(ctx.params.get("max_findings", 3))]:
        lead = min(tbs, key=lambda t: (t.wall_time or float("inf"), t.path, t.line_start))
        frame = project_frame(lead)
        facts: dict[str, Any] = {"exc_type": lead.exc_type,
                                 "message": (lead.message.splitlines() or [""])[0][:300],
                                 "count": len(tbs)}
        if frame is not None:
            facts["frame"] = frame_text(frame)
            facts["function"] = frame.function
            facts["file"] = frame.file
        ranks = sorted({t.rank for t in tbs if t.rank is not None})
        if ranks:
            facts["ranks"] = ranks
        if lead.step is not None:
            facts["step"] = lead.step
        evidence: list[Evidence] = []
        seen: set[tuple[str, int | None]] = set()
        for t in [lead, *tbs]:
            if (t.path, t.rank) in seen or len(evidence) >= 5:
                continue
            seen.add((t.path, t.rank))
            f = project_frame(t)
            evidence.append(Evidence(path=t.path, line=t.line_start, line_end=t.line_end,
                                     excerpt=exception_line(t)[:400], rank=t.rank, step=t.step,
                                     detail=f"raised in {frame_text(f)}" if f is not None else None))
        inside = f" in {frame_text(frame)}" if frame is not None else ""
        step = f" at step {lead.step}" if lead.step is not None else ""
        confidence = None
        if lead.exc_type:
            msg = (f"The run died of an uncaught {exception_line(lead)[:200]!r}{inside}{step}{rank_phrase(facts)} "
                   f"({lead.path}:{lead.line_end}).")
        else:
            # The log (or the paste of it) stops inside the traceback: a crash, of a type we cannot see.
            confidence = Confidence.LOW
            msg = (f"The run died in a traceback that is cut off before its exception line{inside}{step}"
                   f"{rank_phrase(facts)} ({lead.path}:{lead.line_start}-{lead.line_end}); the exception type "
                   "is not in the log.")
        findings.append(ctx.finding(msg, key=key, facts=facts, evidence=evidence, step=lead.step,
                                    wall_time=lead.wall_time, confidence=confidence))
    return findings


def _headless(ctx: CheckContext, ignore: set[str], min_after: int,
              explainers: Sequence[_Explainer]) -> list[Finding]:
    """The last line of an uncaught exception kept without its traceback (pastes, tail -n)."""
    def explained(h: Hit) -> bool:
        texts = [h.text, group(h, "message") or "", group(h, "body") or ""]
        for ex in _likely_first(explainers, texts):
            rx, gated_by = ex.rx, ex.gated_by
            if rx is not None and any(rx.search(t) for t in texts) and (gated_by is None
                                                     or gate_open(gated_by, hit_context(ctx.run, h))):
                return True
        return False

    headless = ctx.hits.get("headless_exception", ())
    candidates = [*headless, *headless_candidates(ctx, headless, ctx.hits.get("c10_error_report", ()))]
    hits = [h for h in candidates
            if (group(h, "exc_type") or "").rsplit(".", 1)[-1] not in ignore
            and not recovered(ctx.run, h, min_after) and not explained(h)]
    if not hits:
        return []
    # The last one ended the program; earlier ones were logged and survived, or chained into it.
    lead = max(hits, key=lambda h: (h.wall_time or 0.0, h.path, h.lineno))
    exc_type = group(lead, "exc_type") or "?"
    message = (group(lead, "message") or "")[:300]
    facts: dict[str, Any] = {"exc_type": exc_type, "message": message, "count": len(hits), "traceback": False}
    if lead.step is not None:
        facts["step"] = lead.step
    step = f" at step {lead.step}" if lead.step is not None else ""
    kept = ("libtorch's C++ report of it, no Python traceback" if exc_type == "c10::Error"
            else "hydra's short report of it (HYDRA_FULL_ERROR unset), not the traceback"
            if lead.key.endswith("/hydra_report")
            else "only its exception line and the message below it, not the traceback" if group(lead, "multiline")
            else "only its last line, not the traceback")
    msg = (f"The run died of an uncaught {exc_type.rsplit('.', 1)[-1]}: {message[:200]!r}{step} ({where(lead)}); "
           f"the log holds {kept}.")
    if group(lead, "prog"):
        facts["program"] = group(lead, "prog")
        msg = (f"{group(lead, 'prog')} refused its command line and exited with status 2 (argparse): {message[:200]!r}"
               f"{step} ({where(lead)}); fix the launch command or the options the script defines.")
    return [ctx.finding(msg, key=f"{exc_type.rsplit('.', 1)[-1]}:headless", facts=facts,
                        evidence=evidence_for([lead]), step=lead.step, wall_time=lead.wall_time)]
