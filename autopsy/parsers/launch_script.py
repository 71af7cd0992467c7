"""Flags and settings of shell launch scripts (``run.sh``, ``*.sbatch``).

What a run was launched with outranks every config file, so each flag of a
``python``/``torchrun``/``accelerate``/``deepspeed`` command line becomes a
:class:`ConfigEntry` (source ``launch_flag``) with the line it is on: ``--flag=value`` and
``--flag value`` (a flag followed by another flag is a boolean ``True``), across ``\\``
line continuations. Also recorded: ``#SBATCH`` directives (``sbatch_time``...),
environment assignments (``export X=1`` and ``X=1 python ...``), the whole command as
``launch_command``, ``launch_uses_nohup`` and ``python_unbuffered`` (``python -u`` or
``PYTHONUNBUFFERED`` set: without it a crashed job's last prints are lost in the buffer).
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from autopsy.parsers.config_aliases import canonical_key
from autopsy.parsers.types import ConfigEntry

SOURCE = "launch_flag"
_LAUNCHERS = re.compile(r"^(?:python[0-9.]*|torchrun|accelerate|deepspeed|lightning|composer|tune|"
                        r"python[0-9.]*\s+-m\s+torch\.distributed\.(?:run|launch))$")
_ENV = re.compile(r"^(?:export\s+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$")
_SBATCH = re.compile(r"^#SBATCH\s+(?P<flag>--?[A-Za-z][\w-]*)(?:[=\s]+(?P<value>\S(?:[^#]*[^\s#])?))?\s*(?:#.*)?$")
_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)$")
_MAX_LINES = 20_000
# Bounds on a pathological script (one 16 MB line, millions of continuations, runs of
# unbalanced quotes): shlex is pure Python, so only short lines go through it.
MAX_SCRIPT_CHARS = 64 * 1024  # a launch script is a few KB; the rest of a larger file is not read
_MAX_COMMANDS = 256  # launcher commands read from one script
_MAX_SHLEX_CHARS = 4096  # a longer line is split on blanks (no quote handling)
_MAX_SEGMENTS = 512  # continuation lines joined into one command
_MAX_TOKENS = 4096  # words of one command


def parse_value(text: str) -> Any:
    """A value as written on a command line or in a config: int, float, bool, None or str."""
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "\"'":
        return t[1:-1]
    low = t.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null", "~"):
        return None
    if _NUMBER.match(t):
        try:
            return int(t)
        except ValueError:
            return float(t)
    return t


def parse_launch_script(text: str, rel_path: str) -> list[ConfigEntry]:
    """Every flag, directive and env assignment of a shell script, with its line."""
    entries: list[ConfigEntry] = []
    env_unbuffered = False
    commands: list[tuple[int, list[tuple[str, int]], str]] = []  # (first line, tokens+lines, text)
    for first, segments in _logical_lines(text[:MAX_SCRIPT_CHARS].splitlines()[:_MAX_LINES]):
        stripped = segments[0][1].strip()
        m = _SBATCH.match(stripped) if len(stripped) <= _MAX_SHLEX_CHARS else None
        if m:
            flag = m.group("flag").lstrip("-").replace("-", "_")
            value = m.group("value") or ""
            entries.append(ConfigEntry(f"sbatch_{flag}", f"#SBATCH --{flag}", parse_value(value) if value else True,
                                       value, rel_path, first, SOURCE))
            continue
        if stripped.startswith("#") or not stripped:
            continue
        tokens = _tokens(segments)
        if not tokens:
            continue
        # leading env assignments: "export X=1" or "X=1 Y=2 python train.py"
        i = 0
        if tokens[0][0] == "export":
            i = 1
        while i < len(tokens):
            m = _ENV.match(tokens[i][0])
            if not m:
                break
            name, value = m.group("name"), m.group("value")
            if name == "PYTHONUNBUFFERED" and value not in ("", "0"):
                env_unbuffered = True
            entries.append(ConfigEntry(name, name, parse_value(value), value, rel_path, tokens[i][1], SOURCE))
            i += 1
        rest = tokens[i:]
        start = _launcher_index(rest)
        if start is not None and len(commands) < _MAX_COMMANDS:
            commands.append((first, rest, " ".join(t for t, _ in rest)))
            entries.extend(_flags(rest, start, rel_path))
    for n, (first, toks, line_text) in enumerate(commands):
        words = [t for t, _ in toks]
        entries.append(ConfigEntry("launch_command", "launch_command", line_text, line_text, rel_path, first, SOURCE))
        entries.append(ConfigEntry("launch_uses_nohup", "nohup", "nohup" in words, "nohup" if "nohup" in words else "",
                                   rel_path, first, SOURCE))
        unbuffered = env_unbuffered or any(w == "-u" or (w.startswith("-") and not w.startswith("--") and "u" in w
                                                         and w[1:].isalpha() and len(w) <= 4)
                                           for w in words[: _script_index(words)])
        if n == 0 or unbuffered:
            entries.append(ConfigEntry("python_unbuffered", "python -u / PYTHONUNBUFFERED", unbuffered,
                                       "-u" if unbuffered else "", rel_path, first, SOURCE))
    return entries


def _logical_lines(lines: list[str]) -> list[tuple[int, list[tuple[int, str]]]]:
    """Join ``\\``-continued lines: (first line number, [(line number, text without the backslash)])."""
    out: list[tuple[int, list[tuple[int, str]]]] = []
    current: list[tuple[int, str]] = []
    for no, line in enumerate(lines, 1):
        body = line.rstrip()
        cont = body.endswith("\\") and not body.endswith("\\\\")
        current.append((no, body[:-1] if cont else body))
        if not cont or len(current) >= _MAX_SEGMENTS:
            out.append((current[0][0], current))
            current = []
    if current:
        out.append((current[0][0], current))
    return out


def _tokens(segments: list[tuple[int, str]]) -> list[tuple[str, int]]:
    toks: list[tuple[str, int]] = []
    for no, seg in segments:
        if len(seg) > _MAX_SHLEX_CHARS:
            words = seg.split("#", 1)[0].split()
        else:
            try:
                words = shlex.split(seg, comments=True)
            except ValueError:  # a quote spanning lines or unbalanced: plain split is good enough
                words = seg.split("#", 1)[0].split()
        toks.extend((w, no) for w in words[:_MAX_TOKENS - len(toks)])
        if len(toks) >= _MAX_TOKENS:
            break
    # stop at shell control operators: "cmd > log 2>&1 &" keeps only cmd's words
    for k, (w, _) in enumerate(toks):
        if w in ("|", "||", "&&", ";", "&") or w.startswith((">", "2>", "1>", "&>")):
            return toks[:k]
    return toks


def _launcher_index(tokens: list[tuple[str, int]]) -> int | None:
    for k, (w, _) in enumerate(tokens[:8]):
        base = w.rsplit("/", 1)[-1]
        if _LAUNCHERS.match(base):
            return k
    return None


def _script_index(words: list[str]) -> int:
    for k, w in enumerate(words):
        if w.endswith(".py") or w == "-m":
            return k
    return len(words)


def _flags(tokens: list[tuple[str, int]], start: int, rel_path: str) -> list[ConfigEntry]:
    out: list[ConfigEntry] = []
    k = start + 1
    n = len(tokens)
    while k < n:
        word, line = tokens[k]
        if word.startswith("--") and len(word) > 2:
            if "=" in word:
                flag, value = word.split("=", 1)
                out.append(_entry(flag, value, rel_path, line))
            elif k + 1 < n and not _is_flag(tokens[k + 1][0]):
                out.append(_entry(word, tokens[k + 1][0], rel_path, line))
                k += 1
            else:
                out.append(ConfigEntry(canonical_key(word, True), word, True, "", rel_path, line, SOURCE))
        k += 1
    return out


def flag_entries(argv: list[str], rel_path: str, line: int) -> list[ConfigEntry]:
    """The ``--flag value`` entries of one argument vector (``argv[0]`` the program), all on ``line``."""
    return _flags([(w, line) for w in argv], 0, rel_path)


def _is_flag(word: str) -> bool:
    return word.startswith("-") and not _NUMBER.match(word)


def _entry(flag: str, text: str, rel_path: str, line: int) -> ConfigEntry:
    value = parse_value(text)
    return ConfigEntry(canonical_key(flag, value), flag, value, text, rel_path, line, SOURCE)


def launch_commands(text: str) -> list[tuple[int, list[str], list[tuple[str, str]]]]:
    """Each training command of a shell script: (line, its words from the launcher on, the
    variables set before it: ``export X=1`` lines and ``X=1 python ...`` prefixes, in order).

    Words are as the shell splits them (quotes removed); redirections and what follows a
    control operator are not part of the command.
    """
    out: list[tuple[int, list[str], list[tuple[str, str]]]] = []
    env: list[tuple[str, str]] = []
    for first, segments in _logical_lines(text.splitlines()[:_MAX_LINES]):
        stripped = segments[0][1].strip()
        if stripped.startswith("#") or not stripped:
            continue
        words = [w for w, _ in _tokens(segments)]
        i = 1 if words[:1] == ["export"] else 0
        inline: list[tuple[str, str]] = []
        while i < len(words) and (m := _ENV.match(words[i])):
            inline.append((m.group("name"), m.group("value")))
            i += 1
        rest = [(w, first) for w in words[i:]]
        start = _launcher_index(rest)
        if start is None:
            env.extend(inline)
            continue
        out.append((first, words[i:], [*env, *inline]))
    return out
