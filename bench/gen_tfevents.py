"""Generate big TensorBoard event files for the benchmarks.

    python bench/gen_tfevents.py OUT_DIR [--scalars 1000000] [--tags 8]

Writes ``OUT_DIR/simple/events.out.tfevents.*`` (``simple_value`` scalars, as PyTorch's
``SummaryWriter.add_scalar`` writes them) and ``OUT_DIR/tensor/events.out.tfevents.*``
(TF2-style: rank-0 float tensors; plugin metadata on each tag's first event only, as
``tf.summary.scalar`` writes them). Protos come from ``tensorboard.compat.proto`` and
frames from TensorBoard's ``RecordWriter``; per tag one Summary is built and only its
value is replaced, which keeps generation to a few seconds per million events.
"""

from __future__ import annotations

import argparse
import math
import struct
import time
from pathlib import Path


def generate(out: Path, n_scalars: int, n_tags: int, tensor_style: bool) -> Path:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.plugins.scalar import summary_v2
    from tensorboard.summary.writer.record_writer import RecordWriter

    tags = ["train/loss", "train/learning_rate", "train/grad_norm", "train/epoch", "eval/loss",
            "perf/tokens_per_sec", "perf/step_time", "train/loss_scale"][:n_tags]
    tags += [f"extra/metric_{i}" for i in range(len(tags), n_tags)]
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"events.out.tfevents.{int(time.time())}.benchhost.{'tensor' if tensor_style else 'simple'}"
    summaries = {}
    for tag in tags:
        if tensor_style:
            summaries[tag] = summary_v2.scalar_pb(tag, 0.0)
        else:
            summaries[tag] = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=0.0)])
    first = set(tags)
    with open(path, "wb") as fh:
        writer = RecordWriter(fh)
        writer.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
        steps = n_scalars // len(tags)
        t0 = 1_700_000_000.0
        for step in range(steps):
            for k, tag in enumerate(tags):
                value = 3.0 * math.exp(-step / 50_000) + 0.01 * math.sin(step + k)
                s = summaries[tag]
                if tensor_style:
                    s.value[0].tensor.tensor_content = struct.pack("<f", value)
                    if tag in first:
                        first.discard(tag)
                    elif s.value[0].HasField("metadata"):
                        s.value[0].ClearField("metadata")  # TF2 writes metadata once per tag
                else:
                    s.value[0].simple_value = value
                ev = event_pb2.Event(wall_time=t0 + step * 0.25, step=step, summary=s)
                writer.write(ev.SerializeToString())
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--scalars", type=int, default=1_000_000)
    ap.add_argument("--tags", type=int, default=8)
    args = ap.parse_args()
    for style in (False, True):
        t = time.perf_counter()
        p = generate(args.out / ("tensor" if style else "simple"), args.scalars, args.tags, style)
        print(f"{p}  {p.stat().st_size / 1e6:.1f} MB  {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
