"""A boolean --resume: the script finds its latest checkpoint itself."""
import argparse
import glob

p = argparse.ArgumentParser()
p.add_argument("--ckpt_dir", default="ckpt")
p.add_argument("-r", "--resume", action="store_true")
a = p.parse_args()
if a.resume:
    latest = sorted(glob.glob(a.ckpt_dir + "/*.pt"))[-1]
