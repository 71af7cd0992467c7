"""The data model: frozen dataclasses and enums shared by parsers, rules and reports.

Everything here is plain data. Parsers produce :class:`Artifact` records (damage is
data: a truncated event file is itself evidence), rules produce :class:`Finding`
objects carrying typed facts and :class:`Evidence`, and every rule ends in one
:class:`Outcome`. Nothing in this module imports pandas, click or tensorboard.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from typing import Any


class Severity(enum.IntEnum):
    """How bad a finding is. Ordered so that ``max()`` picks the worst."""

    INFO = 10
    WARNING = 20
    ERROR = 30
    CRITICAL = 40

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(
                f"unknown severity {text!r}; expected one of: "
                + ", ".join(s.name.lower() for s in cls)
            ) from None

    def __str__(self) -> str:
        return self.name.lower()


class Confidence(enum.IntEnum):
    """How sure a rule is that its finding is right (not how bad it is)."""

    LOW = 10
    MEDIUM = 20
    HIGH = 30

    @classmethod
    def parse(cls, text: str) -> Confidence:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(
                f"unknown confidence {text!r}; expected low, medium or high"
            ) from None

    def __str__(self) -> str:
        return self.name.lower()


class ArtifactKind(str, enum.Enum):
    """What discovery decided a file is, from its name and a sniff of its bytes."""

    LOG = "log"
    TFEVENTS = "tfevents"
    TRAINER_STATE = "trainer_state"
    CONFIG = "config"
    LAUNCH_SCRIPT = "launch_script"
    CHECKPOINT_FILE = "checkpoint_file"  # weights/optimizer/meta files that belong to a checkpoint
    METRICS = "metrics"  # a metric file: CSV/JSONL table, MLflow metric, W&B summary or record log
    EXIT_CODE = "exit_code"
    OTHER = "other"  # listed with its size, never parsed

    def __str__(self) -> str:
        return self.value


class ParseStatus(str, enum.Enum):
    """What happened when autopsy read an artifact."""

    OK = "ok"
    TRUNCATED = "truncated"  # cut short: partial data kept (or only partly read: see note)
    UNREADABLE = "unreadable"  # could not be read at all (permissions, not a regular file, junk)
    SKIPPED = "skipped"  # deliberately not parsed (unknown kind, not needed)
    IN_PROGRESS = "in_progress"  # looks partial but was modified seconds ago: still being written

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Artifact:
    """One file of the run directory as discovered (and, later, as parsed).

    ``path`` is relative to the run root, with forward slashes. ``rank`` is set when the
    path tells it (torchrun's ``attempt_0/3/stderr.log``, ``rank3.log``).
    """

    path: str
    kind: ArtifactKind
    size: int
    mtime: float
    status: ParseStatus = ParseStatus.OK
    note: str | None = None
    rank: int | None = None
    detail: str | None = None  # sub-kind, e.g. "hf_config", "tokenizer", "safetensors"


@dataclass(frozen=True)
class Evidence:
    """Where a finding comes from: a file and line span, or a tag and step range.

    ``path`` is relative to the run root. Use ``line``/``line_end`` for text, ``tag`` and
    ``step``/``step_end`` for series, and ``detail`` for anything else ("header says
    2.1 GB, file has 0.4 GB"). ``excerpt`` is the raw text, escaped only by renderers.
    """

    path: str | None = None
    line: int | None = None
    line_end: int | None = None
    excerpt: str | None = None
    tag: str | None = None
    step: int | None = None
    step_end: int | None = None
    detail: str | None = None
    rank: int | None = None

    def location(self) -> str:
        """A short human location such as ``train.log:48213`` or ``loss@[100..900]``."""
        if self.path and self.line is not None:
            loc = f"{self.path}:{self.line}"
            if self.line_end is not None and self.line_end != self.line:
                loc += f"-{self.line_end}"
            return loc
        if self.tag is not None:
            where = f"{self.path} " if self.path else ""
            if self.step is not None and self.step_end is not None and self.step_end != self.step:
                return f"{where}{self.tag} @ steps {self.step}..{self.step_end}"
            if self.step is not None:
                return f"{where}{self.tag} @ step {self.step}"
            return f"{where}{self.tag}"
        return self.path or "(run)"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in _asdict_ordered(self).items() if v is not None}


@dataclass(frozen=True)
class Finding:
    """One thing a rule found, with the typed facts it decided on and its evidence.

    ``message`` is one sentence that stands alone. ``facts`` keeps numbers as numbers;
    formatting is the templates' job. ``key`` is the normalised identity used for the
    fingerprint (exception type + innermost frame, a path, a tag: never line numbers or
    timestamps) so the same failure is recognised across runs.
    """

    rule: str
    severity: Severity
    confidence: Confidence
    title: str
    message: str
    facts: dict[str, Any] = field(default_factory=dict)
    evidence: tuple[Evidence, ...] = ()
    key: str = ""
    primary: bool = False
    explained_by: str | None = None  # rule id of the finding that explains this one
    step: int | None = None  # the step at which it struck, when known
    wall_time: float | None = None  # unix seconds at which it struck, when known

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha1(f"{self.rule}\x00{self.key}".encode()).hexdigest()
        return f"{self.rule}:{digest[:12]}"


class OutcomeKind(str, enum.Enum):
    FIRED = "fired"
    NOT_FIRED = "not_fired"
    NOT_EVALUATED = "not_evaluated"
    RULE_ERROR = "rule_error"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Outcome:
    """How one rule ended on one run. ``reason`` is set for not_evaluated / rule_error."""

    rule: str
    kind: OutcomeKind
    findings: tuple[Finding, ...] = ()
    reason: str | None = None


def _asdict_ordered(obj: Any) -> dict[str, Any]:
    # dataclasses.asdict deep-copies; evidence is flat, so a shallow walk is enough.
    return {name: getattr(obj, name) for name in obj.__dataclass_fields__}


@dataclass(frozen=True)
class ResumePlan:
    """How to resume the run, as far as its files show: never a flag its script does not accept.

    ``cwd`` is the one directory every path in ``command`` (and ``checkpoint``, ``script``) is
    relative to: the run directory as given to autopsy. ``command`` is a shell command, each word
    quoted for the shell, or None when no command can be proposed; ``note`` then says what to do
    instead (the script takes no resume option: which checkpoint its loading code should get).
    ``option`` is the resume option the command sets (``--resume``, ``--init_from=resume``);
    ``verified`` says the script's own argument parser was read and accepts it; ``source`` where
    the launch came from (``run.sh:4``, ``train.py``).
    """

    cwd: str
    checkpoint: str | None = None
    command: str | None = None
    script: str | None = None
    option: str | None = None
    verified: bool = False
    source: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class RunSummary:
    """The run as a whole: how far it got and where to resume from.

    Times are unix seconds taken from the artifacts (never the analysis time).
    ``steps_lost``/``seconds_lost`` are the work done since the latest valid checkpoint.
    """

    path: str
    last_step: int | None = None
    max_steps: int | None = None
    started: float | None = None
    ended: float | None = None
    latest_valid_checkpoint: str | None = None
    latest_valid_step: int | None = None
    steps_lost: int | None = None
    seconds_lost: float | None = None
    resume_hint: str | None = None  # e.g. "--resume_from_checkpoint runs/exp42/checkpoint-8000"
    failure_time: float | None = None  # when the primary finding struck, unix seconds
    # Where failure_time comes from, in words ("torchrun error record", "train.log last written").
    failure_time_source: str | None = None
    # The volume holding the run as measured when autopsy ran (fs_total_bytes, fs_free_bytes,
    # fs_used_bytes): kept here, in one labelled place, never in findings' facts.
    disk_at_analysis: dict[str, int] | None = None
    # Valid checkpoints saved at or after the first non-finite loss step: their weights carry
    # the blow-up, so they are never the resume point (paths relative to the run).
    poisoned_checkpoints: tuple[str, ...] = ()
    # The resume command (or what to do when none can be proposed); resume_hint is its command.
    resume: ResumePlan | None = None
    # The last step is the planned last one (max_steps, or max_steps - 1 for a loop counted from 0).
    # Derived, not serialized: a saved report reads it back as last_step >= max_steps.
    completed: bool = False


@dataclass(frozen=True)
class Fix:
    """What to do about the root cause, computed once so that every renderer shows the same.

    ``steps``: the run-specific changes, most concrete first (which setting to move or set to
    what, at ``file:line``; which checkpoints to delete and what that frees); ``resume``: the
    resume step (the command, or what to do without one), None when resuming is not advised;
    ``action``: the rule card's general "what to do". Text is plain prose with code in
    CommonMark code spans (`` `save_total_limit: 2` ``): renderers escape the prose for their
    format and show the spans as code.
    """

    rule: str
    steps: tuple[str, ...] = ()
    resume: str | None = None
    action: str | None = None


@dataclass(frozen=True)
class Report:
    """The result of ``autopsy.analyze``: findings sorted primary first, and every outcome.

    Renderers live in ``autopsy.report``; the methods here import them lazily so that
    ``import autopsy`` stays light.
    """

    run: RunSummary
    findings: tuple[Finding, ...]
    outcomes: tuple[Outcome, ...] = ()
    artifacts: tuple[Artifact, ...] = ()
    problems: tuple[str, ...] = ()  # artifacts/dirs that could not be read, one line each
    autopsy_version: str = ""
    # Display-only series (downsampled metrics, checkpoint timeline) so that a report saved as
    # JSON can still draw its charts; see autopsy.report.display_series. None: not collected.
    series: dict[str, Any] | None = None
    # The fix for the verdict's root cause (autopsy.report.fix); None on a clean run, or in a
    # report built by hand or saved before it existed (renderers then compute it).
    fix: Fix | None = None
    # Findings a baseline file accepted as known (autopsy.baseline): not in ``findings``, so they
    # count for no --fail-on gate, verdict or ISSUES entry; renderers say how many there were.
    accepted: tuple[Finding, ...] = ()
    # The baseline file the findings were compared with (as given), whether or not it accepted
    # any: SARIF then says which results are new and which unchanged. None: no baseline.
    baseline: str | None = None

    @property
    def primary(self) -> Finding | None:
        for f in self.findings:
            if f.primary:
                return f
        return None

    @property
    def not_evaluated(self) -> tuple[Outcome, ...]:
        return tuple(o for o in self.outcomes if o.kind is OutcomeKind.NOT_EVALUATED)

    @property
    def rule_errors(self) -> tuple[Outcome, ...]:
        return tuple(o for o in self.outcomes if o.kind is OutcomeKind.RULE_ERROR)

    def to_dict(self) -> dict[str, Any]:
        from autopsy.report.json_report import report_to_dict

        return report_to_dict(self)

    def to_json(self, indent: int | None = 2) -> str:
        from autopsy.report.json_report import report_to_json

        return report_to_json(self, indent=indent)

    def to_markdown(self) -> str:
        from autopsy.report.markdown import render_markdown

        return render_markdown(self)

    def to_frame(self) -> Any:
        from autopsy.report.frame import report_to_frame

        return report_to_frame(self)

    def _repr_markdown_(self) -> str:
        return self.to_markdown()

    def _repr_html_(self) -> str:
        from autopsy.report.notebook import report_repr_html

        return report_repr_html(self)
