"""Run-state rules: log.empty, run.stalled, run.incomplete (helpers in :mod:`autopsy.checks.run_state`).

These rules judge the run as a whole: did it stop, how, and was it still alive after its
last step. They never look at a clock they cannot trust: in-log timestamps are compared
only with the same log's step times (a naive timestamp may be in another time zone),
TensorBoard wall times and file mtimes are unix seconds and may be compared with each
other and with the analysis time.
"""

from __future__ import annotations

from collections.abc import Iterable

import regex

from autopsy.checks.common import final_tracebacks
from autopsy.checks.early_stop import early_stopped
from autopsy.checks.hang import (
    interrupted_hang_finding,
    interrupted_waits,
    is_hang_dump,
    is_stop,
    setup_stall_finding,
    setup_stall_hits,
)
from autopsy.checks.run_state import (
    TERMINATION_EXIT_CODES,
    EpochPlan,
    Signal,
    cadence_seconds,
    completion_line,
    end_signals,
    epoch_plan,
    epoch_progress_time,
    exited_cleanly,
    interrupted_save,
    progress_artifact_mtime,
    reached_plan,
    seconds_since_progress,
)
from autopsy.checks.series import as_bool, cite, config_entry, config_evidence
from autopsy.engine.types import CheckContext, NotEvaluated
from autopsy.model import ArtifactKind, Confidence, Evidence, Finding, Severity
from autopsy.parsers.types import Hit, LogScan
from autopsy.run import Run
from autopsy.units import fmt_duration


def _stall_threshold(ctx: CheckContext, cadence: float | None) -> float:
    floor = float(ctx.param("min_stall_seconds"))
    if cadence is None:
        return floor
    return max(floor, float(ctx.param("stall_cadence_factor")) * cadence)


# ----------------------------------------------------------------------------- log.empty

# Lines that are printed before any training output and say nothing about progress.
_BANNER = regex.compile(
    r"^\s*$"
    r"|warn(?:ing)?s?\b|Warning\b|WARN\b|^W\d{4} |^\[W |^\s+warnings\.warn\("  # Python warnings, glog, c10
    r"|^nohup: ignoring input|^nohup: appending output"  # nohup
    r"|^\*{10,}\s*$|Setting OMP_NUM_THREADS environment variable"  # torchrun banner
    r"|^\s*Token indices sequence length is longer|Running this sequence through the model"  # HF tokenizers
    r"|huggingface/tokenizers: The current process just got forked|To disable this warning"
    r"|^\s*- Avoid using `tokenizers`|^\s*- Explicitly set the environment variable TOKENIZERS_PARALLELISM"
    r"|^Some weights of |^You should probably TRAIN this model|^You are using "  # transformers
    r"|^wandb: |^\s*\d+%\|[\s|]*\|\s*0/\d+"  # wandb banner; tqdm bar at 0
    r"|^\s*(?:WARNING|INFO): \w+ (?:not|is) (?:available|installed)"
    r"|^\s*(?:return|super\(\)\.__init__|self\.\w+ = )",  # the source line a warning quotes
    regex.IGNORECASE,
)


# A traceback frame, wherever a logger's prefix puts it ("[...] torch._dynamo.convert_frame: [WARNING]   File
# "/torch/_dynamo/output_graph.py", line 973, in call_user_compiler"): the program ran code and logged what
# raised in it, which no process that hung before its first print can show, whatever level it was logged at.
_FRAME = regex.compile(r'\bFile "[^"\n]+", line \d+, in \S')

# A Python warning's header ("/path/to/module.py:82: UserWarning: ...", on Windows "C:\\...\\x.py:3: ...") and
# what the program printed on the same line before it. The warning goes to stderr while stdout's last print
# had no newline yet, so a value the program printed (a loss: "0.767207/usr/.../lr_scheduler.py:82:
# UserWarning: ...") or a progress bar past zero lands in front of the header: that is training output.
_WARNING_HEADER = regex.compile(r"(?:[A-Za-z]:\\|/)[^\s:]*\.py:\d+: \w*Warning\b")
_GLUED_PROGRESS = regex.compile(r"(?:[-+]?\d*\.\d+(?:[eE][-+]?\d+)?|\|\s*[1-9]\d*/\d+ \[[^\]]*\])$")


def is_banner_line(line: str) -> bool:
    """True for blank lines, warnings and launcher banners: output that shows no progress."""
    header = _WARNING_HEADER.search(line)
    if header is not None:
        # Glued means touching: a blank before the header is a logger's layout ("2023-07-31 11:08:28.980
        # /x.py:3: UserWarning"), not a print without a newline. Only the last 120 characters are tried
        # (a value or a bar's end is shorter): the float alternative, retried at every offset, is quadratic
        # on a run of digits. (An e-mail or markdown quote marker before the value needs no stripping.)
        before = line[max(0, header.start() - 120):header.start()]
        if before and not before[-1].isspace() and _GLUED_PROGRESS.search(before):
            return False
    return bool(_BANNER.search(line)) and not _FRAME.search(line)


def _log_art_mtimes(run: Run) -> dict[str, float]:
    """Log mtimes, or {} when they are not the run's (a copy): then no log is newer than another."""
    if not run.clock.mtimes_trusted:
        return {}
    return {a.path: a.mtime for a in run.discovery.artifacts if a.kind is ArtifactKind.LOG}


def _is_contentless(scan: LogScan) -> tuple[bool, int]:
    """(holds nothing but banners, number of banner lines seen)."""
    if scan.size == 0 or scan.n_lines == 0:
        return True, 0
    if scan.series or scan.tracebacks or scan.child_failures or scan.last_step is not None:
        return False, 0
    # head holds lines 1..len(head); the tail may overlap it in a short file.
    lines = list(scan.head) + [line for lineno, line in scan.tail if lineno > len(scan.head)]
    if not all(is_banner_line(line) for line in lines):
        return False, 0
    return True, sum(1 for line in lines if line.strip())


def _buffering_hint(run: Run) -> tuple[bool, list[Evidence], dict[str, object]]:
    nohup = config_entry(run, ["launch_uses_nohup"])
    unbuf = config_entry(run, ["python_unbuffered"])
    facts: dict[str, object] = {}
    ev: list[Evidence] = []
    if nohup is None or not as_bool(nohup.value):
        return False, ev, facts
    facts["launch_uses_nohup"] = True
    facts["launch_source"] = cite(nohup)
    # Show the launch line itself ("nohup python train.py ... &"), not the derived flag.
    cmd = next((e for e in run.config_entries if e.key == "launch_command" and e.path == nohup.path
                and e.line == nohup.line and e.text), None)
    ev.append(Evidence(path=nohup.path, line=nohup.line, excerpt=cmd.text) if cmd is not None
              else config_evidence(nohup))
    if cmd is not None:
        facts["launch_command"] = cmd.text
    buffered = unbuf is None or not as_bool(unbuf.value)
    facts["python_unbuffered"] = False if buffered else True
    if unbuf is not None:
        facts["python_unbuffered_source"] = cite(unbuf)
    return buffered, ev, facts


def log_empty(ctx: CheckContext) -> Iterable[Finding]:
    """Logs that are empty or hold only banners, judged against the run's other artifacts."""
    run = ctx.run
    scans = run.logs
    if not scans:
        raise NotEvaluated("no text log found")
    mtimes = _log_art_mtimes(run)
    margin = float(ctx.param("mtime_margin_seconds"))
    judged = [(scan, *_is_contentless(scan)) for scan in scans]
    content_mtimes = [mtimes.get(s.path, 0.0) for s, empty, _ in judged if not empty]
    newest_content = max(content_mtimes) if content_mtimes else None
    buffered, launch_ev, launch_facts = _buffering_hint(run)
    prog_mtime, prog_path = progress_artifact_mtime(run)
    # A quiet stderr beside a stdout full of steps is normal: only a log newer than every log
    # with content (a later attempt) or a run with no content anywhere is a finding, and of
    # several such logs (earlier attempts) the newest is the one the run writes to now.
    cands = [(scan, n_banner) for scan, empty, n_banner in judged if empty and not (
        newest_content is not None and mtimes.get(scan.path, 0.0) <= newest_content + margin)]
    cands.sort(key=lambda c: (mtimes.get(c[0].path, 0.0), c[0].path), reverse=True)
    out: list[Finding] = []
    for scan, n_banner in cands[:1]:
        log_mtime = mtimes.get(scan.path)
        facts: dict[str, object] = {"path": scan.path, "size_bytes": scan.size, "n_lines": scan.n_lines,
                                    "banner_lines": n_banner, "last_step": run.last_step,
                                    "other_contentless_logs": [c[0].path for c in cands[1:]][:20]}
        if log_mtime is not None:
            facts["log_mtime"] = log_mtime
        newer = older = False
        if prog_mtime is not None and log_mtime is not None:
            facts["newest_artifact"] = prog_path
            facts["newest_artifact_mtime"] = prog_mtime
            newer = prog_mtime > log_mtime + margin
            older = prog_mtime + margin < log_mtime
        facts["artifacts_newer_than_log"] = newer
        facts.update(launch_facts)
        what = "is empty (0 bytes)" if scan.size == 0 else f"holds only warnings/banners ({n_banner} lines)"
        cut = interrupted_save(run) if not older else None
        if newer:
            cause = (f"yet {prog_path} was written after it and the run reached step {run.last_step}: "
                     "the training process ran but its output never reached the log")
            severity = Severity.WARNING
        elif cut is not None:
            # A save cut short is the last thing a run does when it dies: this process got past its
            # first prints (it was checkpointing), so nothing hung before them; its output was buffered.
            facts["partial_checkpoint"] = cut.path
            cause = (f"yet the process got as far as saving {cut.path}, which it left incomplete: it ran, and "
                     "died mid-save, with its output still in a block buffer")
            severity = Severity.WARNING
        elif older:
            cause = ("and every event file and checkpoint is older than the log: this attempt produced "
                     "no step at all (hung before its first print, or its output is still buffered)")
            severity = Severity.ERROR
        else:
            cause = "so the process hung before its first print, or its stdout was block-buffered"
            severity = Severity.ERROR
        hint = ""
        if buffered or newer or cut is not None:
            facts["buffering_suspected"] = True
            hint = (" The launch uses nohup without python -u / PYTHONUNBUFFERED=1, so stdout is "
                    "block-buffered (4-8 KB) and lines appear late or never." if buffered else
                    " Run python with -u or PYTHONUNBUFFERED=1 so lines reach the log as they are printed.")
        else:
            facts["buffering_suspected"] = False
        ev = [Evidence(path=scan.path, detail=f"{scan.size} bytes, {scan.n_lines} lines", rank=scan.rank)]
        ev.extend(launch_ev)
        if prog_path is not None:
            ev.append(Evidence(path=prog_path, detail="newest event file/checkpoint/trainer_state"))
        out.append(ctx.finding(f"{scan.path} {what}, {cause}.{hint}", key=f"log.empty:{_norm(scan.path)}",
                               facts=facts, evidence=ev, severity=severity))
    return out


def _norm(path: str) -> str:
    return regex.sub(r"\d+", "N", path)


# ----------------------------------------------------------------------------- run.stalled


# What may follow a setup message in a log that hung there: NCCL's INFO chatter and a bar still at 0.
# Nothing else - a warning printed after it is a sign the program went on.
# Lines that may follow a setup message without being the next stage: NCCL INFO, a bar at 0, a rule
# of dashes or equals signs, the HF Trainer's "***** Running training *****" block.
_AFTER_SETUP = regex.compile(
    r"NCCL INFO|^\s*(?:\w[\w ]{0,40}:\s*)?0%\|[^|]{0,200}\|\s*0/\d+ |^[\W_]+$"
    r"|^\s+(?:Num examples|Num Epochs|Instantaneous batch size|Total train batch size|Gradient Accumulation steps"
    r"|Total optimization steps|Number of trainable parameters)\b")


# A stop the user asked for at the terminal: Ctrl-C as the shell echoes it, SIGINT as launchers relay it.
_USER_INTERRUPT = regex.compile(r"\^C|\bSIGINT\b|\bKeyboardInterrupt\b|Received 2 death signal|got signal: 2\b"
                                r"|interrupted by signal 2\b")


def _user_interrupts(signals: list[Signal]) -> dict[str, int] | None:
    """path -> line of the first Ctrl-C when every end signal is the user's interrupt, else None."""
    if not signals or not all(s.termination and s.evidence.line is not None for s in signals):
        return None
    # (the stop's own traceback, and its header line, which end_signals marks as a termination)
    if not all(_USER_INTERRUPT.search(s.text) or s.kind in ("traceback", "error_line") for s in signals):
        return None
    first: dict[str, int] = {}
    for s in signals:
        line, path = s.evidence.line or 0, s.evidence.path or ""
        first[path] = min(first.get(path, line), line)
    return first


def stalled(ctx: CheckContext) -> Iterable[Finding]:
    """No new steps for long while the run was not finished, not failed and not exited; or a stop
    that caught the process waiting; or a log that stops on a setup message (:mod:`hang`)."""
    run = ctx.run
    waits = interrupted_waits(run)
    # (a crash elsewhere in the run: its survivors wait, and the crash is the story)
    if waits and all(is_stop(tb, run) or is_hang_dump(tb) for tb in final_tracebacks(run)):
        return [interrupted_hang_finding(ctx, waits)]
    last, planned = run.last_step, run.max_steps
    setup = [h for name, hs in ctx.hits.items() if name.startswith("setup_") for h in hs]
    signals = end_signals(run)
    interrupts = _user_interrupts(signals)
    if setup and not run.exit_codes and (not signals or interrupts is not None) \
            and (planned is None or last is None or last < planned or interrupts is not None):
        # (a user's Ctrl-C right after a setup message is how a hang in that stage usually ends; then a
        # step count an earlier bar reached - dataset loading "3/3" - says nothing about the stage it hung in)
        ended_on_setup = setup_stall_hits(run, setup, _AFTER_SETUP, interrupts)
        if ended_on_setup:
            return [setup_stall_finding(ctx, ended_on_setup, interrupted=interrupts is not None)]
    if last is None:
        raise NotEvaluated("no training step found in any artifact")
    if reached_plan(run):
        return []
    if end_signals(run) or run.exit_codes:
        return []  # it ended, and the end left a trace: other rules (or run.incomplete) say how
    t_prog, t_source = epoch_progress_time(run)
    cadence = cadence_seconds(run)
    threshold = _stall_threshold(ctx, cadence)
    facts: dict[str, object] = {"last_step": last, "max_steps": planned, "stall_threshold_seconds": threshold}
    if cadence is not None:
        facts["cadence_seconds"] = round(cadence, 3)
    ev: list[Evidence] = []
    reasons: list[str] = []
    confidence = Confidence.LOW
    # 1. Same-clock evidence: a log kept printing (timestamps) long after its last step.
    for scan in run.logs:
        df = run.scalars
        own = df[(df["path"] == scan.path) & df["wall_time"].notna()]
        if scan.last_wall_time is None or own.empty:
            continue
        gap = scan.last_wall_time - float(own["wall_time"].max())
        if gap > threshold:
            reasons.append(f"{scan.path} kept printing for {fmt_duration(gap)} after its last step")
            ev.append(Evidence(path=scan.path, line=scan.tail[-1][0] if scan.tail else None,
                               excerpt=scan.tail[-1][1][:300] if scan.tail else None))
            facts["seconds_alive_after_last_step"] = round(gap, 1)
            confidence = Confidence.HIGH
    # 2. A log written (mtime) long after the last progress: a later attempt that makes no steps.
    # Only with real mtimes: a copy gives the log the copy's time, days after the last step.
    if t_prog is not None:
        facts["last_progress_time"] = t_prog
        facts["last_progress_source"] = t_source
        logs = [a for a in run.discovery.artifacts if a.kind is ArtifactKind.LOG and run.clock.mtimes_trusted]
        for art in sorted(logs, key=lambda a: a.mtime, reverse=True)[:1]:  # the newest log: the latest attempt
            if art.mtime - t_prog > threshold:
                reasons.append(f"{art.path} was modified {fmt_duration(art.mtime - t_prog)} after the last step")
                ev.append(Evidence(path=art.path, detail=f"mtime {art.mtime:.0f}, last progress {t_prog:.0f}"))
                facts.setdefault("log_newer_than_progress_seconds", round(art.mtime - t_prog, 1))
                confidence = max(confidence, Confidence.MEDIUM)
        facts["seconds_since_progress"] = round(run.now - t_prog, 1)
        # Only "no new step since" without a sign of life is not a stall: a run killed without
        # a trace looks the same, and run.incomplete reports that.
    elif not reasons:
        raise NotEvaluated("no step times found (no TensorBoard wall times, no progress artifacts)")
    if not reasons:
        return []
    remaining = f" of {planned}" if planned is not None else ""
    msg = (f"The run stopped making progress at step {last}{remaining}: {'; '.join(reasons)}; it is hung "
           "(data loading, a collective, a deadlock) or was stopped without a trace.")
    if planned is not None:
        facts["steps_remaining"] = planned - last
    return [ctx.finding(msg, key="run.stalled", facts=facts, evidence=ev, confidence=confidence, step=last)]


# ----------------------------------------------------------------------------- run.incomplete

# Pattern names of rules/run/incomplete.yaml -> how the run was stopped.
_KIND_BY_PATTERN = {
    "slurm_time_limit": "scheduler time limit",
    "slurm_cancelled": "cancelled by the scheduler or a user",
    "slurm_preempted": "preempted",
    "preempted": "preempted",
    "keyboard_interrupt": "interrupted (SIGINT)",
    "lightning_graceful_shutdown": "interrupted (SIGINT)",
    "torchrun_sigint": "interrupted (SIGINT)",
    "torchrun_sighup": "SIGHUP, the hangup sent when the terminal or session that started it closed",
    "lsf_time_limit": "scheduler time limit",
    "pbs_walltime": "scheduler time limit",
    "sge_wallclock": "scheduler time limit",
    "lsf_cancelled": "cancelled by the scheduler or a user",
    "timeout_124": "time limit (timeout, exit 124)",
}


def _termination_kind(name: str, hit: Hit) -> str:
    if name == "ide_sigterm" and hit.groups.get("signal") == "SIGINT":
        return "interrupted (SIGINT)"
    if name == "signal_exception" and hit.groups.get("signal") == "1":
        return _KIND_BY_PATTERN["torchrun_sighup"]
    if name == "torchrun_sighup" and (hit.groups.get("signal") == "QUIT" or hit.groups.get("signal_number") == "3"):
        return "SIGQUIT"
    return _KIND_BY_PATTERN.get(name, "SIGTERM")


def incomplete(ctx: CheckContext) -> Iterable[Finding]:
    """Ended before its planned steps with no error recorded: a time limit, SIGTERM, preemption."""
    run = ctx.run
    if ctx.hits.get("ctx_nan_guard"):
        return []  # the framework's own NaN guard ended it: loss.nonfinite says so
    hits: list[tuple[str, Hit]] = [(name, h) for name, hs in ctx.hits.items() if not name.startswith("ctx_")
                                   for h in hs]
    hits.sort(key=lambda nh: (nh[1].path, nh[1].lineno))
    last, planned = run.last_step, run.max_steps
    signals = end_signals(run)
    errors = [s for s in signals if not s.termination and not _outlived(s, signals)]
    if errors:
        return []  # an error explains the end: the crash rules say which
    term_codes = [(p, c) for p, c in run.exit_codes if c in TERMINATION_EXIT_CODES]
    clean = exited_cleanly(run)
    epochs = epoch_plan(run) if planned is None else None
    if planned is None and epochs is None and not hits and not term_codes:
        if completion_line(run) is not None:
            return []  # no planned count, but the program said its training finished (Lightning's max_epochs)
        raise NotEvaluated("no planned step count (max_steps) or epoch count (epochs, 'Epoch N/M') "
                           "and no termination line")
    reached = reached_plan(run)
    restarted = reached and bool(hits) and _restarted_short(run)
    if (reached and not restarted) or (epochs is not None and epochs.reached):
        return []
    if not hits and not term_codes and early_stopped(run) is not None:
        return []  # its early-stopping callback ended it: the best validation value is patience epochs back
    if restarted:  # the counter's final position, not the earlier pass's total
        last = max(scan.last_step for scan in run.logs if scan.last_step is not None)
    facts: dict[str, object] = {"last_step": last, "max_steps": planned}
    if restarted:
        facts["progress_restarted"] = True
    if planned and last is not None:
        facts["fraction_done"] = round(last / planned, 4)
    if epochs is not None:
        facts.update(last_epoch=epochs.last, max_epochs=epochs.planned, last_epoch_source=epochs.last_source,
                     max_epochs_source=epochs.planned_source, fraction_done=round(epochs.last / epochs.planned, 4))
    ev: list[Evidence] = []
    confidence = Confidence.HIGH
    if hits:
        name, hit = hits[-1]
        facts["termination"] = _termination_kind(name, hit)
        facts["termination_line"] = hit.text.strip()[:300]
        facts.update({k: v for k, v in hit.groups.items() if v is not None})
        ev.extend(Evidence(path=h.path, line=h.lineno, excerpt=h.text.strip()[:300], rank=h.rank)
                  for _, h in hits[-5:])
        how = f"it was stopped from outside ({facts['termination']})"
    elif term_codes:
        facts["termination"] = "SIGTERM" if term_codes[0][1] in (143, -15, 15) else "interrupted (SIGINT)"
        facts["exit_code"] = term_codes[0][1]
        ev.append(Evidence(path=term_codes[0][0], excerpt=str(term_codes[0][1])))
        how = f"it exited with status {term_codes[0][1]} ({facts['termination']})"
    elif clean:
        facts["exit_code"] = 0
        ev.extend(Evidence(path=p, excerpt="0") for p, c in run.exit_codes if c == 0)
        how = "it exited with status 0 (the loop ended early: epochs vs max_steps, a break, an exhausted dataset)"
        confidence = Confidence.MEDIUM
    else:
        if completion_line(run) is not None:
            return []  # the program said its training finished: a short count is the plan's, not the run's
        t_prog, t_src = epoch_progress_time(run)
        idle = seconds_since_progress(run)
        if idle is None:
            raise NotEvaluated("it may still be running: nothing says it ended and no clock says when it last "
                               "progressed (its files' mtimes are recent or untrusted, and it wrote no time)")
        if t_prog is not None and idle < _stall_threshold(ctx, cadence_seconds(run)):
            return _maybe_running(ctx, t_prog, t_src)
        if t_prog is None:
            return _cannot_tell(ctx, epochs)
        how = ("it left no error, exit status or termination line (killed from outside, the log was cut, "
               "or the process is still alive and hung)")
        confidence = Confidence.LOW
    if epochs is not None:
        done = (f"in epoch {epochs.last} of {epochs.planned} ({100 * epochs.last / epochs.planned:.0f}%; "
                f"planned: {epochs.planned_source}; reached: {epochs.last_source})")
    elif last is None:
        done = "before logging any step"
    elif planned is not None:
        done = f"at step {last} of {planned} ({100 * last / planned:.0f}%)"
    else:
        done = f"at step {last}"
    latest = run.latest_valid_checkpoint
    resume = f"; resume from {latest.path}" if latest is not None else ""
    if latest is not None:
        facts["latest_valid_checkpoint"] = latest.path
    severity = None
    cut = interrupted_save(run) if confidence is Confidence.HIGH and "termination" in facts else None
    if cut is not None:
        # The recorded stop cut a save short: it cost a checkpoint, and it is what checkpoint.corrupt's
        # half-written directory comes from (the engine links the two by this fact), so it ranks with that damage.
        facts["interrupted_checkpoint"] = cut.path
        how += f", in the middle of saving {cut.path}, which it left incomplete"
        ev.append(Evidence(path=cut.path, detail="newest checkpoint, incomplete: the save the stop cut short"))
        severity = Severity.ERROR
    key = f"run.incomplete:{facts.get('termination', 'unknown')}"
    return [ctx.finding(f"The run ended {done}: {how}{resume}.", key=key,
                        facts=facts, evidence=ev, confidence=confidence, step=last, severity=severity)]


def _restarted_short(run: Run) -> bool:
    """Every log's progress ended short of the plan, which (the caller has seen) an earlier pass reached:
    the counter started over (a second round of workers' bars, the next loop over the same total)
    before the stop.

    The highest step reached the planned count, so the plan alone says "finished"; with a termination
    line after the restarted counter, the stop ended the later pass (a time limit glued to a redraw of
    8/25 after every bar once showed 25/25). Asked only when the plan was reached: otherwise a stop
    short of it is an ordinary one, not a restart."""
    planned = run.max_steps
    finals = [scan.last_step for scan in run.logs if scan.last_step is not None]
    return planned is not None and bool(finals) and all(f < planned for f in finals)


def _outlived(sig: Signal, signals: list[Signal]) -> bool:
    """A bare error line (no traceback) that a later termination line of the same log follows.

    The program went on after it (a job script's ``conda activate`` CommandNotFoundError, a
    warning-level error a library printed) and was then stopped from outside: the error did not
    end the run, the termination did.
    """
    if sig.kind != "error_line" or sig.evidence.line is None:
        return False
    return any(t.termination and t.kind == "termination" and t.evidence.path == sig.evidence.path
               and t.evidence.line is not None and t.evidence.line > sig.evidence.line for t in signals)


def _cannot_tell(ctx: CheckContext, epochs: EpochPlan | None = None) -> list[Finding]:
    """Short of max_steps, nothing recorded the end, and no clock tells how long ago the last step was.

    The log's lines simply stop: a run killed without a trace, a log cut by a paste or a partial
    copy, and a healthy run still going all look like this. Saying the run ended early would be a
    guess; the report says what it saw and that it cannot tell (info: never the primary finding).
    """
    run = ctx.run
    last, planned = run.last_step, run.max_steps
    if epochs is not None:  # planned in epochs: the log stops inside one short of (or in) the last
        facts: dict[str, object] = {"last_step": last, "last_epoch": epochs.last, "max_epochs": epochs.planned,
                                    "last_epoch_source": epochs.last_source,
                                    "max_epochs_source": epochs.planned_source}
        where = f"in epoch {epochs.last} of {epochs.planned}"
    elif last is None or planned is None:
        return []
    else:
        facts = {"last_step": last, "max_steps": planned, "fraction_done": round(last / planned, 4)}
        where = f"at step {last} of {planned}"
    msg = (f"The log stops {where} with no error, exit status or termination line, and no clock "
           "(TensorBoard wall times, the run's own file times) tells how long ago that step was: the run may have "
           "been killed without a trace, the log may be cut (a paste, a partial copy), or the run may still be "
           "going. Not enough to say it ended early.")
    return [ctx.finding(msg, key="run.incomplete:cannot_tell", facts=facts, severity=Severity.INFO,
                        confidence=Confidence.LOW, step=last)]


def _maybe_running(ctx: CheckContext, t_prog: float, t_src: str) -> list[Finding]:
    """Short of max_steps with no end recorded, and recent: say so (info) rather than nothing.

    A run analysed while it still runs (or right after a copy or a clone, which gives every
    file a fresh mtime) cannot be told from one that died silently a moment ago; the report
    must say why it draws no conclusion, not claim the run is fine.
    """
    run = ctx.run
    last, planned = run.last_step, run.max_steps
    if last is None or planned is None:
        return []
    age = max(0.0, run.now - t_prog)
    saving = [c.path for c in run.checkpoint_list if c.in_progress]
    facts: dict[str, object] = {"last_step": last, "max_steps": planned, "seconds_since_progress": round(age, 1),
                                "progress_source": t_src, "checkpoints_in_progress": saving}
    busy = (f"; {', '.join(saving[:3])} {'is' if len(saving) == 1 else 'are'} incomplete but recent "
            "(a save may be in progress)") if saving else ""
    msg = (f"The run is at step {last} of {planned} and its last progress is only {fmt_duration(age)} old ({t_src}): "
           f"it may still be running{busy}. Nothing says it ended; analyse it again once it has stopped.")
    ev = [Evidence(path=p, detail="incomplete, written recently: a save may be in progress") for p in saving[:3]]
    return [ctx.finding(msg, key="run.incomplete:maybe_running", facts=facts, evidence=ev, severity=Severity.INFO,
                        confidence=Confidence.LOW, step=last)]
