"""DeepSpeed: the resume directory goes to engine.load_checkpoint()."""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
parser.add_argument("--load_dir", type=str, default=None)
args = parser.parse_args()


def run(model_engine):
    if args.load_dir:
        model_engine.load_checkpoint(args.load_dir, tag=None)
