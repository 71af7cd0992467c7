"""Configs flattened to key/value entries with the file and line they are written on.

A rule cites ``configs/train.yaml:12  save_total_limit: 3``, so every leaf value keeps its
line. Keys are canonicalised (:mod:`autopsy.parsers.config_aliases`) so ``lr``,
``--learning-rate`` and ``optimizer.lr`` all answer ``run.config_value("learning_rate")``.

Sources: ``yaml`` / ``json`` / ``toml`` (training configs), ``hydra`` (``.hydra/config.yaml``),
``args_dump`` (``args.json``, ``hparams.yaml``), ``hf_config`` (a model's ``config.json``),
``tokenizer`` (``tokenizer.json``: the vocabulary size only; ``tokenizer_config.json``),
``launch_flag`` (shell scripts, :mod:`autopsy.parsers.launch_script`).

YAML is read with the safe loader's composer only (node marks give the lines); aliases
are followed with a cap on expanded nodes so an alias bomb cannot blow up memory.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

from autopsy.model import ArtifactKind, ParseStatus
from autopsy.parsers.config_aliases import canonical_key
from autopsy.parsers.launch_script import MAX_SCRIPT_CHARS, parse_launch_script, parse_value
from autopsy.parsers.numbers import OUT_OF_RANGE, config_number
from autopsy.parsers.safe_open import read_regular
from autopsy.parsers.types import ConfigEntry, Parsed

MAX_CONFIG_BYTES = 16 * 1024 * 1024
MAX_TOKENIZER_BYTES = 256 * 1024 * 1024
MAX_ENTRIES = 20_000  # leaves kept per file; also the cap on YAML alias expansion
# The YAML composer keeps lines but is pure Python: an 11 MB manifest of 800,000 keys took
# minutes. A configuration has hundreds of values; a file this large is data.
MAX_YAML_BYTES = 2**20
MAX_YAML_NODES = 20_000
_SKIP_SUBTREES = frozenset({"added_tokens_decoder", "id2label", "label2id"})  # big and never a setting
_HUGE_MAX_LENGTH = 10**18  # tokenizer_config's "no limit" (int(1e30))
_JSON_KEY = re.compile(r'"((?:[^"\\\n]|\\.)*)"\s*:')


class _TooMany(Exception):
    pass


def read_config(fs_path: Path, rel_path: str, kind: ArtifactKind, detail: str | None) -> Parsed:
    """Flatten one config/launch script into :class:`ConfigEntry` rows; never raises on damage."""
    name = rel_path.rsplit("/", 1)[-1].lower()
    is_tokenizer_json = name == "tokenizer.json"
    cap = MAX_TOKENIZER_BYTES if is_tokenizer_json else MAX_CONFIG_BYTES
    try:
        data = read_regular(fs_path, cap + 1)
    except OSError as exc:
        return Parsed([], ParseStatus.UNREADABLE, f"cannot read: {exc.strerror or exc}")
    if len(data) > cap:
        return Parsed([], ParseStatus.SKIPPED, f"larger than {cap} bytes; not parsed")
    return _bounded(_read_text(data.decode("utf-8", "replace"), fs_path, rel_path, kind, detail, name,
                               is_tokenizer_json))


def _bounded(parsed: Parsed) -> Parsed:
    """Numbers out of range (beyond int64, +-inf, NaN) become None, named in the parse note."""
    if not isinstance(parsed.value, list):
        return parsed
    bad: list[str] = []
    out: list[ConfigEntry] = []
    for e in parsed.value:
        value, refused = config_number(e.value)
        if refused:
            bad.append(e.raw_key)
            e = dataclasses.replace(e, value=value)
        out.append(e)
    if not bad:
        return parsed
    note = (f"{len(bad)} value{'s' if len(bad) != 1 else ''} {OUT_OF_RANGE} (read as unset): "
            + ", ".join(k[:60] for k in bad[:5]) + (" ..." if len(bad) > 5 else ""))
    return Parsed(out, parsed.status, "; ".join(n for n in (parsed.note, note) if n))


def _read_text(text: str, fs_path: Path, rel_path: str, kind: ArtifactKind, detail: str | None, name: str,
               is_tokenizer_json: bool) -> Parsed:
    if kind is ArtifactKind.LAUNCH_SCRIPT:
        entries = parse_launch_script(text, rel_path)
        if len(text) > MAX_SCRIPT_CHARS:
            return Parsed(entries, ParseStatus.TRUNCATED, f"read only the first {MAX_SCRIPT_CHARS:,} characters "
                                                          f"of {len(text):,} (a launch script is a few KB)")
        return Parsed(entries)
    if detail == "mlflow_param":
        from autopsy.parsers.tracker_stores import read_mlflow_param

        return read_mlflow_param(fs_path, rel_path)
    if not text.strip():
        return Parsed([], ParseStatus.OK, "empty file")
    if is_tokenizer_json:
        return _tokenizer_json(text, rel_path)
    source = _source(name, detail)
    if detail == "mlflow_meta":
        from autopsy.parsers.tracker_stores import mlflow_status_entry

        parsed = _yaml(text, rel_path, "mlflow")
        return Parsed(parsed.value + mlflow_status_entry(parsed.value), parsed.status, parsed.note)
    if name.endswith((".yaml", ".yml")):
        return _yaml(text, rel_path, source)
    if name == "wandb-metadata.json":
        from autopsy.parsers.tracker_stores import wandb_metadata_flags

        parsed = _json(text, rel_path, source)
        return Parsed(list(parsed.value) + wandb_metadata_flags(text, rel_path), parsed.status, parsed.note)
    if name.endswith(".json"):
        return _json(text, rel_path, source)
    if name.endswith(".toml"):
        return _toml(text, rel_path, source)
    if detail == "py_dump":
        from autopsy.parsers.py_config import read_py_dump

        return read_py_dump(text, rel_path)
    return Parsed([], ParseStatus.SKIPPED, "config format not parsed (only YAML, JSON, TOML)")


def _source(name: str, detail: str | None) -> str:
    if detail in ("hf_config", "tokenizer", "hydra", "args_dump"):
        return detail
    if detail == "generation_config":
        return "hf_config"
    return "yaml" if name.endswith((".yaml", ".yml")) else "toml" if name.endswith(".toml") else "json"


def _entry(raw_key: str, leaf: str, value: Any, text: str, path: str, line: int | None, source: str) -> ConfigEntry:
    # the section holding the leaf: "train" in "train.steps" (a leaf may itself hold dots)
    prefix = raw_key[:-len(leaf) - 1] if raw_key.endswith("." + leaf) else ""
    key = canonical_key(leaf, value, parent=prefix.rsplit(".", 1)[-1] if prefix else None)
    if key == "max_seq_len" and isinstance(value, (int, float)) and value >= _HUGE_MAX_LENGTH:
        value = None  # transformers' VERY_LARGE_INTEGER: "no limit set"
    return ConfigEntry(key, raw_key, value, text, path, line, source)


# ---------------------------------------------------------------------------- JSON


def _json(text: str, rel_path: str, source: str) -> Parsed:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return Parsed([], ParseStatus.UNREADABLE, f"not valid JSON: {str(exc)[:160]}")
    # Lines: dicts keep document order, so the n-th use of a key in a depth-first walk is
    # its n-th occurrence in the text.
    lines: dict[str, deque[int]] = defaultdict(deque)
    line, pos = 1, 0
    for m in _JSON_KEY.finditer(text):
        line += text.count("\n", pos, m.start())
        pos = m.start()
        lines[m.group(1)].append(line)
    out: list[ConfigEntry] = []
    status, note = ParseStatus.OK, None
    try:
        _walk_json(obj, "", out, lines, rel_path, source, 0)
    except _TooMany:
        status, note = ParseStatus.TRUNCATED, f"more than {MAX_ENTRIES} values; kept the first"
    except RecursionError:
        status, note = ParseStatus.TRUNCATED, "nested too deeply; kept what was read"
    return Parsed(out, status, note)


def _walk_json(obj: Any, prefix: str, out: list[ConfigEntry] | None, lines: dict[str, deque[int]], path: str,
               source: str, depth: int, pop_containers: bool = True) -> None:
    """Depth-first, in document order; ``out=None`` only consumes the key lines of a skipped subtree."""
    if depth > 64:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            ks = str(k)
            nested = isinstance(v, (dict, list)) and not _scalar_list(v)
            q = lines.get(ks)
            line = q.popleft() if q and (pop_containers or not nested) else None
            raw = f"{prefix}.{ks}" if prefix else ks
            if ks in _SKIP_SUBTREES or out is None:
                _walk_json(v, raw, None, lines, path, source, depth + 1, pop_containers)
                continue
            if nested:
                _walk_json(v, raw, out, lines, path, source, depth + 1, pop_containers)
            else:
                if len(out) >= MAX_ENTRIES:
                    raise _TooMany
                out.append(_entry(raw, ks, v, json.dumps(v)[:200] if not isinstance(v, str) else v[:200],
                                  path, line, source))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:1000]):
            _walk_json(v, f"{prefix}.{i}", out, lines, path, source, depth + 1, pop_containers)


def _scalar_list(v: Any) -> bool:
    return isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v)


def _tokenizer_json(text: str, rel_path: str) -> Parsed:
    """tokenizer.json: only the vocabulary size (model.vocab plus added tokens)."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return Parsed([], ParseStatus.UNREADABLE, f"not valid JSON: {str(exc)[:160]}")
    model = obj.get("model") if isinstance(obj, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    ids: set[int] = set()
    if isinstance(vocab, dict):  # BPE / WordPiece / WordLevel: {token: id}
        ids.update(v for v in vocab.values() if isinstance(v, int))
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        ids.update(range(len(vocab)))
    else:
        return Parsed([], ParseStatus.OK, "no model.vocab found")
    added = obj.get("added_tokens") or []
    ids.update(t["id"] for t in added if isinstance(t, dict) and isinstance(t.get("id"), int))
    size = max(ids) + 1 if ids else 0
    m = re.search(r'"vocab"\s*:', text)
    line = text.count("\n", 0, m.start()) + 1 if m else None
    return Parsed([ConfigEntry("vocab_size", "model.vocab (+ added_tokens)", size, str(size), rel_path, line,
                               "tokenizer")])


# ---------------------------------------------------------------------------- YAML


class _TooManyNodes(Exception):
    pass


def _counting_loader() -> Any:
    """A SafeLoader whose composer stops after :data:`MAX_YAML_NODES` nodes (pure Python: ~30 us a node)."""
    import yaml

    class Loader(yaml.SafeLoader):
        nodes = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.nodes += 1
            if self.nodes > MAX_YAML_NODES:
                raise _TooManyNodes
            return super().compose_node(parent, index)

    return Loader


# Below this many characters a YAML text cannot hold MAX_YAML_NODES nodes (a node takes at least one
# character of its own, two in the densest forms: "- " or "?" lines, "[[" nesting), so libyaml's
# composer, which cannot be stopped after N nodes, is safe there: ~10x faster than the pure-Python
# one, which a run of thousands of small configs paid 0.2-0.5 ms a file for.
_C_COMPOSER_BELOW = MAX_YAML_NODES // 2


def _compose_all(text: str) -> Any:
    """The documents of ``text`` as node graphs (aliases shared, never expanded here)."""
    import yaml

    if len(text) < _C_COMPOSER_BELOW and getattr(yaml, "__with_libyaml__", False):
        try:
            return list(yaml.compose_all(text, Loader=yaml.CSafeLoader))
        except Exception:  # any complaint of libyaml's is read again below, where the pure-Python
            pass  # parser's messages and salvage points are the ones kept
    return yaml.compose_all(text, Loader=_counting_loader())


def _yaml(text: str, rel_path: str, source: str, _salvage: bool = False) -> Parsed:
    import yaml

    if len(text) > MAX_YAML_BYTES:
        return Parsed([], ParseStatus.SKIPPED, f"{len(text):,} characters of YAML (over {MAX_YAML_BYTES // 2**20} MB): "
                                               "a data file, not a configuration; not parsed")
    out: list[ConfigEntry] = []
    status, note = ParseStatus.OK, None
    budget = [MAX_ENTRIES * 5]  # nodes visited, aliases expanded: bounds an alias bomb
    constructor = yaml.constructor.SafeConstructor()
    try:
        for doc in _compose_all(text):
            if doc is not None:
                _walk_yaml(doc, "", out, rel_path, source, budget, constructor, 0)
    except _TooMany:
        status, note = ParseStatus.TRUNCATED, (f"more than {MAX_ENTRIES} values or too many alias expansions; "
                                               "kept the first")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).split("\n")[0]
        if not out and mark is not None and mark.line > 0 and not _salvage:
            # keep the values written before the damage (a file cut mid-write, a bad line)
            lines = text.splitlines(keepends=True)
            for cut in (mark.line, mark.line - 1, max(0, mark.line - 5)):
                kept = _yaml("".join(lines[:cut]), rel_path, source, _salvage=True) if cut > 0 else None
                if kept is not None and kept.status is ParseStatus.OK:
                    out = kept.value
                    break
        status = ParseStatus.TRUNCATED if out else ParseStatus.UNREADABLE
        note = f"invalid YAML{where}: {problem}"[:200]
    except RecursionError:
        status, note = ParseStatus.TRUNCATED, "nested too deeply; kept what was read"
    except _TooManyNodes:
        return Parsed([], ParseStatus.SKIPPED, f"more than {MAX_YAML_NODES:,} YAML nodes: a data file, not a "
                                               "configuration; not parsed")
    return Parsed(out, status, note)


def _walk_yaml(node: Any, prefix: str, out: list[ConfigEntry], path: str, source: str, budget: list[int],
               constructor: Any, depth: int) -> None:
    import yaml

    budget[0] -= 1
    if budget[0] < 0 or depth > 64:
        raise _TooMany
    if isinstance(node, yaml.MappingNode):
        for knode, vnode in node.value:
            budget[0] -= 1
            key = str(knode.value) if isinstance(knode, yaml.ScalarNode) else "?"
            if key == "<<":  # merge key: its mapping's keys belong to this level
                _walk_yaml(vnode, prefix, out, path, source, budget, constructor, depth + 1)
                continue
            raw = f"{prefix}.{key}" if prefix else key
            if key in _SKIP_SUBTREES:
                continue
            line = knode.start_mark.line + 1
            vnode = _unwrap_wandb(vnode)
            if isinstance(vnode, yaml.ScalarNode):
                _add_scalar(raw, key, vnode, line, out, path, source, constructor)
            elif isinstance(vnode, yaml.SequenceNode) and all(isinstance(x, yaml.ScalarNode) for x in vnode.value):
                values = [_construct(constructor, x) for x in vnode.value[:1000]]
                budget[0] -= len(vnode.value)
                if len(out) >= MAX_ENTRIES:
                    raise _TooMany
                out.append(_entry(raw, key, values, json.dumps(values, default=str)[:200], path, line, source))
            else:
                _walk_yaml(vnode, raw, out, path, source, budget, constructor, depth + 1)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk_yaml(item, f"{prefix}.{i}" if prefix else str(i), out, path, source, budget, constructor,
                       depth + 1)


def _unwrap_wandb(node: Any) -> Any:
    """W&B's ``files/config.yaml`` wraps every value as ``key: {desc: null, value: 2e-05}``.

    Without unwrapping, every setting would be named ``value``; with it, ``learning_rate``
    keeps its name (and its line, the key's).
    """
    import yaml

    if not isinstance(node, yaml.MappingNode) or not 1 <= len(node.value) <= 2:
        return node
    keys = {k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode)}
    if "value" not in keys or not keys <= {"desc", "value"}:
        return node
    return next(v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == "value")


def _add_scalar(raw: str, key: str, vnode: Any, line: int, out: list[ConfigEntry], path: str, source: str,
                constructor: Any) -> None:
    if len(out) >= MAX_ENTRIES:
        raise _TooMany
    value = _construct(constructor, vnode)
    out.append(_entry(raw, key, value, str(vnode.value)[:200], path, line, source))


def _construct(constructor: Any, node: Any) -> Any:
    try:
        value = constructor.construct_object(node, deep=True)
    except Exception:  # a bad timestamp or !!binary: keep the text
        return str(node.value)
    if not isinstance(value, (int, float, str, bool, type(None))):
        return str(node.value)  # dates and other constructed types: keep the text
    if isinstance(value, str) and not node.style:
        # YAML 1.1 reads "1e-4" as a string (no dot); training code reads it as a number
        parsed = parse_value(value)
        if isinstance(parsed, (int, float)) and not isinstance(parsed, bool):
            return parsed
    return value


# ---------------------------------------------------------------------------- TOML


def _toml(text: str, rel_path: str, source: str) -> Parsed:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        return Parsed([], ParseStatus.SKIPPED, "TOML needs Python 3.11 (tomllib)")
    try:
        obj = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError, ValueError) as exc:  # ValueError: a 5,000-digit integer
        return Parsed([], ParseStatus.UNREADABLE, f"not valid TOML: {str(exc)[:160]}")
    lines: dict[str, deque[int]] = defaultdict(deque)
    for no, line in enumerate(text.splitlines(), 1):
        m = re.match(r'\s*"?([A-Za-z0-9_.\-]+)"?\s*=', line)
        if m:
            lines[m.group(1).rsplit(".", 1)[-1]].append(no)
    out: list[ConfigEntry] = []
    try:
        _walk_json(obj, "", out, lines, rel_path, source, 0, pop_containers=False)
    except (_TooMany, RecursionError):
        return Parsed(out, ParseStatus.TRUNCATED, f"more than {MAX_ENTRIES} values; kept the first")
    return Parsed(out)
