"""Where to resume from, and with which command.

Weights saved after the loss first went non-finite carry the NaN/Inf (or the blow-up
that produced it): resuming from them repeats the failure, so after a ``loss.nonfinite``
primary the restart point is the newest valid checkpoint saved *before* that step.
The resume command is the run's own launch command with the resume flag set, so the user
gets something to paste rather than a bare flag.
"""

from __future__ import annotations

import re
from typing import Any

from autopsy.model import Finding

_NONFINITE_RULE = "loss.nonfinite"
# A hint that is one flag with at most one value ("--resume_from_checkpoint DIR",
# "--resume_from_step 500"); advice in words ("set x: y in cfg.yaml:3", a flag with a
# parenthesised note) is not a command-line change and is shown on its own.
_FLAG_HINT = re.compile(r"^(?P<flag>--?[A-Za-z][\w.-]*)(?:[ =](?P<value>\S+))?$")


def first_nonfinite_step(primary: Finding | None) -> int | None:
    """The first non-finite loss step of a ``loss.nonfinite`` primary, else None."""
    if primary is None or primary.rule != _NONFINITE_RULE:
        return None
    for value in (primary.facts.get("first_step"), primary.facts.get("step"), primary.step):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def clean_checkpoint(run: Any, primary: Finding | None) -> tuple[Any, tuple[str, ...]]:
    """(checkpoint to resume from, paths of valid checkpoints saved at/after the first non-finite step).

    Without a non-finite primary this is simply the run's latest valid checkpoint. A
    checkpoint with no known step cannot be dated against the NaN and stays a candidate
    (ranked below any stepped one).
    """
    latest = run.latest_valid_checkpoint
    first = first_nonfinite_step(primary)
    if first is None or latest is None:
        return latest, ()
    valid = [c for c in run.checkpoint_list if c.valid]
    poisoned = tuple(c.path for c in valid if c.step is not None and c.step >= first)
    clean = [c for c in valid if c.step is None or c.step < first]
    best = max(clean, key=lambda c: (c.step if c.step is not None else -1, c.mtime)) if clean else None
    return best, poisoned


def launch_command(entries: Any, flag: str) -> str | None:
    """The run's training command from its launch script: the one already naming ``flag``, else the first."""
    cmds = [e for e in entries if getattr(e, "key", None) == "launch_command"
            and getattr(e, "source", None) == "launch_flag" and isinstance(e.text, str) and e.text.strip()]
    if not cmds:
        return None
    named = [e for e in cmds if any(w == flag or w.startswith(flag + "=") for w in e.text.split())]
    return str((named or cmds)[0].text).strip()


def resume_command(command: str, hint: str) -> str | None:
    """``command`` with the resume flag of ``hint`` set (replacing the flag if it is already there).

    None when ``hint`` is not a single command-line flag.
    """
    m = _FLAG_HINT.match(hint.strip())
    if m is None:
        return None
    flag, value = m.group("flag"), m.group("value")
    new = [flag] + ([value] if value is not None else [])
    words = command.split()
    for i, w in enumerate(words):
        if w.startswith(flag + "="):
            return " ".join(words[:i] + new + words[i + 1:])
        if w == flag:
            end = i + 2 if i + 1 < len(words) and not words[i + 1].startswith("-") else i + 1
            return " ".join(words[:i] + new + words[end:])
    return " ".join(words + new)


def full_resume_hint(hint: str | None, entries: Any) -> str | None:
    """The resume hint as a whole launch command when the run's launch script has one; else ``hint``."""
    if not hint:
        return hint
    m = _FLAG_HINT.match(hint.strip())
    cmd = launch_command(entries, m.group("flag")) if m else None
    full = resume_command(cmd, hint) if cmd else None
    return full or hint
