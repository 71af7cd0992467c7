"""loss.plateau's "rose" mode: a training loss that ended well above where it started.

A supervised loss that more than doubled and stayed there did not improve: the run got worse
(a learning rate too high, a resume that loaded the wrong state, data or labels that changed
mid-run). A reinforcement-learning loss is different: a DQN's TD loss grows with its value
estimates, and several sessions appended to one file restart it. Such a log says what it is on the
loss's own lines ("Episode 12/500 | ... | Loss: 2.06 | ε: 0.31"), and then the rise is not judged.
"""

from __future__ import annotations

import numpy as np
import regex

from autopsy.checks.series import Series
from autopsy.engine.types import CheckContext
from autopsy.model import Confidence, Evidence, Finding
from autopsy.run import Run

# Words only a reinforcement-learning loop prints beside its loss: episodes, exploration rate, rewards.
_RL_WORDS = regex.compile(r"(?i)\bepisodes?\b|\bepsilon\b|ε|\brewards?\b|\bep_?rew|\bq[_-]?values?\b")


# The same in a metric table's columns: stable-baselines3's progress.csv ("rollout/ep_rew_mean",
# "rollout/ep_len_mean" beside "train/loss"), rllib's "episode_reward_mean".
_RL_TAG = regex.compile(r"(?i)ep_?rew|ep_?len|episode|reward")


def reinforcement_learning_lines(run: Run, s: Series) -> bool:
    """Some kept line of the series' log carries both its loss key and a reinforcement-learning word, or the
    series' file has a reinforcement-learning column."""
    key = s.tag.lower()
    for scan in run.logs:
        if scan.path != s.path:
            continue
        lines = list(scan.head) + [line for _, line in scan.tail]
        return any(key in line.lower() and _RL_WORDS.search(line) for line in lines)
    df = run.scalars
    if df.empty:
        return False
    tags = df["tag"].iloc[(df["path"] == s.path).to_numpy(dtype=bool)].unique()
    return any(_RL_TAG.search(str(t)) for t in tags)


def rose(ctx: CheckContext, run: Run, s: Series, initial: float, final: float, window_steps: tuple[int, int],
         facts: dict[str, object], ev: list[Evidence]) -> list[Finding]:
    """The finding for a loss that rose past ``diverged_factor`` times its start, or none for an RL loss."""
    if reinforcement_learning_lines(run, s):
        return []
    # The rise must stand out of the series' own scatter: most of the end above most of the start. Per-batch
    # losses spread over decades (a detector's first epoch: 0.0003 to 1.3) move their medians by chance.
    k = max(3, int(len(s.values) * float(ctx.param("edge_fraction"))))
    if not float(np.percentile(s.values[-k:], 25)) > float(np.percentile(s.values[:k], 75)):
        return []
    facts["mode"] = "rose"
    facts["rise_factor"] = round(final / initial, 3)
    msg = (f"The loss rose and did not come back down: {final:.4g} at the end vs {initial:.4g} at the start "
           f"({final / initial:.1f}x), flat over steps {window_steps[0]}..{window_steps[1]}: the run got worse, "
           "not better (a learning rate too high, a resume that loaded the wrong state, data or labels that "
           "changed mid-run).")
    return [ctx.finding(msg, key="loss.plateau:rose", facts=facts, evidence=ev, step=int(window_steps[0]),
                        confidence=Confidence.MEDIUM)]
