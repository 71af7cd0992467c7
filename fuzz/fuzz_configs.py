"""Fuzz the config readers (YAML, JSON, TOML) and the launch-script parser (autopsy.parsers.configs)."""

from __future__ import annotations

import math

import atheris

with atheris.instrument_imports():
    from _common import run, scratch_file

    from autopsy.model import ArtifactKind
    from autopsy.parsers.configs import read_config
    from autopsy.parsers.numbers import INT_MAX

NAMES = (("config.yaml", ArtifactKind.CONFIG), ("config.json", ArtifactKind.CONFIG),
         ("config.toml", ArtifactKind.CONFIG), ("run.sh", ArtifactKind.LAUNCH_SCRIPT))


def test_one(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    name, kind = NAMES[fdp.ConsumeIntInRange(0, len(NAMES) - 1)]
    path = scratch_file(name, fdp.ConsumeBytes(fdp.remaining_bytes()))
    parsed = read_config(path, name, kind, None)
    for e in parsed.value or ():
        v = e.value
        if isinstance(v, bool) or v is None or isinstance(v, str):
            continue
        if isinstance(v, int) and not -INT_MAX <= v <= INT_MAX:
            raise AssertionError(f"{e.raw_key}: int out of range reached a rule: {v}")
        if isinstance(v, float) and not math.isfinite(v):
            raise AssertionError(f"{e.raw_key}: non-finite value reached a rule: {v}")


if __name__ == "__main__":
    run(test_one)
