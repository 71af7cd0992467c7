"""Defines --resume but never reads it: proposing it would silently train from scratch."""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--resume", default=None)
args = parser.parse_args()
print(args.epochs)
