"""`autopsy diff`: what changed between the runs that worked and the run that died.

``diff(good, bad)`` (or several good runs) analyses every run with the same engine as
``autopsy analyze`` and compares configuration, environment, log templates, metrics,
checkpoints and findings, ranking each difference by how likely it explains the bad run's
primary finding. The result's parts are DataFrames (``RunDiff.config``, ``.environment``,
``.templates``, ``.metrics``, ``.checkpoints``, ``.findings``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from autopsy.compare.model import Difference, RunDiff

if TYPE_CHECKING:
    from autopsy.engine.loader import Catalog
    from autopsy.run import LoadOptions

__all__ = ["AGREE_BELOW", "Difference", "RunDiff", "diff"]

# A difference scoring below this (a seed, a vanished template, a size) is expected variation:
# runs whose differences all score below it "agree".
AGREE_BELOW = 0.3


def diff(good: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], bad: str | os.PathLike[str], *,
         catalog: Catalog | None = None, options: LoadOptions | None = None) -> RunDiff:
    """Compare the bad run with one good run or several; return the ranked :class:`RunDiff`.

    Raises :class:`autopsy.run.RunError` when a directory cannot be read.
    """
    from autopsy.compare import rank as r
    from autopsy.compare.collect import collect
    from autopsy.engine.loader import load_catalog

    goods_in = [good] if isinstance(good, str | os.PathLike) else list(good)
    if not goods_in:
        raise ValueError("diff needs at least one good run")
    catalog = catalog if catalog is not None else load_catalog()
    goods = [collect(g, catalog=catalog, options=options) for g in goods_in]
    bad_facts = collect(bad, catalog=catalog, options=options)

    divs, metric_diffs, metric_rows = r.metric_differences(goods, bad_facts)
    config_diffs, config_rows = r.config_differences(goods, bad_facts, divs)
    env_diffs, env_rows = r.environment_differences(goods, bad_facts)
    tpl_diffs, tpl_rows = r.template_differences(goods, bad_facts)
    ckpt_diffs, ckpt_rows = r.checkpoint_differences(goods, bad_facts)
    finding_diffs, finding_rows = r.finding_differences(goods, bad_facts)
    ranked = r.rank(config_diffs + env_diffs + tpl_diffs + metric_diffs + ckpt_diffs
                    + r.file_differences(goods, bad_facts) + finding_diffs)
    notes = [n for f in (*goods, bad_facts) for n in f.notes]
    if not any(g.series for g in goods) or not bad_facts.series:
        notes.append("metrics not compared: no loss, grad norm, LR or throughput series on "
                     + ("the bad run" if not bad_facts.series else "any good run"))
    agree = not any(d.score >= AGREE_BELOW for d in ranked)
    return RunDiff(goods=tuple(str(g) for g in goods_in), bad=str(bad), differences=ranked,
                   bad_primary=bad_facts.primary, good_primaries=tuple(g.primary for g in goods), agree=agree,
                   rows={"config": config_rows, "environment": env_rows, "templates": tpl_rows,
                         "metrics": metric_rows, "checkpoints": ckpt_rows, "findings": finding_rows},
                   notes=tuple(notes), series=r.chart_series(goods, bad_facts))
