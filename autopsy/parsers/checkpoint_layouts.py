"""Framework checkpoint layouts, each judged against what its own framework writes.

A checkpoint is corrupt only for lacking a file *its* framework writes; an accelerate or
Lightning checkpoint never needs HF's ``trainer_state.json``. Layouts (one row each):

- ``accelerate``: ``Accelerator.save_state`` folders: weights (``model.safetensors`` /
  ``pytorch_model.bin``, ``model_1.safetensors``...), ``optimizer.bin``, ``scheduler.bin``,
  ``sampler.bin``, ``scaler.pt`` and ``random_states_<process>.pkl``, which
  ``save_accelerator_state`` writes after everything else: a folder without it is a save that
  did not finish. Optional parts are required when the folder's complete siblings have them.
- ``deepspeed``: ``global_stepN/`` with ``mp_rank_XX_model_states.pt`` (and
  ``*optim_states.pt`` under ZeRO, when its siblings have them); ``latest`` must name a tag
  that exists.
- ``dcp``: ``torch.distributed.checkpoint`` folders: ``__R_I.distcp`` data files and
  ``.metadata``, which the coordinator writes last; every ``.distcp`` the metadata names must exist.
- ``lightning``: a ``.ckpt`` whose pickle opcodes carry ``pytorch-lightning_version``
  (its ``global_step`` gives the step of ``last.ckpt``).
- ``nanogpt``: ``ckpt.pt`` holding ``model``, ``optimizer`` and ``iter_num`` (the step).
- ``keras``: a ``.keras`` archive or a ``.weights.h5`` / ``.h5`` file.
- ``unknown``: several checkpoint-like files in one folder that match no layout: each file
  is checked from its header, none is called missing.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from autopsy.model import Artifact
from autopsy.parsers.checkpoint_formats import pickle_facts
from autopsy.parsers.safe_open import open_binary
from autopsy.parsers.types import Checkpoint, FileCheck

Make = Callable[..., Checkpoint]
CheckFile = Callable[[Path, Artifact], FileCheck]

_ACC_WEIGHTS = re.compile(r"^(?:model|pytorch_model)(?:_\d+)?\.(?:safetensors|bin)$")
_ACC_PART = re.compile(r"^(?P<part>optimizer|scheduler|sampler|random_states|custom_checkpoint)(?:_(?P<i>\d+))?\."
                       r"(?:bin|pkl|safetensors)$|^(?P<scaler>scaler)\.pt$")
_ACC_MARKER = re.compile(r"^(?:optimizer|scheduler|sampler)(?:_\d+)?\.bin$|^random_states_\d+\.pkl$")
_DS_TAG = re.compile(r"^global_step(?P<step>\d+)$")
_DISTCP = re.compile(r"\.distcp$")
_LIGHTNING_KEYS = frozenset({"global_step", "epoch"})
_NANOGPT_KEYS = frozenset({"iter_num", "best_val_loss"})


def _split(path: str) -> tuple[str, str]:
    folder, _, name = path.rpartition("/")
    return folder, name


def group_framework(root: Path, arts: list[Artifact], make: Make, check: CheckFile,
                    step_from_name: Callable[[str], int | None]) -> tuple[list[Checkpoint], list[Artifact]]:
    """Checkpoints of the framework layouts among ``arts``, and the artifacts left over."""
    out: list[Checkpoint] = []
    by_folder: dict[str, list[Artifact]] = defaultdict(list)
    for a in arts:
        by_folder[_split(a.path)[0]].append(a)
    used: set[str] = set()

    # DeepSpeed: <dir>/global_stepN/*, with <dir>/latest naming the newest tag
    ds: dict[str, dict[str, list[Artifact]]] = defaultdict(dict)
    for folder, items in by_folder.items():
        parent, name = _split(folder)
        m = _DS_TAG.match(name)
        if m and any(i.path.endswith("model_states.pt") for i in items):
            ds[parent][name] = items
    for parent, tags in ds.items():
        out.extend(_deepspeed(root, parent, tags, by_folder.get(parent, []), make, check, used))

    for folder, items in sorted(by_folder.items()):
        names = {_split(a.path)[1] for a in items if a.path not in used}
        if any(_DISTCP.search(n) for n in names) or ".metadata" in names:
            out.append(_dcp(root, folder, [a for a in items if a.path not in used], make, check, step_from_name))
            used.update(a.path for a in items)
    acc_folders = [f for f, items in by_folder.items()
                   if any(_ACC_MARKER.match(_split(a.path)[1]) for a in items if a.path not in used)]
    acc_folders += _accelerate_siblings(acc_folders, by_folder, used)
    out.extend(_accelerate(root, sorted(set(acc_folders)), by_folder, make, check, step_from_name, used))

    for a in arts:
        if a.path in used:
            continue
        name = _split(a.path)[1].lower()
        layout, step = _single_file_layout(root, a, name, step_from_name)
        if layout is None:
            continue
        used.add(a.path)
        fc = check(root, a)
        extra = []
        if layout == "nanogpt" and fc.ok:
            facts = pickle_facts(str(root / a.path), _NANOGPT_KEYS)
            lacking = [k for k in ("model", "optimizer", "iter_num") if k not in facts.strings]
            if not facts.problem and lacking:
                extra.append(f"{name}: nanoGPT checkpoint without {', '.join(lacking)}")
        out.append(make(a.path, layout, step, [a], [fc], [], extra_problems=extra))
    return out, [a for a in arts if a.path not in used]


def _single_file_layout(root: Path, art: Artifact, name: str,
                        step_from_name: Callable[[str], int | None]) -> tuple[str | None, int | None]:
    if name.endswith(".keras") or name.endswith((".h5", ".hdf5")):
        return "keras", step_from_name(name)
    if name.endswith(".ckpt"):
        facts = pickle_facts(str(root / art.path), _LIGHTNING_KEYS)
        if "pytorch-lightning_version" in facts.strings or "lightning_version" in facts.strings:
            step = step_from_name(name)
            if step is None and "global_step" in facts.numbers:
                step = int(facts.numbers["global_step"])
            return "lightning", step
        return None, None
    if name == "ckpt.pt":
        facts = pickle_facts(str(root / art.path), _NANOGPT_KEYS)
        if "iter_num" in facts.strings and "model_args" in facts.strings:
            step = int(facts.numbers["iter_num"]) if "iter_num" in facts.numbers else None
            return "nanogpt", step
    return None, None


def _deepspeed(root: Path, parent: str, tags: dict[str, list[Artifact]], beside: list[Artifact], make: Make,
               check: CheckFile, used: set[str]) -> list[Checkpoint]:
    out = []
    zero = any(i.path.endswith("optim_states.pt") for items in tags.values() for i in items)
    for tag, items in sorted(tags.items(), key=lambda kv: int(kv[0][len("global_step"):])):
        items.sort(key=lambda a: a.path)
        missing = []
        if zero and not any(i.path.endswith("optim_states.pt") for i in items):
            missing.append("*_optim_states.pt (ZeRO optimizer shards its sibling checkpoints have)")
        files = [check(root, a) for a in items]
        folder = f"{parent}/{tag}" if parent else tag
        out.append(make(folder, "deepspeed", int(tag[len("global_step"):]), items, files, missing,
                        base=folder))
        used.update(a.path for a in items)
    latest = next((a for a in beside if _split(a.path)[1] == "latest"), None)
    if latest is not None:
        used.add(latest.path)
        named = _read_small(root / latest.path)
        if named and named not in tags:
            folder = f"{parent}/{named}" if parent else named
            m = _DS_TAG.match(named)
            out.append(make(folder, "deepspeed", int(m.group("step")) if m else None, [latest], [check(root, latest)],
                            [f"{named}/ (named by {latest.path})"], base=folder,
                            extra_problems=[f"`latest` names {named}/ but that directory is missing"]))
    return out


def _read_small(path: Path) -> str | None:
    try:
        with open_binary(path) as fh:
            text = fh.read(256).decode("utf-8", "replace").strip()
    except OSError:
        return None
    return text if re.fullmatch(r"[\w.\-]{1,128}", text) else None


def _dcp(root: Path, folder: str, items: list[Artifact], make: Make, check: CheckFile,
         step_from_name: Callable[[str], int | None]) -> Checkpoint:
    items.sort(key=lambda a: a.path)
    names = {_split(a.path)[1] for a in items}
    missing = []
    extra = []
    meta = next((a for a in items if _split(a.path)[1] == ".metadata"), None)
    if meta is None:
        missing.append(".metadata (written last, after every rank's .distcp)")
    else:
        facts = pickle_facts_plain(root / meta.path)
        named = sorted(s for s in facts if _DISTCP.search(s) and "/" not in s)
        absent = [n for n in named if n not in names]
        if absent:
            extra.append(f".metadata names {len(absent)} data file(s) that are missing: " + ", ".join(absent[:5]))
    if not any(_DISTCP.search(n) for n in names):
        missing.append("*.distcp data files")
    files = [check(root, a) for a in items]
    return make(folder or ".", "dcp", step_from_name(_split(folder)[1]) if folder else None, items, files, missing,
                base=folder, extra_problems=extra)


def pickle_facts_plain(path: Path) -> set[str]:
    """Strings of a plain pickle file (DCP's ``.metadata``), read with opcodes only."""
    import io
    import pickletools

    out: set[str] = set()
    try:
        with open_binary(path) as fh:
            data = fh.read(16 * 1024 * 1024)
        for _op, arg, _pos in pickletools.genops(io.BytesIO(data)):
            if isinstance(arg, str) and len(arg) <= 256:
                out.add(arg)
    except (OSError, ValueError, EOFError) as _exc:
        return out
    return out


def _accelerate_siblings(found: list[str], by_folder: dict[str, list[Artifact]], used: set[str]) -> list[str]:
    """Folders named like an accelerate checkpoint beside one (``checkpoint_4`` beside
    ``checkpoint_3``) that hold weights but no marker yet: a save killed after the model."""
    patterns = {(_split(f)[0], re.sub(r"\d+", "#", _split(f)[1])) for f in found}
    out = []
    for folder, items in by_folder.items():
        if folder in found or not any(_ACC_WEIGHTS.match(_split(a.path)[1]) for a in items if a.path not in used):
            continue
        if (_split(folder)[0], re.sub(r"\d+", "#", _split(folder)[1])) in patterns and re.search(r"\d", folder):
            out.append(folder)
    return out


def _parts(items: list[Artifact]) -> set[str]:
    parts = set()
    for a in items:
        name = _split(a.path)[1]
        if _ACC_WEIGHTS.match(name):
            parts.add("weights")
        m = _ACC_PART.match(name)
        if m:
            parts.add(m.group("part") or "scaler")
    return parts


def _accelerate(root: Path, folders: list[str], by_folder: dict[str, list[Artifact]], make: Make,
                check: CheckFile, step_from_name: Callable[[str], int | None], used: set[str]) -> list[Checkpoint]:
    parts_of = {f: _parts([a for a in by_folder[f] if a.path not in used]) for f in folders}
    complete = [p for p in parts_of.values() if {"weights", "random_states"} <= p]
    expected = set.union(*complete) if complete else {"weights", "random_states"}
    n_procs = {f: {int(m.group(1)) for a in by_folder[f]
                   if (m := re.match(r"^random_states_(\d+)\.pkl$", _split(a.path)[1]))} for f in folders}
    procs = max((len(s) for s in n_procs.values() if s == set(range(len(s)))), default=1)
    out = []
    for f in folders:
        items = sorted((a for a in by_folder[f] if a.path not in used), key=lambda a: a.path)
        have = parts_of[f]
        missing = []
        if "weights" not in have:
            missing.append("model weights (model.safetensors or pytorch_model.bin)")
        for part in ("optimizer", "scheduler", "sampler", "scaler"):
            if part in expected and part not in have:
                missing.append(f"{part}.bin" if part != "scaler" else "scaler.pt")
        missing.extend(f"random_states_{i}.pkl" for i in range(procs) if i not in n_procs[f])
        files = [check(root, a) for a in items]
        out.append(make(f or ".", "accelerate", step_from_name(_split(f)[1]) if f else None, items, files,
                        missing, base=f))
        used.update(a.path for a in items)
    return out
