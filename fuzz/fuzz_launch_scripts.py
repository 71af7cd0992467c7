"""Fuzz the launch-script parser alone, shaped like shell: flags, quotes, continuations."""

from __future__ import annotations

import atheris

with atheris.instrument_imports():
    from _common import run

    from autopsy.parsers.launch_script import parse_launch_script

PIECES = ("python ", "torchrun ", "accelerate launch ", "--lr ", "--max_steps ", "=", " \\\n", "\n", '"', "'",
          "#SBATCH --time ", "export X=", " && ", " > log 2>&1 &", "-u ", "nohup ", "1e999999", "9" * 30)


def test_one(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    parts = []
    while fdp.remaining_bytes():
        if fdp.ConsumeBool():
            parts.append(PIECES[fdp.ConsumeIntInRange(0, len(PIECES) - 1)])
        else:
            parts.append(fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 64)))
    text = "".join(parts)
    entries = parse_launch_script(text, "run.sh")
    if len(entries) > 4 * (text.count("\n") + 1) + 8 * len(text):
        raise AssertionError("more entries than the script has words")


if __name__ == "__main__":
    run(test_one)
