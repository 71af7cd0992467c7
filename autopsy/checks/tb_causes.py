"""What an exception was doing, read from its frames: the gate of ``frames_`` patterns.

Some exception lines name their cause only together with where they were raised: an
``UnpicklingError`` or ``EOFError`` is a corrupt checkpoint inside ``torch.load`` and something
else in a DataLoader worker's spawn; TF's ``ResourceExhaustedError`` is a full disk inside a
checkpoint save and GPU memory elsewhere; "Address already in use" is a rendezvous failure in
``torch.distributed`` and a web server's port clash in a notebook. A card pattern whose name
starts with ``frames_`` therefore counts only when the frames of the traceback holding its line
(or, for a traceback cut off or flattened without its header, the lines just above it) show the
card's activity, given here per rule id. ``crash.exception`` asks the same gate before it leaves
an exception to that card, so the two rules never disagree about who explains it.
"""

from __future__ import annotations

from collections.abc import Iterable

import regex

from autopsy.checks.common import traceback_at
from autopsy.engine.types import CheckContext
from autopsy.parsers.safe_open import open_binary
from autopsy.parsers.types import Hit, Traceback
from autopsy.run import Run

FRAMES_PREFIX = "frames_"
BEFORE_LINES = 30  # lines above a hit read when no traceback holds it (a paste cut before its header)
BEFORE_BYTES = 8192

# rule id -> what its frames (file, function, code) or nearby lines must show.
GATES: dict[str, regex.Pattern[str]] = {
    # loading a checkpoint: torch.load, safetensors, transformers / Lightning / mmengine loaders
    "checkpoint.corrupt": regex.compile(
        r"torch[/\\]serialization\.py|safetensors|[/\\]zipfile\.py|\btorch\.load\(|\bsafe_open\(|\bload_file\("
        r"|\bload_checkpoint\b|\bload_state_dict\b|\bfrom_pretrained\b|modeling_utils\.py|_load_from_checkpoint"
        r"|checkpoint_io|\bresume\w*\(|restore\w*\("),
    # writing a checkpoint: TF Saver / SaveV2 / checkpoint managers, torch.save, save_pretrained
    "disk.full": regex.compile(
        r"training[/\\]saver\.py|\bsaver\.save\(|SaveV2|\.tempstate\d*|checkpoint_management\.py|\bsave_pretrained\("
        r"|\btorch\.save\(|\bsave_checkpoint\b|\bsave_model\b|ModelCheckpoint|\.save\(sess"),
    # distributed set-up: c10d rendezvous / TCPStore, init_process_group, NCCL, launchers
    # a tokenizer or language model: transformers, tokenizers, embeddings, token ids, vocabulary
    "tokenizer.mismatch": regex.compile(
        r"transformers[/\\]|tokeniz|\bvocab|[Ee]mbedding|\binput_ids\b|\blm_head\b|\bnum_labels\b|\bLlama|\bGPT|\bBert"),
    "dist.comm": regex.compile(
        r"torch[/\\]distributed|\bTCPStore\b|rendezvous|\bc10d\b|init_process_group|\bNCCL\b|MASTER_PORT"
        r"|deepspeed[/\\]comm|horovod|torchrun|\bgloo\b"
        r"|[Tt]he (?:server|client) socket has failed to (?:bind|listen)|\bsocket\.cpp:\d+\]"),
}


def frames_text(tb: Traceback) -> str:
    """The frames of a traceback and of the ones it was raised from, one per line, with its message."""
    out: list[str] = []
    cur: Traceback | None = tb
    while cur is not None and len(out) < 400:
        out.extend(f"{f.file} {f.function or ''} {f.code or ''}" for f in cur.frames)
        out.append(cur.message[:2000])
        cur = cur.cause
    return "\n".join(out)


def read_before(run: Run, hit: Hit, max_lines: int = BEFORE_LINES, max_bytes: int = BEFORE_BYTES) -> list[str]:
    """Up to ``max_lines`` lines that precede a hit in its log (read back from the hit's byte offset)."""
    try:
        with open_binary(run.fs_path(hit.path)) as fh:
            if hit.offset < 0:  # a hit made from the log's last line (no offset): read the file's end
                size = fh.seek(0, 2)
                start = max(size - max_bytes, 0)
                fh.seek(start)
                lines = [ln for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()][:-1]
            else:
                start = max(hit.offset - max_bytes, 0)
                fh.seek(start)
                lines = fh.read(max(hit.offset - start, 0)).decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    if start > 0 and lines:
        lines = lines[1:]  # the first one is cut
    return lines[-max_lines:]


# A Python warning as the warnings module prints it ("/site-packages/transformers/training_args.py:1525:
# FutureWarning: `evaluation_strategy` is deprecated ...") and the source line it shows under it
# ("  warnings.warn("): it names the module that warned earlier, not what the failing call was doing.
_WARNING_LINE = regex.compile(r"^\s*\S.*\.py:\d+: (?:[A-Z]\w*)?Warning: |^\s+warnings\.warn\(")


def hit_context(run: Run, hit: Hit) -> str:
    """What a hit's exception was doing: its traceback's frames, else the lines above it (Python's
    warning lines left out), and the line."""
    tb = traceback_at(run, hit)
    above = frames_text(tb) if tb is not None else "\n".join(
        line for line in read_before(run, hit) if not _WARNING_LINE.search(line))
    return f"{above}\n{hit.text}"


def gate_open(rule: str, context: str) -> bool:
    gate = GATES.get(rule)
    return gate is None or bool(gate.search(context))


def gate_closed(ctx: CheckContext, hit: Hit) -> bool:
    """A hit of one of this card's ``frames_`` patterns whose frames do not show the card's activity."""
    return hit.key.rsplit("/", 1)[-1].startswith(FRAMES_PREFIX) and not gate_open(ctx.card.id,
                                                                                  hit_context(ctx.run, hit))


def gated(run: Run, rule: str, named_hits: Iterable[tuple[str, Hit]]) -> list[tuple[str, Hit]]:
    """(pattern name, hit) pairs, those of ``frames_`` patterns kept only when their gate opens."""
    return [(name, h) for name, h in named_hits
            if not name.startswith(FRAMES_PREFIX) or gate_open(rule, hit_context(run, h))]
