"""The generated docs are current, complete, and the README's commands are real.

docs/rules.md and docs/cli.md are regenerated here (in memory) and compared with the
files, so editing a card or a ``--help`` text without ``python scripts/gen_docs.py``
fails. Completeness is checked against sources the generator does not use (the taxonomy,
the raw card files, click's parameter objects), so a generator bug that drops a rule or an
option fails too. README and docs commands that start with ``autopsy `` are parsed
against click's command objects: an option that does not exist, a bad choice, an
unknown subcommand or a missing argument fails.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest
import yaml
from conftest import REPO, RULES
from doc_commands import CommandError, option_map, shell_commands, shell_commands_full, validate_command

from autopsy.cli import main as cli_main

# The taxonomy is a public contract kept in ../shared; tests/data holds a copy so the
# checks also run where ../shared is absent (test_taxonomy_copy_is_current keeps it true).
_SHARED_TAXONOMY = REPO.parent / "shared" / "taxonomy.md"
TAXONOMY = _SHARED_TAXONOMY if _SHARED_TAXONOMY.is_file() else REPO / "tests" / "data" / "taxonomy.md"
_TAXONOMY_ROW = re.compile(r"^\|\s*`(?P<id>[a-z_]+\.[a-z_]+)`\s*\|")


def _load_gen_docs() -> ModuleType:
    path = REPO / "scripts" / "gen_docs.py"
    spec = importlib.util.spec_from_file_location("gen_docs", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_docs"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


gen_docs = _load_gen_docs()


@pytest.fixture(scope="module")
def generated() -> dict[Path, str]:
    return gen_docs.outputs()


# ---------------------------------------------------------------------------- freshness


@pytest.mark.parametrize("name", ["rules.md", "cli.md"])
def test_generated_docs_are_current(generated: dict[Path, str], name: str) -> None:
    path = REPO / "docs" / name
    assert path in generated
    assert path.is_file(), f"docs/{name} is missing: run python scripts/gen_docs.py"
    if path.read_text(encoding="utf-8") != generated[path]:
        pytest.fail(f"docs/{name} is stale: run python scripts/gen_docs.py\n{gen_docs.diff(path, generated[path])}")


def test_generation_is_deterministic(generated: dict[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    # A narrow terminal must not reflow the --help text in docs/cli.md.
    monkeypatch.setenv("COLUMNS", "40")
    assert gen_docs.render_cli() == generated[gen_docs.CLI_MD]
    assert gen_docs.render_rules(gen_docs.load_card_docs()) == generated[gen_docs.RULES_MD]


def test_check_mode_exit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    rules_md, cli_md = tmp_path / "rules.md", tmp_path / "cli.md"
    monkeypatch.setattr(gen_docs, "RULES_MD", rules_md)
    monkeypatch.setattr(gen_docs, "CLI_MD", cli_md)
    assert gen_docs.main(["--check"]) == 1  # missing files are stale
    assert not rules_md.exists()  # --check writes nothing
    assert gen_docs.main([]) == 0
    assert gen_docs.main(["--check"]) == 0
    cli_md.write_text(cli_md.read_text(encoding="utf-8").replace("--fail-on", "--fail-when"), encoding="utf-8")
    assert gen_docs.main(["--check"]) == 1
    assert "cli.md is stale" in capsys.readouterr().err


def test_broken_card_refuses_generation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    # Docs from a partial catalog would silently drop a rule: refuse (exit 2) instead.
    bad = tmp_path / "rules" / "oom"
    bad.mkdir(parents=True)
    (bad / "cuda.yaml").write_text("id: oom.cuda\ntitle: x\nseverity: fatal\n", encoding="utf-8")
    original = gen_docs.load_card_docs
    monkeypatch.setattr(gen_docs, "load_card_docs", lambda: original(tmp_path / "rules"))
    monkeypatch.setattr(gen_docs, "RULES_MD", tmp_path / "rules.md")
    monkeypatch.setattr(gen_docs, "CLI_MD", tmp_path / "cli.md")
    assert gen_docs.main([]) == 2
    assert "broken cards" in capsys.readouterr().err
    assert not (tmp_path / "rules.md").exists()


# ------------------------------------------------------------------------- docs/rules.md


def _rule_sections(text: str) -> dict[str, str]:
    """rule id -> its section of docs/rules.md (from its anchor to the next one)."""
    parts = re.split(r'^<a id="([^"]+)"></a>$', text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _card_files() -> dict[str, dict[str, Any]]:
    """id -> raw YAML of every card file (read directly, so a card the loader refuses still counts)."""
    out = {}
    for path in sorted(p for p in RULES.rglob("*") if p.suffix in (".yaml", ".yml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert isinstance(data, dict) and isinstance(data.get("id"), str), f"{path}: no id"
        out[data["id"]] = data
    return out


def test_every_taxonomy_id_has_a_section(generated: dict[Path, str]) -> None:
    if not TAXONOMY.is_file():
        pytest.skip(f"taxonomy not found at {TAXONOMY} (it lives in ../shared beside the repo)")
    ids = [m["id"] for line in TAXONOMY.read_text(encoding="utf-8").splitlines() if (m := _TAXONOMY_ROW.match(line))]
    assert len(ids) >= 30, f"parsed only {len(ids)} ids from {TAXONOMY}"
    sections = _rule_sections(generated[gen_docs.RULES_MD])
    missing = sorted(set(ids) - set(sections))
    assert not missing, f"taxonomy ids without a section in docs/rules.md: {missing}"


def test_every_card_has_a_complete_section(generated: dict[Path, str]) -> None:
    sections = _rule_sections(generated[gen_docs.RULES_MD])
    cards = _card_files()
    assert set(cards) <= set(sections), f"cards without a section: {sorted(set(cards) - set(sections))}"
    for cid, card in cards.items():
        section = sections[cid]
        assert f"### `{cid}`: " in section, cid
        docs = card.get("docs") or {}
        assert isinstance(docs, dict)
        for heading, key in (("Why it matters", "why"), ("How to confirm", "confirm"), ("What to do", "action"),
                             ("Known false positives", "false_positives"), ("References", "references")):
            if docs.get(key):
                assert f"#### {heading}" in section, f"{cid}: no {heading!r}"
        for ref in docs.get("references") or []:
            assert str(ref) in section, f"{cid}: reference {ref} not shown"
        for name in card.get("params") or {}:
            assert f"| `{name}` |" in section, f"{cid}: param {name} not documented"
        match = card.get("match") or {}
        assert isinstance(match, dict)
        for group in ("any", "all", "none"):
            for pattern in match.get(group) or []:
                assert f"- `{pattern['name']}`" in section, f"{cid}: pattern {pattern['name']} not documented"
                comment = gen_docs.md_text(" ".join(str(pattern["comment"]).split()))
                assert comment in section, f"{cid}: the comment of pattern {pattern['name']} is not shown"
        for other in (*(card.get("supersedes") or []), *(card.get("explains") or [])):
            assert f"`{other}`" in section, f"{cid}: precedence over {other} not shown"


def test_thresholds_show_values_and_notes(generated: dict[Path, str]) -> None:
    section = _rule_sections(generated[gen_docs.RULES_MD])["loss.plateau"]
    assert "| `min_points` | `20` | finite loss points needed |" in section
    # every param of every card says what it means (a comment in the card, or the shared glossary)
    for cid, text in _rule_sections(generated[gen_docs.RULES_MD]).items():
        for row in re.findall(r"^\| `[a-z_0-9]+` \| .* \|$", text, flags=re.M):
            assert not row.endswith("|  |"), f"{cid}: a param without its meaning: {row}"


def test_markdown_escaping() -> None:
    assert gen_docs.md_text("see <pid> and `<pid>` and __init__") == "see &lt;pid> and `<pid>` and \\_\\_init\\_\\_"
    assert gen_docs.md_text("vocab_size 0.1 + 0.9 * cosine") == "vocab_size 0.1 + 0.9 \\* cosine"
    assert gen_docs.yaml_value([1, "a b"]) == "[1, a b]"
    assert gen_docs.yaml_value("x") == "x"


def test_yaml_notes_read_comments() -> None:
    params, top = gen_docs.yaml_notes("params:\n  a: 1  # one\n  # above b\n  b: [x, y]   # list\n  c: 3\n"
                                      "# why\nexplains: [x.y]\n")
    assert params == {"a": "one", "b": "above b list"}
    assert top == {"explains": "why"}


# --------------------------------------------------------------------------- docs/cli.md


def _commands() -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield from gen_docs.iter_commands(cli_main)


def test_every_command_and_option_is_in_cli_md(generated: dict[Path, str]) -> None:
    text = generated[gen_docs.CLI_MD]
    parts = re.split(r'^<a id="([^"]+)"></a>$', text, flags=re.M)
    sections = {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    paths = [p for p, _ in _commands()]
    wanted = {("autopsy",), ("autopsy", "analyze"), ("autopsy", "report"), ("autopsy", "rules", "list"),
              ("autopsy", "rules", "explain")}
    assert wanted <= set(paths)
    for path, cmd in _commands():
        anchor = gen_docs.cli_anchor(path)
        assert anchor in sections, f"{' '.join(path)} has no section in docs/cli.md"
        section = sections[anchor]
        for param in cmd.get_params(click.Context(cmd, info_name=path[-1])):
            if getattr(param, "hidden", False):
                continue
            if isinstance(param, click.Option):
                for opt in (*param.opts, *param.secondary_opts):
                    assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", section), \
                        f"{' '.join(path)} {opt} is not in docs/cli.md"
            elif isinstance(param, click.Argument):
                assert (param.metavar or param.name or "").upper() in section.upper(), (path, param.name)


# --------------------------------------------------------------- commands in README/docs


def _doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_readme_has_checkable_examples() -> None:
    found = list(shell_commands((REPO / "README.md").read_text(encoding="utf-8")))
    assert len(found) >= 5, "README should show autopsy commands in bash blocks"
    assert any(tokens[:2] == ["autopsy", "analyze"] for _, tokens in found)


@pytest.mark.parametrize("path", _doc_files(), ids=lambda p: p.name)
def test_commands_in_docs_use_real_options(path: Path) -> None:
    if not path.is_file():
        pytest.skip(f"{path.name} not present")
    problems = []
    for lineno, tokens, partial in shell_commands_full(path.read_text(encoding="utf-8")):
        try:
            validate_command(tokens, partial=partial)
        except CommandError as exc:
            problems.append(f"{path.name}:{lineno}: `{shlex.join(tokens)}`: {exc}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("command, error", [
    ("autopsy analyze runs/x --formats json", "no such option --formats"),
    ("autopsy analyze runs/x --format yaml", "is not one of"),
    ("autopsy analyze --quiet", "missing"),
    ("autopsy rules explian disk.full", "no such command"),
    ("autopsy rules explain", "missing"),
    ("autopsy rules list extra", "unexpected extra"),
    ("autopsy report a.json b.json", "unexpected extra"),
    ("autopsy analyze runs/x --quiet=yes", "takes no value"),
    ("autopsy analyze runs/x -qz", "no such option -z"),
])
def test_validator_catches_wrong_commands(command: str, error: str) -> None:
    with pytest.raises(CommandError, match=error):
        validate_command(shlex.split(command))


def test_validator_accepts_real_commands_and_splits_shell_lines() -> None:
    md = ("```bash\n$ pip install . && autopsy analyze runs/a --format=json -o r.json  # note\n"
          "autopsy analyze runs/b \\\n  --fail-on ERROR --no-check-crc -q > out.txt\n```\n"
          "Run `autopsy rules explain oom.cuda` or `autopsy report r.json --format md`.\n"
          "```python\nautopsy --bogus\n```\n")
    found = list(shell_commands(md))
    assert [t for _, t in found] == [
        ["autopsy", "analyze", "runs/a", "--format=json", "-o", "r.json"],
        ["autopsy", "analyze", "runs/b", "--fail-on", "ERROR", "--no-check-crc", "-q"],
        ["autopsy", "rules", "explain", "oom.cuda"],
        ["autopsy", "report", "r.json", "--format", "md"],
    ]
    assert [n for n, _ in found] == [2, 3, 6, 6]
    assert [partial for _, _, partial in shell_commands_full(md)] == [False, False, True, True]
    for _, tokens in found:
        validate_command(tokens)


def test_options_named_in_readme_prose_exist() -> None:
    """`--max-bytes-per-file SIZE` in a README sentence must be an option of some command.
    (README only: docs/ also quote other programs' options, --requeue, --resume_from_checkpoint.)"""
    path = REPO / "README.md"
    known = {opt for _, cmd in _commands() for opt in option_map(cmd)}
    named = {m.group(1).split("=")[0] for m in re.finditer(r"`(--[a-z][\w-]*)[^`]*`", path.read_text(encoding="utf-8"))}
    unknown = sorted(named - known)
    assert not unknown, f"{path.name} names options no command has: {unknown}"
