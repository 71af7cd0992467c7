"""Shared helpers for the log-pattern ("crash") checks: hits to evidence, sizes, steps, frames.

Other rule modules may import from here; keep signatures stable. Everything is read-only
on the run: the only file access is :func:`read_after`, which re-reads a few KB of a log
at a hit's byte offset (to quote the frames a segfault handler printed below it).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import regex

from autopsy.engine.patterns import hit_evidence, normalise_key, typed
from autopsy.model import Evidence, Finding
from autopsy.parsers.safe_open import open_binary
from autopsy.parsers.types import ConfigEntry, Frame, Hit, LogScan, Traceback

if TYPE_CHECKING:
    from autopsy.engine.types import CheckContext
    from autopsy.run import Run


MAX_EVIDENCE = 5
CONTEXT_PREFIX = "ctx_"  # pattern names that only add context; they never fire a rule alone
_PLUMBING_GROUPS = frozenset({"quote"})  # regex helper groups (matching quotes), not facts

_UNIT_BYTES: dict[str, float] = {
    "b": 1, "byte": 1, "bytes": 1,
    "kib": 1024.0, "mib": 1024.0**2, "gib": 1024.0**3, "tib": 1024.0**4, "pib": 1024.0**5,
    # Decimal units as printed by df, huggingface_hub, slurm; K/M/G alone are binary (kernel, slurm).
    "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15,
    "k": 1024.0, "m": 1024.0**2, "g": 1024.0**3, "t": 1024.0**4,
}
_SIZE_RE = regex.compile(r"(?P<num>\d+(?:,\d{3})*(?:\.\d+)?)\s*(?P<unit>[KMGTP]i?B|bytes?|B)\b")
_SITE = regex.compile(r"(?:site|dist)-packages[/\\]|[/\\]lib[/\\]python\d[\d.]*[/\\]|^<frozen |^<string>|^<[^>]+>$")


# ----------------------------------------------------------------------------- sizes

def size_to_bytes(number: str | float | None, unit: str | None) -> float | None:
    """``("2.00", "GiB")`` -> bytes; None when either part is missing or the unit unknown."""
    if number is None or unit is None:
        return None
    try:
        value = float(str(number).replace(",", ""))
    except ValueError:
        return None
    factor = _UNIT_BYTES.get(unit.strip().lower())
    return None if factor is None else value * factor


def size_to_gib(number: str | float | None, unit: str | None) -> float | None:
    b = size_to_bytes(number, unit)
    return None if b is None else b / 1024.0**3


def parse_size_gib(text: str | None) -> float | None:
    """The first size in ``text`` ("13.12 GiB", "0 bytes", "6.75 MiB") in GiB."""
    if not text:
        return None
    m = _SIZE_RE.search(text)
    return size_to_gib(m.group("num"), m.group("unit")) if m else None


def fmt_gib(value: float | None) -> str:
    """A GiB figure for a message: 2 decimals, MiB below 1 GiB so "0.01 GiB" never hides 6 MiB."""
    if value is None:
        return "?"
    if 0 < value < 1:
        return f"{value * 1024:.0f} MiB"
    return f"{value:.2f} GiB"


# ----------------------------------------------------------------------------- hits

def group(hit: Hit, name: str) -> str | None:
    """A named group of a hit, None when absent or empty."""
    value = hit.groups.get(name)
    if value is None:
        return None
    value = str(value).strip()
    return value or None


def group_int(hit: Hit, name: str) -> int | None:
    value = group(hit, name)
    if value is None:
        return None
    try:
        return int(value.replace(",", ""))
    except ValueError:
        return None


def group_float(hit: Hit, name: str) -> float | None:
    value = group(hit, name)
    if value is None:
        return None
    try:
        return float(value.replace(",", ""))
    except ValueError:
        return None


def hits_of(ctx: CheckContext, *names: str) -> list[Hit]:
    """The kept hits of these patterns (all non-context patterns when none given), file then line order.

    One hit per line: a line that two patterns match ("[Errno 122] Disk quota exceeded") is one
    event; the pattern listed first (in ``names``, else card order) keeps it.
    """
    wanted = names or tuple(n for n in ctx.hits if not n.startswith(CONTEXT_PREFIX))
    out: dict[tuple[str, int], Hit] = {}
    for h in (h for n in wanted for h in ctx.hits.get(n, ())):
        out.setdefault((h.path, h.lineno), h)
    return sorted(out.values(), key=lambda h: (h.path, h.lineno))


def earliest(hits: Sequence[Hit]) -> Hit:
    """The hit that happened first: by timestamp when lines carry one, else file then line order."""
    timed = [h for h in hits if h.wall_time is not None]
    if timed:
        return min(timed, key=lambda h: (h.wall_time, h.path, h.lineno))
    return min(hits, key=lambda h: (h.path, h.lineno))


def ranks_of(hits: Iterable[Hit], run: Run | None = None) -> list[int]:
    """Ranks of these hits: the line prefix's rank, else the file's rank."""
    out: set[int] = set()
    for h in hits:
        rank = h.rank
        if rank is None and run is not None:
            scan = scan_of(run, h.path)
            rank = scan.rank if scan is not None else None
        if rank is not None:
            out.add(rank)
    return sorted(out)


def hit_rank(hit: Hit, run: Run) -> int | None:
    if hit.rank is not None:
        return hit.rank
    scan = scan_of(run, hit.path)
    return scan.rank if scan is not None else None


def hit_count(run: Run, rule_id: str, names: Iterable[str]) -> int:
    """Every line these patterns hit across all logs (the scanner counts past the kept hits)."""
    keys = {f"{rule_id}/{n}" for n in names}
    return sum(hl.count for scan in run.logs for k, hl in scan.hits.items() if k in keys)


def scan_of(run: Run, path: str) -> LogScan | None:
    for scan in run.logs:
        if scan.path == path:
            return scan
    return None


def excerpt(text: str, limit: int = 200) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def evidence_for(hits: Sequence[Hit], limit: int = MAX_EVIDENCE, *, per_rank: bool = True) -> list[Evidence]:
    """Evidence lines: the first hit of each (file, rank) first, then the others, up to ``limit``."""
    chosen: list[Hit] = []
    seen: set[tuple[str, int | None]] = set()
    if per_rank:
        for h in hits:
            if (h.path, h.rank) not in seen:
                seen.add((h.path, h.rank))
                chosen.append(h)
    for h in hits:
        if h not in chosen:
            chosen.append(h)
    return [hit_evidence(h) for h in chosen[:limit]]


def recovered(run: Run, hit: Hit, min_steps_after: int) -> bool:
    """True when training went on in the same log after this line: the error was caught, not fatal.

    A crash line followed by ``min_steps_after`` more training steps (an OOM caught by a
    batch-size finder, a missing optional file) did not stop the run. ``min_steps_after``
    of 2+ keeps one straggling step logged by another rank from hiding a real crash.
    """
    if min_steps_after <= 0:
        return False
    scan = scan_of(run, hit.path)
    if scan is None or scan.last_step is None:
        return False
    before = hit.step if hit.step is not None else 0
    return scan.last_step >= before + min_steps_after


def other_rule_fired_lines(run: Run, rule_id: str) -> list[Hit]:
    """Kept hits of another rule's firing (non-context) patterns, when that rule was loaded."""
    prefix = rule_id + "/"
    out = []
    for scan in run.logs:
        for key, hl in scan.hits.items():
            if key.startswith(prefix) and not key[len(prefix):].startswith(CONTEXT_PREFIX):
                out.extend(hl.all_kept())
    return out


# ----------------------------------------------------------------------------- config

def config_lookup(run: Run, keys: Sequence[str]) -> ConfigEntry | None:
    """The first of ``keys`` (canonical names, in order of preference) the run's configs set."""
    for key in keys:
        try:
            entry = run.config_value(key)
        except Exception:  # a config parser bug must not hide a crash finding
            return None
        if entry is not None:
            return entry
    return None


# DataLoader settings that decide host RAM use, cited by oom.host and data.worker (canonical
# keys in order of preference: generic configs, then HF TrainingArguments' dataloader_* names).
LOADER_KEYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("num_workers", ("num_workers", "dataloader_num_workers", "workers")),
    ("pin_memory", ("pin_memory", "dataloader_pin_memory")),
    ("persistent_workers", ("persistent_workers", "dataloader_persistent_workers")),
    ("prefetch_factor", ("prefetch_factor", "dataloader_prefetch_factor")),
)


def cite_config(run: Run, specs: Sequence[tuple[str, Sequence[str]]]
                ) -> tuple[dict[str, Any], list[Evidence], list[str]]:
    """Facts, evidence and ``key=value (file:line)`` phrases for each (fact, config keys) found.

    Each fact gets ``<fact>``, ``<fact>_key`` (as written) and ``<fact>_source`` (file:line).
    """
    facts: dict[str, Any] = {}
    evidence: list[Evidence] = []
    cited: list[str] = []
    for fact, keys in specs:
        entry = config_lookup(run, list(keys))
        if entry is None:
            continue
        facts[fact] = entry.value
        facts[f"{fact}_key"] = entry.raw_key
        facts[f"{fact}_source"] = config_where(entry)
        evidence.append(config_evidence(entry))
        cited.append(f"{entry.raw_key}={entry.text} ({config_where(entry)})")
    return facts, evidence, cited


def config_evidence(entry: ConfigEntry) -> Evidence:
    return Evidence(path=entry.path, line=entry.line, excerpt=f"{entry.raw_key}: {entry.text}".strip(),
                    detail=f"config ({entry.source})")


def config_where(entry: ConfigEntry) -> str:
    return f"{entry.path}:{entry.line}" if entry.line is not None else entry.path


# ----------------------------------------------------------------------------- tracebacks

def tb_chain(tb: Traceback) -> list[Traceback]:
    """This traceback and every one it was raised from or during (outermost cause last)."""
    out: list[Traceback] = []
    cur: Traceback | None = tb
    while cur is not None and len(out) < 32:
        out.append(cur)
        cur = cur.cause
    return out


def final_tracebacks(run: Run) -> list[Traceback]:
    """Tracebacks that are not the cause/context of a later one (the exception that escaped)."""
    tbs = run.all_tracebacks
    causes = {id(c) for tb in tbs for c in tb_chain(tb)[1:]}
    # A parser may list causes separately as equal (not identical) objects: compare positions too.
    cause_pos = {(c.path, c.line_start) for tb in tbs for c in tb_chain(tb)[1:]}
    return [tb for tb in tbs if id(tb) not in causes and (tb.path, tb.line_start) not in cause_pos]


def traceback_at(run: Run, hit: Hit, slack_lines: int = 3) -> Traceback | None:
    """The traceback (or chained cause) whose span holds this hit's line."""
    best: Traceback | None = None
    for tb in run.all_tracebacks:
        for t in tb_chain(tb):
            if t.path == hit.path and t.line_start <= hit.lineno <= t.line_end + slack_lines:
                if best is None or t.line_start >= best.line_start:
                    best = t
    return best


def exception_line(tb: Traceback) -> str:
    first = tb.message.splitlines()[0] if tb.message else ""
    return f"{tb.exc_type}: {first}" if first else tb.exc_type


def is_library_frame(frame: Frame) -> bool:
    """Frames of installed packages, the standard library and frozen/internal modules."""
    return bool(_SITE.search(frame.file.replace("\\", "/")))


def project_frame(tb: Traceback) -> Frame | None:
    """The innermost frame of the user's own code, else the innermost frame."""
    for frame in reversed(tb.frames):
        if not is_library_frame(frame):
            return frame
    return tb.innermost


def frame_text(frame: Frame | None) -> str | None:
    if frame is None:
        return None
    where = f"{frame.file}:{frame.line}" if frame.line is not None else frame.file
    return f"{where} in {frame.function}" if frame.function else where


def frame_evidence(tb: Traceback, frame: Frame | None) -> Evidence:
    detail = f"frame {frame_text(frame)}" if frame is not None else None
    return Evidence(path=tb.path, line=tb.line_start, line_end=tb.line_end, excerpt=excerpt(exception_line(tb), 300),
                    detail=detail, step=tb.step, rank=tb.rank)


# ----------------------------------------------------------------------------- misc

def signal_name(number: int | None) -> str | None:
    """``9`` -> ``"SIGKILL"``; None for 0/unknown."""
    if not number:
        return None
    try:
        return signal.Signals(abs(number)).name
    except ValueError:
        return f"signal {abs(number)}"


def read_after(run: Run, hit: Hit, max_lines: int = 20, max_bytes: int = 16384) -> list[str]:
    """Up to ``max_lines`` lines that follow a hit in its log (read at the hit's byte offset)."""
    try:
        with open_binary(run.fs_path(hit.path)) as fh:
            fh.seek(max(hit.offset, 0))
            data = fh.read(max_bytes)
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    return [ln.rstrip() for ln in lines[1 : max_lines + 1]]


def line_rule(
    ctx: CheckContext,
    *,
    names: Sequence[str] = (),
    message: Callable[[Hit, Mapping[str, Any], int], str],
    facts: Callable[[Hit], Mapping[str, Any]] | None = None,
    key: Callable[[Hit], str] | None = None,
    skip: Callable[[Hit], bool] | None = None,
) -> list[Finding]:
    """Findings for a plain "this line means this failure" rule, one per distinct failure.

    Drops hits that ``skip`` rejects and those followed by training progress
    (``params.progress_after_steps``); groups the rest by ``key`` (default: the
    normalised line), so one failure seen by eight ranks is one finding listing the ranks.
    The finding's facts: the named groups of its first hit, ``facts(hit)``, ``count``,
    ``ranks``, ``step``, and the innermost project frame of the traceback holding the line.
    """
    min_after = int(ctx.params.get("progress_after_steps", 2))
    # One hit per line: the first pattern in ``names`` order wins (specific before generic).
    order = names or tuple(n for n in ctx.hits if not n.startswith(CONTEXT_PREFIX))
    seen: set[tuple[str, int]] = set()
    hits = []
    for n in order:
        for h in ctx.hits.get(n, ()):
            if (h.path, h.lineno) not in seen and not (skip and skip(h)):
                seen.add((h.path, h.lineno))
                hits.append(h)
    hits.sort(key=lambda h: (h.path, h.lineno))
    hits = [h for h in hits if not recovered(ctx.run, h, min_after)]
    groups: dict[str, list[Hit]] = {}
    for h in hits:
        groups.setdefault(key(h) if key else normalise_key(h.text), []).append(h)
    findings = []
    for k, members in groups.items():
        first = earliest(members)
        f: dict[str, Any] = {}
        for name, value in first.groups.items():
            if value is not None and str(value).strip() and name not in _PLUMBING_GROUPS:
                f[name] = typed(str(value))
        if facts is not None:
            f.update({n: v for n, v in facts(first).items() if v is not None})
        f["count"] = len(members)
        ranks = ranks_of(members, ctx.run)
        if ranks:
            f["ranks"] = ranks
            f["rank"] = hit_rank(first, ctx.run) if hit_rank(first, ctx.run) is not None else ranks[0]
        if first.step is not None:
            f["step"] = first.step
        evidence = evidence_for([first, *[m for m in members if m is not first]])
        tb = traceback_at(ctx.run, first)
        if tb is not None:
            frame = project_frame(tb)
            if frame is not None:
                f["frame"] = frame_text(frame)
                evidence.append(frame_evidence(tb, frame))
        findings.append(ctx.finding(message(first, f, len(members)), key=k, facts=f, evidence=evidence,
                                    step=first.step, wall_time=first.wall_time))
    return findings


def where(hit: Hit) -> str:
    return f"{hit.path}:{hit.lineno}"


def rank_phrase(facts: Mapping[str, Any]) -> str:
    ranks = facts.get("ranks") or []
    if not ranks:
        return ""
    if len(ranks) == 1:
        return f" on rank {ranks[0]}"
    return f" on ranks {', '.join(map(str, ranks[:8]))}{'...' if len(ranks) > 8 else ''}"
