"""OpenMMLab's dumped Python config (mmengine ``vis_data/config.py``, a work dir's ``<name>.py``).

mmengine and mmcv write the resolved config of a run as Python source made only of assignments
(``train_cfg = dict(by_epoch=True, max_epochs=100, val_interval=1)``, ``max_epochs = 300``), next to
the run's log and ``scalars.json``. It holds the run's plan (``max_epochs``, ``max_iters``), LR and
schedule, so it is read as a config: parsed with :mod:`ast`, never executed. Only literals,
``dict(...)`` calls and lists/tuples of them are values; anything else (a name, an expression) is
kept as its source text. A training script is not such a file: it imports, defines or calls things
at its top level, and is left alone (:func:`looks_like_py_dump`).
"""

from __future__ import annotations

import ast
from typing import Any

import regex

from autopsy.model import ParseStatus
from autopsy.parsers.types import ConfigEntry, Parsed

_ASSIGN = regex.compile(r"^[A-Za-z_]\w*\s*=[^=]")
# a statement no dumped config has at its top level
_CODE = regex.compile(r"^(?:import |from \S+ import |def |class |async |if |for |while |with |try:|@)", regex.M)
_MAX_DEPTH = 12
_MAX_ENTRIES = 20_000


def looks_like_py_dump(head: bytes) -> bool:
    """A ``.py`` whose first statement is an assignment and whose head holds no import, def, class
    or control statement at its top level: a dumped config, not a script."""
    text = head.decode("utf-8", "replace").lstrip("\ufeff")
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return bool(lines) and _ASSIGN.match(lines[0]) is not None and _CODE.search(text) is None


def read_py_dump(text: str, rel_path: str) -> Parsed:
    """Flatten a dumped config's top-level assignments into entries (``train_cfg.max_epochs``)."""
    from autopsy.parsers.configs import _entry

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return Parsed([], ParseStatus.UNREADABLE, f"not valid Python: {str(exc)[:120]}")
    out: list[ConfigEntry] = []

    def walk(node: ast.AST, key: str, depth: int) -> None:
        if len(out) >= _MAX_ENTRIES or depth > _MAX_DEPTH:
            return
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
            for kw in node.keywords:
                if kw.arg is not None:
                    walk(kw.value, f"{key}.{kw.arg}", depth + 1)
            return
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=False):
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    walk(v, f"{key}.{k.value}", depth + 1)
            return
        if isinstance(node, (ast.List, ast.Tuple)) and any(isinstance(e, (ast.Call, ast.Dict)) for e in node.elts):
            for i, e in enumerate(node.elts):
                walk(e, f"{key}.{i}", depth + 1)
            return
        value, shown = _value(node)
        src = ast.get_source_segment(text, node) or shown
        out.append(_entry(key, key.rsplit(".", 1)[-1], value, src[:200], rel_path, getattr(node, "lineno", None),
                          "py_dump"))

    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            walk(stmt.value, stmt.targets[0].id, 0)
    note = None if len(out) < _MAX_ENTRIES else f"stopped at {_MAX_ENTRIES} values"
    return Parsed(out, ParseStatus.OK if note is None else ParseStatus.TRUNCATED, note)


def _value(node: ast.AST) -> tuple[Any, str]:
    """A literal's value (numbers, strings, booleans, None, lists of them), else its source text.
    Read from the syntax tree node by node: nothing is evaluated."""
    got = _literal(node)
    if got is _NOT_LITERAL:
        text = ast.unparse(node)[:200]
        return text, text
    return got, repr(got)[:200]


_NOT_LITERAL = object()


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) \
            and isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, (int, float)) \
            and not isinstance(node.operand.value, bool):
        return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
    if isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) <= 1000:
        items = [_literal(e) for e in node.elts]
        return _NOT_LITERAL if any(x is _NOT_LITERAL for x in items) else items
    return _NOT_LITERAL
