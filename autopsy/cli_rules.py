"""``autopsy rules list`` / ``autopsy rules explain``, and loading the catalog with team cards.

:func:`load_catalog` is what every command that runs rules uses: a card from ``--rules``
that the loader refused, or whose path does not mirror its id, is an input error (exit 2).
Without ``--rules``, the ``rules`` commands read the light cached index of the built-in
cards instead (:mod:`autopsy.engine.catalog_index`), so listing rules need not load the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from autopsy.cli_output import die, guarded, say
from autopsy.cli_support import plain_table, team_card_errors

if TYPE_CHECKING:
    from autopsy.engine.catalog_index import CatalogIndex
    from autopsy.engine.loader import Catalog


def load_catalog(rules: Sequence[str]) -> Catalog:
    """The catalog; a refused or misnamed card from ``--rules`` is an input error (exit 2)."""
    from autopsy.engine import loader

    catalog = loader.load_catalog(tuple(rules))
    problems = team_card_errors(catalog, rules)
    if problems:
        for message in problems[:-1]:
            say(f"autopsy: error: card refused: {message}")
        die(f"card refused: {problems[-1]}")
    return catalog


def catalog_index(rules: Sequence[str]) -> CatalogIndex:
    """What ``rules list``/``explain`` print: the cached built-in index, or a full load with ``--rules``.

    Both hold the same cards and refusals (the index is the full load's result, served only
    while no card, engine source or dependency changed); team cards are always loaded in full.
    """
    from autopsy.engine.catalog_index import CatalogIndex, builtin_index

    if not rules:
        return builtin_index()
    return CatalogIndex.from_catalog(load_catalog(rules))


@click.group()
def rules() -> None:
    """The rule catalog: list the rules, explain one."""


@rules.command("list")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(exists=True, file_okay=False), metavar="DIR",
              help="Include rule cards from DIR.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per rule.")
@guarded
def rules_list(rules_dirs: tuple[str, ...], as_json: bool) -> None:
    """Every rule: id, severity, status, summary."""
    catalog = catalog_index(rules_dirs)
    rows = [c.summary() for c in sorted(catalog.cards.values(), key=lambda c: c.id)]
    if as_json:
        import json

        for row in rows:
            click.echo(json.dumps(row, ensure_ascii=False))
    else:
        table = plain_table(["ID", "SEVERITY", "STATUS", "SUMMARY"],
                            [[r["id"], r["severity"], r["status"], str(r["summary"]).strip()] for r in rows])
        click.echo("\n".join(table))
    for err in catalog.errors:  # built-in cards only: a refused team card stopped us above
        say(f"autopsy: card refused: {err}")


@rules.command("explain")
@click.argument("rule_id")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(exists=True, file_okay=False), metavar="DIR",
              help="Include rule cards from DIR.")
@guarded
def rules_explain(rule_id: str, rules_dirs: tuple[str, ...]) -> None:
    """A rule's documentation: summary, why it matters, how to confirm, what to do."""
    catalog = catalog_index(rules_dirs)
    card = catalog.get(rule_id)
    if card is None:
        die(f"unknown rule {rule_id!r}; `autopsy rules list` shows them")
    docs = card.docs
    out = [f"{card.id}: {card.title}",
           f"severity: {card.severity}   confidence: {card.confidence}   status: {card.status}",
           f"needs: {', '.join(card.needs) or '-'}"]
    if card.aliases:
        out.append(f"aliases: {', '.join(card.aliases)}")
    for title, key in (("Summary", "summary"), ("Why it matters", "why"), ("How to confirm", "confirm"),
                       ("What to do", "action")):
        if docs.get(key):
            out += ["", f"{title}:", *(f"  {line}" for line in str(docs[key]).strip().splitlines())]
    for title, key in (("Known false positives", "false_positives"), ("References", "references")):
        items = docs.get(key) or []
        if items:
            out += ["", f"{title}:", *(f"  - {item}" for item in items)]
    if card.supersedes or card.explains:
        out += ["", "Precedence:"]
        if card.supersedes:
            out.append(f"  primary over: {', '.join(card.supersedes)}")
        if card.explains:
            out.append(f"  explains: {', '.join(card.explains)}")
    if card.params:
        out += ["", "Parameters:", *(f"  {k}: {v}" for k, v in sorted(card.params.items()))]
    out += ["", f"card: {card.source}"]
    click.echo("\n".join(out))
