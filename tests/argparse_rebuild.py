"""Rebuild a script's argparse parser from its source, without running the rest of it (no torch).

The statements that build the parser (``X = argparse.ArgumentParser(...)`` and every
``X.add_argument(...)``, at module level or in a function) are lifted out of the AST and run
on their own: the parser is then the script's own, with its own option strings, actions and
types, so a proposed command that it rejects fails the test the way it would fail the user.
"""

from __future__ import annotations

import argparse
import ast
import shlex
from pathlib import Path


def rebuild_parser(script: Path) -> argparse.ArgumentParser:
    tree = ast.parse(script.read_text())
    keep: list[ast.stmt] = []
    name = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and ast.unparse(node.value.func).endswith("ArgumentParser") and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            keep.append(node)
    assert name is not None, f"{script} builds no argparse parser"
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and ast.unparse(node.value.func) == f"{name}.add_argument":
            keep.append(node)
    keep.sort(key=lambda n: n.lineno)
    module = ast.Module(body=[ast.parse("import argparse").body[0], *keep], type_ignores=[])
    ns: dict[str, object] = {}
    exec(compile(ast.fix_missing_locations(module), str(script), "exec"), ns)  # the test's own fixture scripts
    parser = ns[name]
    assert isinstance(parser, argparse.ArgumentParser)
    parser.exit_on_error = False
    return parser


def script_args(command: str, script: str) -> list[str]:
    """The words after ``script`` in a shell command (variables set before it are dropped)."""
    words = shlex.split(command)
    return words[words.index(script) + 1:]
