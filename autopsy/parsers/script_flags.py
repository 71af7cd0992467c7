"""What a training script accepts on its command line, read from its source (never run).

The script is parsed with :mod:`ast` and nothing of it is executed or imported. Recognised:
argparse (``add_argument``), ``HfArgumentParser`` over dataclasses (the script's own and
transformers' ``TrainingArguments``), click options, typer commands, python-fire, hydra's
``@hydra.main`` (``key=value`` overrides), nanoGPT's configurator (``--name=value`` for the
module's globals) and LightningCLI (``fit --ckpt_path``). What it cannot see (a parser built
in another module) it says: ``kind`` is ``"unknown"`` and no flag is claimed.

Besides the flags, the script's resume option is picked: an accepted option whose value the
script reads (an option defined but never read would be ignored silently) and that is a
resume option by name or reaches a loading call (``trainer.train(resume_from_checkpoint=…)``,
``trainer.fit(ckpt_path=…)``, ``accelerator.load_state(…)``, DeepSpeed ``load_checkpoint(…)``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

# Option names (dest, underscores) that mean "resume from this", best first.
RESUME_NAMES = ("resume_from_checkpoint", "resume_from", "resume_checkpoint", "resume_path", "resume",
                "ckpt_path", "load_checkpoint", "checkpoint_path", "restore_from", "from_checkpoint",
                "init_from", "resume_from_step", "load_dir", "load", "checkpoint", "ckpt")
# Calls that load a checkpoint to resume from: (method name, keyword holding the path or None: first arg).
LOAD_CALLS = (("train", "resume_from_checkpoint"), ("fit", "ckpt_path"), ("load_state", None),
              ("load_checkpoint", None))
# transformers/trl argument classes whose fields include resume_from_checkpoint.
_HF_TRAINING_ARGS_SUFFIXES = ("TrainingArguments", "Config")
_HF_TRAINING_ARGS_MODULES = ("transformers", "trl")


@dataclass(frozen=True)
class Option:
    """One accepted option: its spellings, dest name, what its value is, and where it is defined."""

    names: tuple[str, ...]  # "--resume", "-r" (hydra/configurator: "key=" / "--key=")
    dest: str
    value: str  # "path" (takes a value), "flag" (no value), "int", "choice"
    choices: tuple[str, ...] = ()
    line: int | None = None


@dataclass(frozen=True)
class ScriptInterface:
    """How a script reads its command line, as far as its source shows.

    ``kind``: argparse, hf, click, typer, fire, hydra, configurator, lightning_cli, none (the
    script reads no arguments), unknown (it reads ``sys.argv`` or builds its parser elsewhere).
    ``ignores_unknown``: unknown options are dropped silently (``parse_known_args``, hydra).
    ``resume``: the option to resume with, None when the script has none.
    ``resume_via``: where its value goes ("trainer.train(resume_from_checkpoint=…)", ...).
    ``loads``: loading calls the script makes (so a report can say what to hand them).
    """

    path: str
    kind: str
    options: tuple[Option, ...] = ()
    ignores_unknown: bool = False
    resume: Option | None = None
    resume_via: str | None = None
    loads: tuple[str, ...] = ()
    subcommand: str | None = None  # LightningCLI: "fit"

    def accepts(self, flag: str) -> bool:
        return any(flag in o.names for o in self.options)


def analyze_script(text: str, path: str) -> ScriptInterface:
    """The command-line interface of a Python script's source ``text``."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return ScriptInterface(path, "unknown")
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    imports = _imports(tree)
    reads = _attribute_reads(tree)
    kind, options, ignores, sub = _interface(tree, calls, imports)
    loads, load_args = _loads(calls)
    resume, via = _pick_resume(options, reads, load_args, kind)
    return ScriptInterface(path, kind, tuple(options), ignores, resume, via, tuple(loads), sub)


# ------------------------------------------------------------------------- interface


def _interface(tree: ast.Module, calls: list[ast.Call],
               imports: dict[str, str]) -> tuple[str, list[Option], bool, str | None]:
    if any(_name(c.func) == "LightningCLI" for c in calls):
        return "lightning_cli", [Option(("--ckpt_path",), "ckpt_path", "path")], False, "fit"
    if any(_decorator_is(fn, "hydra.main", "main", imports, "hydra") for fn in _functions(tree)):
        return "hydra", [], True, None
    hf = [c for c in calls if _name(c.func) == "HfArgumentParser"]
    if hf:
        return "hf", _hf_options(tree, hf[0], imports), _known_args(calls), None
    adds = [c for c in calls if isinstance(c.func, ast.Attribute) and c.func.attr == "add_argument"]
    if adds:
        return "argparse", [o for c in adds if (o := _argparse_option(c)) is not None], _known_args(calls), None
    click_opts = [d for fn in _functions(tree) for d in fn.decorator_list
                  if isinstance(d, ast.Call) and _name(d.func) in ("option", "argument")
                  and _root(d.func) in ("click", "option", "argument")]
    if click_opts:
        return "click", [o for d in click_opts if (o := _click_option(d)) is not None], False, None
    typer_fns = _typer_functions(tree, calls)
    if typer_fns:
        return "typer", [o for fn in typer_fns for o in _param_options(fn, dashes=True, bools_negatable=True)], \
            False, None
    fire = [c for c in calls if _name(c.func) == "Fire"]
    if fire:
        return "fire", _fire_options(tree, fire[0]), False, None
    if _execs_configurator(calls):
        return "configurator", _global_options(tree), False, None
    if _reads_argv(tree):
        return "unknown", [], False, None
    return "none", [], False, None


def _known_args(calls: list[ast.Call]) -> bool:
    """Unknown options are dropped silently: ``parse_known_args`` or HF's ``return_remaining_strings``."""
    for c in calls:
        if isinstance(c.func, ast.Attribute) and (c.func.attr == "parse_known_args" or (
                c.func.attr == "parse_args_into_dataclasses"
                and any(k.arg == "return_remaining_strings" for k in c.keywords))):
            return True
    return False


def _argparse_option(call: ast.Call) -> Option | None:
    names = tuple(a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
    if not names:
        return None
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    flags = tuple(n for n in names if n.startswith("-"))
    if not flags:  # a positional: its value is given without a name
        return Option((), names[0], "positional", line=call.lineno)
    long = next((n for n in flags if n.startswith("--")), flags[0])
    dest = _const(kw.get("dest")) or long.lstrip("-").replace("-", "_")
    action = _const(kw.get("action"))
    choices = tuple(str(c) for c in _consts(kw.get("choices")))
    if action in ("store_true", "store_false", "count", "store_const") or (
            isinstance(kw.get("action"), ast.Attribute) and "Boolean" in ast.unparse(kw["action"])):
        value = "flag"
    elif choices:
        value = "choice"
    elif _name(kw.get("type")) == "int":
        value = "int"
    else:
        value = "path"
    return Option(flags, str(dest), value, choices, call.lineno)


def _hf_options(tree: ast.Module, call: ast.Call, imports: dict[str, str]) -> list[Option]:
    classes = {c.name: c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)}
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "dataclass_types"), None)
    names = [_name(e) for e in (arg.elts if isinstance(arg, (ast.Tuple, ast.List)) else [arg] if arg else [])]
    out: list[Option] = []
    seen: set[str] = set()

    def add(cls_name: str) -> None:
        if cls_name in seen:
            return
        seen.add(cls_name)
        cls = classes.get(cls_name)
        if cls is None:
            if _is_hf_training_args(cls_name, imports):
                out.append(Option(("--resume_from_checkpoint",), "resume_from_checkpoint", "path"))
            return
        for base in cls.bases:
            add(_name(base))
        for st in cls.body:
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                field = st.target.id
                ann = ast.unparse(st.annotation)
                value = "flag" if ann in ("bool", "Optional[bool]", "bool | None") else "path"
                spellings = (f"--{field}",) + ((f"--{field.replace('_', '-')}",) if "_" in field else ())
                out.append(Option(spellings, field, value, line=st.lineno))

    for n in names:
        add(n)
    return out


def _is_hf_training_args(name: str, imports: dict[str, str]) -> bool:
    module = imports.get(name, "")
    return name.endswith(_HF_TRAINING_ARGS_SUFFIXES) and module.split(".")[0] in _HF_TRAINING_ARGS_MODULES


def _click_option(dec: ast.Call) -> Option | None:
    names = [a.value for a in dec.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if not names:
        return None
    if _name(dec.func) == "argument":
        return Option((), names[0], "positional", line=dec.lineno)
    kw = {k.arg: k.value for k in dec.keywords if k.arg}
    flags: list[str] = []
    for n in names:
        flags += [p for p in n.split("/") if p.startswith("-")]
    plain = [n for n in names if not n.startswith("-")]
    long = next((f for f in flags if f.startswith("--")), flags[0] if flags else "")
    dest = plain[0] if plain else long.lstrip("-").replace("-", "_")
    is_flag = _const(kw.get("is_flag")) is True or any("/" in n for n in names)
    return Option(tuple(flags), dest, "flag" if is_flag else "int" if _name(kw.get("type")) == "int" else "path",
                  line=dec.lineno)


def _typer_functions(tree: ast.Module, calls: list[ast.Call]) -> list[ast.FunctionDef]:
    fns = {f.name: f for f in _functions(tree)}
    out = [fns[_name(c.args[0])] for c in calls
           if _dotted(c.func) == "typer.run" and c.args and _name(c.args[0]) in fns]
    out += [f for f in fns.values() if any(isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)
                                           and d.func.attr == "command" for d in f.decorator_list)
            and "typer" in _imports(tree)]
    return out


def _param_options(fn: ast.FunctionDef, *, dashes: bool, bools_negatable: bool = False) -> list[Option]:
    args = fn.args.args + fn.args.kwonlyargs
    defaults: list[ast.expr | None] = [None] * (len(fn.args.args) - len(fn.args.defaults)) + list(fn.args.defaults)
    defaults += list(fn.args.kw_defaults)
    out = []
    for a, d in zip(args, defaults, strict=True):
        if a.arg in ("self", "cls"):
            continue
        ann = ast.unparse(a.annotation) if a.annotation is not None else ""
        is_bool = ann.startswith("bool") or (isinstance(d, ast.Constant) and isinstance(d.value, bool))
        positional = d is None or (isinstance(d, ast.Call) and _name(d.func) == "Argument")
        if positional and dashes:  # typer: no default -> a CLI argument
            out.append(Option((), a.arg, "positional", line=a.lineno))
            continue
        name = a.arg.replace("_", "-") if dashes else a.arg
        names = (f"--{name}",) + ((f"--no-{name}",) if is_bool and bools_negatable else ())
        if not dashes and "_" in a.arg:
            names += (f"--{a.arg.replace('_', '-')}",)
        out.append(Option(names, a.arg, "flag" if is_bool and dashes else "path", line=a.lineno))
    return out


def _fire_options(tree: ast.Module, call: ast.Call) -> list[Option]:
    fns = {f.name: f for f in _functions(tree)}
    target = _name(call.args[0]) if call.args else None
    chosen = [fns[target]] if target in fns else list(fns.values()) if target is None else []
    return [o for fn in chosen for o in _param_options(fn, dashes=False)]


def _execs_configurator(calls: list[ast.Call]) -> bool:
    return any(_name(c.func) == "exec" and "configurator" in ast.unparse(c) for c in calls)


def _global_options(tree: ast.Module) -> list[Option]:
    """nanoGPT configurator: ``--name=value`` overrides a module global set to a literal before the exec."""
    out = []
    for st in tree.body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                and isinstance(st.value, ast.Constant):
            name, v = st.targets[0].id, st.value.value
            out.append(Option((f"--{name}",), name, "int" if isinstance(v, int) and not isinstance(v, bool)
                              else "path", line=st.lineno))
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and _name(st.value.func) == "exec":
            break
    return out


def _reads_argv(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "argv" and _name(n.value) == "sys" for n in ast.walk(tree))


# ------------------------------------------------------------------------- resume


def _loads(calls: list[ast.Call]) -> tuple[list[str], dict[str, str]]:
    """Loading calls in the script, and the names whose value reaches one (name -> call)."""
    seen: list[str] = []
    reach: dict[str, str] = {}
    for c in calls:
        if not isinstance(c.func, ast.Attribute):
            continue
        for method, keyword in LOAD_CALLS:
            if c.func.attr != method:
                continue
            arg = next((k.value for k in c.keywords if k.arg == keyword), None) if keyword else (
                c.args[0] if c.args else None)
            if keyword and arg is None:
                continue
            text = f"{ast.unparse(c.func)}({keyword + '=' if keyword else ''}…)"
            if text not in seen:
                seen.append(text)
            for n in ast.walk(arg) if arg is not None else ():
                leaf = n.attr if isinstance(n, ast.Attribute) else n.id if isinstance(n, ast.Name) else None
                if leaf:
                    reach.setdefault(leaf, text)
    return seen, reach


def _pick_resume(options: list[Option], reads: set[str], reach: dict[str, str],
                 kind: str) -> tuple[Option | None, str | None]:
    named = [o for o in options if o.names]
    if kind == "lightning_cli":
        return named[0], "LightningCLI fit --ckpt_path"
    # A value that reaches a loading call wins; then a resume name the script reads.
    for o in named:
        if o.dest in reach and o.dest not in ("config", "output_dir", "out_dir"):
            return o, reach[o.dest]
    by_name = [o for o in named if o.dest.lower() in RESUME_NAMES and (o.dest in reads or kind in
                                                                       ("typer", "fire", "click", "configurator"))]
    by_name.sort(key=lambda o: RESUME_NAMES.index(o.dest.lower()))
    if by_name:
        o = by_name[0]
        if o.dest == "init_from" and o.value != "choice" and kind != "configurator":
            return None, None  # init_from as a model path (not nanoGPT's "resume") is a fresh start
        return o, None
    return None, None


# ------------------------------------------------------------------------- ast helpers


def _imports(tree: ast.Module) -> dict[str, str]:
    out: dict[str, str] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module:
            for a in n.names:
                out[a.asname or a.name] = n.module
        elif isinstance(n, ast.Import):
            for a in n.names:
                out[a.asname or a.name.split(".")[0]] = a.name
    return out


def _attribute_reads(tree: ast.Module) -> set[str]:
    reads = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)}
    reads |= {n.slice.value for n in ast.walk(tree) if isinstance(n, ast.Subscript)
              and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str)}
    reads |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return reads


def _functions(tree: ast.Module) -> list[ast.FunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]


def _decorator_is(fn: ast.FunctionDef, dotted: str, bare: str, imports: dict[str, str], module: str) -> bool:
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        text = _dotted(target)
        if text == dotted or (text == bare and imports.get(bare, "").startswith(module)):
            return True
    return False


def _name(node: ast.AST | None) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _root(node: ast.AST) -> str:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _dotted(node: ast.AST) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _const(node: ast.AST | None) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _consts(node: ast.AST | None) -> list[object]:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return []
