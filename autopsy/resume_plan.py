"""The resume command: the run's own launch, with a resume option its script really accepts.

How the run was launched comes from its launch script (``run.sh``, ``*.sbatch``: the
``python``/``torchrun``/``accelerate``/``deepspeed`` line and the variables set before it),
else from the training script alone (``python train.py``). When that script is in the run
directory its command-line interface is read statically (:mod:`autopsy.parsers.script_flags`)
and a resume option is proposed only when the script accepts it and reads it; otherwise the
plan says so in words and names the checkpoint its loading code should be given. Without the
script, a flag is proposed only when the run's own args dump or launch line shows it.

Every path in the command is relative to one directory, the run directory (``ResumePlan.cwd``),
and every word is quoted for the shell. Nothing is executed, and nothing is written.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable
from typing import Any

from autopsy.model import ArtifactKind, ResumePlan
from autopsy.parsers.launch_script import launch_commands
from autopsy.parsers.safe_open import open_binary
from autopsy.parsers.script_flags import Option, ScriptInterface, analyze_script

MAX_SCRIPT_BYTES = 2 * 1024 * 1024
_TRAINING_NAME = re.compile(r"(?:^|_)(?:train|training|finetune|fine_tune|pretrain|main|run)(?:_|$)", re.I)
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", re.I)
_SAFE_WORD = re.compile(r"^[\w@%+=:,./-]+$")
_VAR_WORD = re.compile(r'^[^"`\\]*\$[^"`\\]*$')
# Resume keys of an args dump or launch line, when the script itself is not in the run directory.
_KNOWN_RESUME_FLAGS = ("resume_from_checkpoint", "resume_from", "resume_checkpoint", "resume", "ckpt_path",
                       "init_from", "resume_from_step", "load_checkpoint")


def quote(word: str) -> str:
    """A word for a POSIX shell: bare when safe, ``"$VAR/x"`` keeps a variable expanding, else single quotes."""
    if word and _SAFE_WORD.match(word):
        return word
    if _VAR_WORD.match(word):
        return f'"{word}"'
    return shlex.quote(word)


def plan_resume(run: Any, ckpt: Any, cwd: str, entries: Iterable[Any] = ()) -> ResumePlan:
    """How to resume ``run`` from checkpoint ``ckpt`` (a :class:`Checkpoint`, path relative to the run)."""
    entries = list(entries)
    launch = _launch(run)
    script_rel = _script_from_launch(launch[1]) if launch else None
    if script_rel is None and launch is None:
        script_rel = _lone_training_script(run)
    iface = _read_interface(run, script_rel) if script_rel else None
    words = list(launch[1]) if launch else (["python", script_rel] if script_rel else [])
    env = [(k, v) for k, v in (launch[2] if launch else []) if not _SECRET.search(k)]
    source = f"{launch[0]}:{launch[3]}" if launch else script_rel
    base = ResumePlan(cwd=cwd, checkpoint=ckpt.path, script=script_rel, source=source)
    if iface is not None and iface.kind not in ("unknown",):
        return _from_interface(base, iface, ckpt, words, env, entries)
    # The script is not readable here (absent, or its parser is built elsewhere): only a flag the
    # run itself shows it accepts (its launch line, an args dump) is proposed.
    shown = _shown_flag(entries)
    if shown is not None and words:
        option, value = _value_for(shown.raw_key.lstrip("-"), "path", ckpt)
        flag = shown.raw_key if shown.raw_key.startswith("-") else f"--{shown.raw_key}"
        cmd = _with_option(words, flag, value, eq=option.endswith("="))
        flag = flag + "=" if option.endswith("=") else flag
        return _done(base, cmd, env, flag, verified=False,
                     note=f"{flag} is the option the run's own {_where(shown)} shows"
                          + ("" if script_rel is None else f"; {script_rel} could not be read to check it"))
    if shown is not None:
        flag = shown.raw_key if shown.raw_key.startswith("-") else f"--{shown.raw_key}"
        value = _value_for(shown.raw_key.lstrip("-"), "path", ckpt)[1]
        return _replace(base, option=flag,
                        note=f"the training script is not in the run directory; the run's {_where(shown)} shows it "
                             f"takes {flag}: give it {value if value is not None else ckpt.path}")
    what = f"{script_rel} builds its argument parser elsewhere" if iface is not None and iface.kind == "unknown" \
        else "the training script is not in the run directory"
    return _replace(base, note=f"{what}, so no resume flag is proposed: pass {ckpt.path} to the resume option "
                               f"or loading code of the script that trained this run{_layout_words(ckpt)}")


def _from_interface(base: ResumePlan, iface: ScriptInterface, ckpt: Any, words: list[str],
                    env: list[tuple[str, str]], entries: list[Any]) -> ResumePlan:
    script = iface.path
    if iface.kind == "hydra":
        entry = _config_resume_entry(entries)
        if entry is None:
            return _replace(base, note=f"{script} is a hydra app and its config has no resume key: its loading "
                                       f"code should be given {ckpt.path}{_layout_words(ckpt)}")
        key = entry.raw_key
        value = "resume" if key.rsplit(".", 1)[-1] == "init_from" else str(ckpt.step) \
            if key.endswith("resume_from_step") else ckpt.path
        cmd = [w for w in words if not w.startswith(f"{key}=")] + [f"{key}={value}"]
        return _done(base, cmd, env, f"{key}=", verified=True,
                     note=f"a hydra override of {key} (set at {_where(entry)})")
    opt = iface.resume
    if opt is None:
        return _replace(base, note=_no_option_words(iface, ckpt))
    option, value = _value_for(opt.dest, opt.value, ckpt, opt)
    flag = _spelling(opt)
    if iface.kind == "lightning_cli" and "fit" not in words:
        words = [*words, "fit"]
    eq = iface.kind == "configurator" or option.endswith("=")
    cmd = _with_option(words, flag, value, eq=eq)
    via = f"; its value goes to {iface.resume_via}" if iface.resume_via else ""
    note = f"{script} accepts {flag} ({iface.kind}, line {opt.line}){via}" if opt.line else \
        f"{script} accepts {flag} ({iface.kind}){via}"
    if opt.value == "flag":
        note += f"; the flag takes no path: the script picks the checkpoint itself and should find {ckpt.path}"
    if opt.dest == "init_from":
        note += f"; nanoGPT-style: it loads ckpt.pt from out_dir (here {ckpt.path})"
    return _done(base, cmd, env, flag + "=" if eq else flag, verified=True, note=note)


def _no_option_words(iface: ScriptInterface, ckpt: Any) -> str:
    script = iface.path
    if iface.kind == "none":
        takes = "reads no command-line arguments"
    else:
        names = [o.names[0] for o in iface.options if o.names][:6]
        takes = f"takes no resume option ({iface.kind}: {', '.join(names)})" if names else \
            f"takes no resume option ({iface.kind})"
    loads = f"; it loads with {', '.join(iface.loads)} but not from an option" if iface.loads else ""
    return (f"{script} {takes}{loads}: to resume, its loading code should load {ckpt.path}"
            f"{_layout_words(ckpt)}; running it again starts from scratch")


def _layout_words(ckpt: Any) -> str:
    step = f", step {ckpt.step}" if getattr(ckpt, "step", None) is not None else ""
    layout = getattr(ckpt, "layout", None)
    kind = {"hf": "Hugging Face Trainer layout: trainer.train(resume_from_checkpoint=...) loads it",
            "nanochat": "nanochat layout: model_/optim_/meta_ files"}.get(layout or "")
    return f" ({kind}{step})" if kind else (f" ({step[2:]})" if step else "")


def _value_for(dest: str, value_kind: str, ckpt: Any, opt: Option | None = None) -> tuple[str, str | None]:
    leaf = dest.lower()
    if value_kind == "flag":
        return leaf, None
    if leaf == "init_from" or (opt is not None and "resume" in opt.choices):
        return leaf + "=", "resume"
    if leaf.endswith("step") or value_kind == "int":
        return leaf, str(ckpt.step) if ckpt.step is not None else None
    return leaf, ckpt.path


def _spelling(opt: Option) -> str:
    longs = [n for n in opt.names if n.startswith("--") and not n.startswith("--no-")]
    return (longs or list(opt.names))[0]


def _with_option(words: list[str], flag: str, value: str | None, *, eq: bool = False) -> list[str]:
    """``words`` with ``flag`` set to ``value`` (an existing occurrence replaced)."""
    new = [f"{flag}={value}"] if eq and value is not None else [flag] + ([value] if value is not None else [])
    for i, w in enumerate(words):
        if w.startswith(flag + "="):
            return words[:i] + new + words[i + 1:]
        if w == flag:
            end = i + 2 if i + 1 < len(words) and not words[i + 1].startswith("-") else i + 1
            return words[:i] + new + words[end:]
    return words + new


def _done(base: ResumePlan, words: list[str], env: list[tuple[str, str]], option: str, *, verified: bool,
          note: str) -> ResumePlan:
    if any("$" in w for w in words):  # it needs the launch script's variables: say where to add the option
        added = [w for w in words if w.startswith(option.rstrip("="))]
        i = words.index(added[0]) if added else len(words)
        shown = " ".join(quote(w) for w in words[i:i + 2] if w == words[i] or not w.startswith("-"))
        return _replace(base, option=option, verified=verified,
                        note=f"the launch command at {base.source} uses shell variables: add {shown} to it there "
                             f"and run the launch script from {base.cwd}; {note}")
    prefix = [f"{k}={quote(v)}" for k, v in env]
    return _replace(base, command=" ".join([*prefix, *(quote(w) for w in words)]), option=option,
                    verified=verified, note=note)


def _replace(base: ResumePlan, **kw: Any) -> ResumePlan:
    from dataclasses import replace

    return replace(base, **kw)


def _launch(run: Any) -> tuple[str, list[str], list[tuple[str, str]], int] | None:
    """(launch script, command words, variables, line) of the first training command found."""
    for art in sorted(run.artifacts_of(ArtifactKind.LAUNCH_SCRIPT), key=lambda a: (a.path.count("/"), a.path)):
        text = _read(run, art.path)
        if text is None:
            continue
        for line, words, env in launch_commands(text):
            if _script_from_launch(words) is not None or any(w == "-m" for w in words):
                return art.path, words, env, line
    return None


def _script_from_launch(words: list[str]) -> str | None:
    for w in words:
        if w.endswith(".py") and not w.startswith("-"):
            return posixpath.normpath(w.split("=", 1)[-1]) if "=" in w else posixpath.normpath(w)
    return None


def _lone_training_script(run: Any) -> str | None:
    """The run directory's training script when nothing launched it: the one top-level ``.py``
    that no other imports and that is named like a training entry point (or the only one left)."""
    tops = [a.path for a in run.discovery.artifacts if a.path.endswith(".py") and "/" not in a.path]
    if not tops:
        return None
    mods = {posixpath.splitext(p)[0]: p for p in tops}
    imported: set[str] = set()
    for p in tops:
        text = _read(run, p) or ""
        imported |= {m for m in mods if re.search(rf"^\s*(?:import|from)\s+{re.escape(m)}\b", text, re.M)}
    left = [p for m, p in mods.items() if m not in imported]
    named = [p for p in left if _TRAINING_NAME.search(posixpath.splitext(p)[0])]
    chosen = named if named else left
    return chosen[0] if len(chosen) == 1 else None


def _read_interface(run: Any, rel: str) -> ScriptInterface | None:
    text = _read(run, rel)
    return analyze_script(text, rel) if text is not None else None


def _read(run: Any, rel: str) -> str | None:
    try:
        path = run.fs_path(rel)
        if not path.is_file():
            return None
        with open_binary(path) as fh:
            data = fh.read(MAX_SCRIPT_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_SCRIPT_BYTES or b"\x00" in data:
        return None
    return data.decode("utf-8", "replace")


def _shown_flag(entries: list[Any]) -> Any:
    found = [e for e in entries if e.source in ("launch_flag", "args_dump")
             and _leaf(e.raw_key) in _KNOWN_RESUME_FLAGS]
    found.sort(key=lambda e: _KNOWN_RESUME_FLAGS.index(_leaf(e.raw_key)))
    return found[0] if found else None


def _config_resume_entry(entries: list[Any]) -> Any:
    found = [e for e in entries if e.source not in ("launch_flag", "args_dump", "trainer_state")
             and _leaf(e.raw_key) in _KNOWN_RESUME_FLAGS]
    found.sort(key=lambda e: _KNOWN_RESUME_FLAGS.index(_leaf(e.raw_key)))
    return found[0] if found else None


def _leaf(raw_key: str) -> str:
    return raw_key.lstrip("-").rsplit(".", 1)[-1].replace("-", "_").lower()


def _where(entry: Any) -> str:
    return f"{entry.path}:{entry.line}" if entry.line is not None else str(entry.path)
