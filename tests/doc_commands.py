"""Find the ``autopsy ...`` commands in markdown and check them against click's command tree.

Used by tests/test_docs.py for README.md and docs/*.md: a documented command must parse
the way click would parse it (real subcommands and options, valid choices, its arguments),
so a renamed option breaks the test instead of the reader's copy-paste.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

import click

from autopsy.cli import main as cli_main


class CommandError(AssertionError):
    pass


def option_map(cmd: click.Command) -> dict[str, click.Parameter]:
    out: dict[str, click.Parameter] = {}
    for param in cmd.get_params(click.Context(cmd)):
        if isinstance(param, click.Option):
            for opt in (*param.opts, *param.secondary_opts):
                out[opt] = param
    return out


def _takes_value(param: click.Parameter) -> bool:
    return isinstance(param, click.Option) and not param.is_flag and not param.count


def _check_value(opt: str, param: click.Parameter, value: str) -> None:
    if isinstance(param.type, click.Choice):
        choices = [str(c) for c in param.type.choices]
        ok = value in choices or (not param.type.case_sensitive and value.lower() in (c.lower() for c in choices))
        if not ok:
            raise CommandError(f"{opt} {value!r} is not one of {choices}")


def validate_command(tokens: list[str], *, partial: bool = False) -> None:
    """Walk ``autopsy ...`` tokens through click's command tree; raise CommandError when
    an option, subcommand, choice or argument count would make click refuse the command.

    ``partial``: a command named in prose (`autopsy report`, `autopsy ... --help`): its
    options and subcommands must exist, but arguments may be left out and ``...`` stands
    for anything.
    """
    assert tokens and tokens[0] == "autopsy"
    if partial:
        tokens = [t for t in tokens if t != "..."]
    cmd: click.Command = cli_main
    i, positionals, options_done = 1, [], False
    while i < len(tokens):
        tok = tokens[i]
        if isinstance(cmd, click.Group) and not tok.startswith("-"):
            sub = cmd.commands.get(tok)
            if sub is None:
                raise CommandError(f"no such command {tok!r} (have {sorted(cmd.commands)})")
            cmd, i = sub, i + 1
            continue
        if tok == "--" and not options_done:
            options_done, i = True, i + 1
            continue
        if tok.startswith("-") and len(tok) > 1 and not options_done:
            options = option_map(cmd)
            name, eq, inline = tok.partition("=")
            if name not in options and not name.startswith("--") and len(name) > 2:
                # a cluster of short flags: -qV; every one but the last must be a flag
                for k, letter in enumerate(name[1:]):
                    p = options.get(f"-{letter}")
                    if p is None:
                        raise CommandError(f"{cmd.name}: no such option -{letter} (in {tok})")
                    if _takes_value(p) and k < len(name) - 2:
                        raise CommandError(f"{cmd.name}: -{letter} takes a value (in {tok})")
                i += 1
                continue
            param = options.get(name)
            if param is None:
                raise CommandError(f"autopsy {cmd.name}: no such option {name}")
            if _takes_value(param):
                if eq:
                    value = inline
                elif i + 1 < len(tokens):
                    value, i = tokens[i + 1], i + 1
                else:
                    raise CommandError(f"{name} needs a value")
                _check_value(name, param, value)
            elif eq:
                raise CommandError(f"{name} is a flag and takes no value")
            i += 1
            continue
        positionals.append(tok)
        i += 1
    if partial:
        return
    if isinstance(cmd, click.Group):
        if not positionals and "--help" not in tokens and "-h" not in tokens and "--version" not in tokens:
            raise CommandError(f"{cmd.name}: missing subcommand")
        return
    if "--help" in tokens or "-h" in tokens:
        return
    args = [p for p in cmd.params if isinstance(p, click.Argument)]
    left = len(positionals)
    for arg in args:
        if arg.nargs == -1:
            if arg.required and left < 1:
                raise CommandError(f"{cmd.name}: missing {arg.human_readable_name}")
            left = 0
        else:
            if left < arg.nargs and arg.required:
                raise CommandError(f"{cmd.name}: missing {arg.human_readable_name}")
            left = max(0, left - arg.nargs)
    if left:
        raise CommandError(f"{cmd.name}: unexpected extra arguments {positionals[-left:]}")


_SHELL_FENCE = re.compile(r"^(?P<fence>```|~~~)\s*(?P<lang>[\w-]*)\s*$")
_SHELL_LANGS = {"", "bash", "sh", "shell", "console", "zsh", "text"}
_INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_SEPARATORS = {"&&", "||", ";", "|", "&"}
_REDIRECTS = {">", ">>", "<", "2>", "2>>", "&>"}


def shell_commands(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, tokens) of every ``autopsy ...`` command (see :func:`shell_commands_full`)."""
    for lineno, tokens, _partial in shell_commands_full(text):
        yield lineno, tokens


def shell_commands_full(text: str) -> Iterator[tuple[int, list[str], bool]]:
    """(line number, tokens, partial) of every ``autopsy ...`` command in the markdown's shell
    blocks (after ``&&``/``;``/``|``, ``$`` prompts, continuations and comments) and in
    inline code spans that start with ``autopsy `` (partial: prose names a command without
    its arguments)."""
    lines = text.splitlines()
    in_block, lang = False, ""
    pending, start = "", 0
    for n, line in enumerate(lines, 1):
        fence = _SHELL_FENCE.match(line.strip())
        if fence:
            in_block, lang = (not in_block, fence["lang"]) if not in_block else (False, "")
            continue
        if in_block:
            if lang.lower() not in _SHELL_LANGS:
                continue
            body = re.sub(r"^\s*\$\s+", "", line)
            if not pending:
                start = n
            if body.rstrip().endswith("\\"):
                pending += body.rstrip()[:-1] + " "
                continue
            yield from _segments(start, pending + body, partial=False)
            pending = ""
        else:
            for m in _INLINE_CODE.finditer(line):
                if m.group(1).startswith("autopsy "):
                    yield from _segments(n, m.group(1), partial=True)


def _segments(lineno: int, command: str, *, partial: bool) -> Iterator[tuple[int, list[str], bool]]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote in prose-like text: not a command we can check
        return
    segment: list[str] = []
    skip_next = False
    for tok in [*tokens, ";"]:
        if skip_next:
            skip_next = False
            continue
        if tok in _REDIRECTS:
            skip_next = True
            continue
        if tok in _SEPARATORS:
            if segment and segment[0] == "autopsy":
                yield lineno, segment, partial
            segment = []
            continue
        segment.append(tok)
