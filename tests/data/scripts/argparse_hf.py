"""HF Trainer script whose own argparse flag feeds trainer.train(resume_from_checkpoint=...)."""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--output_dir", default="out")
parser.add_argument("--resume_from_checkpoint", default=None, help="checkpoint directory")
parser.add_argument("--lr", type=float, default=3e-4)
args = parser.parse_args()


def main(trainer):
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
