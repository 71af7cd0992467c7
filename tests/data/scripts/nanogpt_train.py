"""nanoGPT: globals overridden by configurator.py (--key=value), init_from='resume' loads out_dir/ckpt.pt."""
import os

out_dir = "out"
eval_interval = 2000
init_from = "scratch"  # 'scratch' or 'resume' or 'gpt2*'
learning_rate = 6e-4
exec(open("configurator.py").read())
if init_from == "resume":
    ckpt_path = os.path.join(out_dir, "ckpt.pt")
