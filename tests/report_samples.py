"""Hand-built, realistic Reports for renderer tests (no run directory, no engine needed).

* ``disk_full``: the seed story: 9 checkpoints of 3 GB on a 100 GB volume, ``save_total_limit: 3``
  ignored, SafetensorError ENOSPC while saving checkpoint-9000 (which is left truncated).
* ``nan_loss``: loss turns NaN at step 1,234 after a grad-norm explosion (tfevents + log).
* ``empty_log``: ``nohup python train.py`` block-buffered: a 0-byte log and nothing else.
* ``hostile``: log text with ``<script>``, backtick fences, ANSI and OSC escapes in every field.
* ``clean``: a finished run with no finding.

Also a tiny fake catalog (``CATALOG``) so markdown/SARIF snapshots do not depend on the
wording of the real cards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autopsy.model import (
    Artifact,
    ArtifactKind,
    Confidence,
    Evidence,
    Finding,
    Outcome,
    OutcomeKind,
    ParseStatus,
    Report,
    ResumePlan,
    RunSummary,
    Severity,
)

T0 = 1761282000.0  # 2025-10-24 05:00:00 UTC
GB = 10**9
_CMD_8000 = "python train.py --config configs/train.yaml --resume_from_checkpoint checkpoint-8000"
_CMD_1000 = "python train.py --config configs/train.yaml --resume_from_checkpoint checkpoint-1000"


def _resume(cwd: str, ckpt: str) -> ResumePlan:
    """A resume plan as autopsy.resume_plan makes it for an argparse script taking --resume_from_checkpoint."""
    return ResumePlan(cwd=cwd, checkpoint=ckpt, command=_CMD_8000 if ckpt.endswith("8000") else _CMD_1000,
                      script="train.py", option="--resume_from_checkpoint", verified=True, source="train.py",
                      note="train.py accepts --resume_from_checkpoint (argparse, line 9)")


def _outcomes(findings: tuple[Finding, ...], not_evaluated: dict[str, str], not_fired: tuple[str, ...],
              errors: dict[str, str] | None = None) -> tuple[Outcome, ...]:
    out = [Outcome(r, OutcomeKind.FIRED, tuple(f for f in findings if f.rule == r))
           for r in sorted({f.rule for f in findings})]
    out += [Outcome(r, OutcomeKind.NOT_EVALUATED, reason=why) for r, why in not_evaluated.items()]
    out += [Outcome(r, OutcomeKind.NOT_FIRED) for r in not_fired]
    out += [Outcome(r, OutcomeKind.RULE_ERROR, reason=why) for r, why in (errors or {}).items()]
    return tuple(sorted(out, key=lambda o: o.rule))


def disk_full() -> Report:
    ended = T0 + 9 * 3600 + 3 * 60 + 11  # 14:03:11
    arts = [
        Artifact("train.log", ArtifactKind.LOG, 9_812_331, ended),
        Artifact("configs/train.yaml", ArtifactKind.CONFIG, 612, T0 - 60),
        Artifact("trainer_state.json", ArtifactKind.TRAINER_STATE, 88_120, T0 + 8 * 3600),
        Artifact("runs/events.out.tfevents.1761282000.h100", ArtifactKind.TFEVENTS, 1_204_551, ended,
                 ParseStatus.TRUNCATED, "last record cut short at byte 1204520 (kept 8,990 records)"),
    ]
    for i in range(1, 10):
        step = i * 1000
        mt = T0 + i * 3600
        arts.append(Artifact(f"checkpoint-{step}/adapter_model.safetensors", ArtifactKind.CHECKPOINT_FILE,
                             500_000_000 if i < 9 else 120_000_000, mt, detail="safetensors"))
        if i < 9:
            arts.append(Artifact(f"checkpoint-{step}/optimizer.pt", ArtifactKind.CHECKPOINT_FILE, 2_000_000_000, mt))
            arts.append(Artifact(f"checkpoint-{step}/trainer_state.json", ArtifactKind.CHECKPOINT_FILE, 50_000, mt))
    primary = Finding(
        rule="disk.full", severity=Severity.CRITICAL, confidence=Confidence.HIGH, title="Disk full",
        message="No space left on device while saving checkpoint-9000 at step 9,000.",
        facts={"errno": 28, "path": "checkpoint-9000/adapter_model.safetensors", "fs_total_bytes": 100 * GB,
               "checkpoint_bytes": 20_520_400_000},
        evidence=(Evidence(path="train.log", line=48213,
                           excerpt="safetensors_rust.SafetensorError: Error while serializing: I/O error: "
                                   "No space left on device (os error 28)"),),
        key="SafetensorError/No space left on device", primary=True, step=9000, wall_time=ended,
    )
    retention = Finding(
        rule="checkpoint.retention", severity=Severity.CRITICAL, confidence=Confidence.HIGH,
        title="More checkpoints than the retention limit",
        message="9 checkpoints are on disk although save_total_limit is 3 (2.5 GB each, 20.5 GB in all).",
        facts={"count": 9, "limit": 3, "bytes_per_checkpoint": 2_550_000_000, "save_steps": 1000},
        evidence=(Evidence(path="configs/train.yaml", line=12, excerpt="save_total_limit: 3"),
                  Evidence(path="configs/train.yaml", line=11, excerpt="save_steps: 1000"),
                  Evidence(detail="9 checkpoint directories: checkpoint-1000 … checkpoint-9000")),
        key="save_total_limit", explained_by="disk.full", step=9000,
    )
    corrupt = Finding(
        rule="checkpoint.corrupt", severity=Severity.ERROR, confidence=Confidence.HIGH,
        title="Checkpoint cannot be resumed from",
        message="checkpoint-9000 is half-written: adapter_model.safetensors is truncated and optimizer.pt is missing.",
        facts={"checkpoint": "checkpoint-9000", "missing": ["optimizer.pt", "trainer_state.json"]},
        evidence=(Evidence(path="checkpoint-9000/adapter_model.safetensors",
                           detail="header says 500.0 MB of tensors, file has 120.0 MB"),),
        key="checkpoint-N/adapter_model.safetensors", explained_by="disk.full", step=9000,
    )
    findings = (primary, retention, corrupt)
    return Report(
        run=RunSummary(path="runs/exp42", last_step=9000, max_steps=28000, started=T0, ended=ended,
                       latest_valid_checkpoint="checkpoint-8000", latest_valid_step=8000, steps_lost=1000,
                       seconds_lost=3791.0, resume_hint=_CMD_8000, resume=_resume("runs/exp42", "checkpoint-8000"),
                       failure_time=ended),
        findings=findings,
        outcomes=_outcomes(findings, {"dist.straggler": "single-process run: no per-rank step times"},
                           ("oom.cuda", "loss.nonfinite", "crash.exception")),
        artifacts=tuple(arts),
        autopsy_version="0.1.0",
    )


def nan_loss() -> Report:
    ev_path = "runs/events.out.tfevents.1761282000.a100"
    primary = Finding(
        rule="loss.nonfinite", severity=Severity.ERROR, confidence=Confidence.HIGH, title="Loss became NaN/Inf",
        message="train/loss is NaN from step 1,234 on (last finite value 2.31 at step 1,233).",
        facts={"first_nonfinite_step": 1234, "last_finite_value": 2.31, "value": float("nan"), "tag": "train/loss"},
        evidence=(Evidence(path=ev_path, tag="train/loss", step=1230, step_end=1240,
                           detail="2.29, 2.30, 2.31, nan, nan"),
                  Evidence(path="logs/train.log", line=2471,
                           excerpt="\x1b[32m{'loss': nan, 'grad_norm': nan, 'learning_rate': 0.0003, 'epoch': 0.41}"
                                   "\x1b[0m")),
        key="train/loss", primary=True, step=1234, wall_time=T0 + 5000,
    )
    spike = Finding(
        rule="loss.spike", severity=Severity.WARNING, confidence=Confidence.MEDIUM, title="Gradient norm explosion",
        message="grad_norm jumped to 10,412 (812x its running median) at step 1,228.",
        facts={"step": 1228, "value": 10412.0, "ratio_to_median": 812.0},
        evidence=(Evidence(path=ev_path, tag="train/grad_norm", step=1200, step_end=1233),),
        key="train/grad_norm", explained_by=None, step=1228, wall_time=T0 + 4980,
    )
    findings = (primary, spike)
    return Report(
        run=RunSummary(path="runs/nan-7b", last_step=2000, max_steps=2000, started=T0, ended=T0 + 8000,
                       latest_valid_checkpoint="checkpoint-1000", latest_valid_step=1000, steps_lost=1000,
                       seconds_lost=4000.0, resume_hint=_CMD_1000, resume=_resume("runs/nan-7b", "checkpoint-1000"),
                       failure_time=T0 + 5000),
        findings=findings,
        outcomes=_outcomes(findings, {"lr.mismatch": "no configured learning rate found"}, ("disk.full",),
                           {"loss.plateau": "ZeroDivisionError: float division by zero"}),
        artifacts=(Artifact(ev_path, ArtifactKind.TFEVENTS, 81_220, T0 + 8000),
                   Artifact("logs/train.log", ArtifactKind.LOG, 412_000, T0 + 8000),
                   Artifact("checkpoint-1000/model.safetensors", ArtifactKind.CHECKPOINT_FILE, 13 * GB, T0 + 4000),
                   Artifact("checkpoint-2000/model.safetensors", ArtifactKind.CHECKPOINT_FILE, 13 * GB, T0 + 8000)),
        autopsy_version="0.1.0",
    )


def empty_log() -> Report:
    primary = Finding(
        rule="log.empty", severity=Severity.ERROR, confidence=Confidence.MEDIUM, title="Training log is empty",
        message="nohup.out is empty (0 bytes) although the run was launched 2h 10m before its last change.",
        facts={"size": 0, "path": "nohup.out"},
        evidence=(Evidence(path="nohup.out", detail="0 bytes"),),
        key="nohup.out", primary=True,
    )
    return Report(
        run=RunSummary(path="runs/silent"),
        findings=(primary,),
        outcomes=_outcomes((primary,), {"loss.plateau": "no loss series found",
                                        "checkpoint.gap": "no checkpoints and no step count"}, ()),
        artifacts=(Artifact("nohup.out", ArtifactKind.LOG, 0, T0 + 7800),
                   Artifact("launch.sh", ArtifactKind.LAUNCH_SCRIPT, 210, T0)),
        problems=("cache/: permission denied",),
        autopsy_version="0.1.0",
    )


HOSTILE_EXCERPT = ("<script>alert(1)</script> ```` end fence\n```\n# Heading\n\x1b]0;pwned title\x07"
                   "\x1b[2J\x1b[31mred\x1b[0m \x1b]8;;http://evil.example/\x1b\\link\x1b]8;;\x1b\\ \u202eevil\r"
                   "\n::error::injected")


def hostile() -> Report:
    f = Finding(
        rule="crash.exception", severity=Severity.CRITICAL, confidence=Confidence.MEDIUM,
        title="Uncaught exception",
        message="RuntimeError: <img src=x onerror=alert(1)> `code` \x1b[31mboom\x1b[0m",
        facts={"exc_type": "RuntimeError", "note": "<b>bold</b>"},
        evidence=(Evidence(path="train.log", line=7, excerpt=HOSTILE_EXCERPT),),
        key="RuntimeError", primary=True, step=5,
    )
    return Report(run=RunSummary(path="runs/<evil>", last_step=5), findings=(f,),
                  outcomes=_outcomes((f,), {}, ()),
                  artifacts=(Artifact("train.log", ArtifactKind.LOG, 900, T0),), autopsy_version="0.1.0")


def clean() -> Report:
    return Report(run=RunSummary(path="runs/ok", last_step=500, max_steps=500, started=T0, ended=T0 + 600),
                  findings=(), outcomes=_outcomes((), {}, ("disk.full", "oom.cuda")),
                  artifacts=(Artifact("train.log", ArtifactKind.LOG, 1000, T0 + 600),), autopsy_version="0.1.0")


SAMPLES = {"disk_full": disk_full, "nan_loss": nan_loss, "empty_log": empty_log}


@dataclass(frozen=True)
class FakeCard:
    id: str
    title: str
    docs: dict[str, Any] = field(default_factory=dict)


class FakeCatalog:
    def __init__(self, cards: list[FakeCard]) -> None:
        self.cards = {c.id: c for c in cards}

    def get(self, rule: str) -> FakeCard | None:
        return self.cards.get(rule)


CATALOG = FakeCatalog([
    FakeCard("disk.full", "Disk full", {
        "summary": "The filesystem ran out of space (ENOSPC) and a write failed.",
        "why": "A failed checkpoint write ends the run and can leave a half-written checkpoint behind.",
        "confirm": "Run df -h on the volume; compare checkpoint bytes with its size.",
        "action": "Free space and cap the number of checkpoints kept before restarting.",
        "false_positives": ["A different volume (e.g. /tmp) filled up, not the run's."],
        "references": ["https://huggingface.co/docs/transformers/main_classes/trainer#transformers.TrainingArguments.save_total_limit",
                       "docs/DISK_SPACE.md"],
    }),
    FakeCard("loss.nonfinite", "Loss became NaN/Inf", {
        "summary": "The loss or gradient norm became NaN or infinite.",
        "why": "Every step after a NaN is wasted and checkpoints saved after it are poisoned.",
        "action": "Resume from a checkpoint before the first non-finite step with a lower learning rate.",
        "references": ["https://pytorch.org/docs/stable/amp.html"],
    }),
    FakeCard("loss.spike", "Loss spike", {
        "summary": "A sudden loss or gradient-norm spike.",
        "why": "Spikes often precede divergence.",
        "action": "Lower the learning rate or clip gradients.",
        "references": [],
    }),
    FakeCard("log.empty", "Training log is empty", {
        "summary": "The run's log is empty or holds only banners.",
        "why": "Without output nobody can tell where the process stopped.",
        "action": "Run python unbuffered.",
        "references": ["https://docs.python.org/3/using/cmdline.html#cmdoption-u"],
    }),
])
