"""Generate a big HF ``trainer_state.json`` (as ``TrainerState.save_to_json`` writes it).

    python bench/gen_trainer_state.py OUT_PATH [N_ENTRIES]      (default 200,000)

The Trainer writes ``json.dumps(dataclasses.asdict(state), indent=2, sort_keys=True)``:
one ``log_history`` entry per ``logging_steps`` (loss, grad_norm, learning_rate, epoch,
step) and an eval entry every ``eval_steps``. 200k entries is a ~35 MB file, the size a
long run with ``logging_steps=1`` leaves.
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path


def generate(path: Path, n_entries: int = 200_000, seed: int = 0) -> dict[str, int]:
    rng = random.Random(seed)
    history: list[dict[str, float | int]] = []
    max_steps = n_entries + n_entries // 50
    step = 0
    while len(history) < n_entries:
        step += 1
        loss = 3.0 * math.exp(-step / 50_000) + rng.random() * 0.05
        history.append({"epoch": round(step / max_steps * 3, 4), "grad_norm": rng.random() * 3,
                        "learning_rate": 2e-5 * (1 - step / max_steps), "loss": round(loss, 4), "step": step})
        if step % 50 == 0 and len(history) < n_entries:
            history.append({"epoch": round(step / max_steps * 3, 4), "eval_loss": loss + 0.1, "eval_runtime": 12.3,
                            "eval_samples_per_second": 81.3, "eval_steps_per_second": 1.6, "step": step})
    state: dict[str, object] = {
        "best_metric": None, "best_model_checkpoint": None, "epoch": round(step / max_steps * 3, 4),
        "eval_steps": 50, "global_step": step, "is_hyper_param_search": False, "is_local_process_zero": True,
        "is_world_process_zero": True, "log_history": history, "logging_steps": 1, "max_steps": max_steps,
        "num_input_tokens_seen": 0, "num_train_epochs": 3, "save_steps": 500, "stateful_callbacks": {},
        "total_flos": 1.0e18, "train_batch_size": 8, "trial_name": None, "trial_params": None}
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return {"entries": len(history), "bytes": path.stat().st_size}


if __name__ == "__main__":
    out = Path(sys.argv[1])
    print(generate(out, int(sys.argv[2]) if len(sys.argv) > 2 else 200_000))
