"""Resume commands that run: a flag is proposed only when the run's own script accepts it.

Every proposed command is parsed by the script's own parser (argparse rebuilt from the
script's source, click run for real), never by a copy of autopsy's reading of it.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import autopsy
from autopsy.model import ResumePlan
from autopsy.parsers.launch_script import launch_commands
from autopsy.parsers.script_flags import ScriptInterface, analyze_script
from autopsy.resume_plan import plan_resume, quote
from autopsy.run import LoadOptions, load_run
from tests.argparse_rebuild import rebuild_parser, script_args
from tests.builders import torch_like_zip_entries, write_safetensors, write_zip
from tests.fixture_runs import pinned_copy, pinned_now, run_names

SCRIPTS = Path(__file__).parent / "data" / "scripts"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "runs"


def iface(name: str) -> ScriptInterface:
    return analyze_script((SCRIPTS / name).read_text(), name)


@pytest.mark.parametrize(("name", "kind", "flag", "via"), [
    ("argparse_hf.py", "argparse", "--resume_from_checkpoint", "trainer.train(resume_from_checkpoint=…)"),
    ("argparse_flag.py", "argparse", "--resume", None),
    ("accelerate_state.py", "argparse", "--from-state", "accelerator.load_state(…)"),
    ("deepspeed_load.py", "argparse", "--load_dir", "model_engine.load_checkpoint(…)"),
    ("hf_dataclasses.py", "hf", "--resume_from_checkpoint", None),
    ("click_app.py", "click", "--resume-from", None),
    ("typer_app.py", "typer", "--resume-from-checkpoint", None),
    ("fire_app.py", "fire", "--resume_from", None),
    ("nanogpt_train.py", "configurator", "--init_from", None),
    ("lightning_cli.py", "lightning_cli", "--ckpt_path", "LightningCLI fit --ckpt_path"),
])
def test_resume_option_is_read_from_the_script(name: str, kind: str, flag: str, via: str | None) -> None:
    got = iface(name)
    assert got.kind == kind
    assert got.resume is not None and flag in got.resume.names
    assert got.resume_via == via


@pytest.mark.parametrize(("name", "kind"), [
    ("argparse_unused.py", "argparse"),  # --resume defined, never read: it would be ignored
    ("hf_ignored.py", "hf"),  # TrainingArguments takes the flag but Trainer never reads it itself
    ("no_args.py", "none"),
    ("argv_script.py", "unknown"),
    ("hydra_app.py", "hydra"),  # overrides come from the config, not from the script
])
def test_no_resume_option_is_claimed(name: str, kind: str) -> None:
    got = iface(name)
    assert got.kind == kind and got.resume is None


def test_typer_and_fire_spellings() -> None:
    typer = iface("typer_app.py")
    assert typer.accepts("--epochs") and not typer.accepts("--data") and not typer.accepts("--resume_from_checkpoint")
    fire = iface("fire_app.py")
    assert fire.accepts("--resume_from") and fire.accepts("--resume-from")


def test_script_that_does_not_parse_is_unknown() -> None:
    assert analyze_script("def broken(:\n", "x.py").kind == "unknown"


def test_quote_keeps_variables_and_quotes_spaces() -> None:
    assert quote("out/checkpoint-70") == "out/checkpoint-70"
    assert quote("my run/ckpt 1") == "'my run/ckpt 1'"
    assert quote("$OUT/ckpt") == '"$OUT/ckpt"'
    assert quote("it's") == "'it'\"'\"'s'"
    assert shlex.split(quote("a b") + " " + quote("c'd")) == ["a b", "c'd"]


def test_launch_commands_keep_variables_and_drop_redirects() -> None:
    text = "#!/bin/bash\nexport A=1\nB=2\nC=3 nohup python train.py --x 'a b' \\\n  --y 2 > log.txt 2>&1 &\n"
    [(line, words, env)] = launch_commands(text)
    assert line == 4 and words == ["nohup", "python", "train.py", "--x", "a b", "--y", "2"]
    assert env == [("A", "1"), ("B", "2"), ("C", "3")]


# ------------------------------------------------------------------ the shipped fixture runs


@pytest.fixture(scope="module")
def fixture_plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ResumePlan | None]:
    """Each fixture run's resume plan from its latest valid checkpoint (a copy with its real mtimes)."""
    root = tmp_path_factory.mktemp("runs")
    out: dict[str, ResumePlan | None] = {}
    for name in run_names():
        run = load_run(pinned_copy(name, root), LoadOptions(now=pinned_now(name)))
        ckpt = run.latest_valid_checkpoint
        out[name] = plan_resume(run, ckpt, name, run.config_entries) if ckpt is not None else None
    return out


def test_every_fixture_command_parses_with_its_own_script(fixture_plans: dict[str, ResumePlan | None]) -> None:
    proposed = 0
    for name, plan in fixture_plans.items():
        if plan is None or plan.command is None:
            continue
        proposed += 1
        assert plan.verified and plan.script and plan.checkpoint and plan.option, (name, plan)
        parser = rebuild_parser(FIXTURES / name / plan.script)
        ns, extra = parser.parse_known_args(script_args(plan.command, plan.script))
        assert not extra, (name, plan.command, extra)
        # the checkpoint the command names exists relative to the one stated directory
        assert plan.cwd == name and (FIXTURES / name / plan.checkpoint).exists()
        assert getattr(ns, plan.option.lstrip("-").replace("-", "_")) == plan.checkpoint, (name, plan.command)
    assert proposed >= 5  # the HF fixtures whose train.py takes --resume


def test_disk_full_resume_uses_the_scripts_own_flag(fixture_plans: dict[str, ResumePlan | None]) -> None:
    plan = fixture_plans["disk_full"]
    assert plan is not None
    assert plan.command == ("TENSORBOARD_LOGGING_DIR=tb python train.py --config configs/train.yaml "
                            "--resume checkpoints/checkpoint-70")
    assert plan.source == "run.sh:4" and plan.option == "--resume"
    assert "--resume_from_checkpoint" not in plan.command


def test_script_without_resume_option_gets_words_not_a_flag(fixture_plans: dict[str, ResumePlan | None]) -> None:
    plan = fixture_plans["nanochat"]
    assert plan is not None and plan.command is None and plan.script == "train.py" and plan.checkpoint
    assert plan.note and "reads no command-line arguments" in plan.note and plan.checkpoint in plan.note


# ------------------------------------------------------------------ whole runs with their script


def _hf_run(root: Path, script: Path, launch: str | None) -> Path:
    ck = root / "out dir" / "checkpoint-1500"
    ck.mkdir(parents=True)
    (ck / "trainer_state.json").write_text(json.dumps({"global_step": 1500, "log_history": []}))
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        write_zip(ck / name, torch_like_zip_entries())
    write_safetensors(ck / "model.safetensors", {"w": ["F32", [4, 4]]})
    (root / "train.py").write_text(script.read_text())
    if launch is not None:
        (root / "run.sh").write_text(launch)
    (root / "train.log").write_text("step 1600\nTraceback (most recent call last):\n"
                                    "  File \"train.py\", line 3, in <module>\nRuntimeError: boom\n")
    return root


def test_launch_command_gets_the_accepted_flag_and_a_quoted_path(tmp_path: Path) -> None:
    root = _hf_run(tmp_path / "run", SCRIPTS / "argparse_hf.py",
                   "#!/bin/bash\nexport WANDB_API_KEY=secret\nexport HF_HOME=/cache\n"
                   "torchrun --nproc_per_node 8 train.py \\\n  --output_dir 'out dir' --lr 3e-4 > train.log 2>&1\n")
    plan = autopsy.analyze(root).run.resume
    assert plan is not None and plan.verified and plan.source == "run.sh:4"
    assert plan.command == ("HF_HOME=/cache torchrun --nproc_per_node 8 train.py --output_dir 'out dir' --lr 3e-4 "
                            "--resume_from_checkpoint 'out dir/checkpoint-1500'")
    assert "secret" not in plan.command
    ns, extra = rebuild_parser(root / "train.py").parse_known_args(script_args(plan.command, "train.py"))
    assert not extra and ns.resume_from_checkpoint == "out dir/checkpoint-1500"


def test_script_that_ignores_the_flag_gets_no_command(tmp_path: Path) -> None:
    root = _hf_run(tmp_path / "run", SCRIPTS / "argparse_unused.py", None)
    plan = autopsy.analyze(root).run.resume
    assert plan is not None and plan.command is None
    assert "takes no resume option" in plan.note and "out dir/checkpoint-1500" in plan.note


def test_no_script_no_invented_flag(tmp_path: Path) -> None:
    root = _hf_run(tmp_path / "run", SCRIPTS / "argparse_hf.py", None)
    (root / "train.py").unlink()
    report = autopsy.analyze(root)
    assert report.run.resume_hint is None and report.run.resume is not None
    assert "not in the run directory" in report.run.resume.note


def test_click_command_parses_with_click(tmp_path: Path) -> None:
    root = _hf_run(tmp_path / "run", SCRIPTS / "click_app.py", "python train.py --epochs 5\n")
    plan = autopsy.analyze(root).run.resume
    assert plan is not None and plan.command is not None
    args = script_args(plan.command, "train.py")
    out = subprocess.run([sys.executable, str(root / "train.py"), *args], capture_output=True, text=True,
                         check=True, cwd=root)
    assert json.loads(out.stdout) == {"epochs": 5, "resume_from": "out dir/checkpoint-1500"}


def test_rebuilt_parser_rejects_an_invented_flag() -> None:
    parser = rebuild_parser(FIXTURES / "disk_full" / "train.py")
    _, extra = parser.parse_known_args(["--resume_from_checkpoint", "x"])
    assert extra == ["--resume_from_checkpoint", "x"]  # the test helper can fail
