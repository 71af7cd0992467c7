"""Out-of-memory rules: GPU (``oom.cuda``) and host RAM (``oom.host``) told apart.

``oom.cuda`` parses the allocator's figures from both PyTorch message formats (1.x:
"(GPU 0; 15.78 GiB total capacity; 13.12 GiB already allocated; 1.20 GiB free; ...)",
2.x: "GPU 0 has a total capacity of 79.15 GiB of which 6.75 MiB is free ...") and cites
the batch size and sequence length from the config. ``oom.host`` weighs its evidence: a
kernel/cgroup/slurm OOM-kill line or a MemoryError is certain; a bare ``Killed``, exit
code 137 or SIGKILL is only likely host OOM, and is not blamed on memory when the
scheduler says it cancelled the job (time limit, preemption).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import regex

from autopsy.checks.common import (
    LOADER_KEYS,
    cite_config,
    config_where,
    earliest,
    evidence_for,
    fmt_gib,
    frame_text,
    group,
    group_int,
    hit_rank,
    hits_of,
    is_library_frame,
    other_rule_fired_lines,
    parse_size_gib,
    project_frame,
    rank_phrase,
    ranks_of,
    recovered,
    scan_of,
    signal_name,
    size_to_gib,
    traceback_at,
    where,
)
from autopsy.engine.types import CheckContext
from autopsy.model import Confidence, Evidence, Finding
from autopsy.parsers.types import Hit

_SIZE = r"(?P<v>\d+(?:\.\d+)?\s*(?:[KMGT]iB|bytes))"
_V1_FIELDS = {
    "allocated_gib": regex.compile(_SIZE + r" already allocated"),
    "free_gib": regex.compile(_SIZE + r" free\b"),
    "reserved_gib": regex.compile(_SIZE + r" reserved in total by PyTorch"),
    "cached_gib": regex.compile(_SIZE + r" cached"),
    "allowed_gib": regex.compile(_SIZE + r" allowed"),
}
_V2_FIELDS = {
    "in_use_gib": regex.compile(r"this process has " + _SIZE + r" memory in use"),
    "allocated_gib": regex.compile(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch"),
    "reserved_unallocated_gib": regex.compile(_SIZE + r" is reserved by PyTorch but unallocated"),
}
_VARIANTS = {
    "torch2_oom": "torch_allocator", "torch1_oom": "torch_allocator", "oom_bare": "torch_allocator",
    "cuda_error_oom": "cuda_runtime", "cuda_driver_oom": "cuda_driver", "cublas_alloc": "cublas",
    "cudnn_alloc": "cudnn", "xla_oom": "xla", "tf_oom": "tensorflow", "notebook_oom_header": "torch_allocator",
    "xla_tpu_compile_oom": "xla_tpu_compile", "xla_tpu_alloc": "xla_tpu", "pjrt_alloc": "xla",
    "mps_oom": "mps",
}
# The device named in the message: the rule id says CUDA, but the same failure on a TPU or an
# Apple GPU is reported by this rule too (it is what users search for), in the device's words.
_DEVICE = {"xla_tpu_compile": "TPU", "xla_tpu": "TPU", "mps": "Apple GPU (MPS)"}


def _unit(hit: Hit, name: str, group_name: str) -> str | None:
    unit = group(hit, group_name)
    # PyTorch's MPS allocator and PaddlePaddle's (string::HumanReadableSize: "98.000244MB" is 102760704
    # bytes / 1024**2) format sizes in powers of 1024 but label them "kB"/"MB"/"GB".
    if unit is not None and name in ("mps_oom", "paddle_oom") and unit.upper() in ("KB", "MB", "GB", "TB"):
        return unit[0].upper() + "iB"
    return unit


def _figures(hit: Hit, name: str) -> dict[str, Any]:
    """Requested/total/free/allocated/reserved GiB from one allocator message."""
    out: dict[str, Any] = {}
    req = size_to_gib(group(hit, "requested"), _unit(hit, name, "requested_unit"))
    if req is None and group_int(hit, "requested_bytes") is not None:
        req = (group_int(hit, "requested_bytes") or 0) / 1024.0**3
    out["requested_gib"] = req
    out["total_gib"] = size_to_gib(group(hit, "total"), _unit(hit, name, "total_unit"))
    out["free_gib"] = size_to_gib(group(hit, "free"), _unit(hit, name, "free_unit"))
    # XLA's compile-time figure (what the program needs) and MPS's own/other allocations.
    out["needed_gib"] = size_to_gib(group(hit, "used"), group(hit, "used_unit"))
    if name in ("mps_oom", "paddle_oom"):
        out["allocated_gib"] = size_to_gib(group(hit, "allocated"), _unit(hit, name, "allocated_unit"))
        out["other_gib"] = size_to_gib(group(hit, "other"), _unit(hit, name, "other_unit"))
    if group(hit, "memory_space"):
        out["memory_space"] = group(hit, "memory_space")
    fields = _V2_FIELDS if name == "torch2_oom" else _V1_FIELDS if name == "torch1_oom" else {}
    for fact, rx in fields.items():
        m = rx.search(hit.text)
        if m and out.get(fact) is None:
            out[fact] = parse_size_gib(m.group("v"))
    if out.get("reserved_gib") is None and out.get("cached_gib") is not None:
        out["reserved_gib"] = out.pop("cached_gib")  # PyTorch <= 1.4 called reserved memory "cached"
    out.pop("cached_gib", None)
    gpu = group_int(hit, "gpu")
    if gpu is not None:
        out["gpu"] = gpu
    return {k: v for k, v in out.items() if v is not None}


def _pattern_of(ctx: CheckContext, hit: Hit) -> str:
    for name, hits in ctx.hits.items():
        if any(h is hit or (h.path == hit.path and h.lineno == hit.lineno and h.key == hit.key) for h in hits):
            return name
    return hit.key.rsplit("/", 1)[-1]


def cuda(ctx: CheckContext) -> Iterable[Finding]:
    """One finding per run: the first fatal GPU OOM, with figures, step, rank(s) and config citations."""
    min_after = int(ctx.params.get("progress_after_steps", 2))
    hits = [h for h in hits_of(ctx) if not recovered(ctx.run, h, min_after) and not _skipped(ctx, h)]
    if not hits:
        return []
    # The richest line of the earliest OOM event: prefer a line with figures over a bare one.
    first = earliest(hits)
    by_name = {id(h): _pattern_of(ctx, h) for h in hits}
    rich = [h for h in hits if by_name[id(h)] in ("torch2_oom", "torch1_oom")
            and (first.wall_time is None or h.wall_time is None or abs(h.wall_time - first.wall_time) < 600)]
    lead = earliest(rich) if rich else first
    name = by_name[id(lead)]
    facts: dict[str, Any] = {"variant": _VARIANTS.get(name, name)}
    facts.update(_figures(lead, name))
    if group(lead, "cudnn_status"):
        facts["cudnn_status"] = group(lead, "cudnn_status")
    facts["count"] = len(hits)
    ranks = ranks_of(hits, ctx.run)
    rank = hit_rank(lead, ctx.run)
    if rank is not None:
        facts["rank"] = rank
    if ranks:
        facts["ranks"] = ranks
    step = lead.step if lead.step is not None else first.step
    if step is not None:
        facts["step"] = step
    evidence: list[Evidence] = evidence_for([lead, *[h for h in hits if h is not lead]])
    cfg_facts, cfg_evidence, cited = cite_config(ctx.run, (("batch_size", ctx.params.get("batch_size_keys", ())),
                                                           ("seq_len", ctx.params.get("seq_len_keys", ()))))
    facts.update(cfg_facts)
    evidence.extend(cfg_evidence)
    # Memory savers already on: the advice must not tell the user to enable them again.
    facts.update(_savers_on(ctx))
    # The fingerprint names the code that ran out of memory when the traceback shows it: the
    # same OOM in forward() is recognised across runs, one in evaluate() is another failure.
    # Function names only: line numbers move with every edit of the script.
    key = f"oom.cuda:{facts['variant']}"
    tb = traceback_at(ctx.run, lead)
    frame = project_frame(tb) if tb is not None else None
    if frame is not None and not is_library_frame(frame) and frame.function:
        facts["frame"] = frame_text(frame)
        key += f":{frame.function}"
    msg = _message(facts, lead, step, cited)
    return [ctx.finding(msg, key=key, facts=facts, evidence=evidence, step=step, wall_time=lead.wall_time)]


# How close the loop's "skipping batch" follows the OOM line it is about, and how soon after it a
# traceback means the skip did not save the run (fairseq's spawn traceback follows at once).
_SKIP_WINDOW = 3
_FAILED_SKIP_WINDOW = 10


def _skipped(ctx: CheckContext, hit: Hit) -> bool:
    """The training loop announced it caught this OOM and skipped the batch, and no traceback follows.

    fairseq, MinkowskiEngine users' loops and Lightning modules catch the allocator's error, print
    that they skip the batch, and go on; steps after it may be few or unlogged (a bar glued to the
    next warning), so ``recovered`` alone misses them. A traceback right after the announcement is
    the skip failing (a multi-GPU run whose other ranks waited for the skipped one): still fatal.
    """
    notes = [h.lineno for name in ("ctx_oom_skipped", "ctx_oom_recovering") for h in ctx.hits.get(name, ())
             if h.path == hit.path and 0 <= h.lineno - hit.lineno <= _SKIP_WINDOW]
    if not notes:
        return False
    note = min(notes)
    scan = scan_of(ctx.run, hit.path)
    tracebacks = scan.tracebacks if scan is not None else []
    return not any(0 < tb.line_start - note <= _FAILED_SKIP_WINDOW for tb in tracebacks)


def _savers_on(ctx: CheckContext) -> dict[str, Any]:
    """``gradient_checkpointing_on`` / ``mixed_precision_on`` (with where) when a config turns them on."""
    out: dict[str, Any] = {}
    for fact, param in (("gradient_checkpointing", "gradient_checkpointing_keys"),
                        ("mixed_precision", "mixed_precision_keys")):
        for key in ctx.params.get(param, ()):
            entry = ctx.run.config_value(key)
            if entry is None:
                continue
            value = entry.value
            on = value is True or (isinstance(value, str) and ("16" in value or value.lower() in ("true", "yes")))
            if on:
                out[f"{fact}_on"] = True
                out[f"{fact}_source"] = f"{entry.raw_key}: {entry.text} ({config_where(entry)})"
                break
    return out


def _message(facts: dict[str, Any], lead: Hit, step: int | None, cited: list[str]) -> str:
    parts = [f"The {_DEVICE.get(facts['variant'], 'GPU')} ran out of memory"]
    if "needed_gib" in facts and "total_gib" in facts:
        parts.append(f" (the compiled program needs {fmt_gib(facts['needed_gib'])} of {fmt_gib(facts['total_gib'])})")
    elif "requested_gib" in facts:
        detail = f"tried to allocate {fmt_gib(facts['requested_gib'])}"
        if "free_gib" in facts:
            detail += f" with {fmt_gib(facts['free_gib'])} free"
        if "total_gib" in facts:
            detail += f" of {fmt_gib(facts['total_gib'])}"
        parts.append(f" ({detail})")
    elif facts["variant"] != "torch_allocator":
        parts.append(f" ({facts['variant']} allocation failure)")
    parts.append(rank_phrase({"ranks": [facts["rank"]]} if "rank" in facts else {}))
    if step is not None:
        parts.append(f" at step {step}")
    parts.append(f" ({where(lead)})")
    if cited:
        parts.append("; " + ", ".join(cited))
    return "".join(parts) + "."


# ----------------------------------------------------------------------------- host OOM

# Strength of each pattern's evidence that host RAM ran out.
_STRONG = {"windows_commit_limit": "Windows commit limit (RAM + page file)",
           "kernel_oom_kill": "kernel", "cgroup_oom_kill": "cgroup", "slurm_oom_kill": "slurm",
           "slurm_memory_limit_kill": "slurm memory limit",
           "srun_task_oom": "slurm", "oom_killed": "container", "memory_error": "MemoryError",
           "numpy_alloc": "MemoryError", "bad_alloc": "std::bad_alloc", "bad_alloc_exception": "std::bad_alloc",
           "cpu_allocator": "torch CPU allocator",
           "errno_enomem": "ENOMEM", "lsf_memlimit": "LSF memory limit",
           "k8s_evicted_memory": "Kubernetes eviction (node memory pressure)", "pbs_mem_killed": "PBS memory limit",
           "htcondor_memory_hold": "HTCondor memory limit (job held)",
           "dotnet_oom": ".NET OutOfMemoryException", "jvm_oom": "Java OutOfMemoryError",
           "lua_not_enough_memory": "Lua allocator (not enough memory)",
           "ray_memory_monitor": "Ray memory monitor (node low on memory)"}
_WEAK = {"bare_killed": "Killed", "shell_killed": "Killed", "zsh_killed": "Killed", "exit_137": "exit code 137",
         "ide_sigkill": "exit code 137",
         "worker_killed": "DataLoader worker SIGKILL", "torchrun_sigkill": "SIGKILL", "spawn_sigkill": "SIGKILL",
         "subprocess_sigkill": "SIGKILL", "deepspeed_sigkill": "SIGKILL", "mpi_sigkill": "SIGKILL",
         "mpich_sigkill": "SIGKILL"}
_SCHEDULER_STOP = ("ctx_time_limit", "ctx_pbs_walltime", "ctx_lsf_runlimit", "ctx_timeout_124")


def host(ctx: CheckContext) -> Iterable[Finding]:
    """Host RAM exhaustion, from certain (kill lines, MemoryError) down to likely (Killed, 137, SIGKILL)."""
    min_after = int(ctx.params.get("progress_after_steps", 2))
    strong = _one_per_line(h for n in _STRONG for h in ctx.hits.get(n, ()) if not recovered(ctx.run, h, min_after))
    weak = _one_per_line(h for n in _WEAK for h in ctx.hits.get(n, ()) if not recovered(ctx.run, h, min_after))
    codes = [(p, c) for p, c in ctx.run.exit_codes if c in (137, -9)]
    sigkilled = [cf for cf in ctx.run.all_child_failures
                 if (cf.exitcode == -9) or (cf.signal or "").upper() in ("SIGKILL", "9")]
    if not strong:
        # Weak evidence is not host OOM when the scheduler says why it killed the job, or
        # when the GPU ran out of memory (the process died of that, not of RAM).
        if any(ctx.hits.get(n) for n in _SCHEDULER_STOP) or other_rule_fired_lines(ctx.run, "oom.cuda"):
            return []
        if not weak and not codes and not sigkilled:
            return []
    hits = sorted(strong or weak, key=lambda h: (h.path, h.lineno))
    facts: dict[str, Any] = {}
    evidence: list[Evidence] = []
    lead = earliest(hits) if hits else None
    name = _name_of(ctx, lead) if lead is not None else None
    if strong:
        confidence = Confidence.HIGH
        facts["source"] = _STRONG.get(name or "", "log")
    elif weak:
        confidence = Confidence.MEDIUM
        facts["source"] = _WEAK.get(name or "", "Killed")
        if name == "exit_137" and lead is not None and group(lead, "exit_code") == "-9":
            facts["source"] = "exit code -9"
    else:
        confidence = Confidence.LOW
        facts["source"] = "exit code" if codes else "SIGKILL"
    if lead is not None:
        for g in ("pid", "process", "anon_rss_kb", "total_vm_kb", "oom_events", "node", "task", "requested",
                  "requested_unit", "requested_bytes", "command", "signal", "local_rank", "rank", "jvm_pool"):
            value = group(lead, g)
            if value is not None:
                facts[g] = int(value.replace(",", "")) if value.replace(",", "").isdigit() else value
        if "anon_rss_kb" in facts and isinstance(facts["anon_rss_kb"], int):
            facts["rss_gib"] = round(facts["anon_rss_kb"] / 1024.0**2, 3)
        if "requested" in facts:
            gib = size_to_gib(str(facts.pop("requested")), str(facts.pop("requested_unit", "")))
            if gib is not None:
                facts["requested_gib"] = round(gib, 4)
        if isinstance(facts.get("requested_bytes"), int):
            facts["requested_gib"] = round(facts.pop("requested_bytes") / 1024.0**3, 4)
        evidence.extend(evidence_for([lead, *[h for h in hits if h is not lead]]))
        facts["count"] = len(hits)
        ranks = ranks_of(hits, ctx.run)
        if ranks:
            facts["ranks"] = ranks
        if lead.step is not None:
            facts["step"] = lead.step
    for path, code in codes:
        facts.setdefault("exit_code", code)
        evidence.append(Evidence(path=path, excerpt=str(code), detail=f"exit code {code} (128 + SIGKILL)"))
    for cf in sigkilled[:3]:
        facts.setdefault("failed_rank", cf.rank)
        facts.setdefault("signal", signal_name(9))
        evidence.append(Evidence(path=cf.path, line=cf.line, rank=cf.rank,
                                 detail=f"rank {cf.rank} exitcode {cf.exitcode} ({cf.signal or 'SIGKILL'})"))
    # What decides host RAM use, from the config (as oom.cuda cites its batch size).
    cfg_facts, cfg_evidence, cited = cite_config(ctx.run, host_config_keys(ctx.params))
    facts.update(cfg_facts)
    evidence.extend(cfg_evidence)
    step = facts.get("step")
    msg = _host_message(facts, lead, confidence)
    if cited:
        msg = msg[:-1] + "; " + ", ".join(cited) + "."
    key = f"oom.host:{facts['source']}"
    return [ctx.finding(msg, key=key, facts=facts, evidence=evidence, confidence=confidence, step=step,
                        wall_time=lead.wall_time if lead is not None else None)]


def host_config_keys(params: Any) -> list[tuple[str, tuple[str, ...]]]:
    """(fact, config keys) cited for host-RAM failures: batch size, then the DataLoader settings."""
    batch = tuple(params.get("batch_size_keys", ())) or _BATCH_KEYS
    return [("batch_size", batch), *LOADER_KEYS]


_BATCH_KEYS = ("per_device_train_batch_size", "micro_batch_size", "train_micro_batch_size_per_gpu",
               "device_batch_size", "batch_size", "train_batch_size")


def _one_per_line(hits: Iterable[Hit]) -> list[Hit]:
    """The first hit of each log line: one line may match two patterns (exit code 137 and SIGKILL)."""
    out: dict[tuple[str, int], Hit] = {}
    for h in hits:
        out.setdefault((h.path, h.lineno), h)
    return list(out.values())


def _name_of(ctx: CheckContext, hit: Hit | None) -> str | None:
    if hit is None:
        return None
    return _pattern_of(ctx, hit)


def _host_message(facts: dict[str, Any], lead: Hit | None, confidence: Confidence) -> str:
    src = facts["source"]
    at = f" at step {facts['step']}" if "step" in facts else ""
    loc = f" ({where(lead)})" if lead is not None else ""
    if confidence is Confidence.HIGH:
        what = f"the {src} OOM killer" if src in ("kernel", "cgroup", "slurm", "container") else src
        rss = f"; RSS {fmt_gib(facts['rss_gib'])}" if "rss_gib" in facts else ""
        proc = f" killed {facts['process']} (pid {facts['pid']})" if "process" in facts and "pid" in facts else ""
        asked = (f" could not allocate {fmt_gib(facts['requested_gib'])}" if "requested_gib" in facts
                 and "process" not in facts else "")
        return f"Host RAM ran out{at}: {what}{asked}{proc}{rss}{loc}."
    if confidence is Confidence.MEDIUM:
        who = (f"Local rank {facts['local_rank']} was" if "local_rank" in facts
               else f"Rank {facts['rank']} was" if "rank" in facts else "The process was")
        seen = f"{loc[2:-1]}" if src == "SIGKILL" and loc else f"{src}{loc}"
        return (f"{who} killed with SIGKILL{at} ({seen}), most likely by the kernel OOM killer: "
                "host RAM, not GPU memory, ran out.")
    code = facts.get("exit_code")
    why = f"exit code {code}" if code is not None else f"rank {facts.get('failed_rank')} died of SIGKILL"
    return f"The run ended with {why} and no error of its own: host RAM exhaustion (OOM killer) is the likely cause."
