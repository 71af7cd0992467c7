"""Uncaught exceptions a log keeps without their traceback, for ``crash.exception``.

The last line of an exception kept alone (a paste, ``tail``), a message that runs on below its
exception line to the log's end, argparse's refusal after its usage block, libtorch's C++ report
with no Python traceback, and hydra's short report of a failed job. Each is returned as a hit; the
check decides whether another card explains it and whether training went on after it.
"""

from __future__ import annotations

from collections.abc import Sequence

import regex

from autopsy.checks.tb_causes import read_before
from autopsy.engine.types import CheckContext
from autopsy.parsers.types import Hit

# The last line of an uncaught exception: "ValueError: bad value", "AssertionError", "ZeroDivisionError: ...".
_LAST_LINE_EXC = regex.compile(r"^\s*(?P<exc_type>(?:[A-Za-z_]\w*\.){0,6}[A-Z]\w*)(?:: (?P<message>\S.*))?\s*$")
# argparse's exit on a bad command line: "usage: train.py [-h] ..." then "train.py: error: unrecognized arguments:
# -ws 8" (status 2, no traceback). Read only as a log's last line, with its usage line just above.
_ARGPARSE_ERROR = regex.compile(r"^\s*(?P<prog>[\w.\-]+(?:\.py)?): error: (?P<message>\S.*?)\s*$")
_ARGPARSE_USAGE = regex.compile(r"^\s*usage: \S")
# A wrapped usage line's continuation: argparse indents it under the first option ("                     [--fp16
# [FP16]] [--bf16 [BF16]]", a required "--output_dir OUTPUT_DIR", a choice "{sft,rm,ppo}").
_USAGE_CONTINUATION = regex.compile(r"^\s{4,}(?:\[-|--?\w|\{)")
_BUILTIN_EXC = frozenset({"AssertionError", "StopIteration", "KeyboardInterrupt", "SystemExit", "RecursionError",
                          "MemoryError", "EOFError"})


_EXC_MODULES = frozenset({"exc", "exceptions", "errors", "error"})
_MESSAGE_LINES = 40  # lines a multi-line exception message may take below its exception line
_WRAP_WIDTH = 80  # a line at least this long may have been wrapped by the terminal onto the next one
_BODY_CHARS = 4000  # of such a message's lines, read by the cards that may explain it


def looks_like_exception(name: str) -> bool:
    """Its name says so, or the module it comes from does ("torch._dynamo.exc.FailOnRecompileLimitHit")."""
    module, _, last = name.rpartition(".")
    return (last.endswith(("Error", "Exception")) or last in _BUILTIN_EXC
            or bool(_EXC_MODULES.intersection(module.split("."))))




def headless_candidates(ctx: CheckContext, headless: Sequence[Hit], c10_reports: Sequence[Hit]) -> list[Hit]:
    """The exceptions kept without a traceback besides the card's own headless-exception hits (``headless``):
    libtorch's C++ reports (the card's ``c10_error_report`` hits), a log's last line, hydra's report."""
    return [*_c10_reports(ctx, headless, c10_reports), *_last_line_exceptions(ctx), *_hydra_reports(ctx)]


def _c10_reports(ctx: CheckContext, headless: Sequence[Hit], c10_reports: Sequence[Hit]) -> list[Hit]:
    """libtorch's "Exception raised from X at file:line (most recent call first):" with no Python traceback
    (a .NET / Java / C++ host): the error whose message is the line above it. Left out when that line is
    already the host's own exception line (a headless_exception hit just above)."""
    heads = {(h.path, h.lineno) for h in headless}
    out = []
    for h in c10_reports:
        if any((h.path, h.lineno - d) in heads for d in (1, 2)):
            continue
        above = [ln.strip() for ln in read_before(ctx.run, h, 3) if ln.strip()]
        out.append(Hit(key=h.key, path=h.path, lineno=h.lineno, offset=h.offset, text=h.text,
                       groups={"exc_type": "c10::Error", "message": above[-1] if above else ""},
                       rank=h.rank, wall_time=h.wall_time, step=h.step))
    return out


def _message_head(tail: Sequence[tuple[int, str]]) -> tuple[int, str, str] | None:
    """The exception line of a multi-line message that ends the log: "RuntimeError: Error(s) in loading
    state_dict for DataParallel:" whose message goes on below it, indented ("\tMissing key(s) in
    state_dict: ..."), and wrapped by the terminal (a line below one of at least ``_WRAP_WIDTH``
    characters), with that message's lines joined. None when the log's last lines are not such a
    continuation."""
    lines = [(n, line) for n, line in tail if line.strip()][-_MESSAGE_LINES - 1:]
    for i in range(len(lines) - 2, -1, -1):
        n, line = lines[i]
        m = _LAST_LINE_EXC.match(line)
        if m is not None and looks_like_exception(m.group("exc_type")):
            body = lines[i + 1:]
            if line.rstrip().endswith(":") and body[0][1][:1] in (" ", "\t") and all(
                    cur[:1] in (" ", "\t") or len(prev.rstrip()) >= _WRAP_WIDTH
                    for (_, prev), (_, cur) in zip(lines[i:-1], body, strict=True)):
                return n, line, "\n".join(text for _, text in body)
            return None
        if line.lstrip().startswith(("Traceback (most recent call last)", 'File "')):
            return None
    return None


# hydra's report of a job that raised, without HYDRA_FULL_ERROR (hydra/_internal/utils.py run_and_report):
# "Error executing job with overrides: [...]", the exception's text (for an instantiation: "Error in call to
# target 'pkg.Class':" and the cause's repr, "ValueError(\"Directory ... does not exist\")"), then
# "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace." The job died; when hydra
# strips the whole traceback, these lines are all the log holds of the exception.
_HYDRA_HEAD = regex.compile(r"^Error executing job with overrides: ")
_HYDRA_TAIL = regex.compile(r"^Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace")
_REPR_EXC = regex.compile(r"^\s*(?P<exc_type>(?:[A-Za-z_]\w*\.){0,6}[A-Z]\w*)\((?P<message>.*)\)\s*$")


def _hydra_reports(ctx: CheckContext) -> list[Hit]:
    """hydra's short report of a failed job, kept without a traceback: its exception lines as a headless hit."""
    out = []
    for scan in ctx.run.logs:
        lines = [(n, line) for n, line in scan.tail if line.strip()]
        end = next((i for i in range(len(lines) - 1, -1, -1) if _HYDRA_TAIL.match(lines[i][1].strip())), None)
        if end is None:
            continue
        start = next((i for i in range(end - 1, -1, -1) if _HYDRA_HEAD.match(lines[i][1].strip())), None)
        body = lines[start + 1:end] if start is not None else []
        if not body or any(line.lstrip().startswith(("Traceback (most recent call last)", 'File "'))
                           for _, line in body):
            continue  # no exception text, or hydra printed the traceback (read as one)
        exc_type, message, lead = "", body[0][1].strip(), body[0]
        for n, line in body:
            m = _REPR_EXC.match(line) or _LAST_LINE_EXC.match(line)
            if m is not None and looks_like_exception(m.group("exc_type")):
                exc_type, message, lead = m.group("exc_type"), _unquoted(m.group("message") or ""), (n, line)
        out.append(Hit(key=f"{ctx.card.id}/hydra_report", path=scan.path, lineno=lead[0], offset=-1, text=lead[1],
                       groups={"exc_type": exc_type or "hydra job error", "message": message,
                               "body": "\n".join(line for _, line in body)[:_BODY_CHARS]},
                       rank=scan.rank, step=scan.last_step))
    return out


def _unquoted(text: str) -> str:
    """A repr's message without its quotes: "'bad value'" -> "bad value"."""
    text = text.strip()
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" else text


def _after_usage(tail: Sequence[tuple[int, str]], lineno: int) -> bool:
    """The lines just above ``lineno`` are argparse's usage: its "usage: prog ..." line a few lines up, or
    the continuation lines it wraps into, back to that line or to the start of the kept tail (a parser with
    hundreds of options, HfArgumentParser's TrainingArguments, wraps its usage over 140 lines)."""
    if any(_ARGPARSE_USAGE.match(line) for n, line in tail if lineno - 4 <= n < lineno):
        return True
    above = [line for n, line in tail if n < lineno and line.strip()][::-1]
    continuations = 0
    for line in above:
        if _ARGPARSE_USAGE.match(line):
            return True
        if not _USAGE_CONTINUATION.match(line):
            return False
        continuations += 1
    return continuations >= 3  # the usage line is above the kept tail


def _last_line_exceptions(ctx: CheckContext) -> list[Hit]:
    """A plain "ZeroDivisionError: division by zero" as the last line of a log: what CPython's excepthook
    prints last, kept without its traceback (a tail, a paste). Only the last line: earlier such lines
    may have been logged by a program that went on."""
    out = []
    for scan in ctx.run.logs:
        last = next(((n, line) for n, line in reversed(scan.tail) if line.strip()), None)
        if last is None:
            continue
        head = _message_head(scan.tail)
        if head is not None:
            last = head[:2]
        m = _LAST_LINE_EXC.match(last[1])
        a = _ARGPARSE_ERROR.match(last[1])
        if a is not None and _after_usage(scan.tail, last[0]):
            out.append(Hit(key=f"{ctx.card.id}/last_line_exception", path=scan.path, lineno=last[0], offset=-1,
                           text=last[1], groups={"exc_type": "argparse.ArgumentError", "message": a.group("message"),
                                                 "prog": a.group("prog")},
                           rank=scan.rank, step=scan.last_step))
        elif m is not None and looks_like_exception(m.group("exc_type")):
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            if head is not None:
                groups["multiline"] = "yes"
                groups["body"] = head[2][:_BODY_CHARS]
            out.append(Hit(key=f"{ctx.card.id}/last_line_exception", path=scan.path, lineno=last[0], offset=-1,
                           text=last[1], groups=groups, rank=scan.rank, step=scan.last_step))
    return out
