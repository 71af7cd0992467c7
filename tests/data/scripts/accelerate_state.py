"""accelerate: the resume path goes to accelerator.load_state()."""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--output_dir", type=str, default="out")
parser.add_argument("--from-state", dest="state_dir", type=str, default=None)
args = parser.parse_args()


def run(accelerator):
    if args.state_dir:
        accelerator.load_state(args.state_dir)
