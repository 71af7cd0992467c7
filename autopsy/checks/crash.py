"""Process crashes: native faults, CUDA runtime errors, shape/device bugs, DataLoader worker deaths,
and the generic uncaught exception (``crash.exception``) that no more specific rule explains.

``crash.exception`` decides "explained" itself, without knowing other rules' findings: an
exception whose line matches a firing pattern of any other loaded card (an OOM, ENOSPC,
NCCL, ImportError... line) is left to that card; precedence then needs no special case.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import regex

from autopsy.checks.common import (
    cite_config,
    evidence_for,
    group,
    hit_count,
    line_rule,
    normalise_key,
    rank_phrase,
    ranks_of,
    read_after,
    recovered,
    where,
)
from autopsy.checks.oom import host_config_keys
from autopsy.engine.types import CheckContext
from autopsy.model import Finding
from autopsy.parsers.types import Hit

_FAULTHANDLER_FRAME = regex.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_WORKER_MARKERS = ("DataLoader worker", "encountered in worker")


# ----------------------------------------------------------------------------- crash.segfault

_NT_STACK_OVERFLOW = ("-1073741571", "3221225725", "0xC00000FD", "0xc00000fd", "stack overflow")
_NT_HEAP = ("-1073740940", "3221226356", "0xC0000374", "0xc0000374")
_NT_ACCESS = ("-1073741819", "3221225477", "0xC0000005", "0xc0000005", "access violation")
_NT_FAIL_FAST = ("-1073740791", "3221226505", "0xC0000409", "0xc0000409")  # STATUS_STACK_BUFFER_OVERRUN
_NT_DIVIDE = ("-1073741676", "3221225620", "0xC0000094", "0xc0000094")  # STATUS_INTEGER_DIVIDE_BY_ZERO


# Windows NTSTATUS codes in the order they are told apart, with the name the finding gives
_NT_CODES = ((_NT_STACK_OVERFLOW, "stack overflow"), (_NT_HEAP, "heap corruption"), (_NT_ACCESS, "access violation"),
             (_NT_FAIL_FAST, "fail-fast"), (_NT_DIVIDE, "divide by zero"))


# zsh's word for SIGABRT, as a job report or for a foreground job ("zsh: abort      python train.py"),
# bash's ("Aborted (core dumped)", "line 14: 94460 Aborted ..."), libstdc++'s terminate handler (abort())
_SHELL_ABORT = regex.compile(r"(?:\d |zsh: )abort\b|(?:^\s*|[\]|%]|\d )Aborted\b|terminate called after throwing")
# The what() of a C++ exception another rule reads: NCCL / c10d errors and their watchdog (dist.*), CUDA
# errors (cuda.runtime / oom.cuda), std::bad_alloc (oom.host). Thrown through std::terminate they are
# still that rule's; crash.segfault reports only the abort of an exception no rule knows.
_KNOWN_WHAT = regex.compile(r"NCCL|ProcessGroup|c10d|DistBackendError|Watchdog|CUDA|CUBLAS|CUDNN|bad_alloc")


def _signal_of(text: str) -> str:
    t = text
    for codes, name in _NT_CODES:
        if any(c in t for c in codes):
            return name
    if any(m in t for m in ("SIGBUS", "Bus error", "bus error", "signal 7", "-7)", "return code = -7",
                            "SIGNAL: 7 (")):
        return "SIGBUS"
    if "SIGILL" in t or "signal 4" in t:
        return "SIGILL"
    # (MPICH's Hydra names the signal by number: "EXIT STRING: Aborted (signal 6)", "KILLED BY SIGNAL: 6 (Aborted)")
    if "Fatal Python error: Aborted" in t or "Abort trap" in t or _SHELL_ABORT.search(t) \
            or "(signal 6)" in t or "SIGNAL: 6 (" in t:
        return "SIGABRT"
    if "Fatal Python error" in t and "Segmentation fault" not in t and "Bus error" not in t:
        return "fatal"
    return "SIGSEGV"


def _faulthandler_frames(ctx: CheckContext, hit: Hit) -> list[str]:
    """The Python frames faulthandler printed under "Fatal Python error" (innermost first)."""
    fatal = [h for h in ctx.hits.get("fatal_python", ()) if h.path == hit.path]
    source = fatal[0] if fatal else hit
    out = []
    for line in read_after(ctx.run, source, max_lines=int(ctx.params.get("frames_after_lines", 25))):
        m = _FAULTHANDLER_FRAME.match(line)
        if m:
            out.append(f"{m.group('file')}:{m.group('line')} in {m.group('func')}")
    return out


def segfault(ctx: CheckContext) -> Iterable[Finding]:
    def what(hit: Hit) -> str:
        """The terminate handler's what() line: on the same line or one of the next two."""
        if "what():" in hit.text:
            return hit.text.split("what():", 1)[1].strip()
        nxt = next((ln for ln in read_after(ctx.run, hit, max_lines=2) if "what():" in ln), "")
        return nxt.split("what():", 1)[1].strip() if nxt else ""

    def facts(hit: Hit) -> dict[str, Any]:
        frames = _faulthandler_frames(ctx, hit)
        out: dict[str, Any] = {"signal": _signal_of(hit.text)}
        if group(hit, "exception"):
            out["exception"] = group(hit, "exception")
            if what(hit):
                out["what"] = what(hit)[:300]
        if frames:
            out["last_frames"] = frames[:8]
            project = [f for f in frames if "-packages/" not in f and "/lib/python" not in f]
            out["frame"] = (project or frames)[0]
        return out

    def message(hit: Hit, f: Mapping[str, Any], n: int) -> str:
        sig = f.get("signal")
        what_died = {"SIGBUS": "a bus error (SIGBUS)", "SIGILL": "an illegal instruction (SIGILL)",
                     "SIGABRT": "an abort (SIGABRT)", "fatal": "a fatal Python error",
                     "access violation": "a Windows access violation (0xC0000005, the SIGSEGV of Windows)",
                     "stack overflow": "a stack overflow (0xC00000FD)",
                     "heap corruption": "heap corruption (0xC0000374)",
                     "fail-fast": "a fail-fast abort (0xC0000409, STATUS_STACK_BUFFER_OVERRUN: a native library called "
                                  "abort() or detected a corrupted stack)",
                     "divide by zero": "an integer division by zero in native code (0xC0000094, the SIGFPE of Windows)",
                     }.get(str(sig), "a segmentation fault (SIGSEGV)")
        inside = f" in {f['frame']}" if f.get("frame") else ""
        if f.get("exception"):
            said = f": {f['what']}" if f.get("what") else ""
            inside += f" after an uncaught C++ exception ({f['exception']}{said})"
        return f"The process died of {what_died}{inside}{rank_phrase(f)} ({where(hit)})."

    def key(hit: Hit) -> str:
        return _signal_of(hit.text)

    def skip(hit: Hit) -> bool:
        if group(hit, "exception") and (_KNOWN_WHAT.search(group(hit, "exception") or "")
                                        or _KNOWN_WHAT.search(what(hit))):
            return True
        return any(m in hit.text for m in _WORKER_MARKERS)

    return line_rule(ctx, names=("fatal_python", "windows_fatal", "segfault", "segfault_zsh", "bus_error",
                                 "bus_error_zsh", "abort_shell", "abort_bash", "cxx_terminate", "signal_line",
                                 "caught_signal", "exit_139",
                                 "windows_exit_code",
                                 "dotnet_access_violation", "elastic_exitcode", "deepspeed_signal_exit",
                                 "mpich_signal"),
                     message=message, facts=facts, key=key, skip=skip)


# ----------------------------------------------------------------------------- cuda.runtime

def cuda_runtime(ctx: CheckContext) -> Iterable[Finding]:
    min_after = int(ctx.params.get("progress_after_steps", 2))
    findings: list[Finding] = []
    asserts = [h for h in ctx.hits.get("assertion", ()) if not recovered(ctx.run, h, min_after)]
    triggered = [h for h in ctx.hits.get("device_assert", ()) if not recovered(ctx.run, h, min_after)]
    if asserts or triggered:
        facts: dict[str, Any] = {"error": "device-side assert triggered"}
        lead = (triggered or asserts)[0]
        if asserts:
            common = Counter(group(h, "assertion") for h in asserts if group(h, "assertion")).most_common(1)
            first = asserts[0]
            if common:
                facts["assertion"] = common[0][0]
            for g in ("kernel", "kernel_file"):
                value = next((group(h, g) for h in asserts if group(h, g)), None)
                if value:
                    facts[g] = value
            facts["assert_lines"] = hit_count(ctx.run, ctx.card.id, ["assertion"])
            lead = triggered[0] if triggered else first
        ranks = ranks_of([*asserts, *triggered], ctx.run)
        if ranks:
            facts["ranks"] = ranks
        if lead.step is not None:
            facts["step"] = lead.step
        evidence = evidence_for([*triggered[:2], *asserts[:3]])
        hint = ""
        a = str(facts.get("assertion", ""))
        if "srcIndex < srcSelectDimSize" in a:
            hint = ": an index is larger than an embedding table (token id >= vocab size, or position >= max positions)"
        elif "n_classes" in a:
            hint = ": a label id is outside [0, num_classes)"
        what = f" (assertion `{a}`{' in ' + facts['kernel'] if 'kernel' in facts else ''})" if a else ""
        at = f" at step {facts['step']}" if "step" in facts else ""
        findings.append(ctx.finding(
            f"A CUDA device-side assert killed the run{what}{hint}{at}{rank_phrase(facts)} ({where(lead)}).",
            key=f"device_assert:{normalise_key(a)}", facts=facts, evidence=evidence, step=lead.step,
            wall_time=lead.wall_time))

    def facts_of(hit: Hit) -> dict[str, Any]:
        return {"error": group(hit, "error") or (f"CUBLAS/CUDNN_STATUS_{group(hit, 'status')}"
                                                 if group(hit, "status") else None)}

    def message(hit: Hit, f: Mapping[str, Any], n: int) -> str:
        if "xid" in f or "fallen off the bus" in hit.text or "ECC" in hit.text:
            xid = f" Xid {f['xid']}" if "xid" in f else ""
            return f"The GPU reported a hardware/driver fault{xid}{rank_phrase(f)} ({where(hit)}): drain the node."
        return f"A CUDA kernel failed: {f.get('error') or hit.text.strip()[:120]}{rank_phrase(f)} ({where(hit)})."

    def key(hit: Hit) -> str:
        return str(group(hit, "xid") or group(hit, "status") or group(hit, "error") or normalise_key(hit.text))

    findings.extend(line_rule(ctx, names=("illegal_access", "cublas_failure", "cudnn_failure", "xid",
                                                 "fallen_off_bus", "ecc", "ecc_double_bit"),
                              message=message, facts=facts_of, key=key))
    return findings


# ----------------------------------------------------------------------------- code.*

def code_shape(ctx: CheckContext) -> Iterable[Finding]:
    def message(hit: Hit, f: Mapping[str, Any], n: int) -> str:
        inside = f" in {f['frame']}" if f.get("frame") else ""
        return (f"A tensor shape mismatch crashed the run{rank_phrase(f)}{inside}: {hit.text.strip()[:200]} "
                f"({where(hit)}).")

    def key(hit: Hit) -> str:
        tb_fn = hit.key.rsplit("/", 1)[-1]
        return f"{tb_fn}:{group(hit, 'param') or ''}"

    return line_rule(ctx, message=message, key=key)


def code_device(ctx: CheckContext) -> Iterable[Finding]:
    def skip(hit: Hit) -> bool:
        a, b = group(hit, "input_type"), group(hit, "weight_type")
        if a is None or b is None:
            return False
        return ("cuda" in a.lower()) == ("cuda" in b.lower())  # a dtype mismatch, not a device one

    def facts(hit: Hit) -> dict[str, Any]:
        devices = [d for d in (group(hit, n) for n in ("device_a", "device_b", "device_arg", "device_other"))
                   if d]
        for n in ("input_type", "weight_type"):
            t = group(hit, n)
            if t:
                devices.append("cuda" if "cuda" in t.lower() else "cpu")
        return {"devices": sorted(set(devices))} if devices else {}

    def message(hit: Hit, f: Mapping[str, Any], n: int) -> str:
        devs = " and ".join(f.get("devices", [])) or "two devices"
        inside = f" in {f['frame']}" if f.get("frame") else ""
        return f"An operation got tensors on different devices ({devs}){inside}{rank_phrase(f)} ({where(hit)})."

    def key(hit: Hit) -> str:
        f = facts(hit)
        return ",".join(f.get("devices", [])) or normalise_key(hit.text)

    return line_rule(ctx, message=message, facts=facts, key=key, skip=skip)


# ----------------------------------------------------------------------------- data.worker

def _worker_cause(signal_text: str | None, text: str) -> str:
    s = (signal_text or "").lower()
    if "bus error" in s or "shared memory" in text or "</torch_" in text or "bus error" in text.lower():
        return "shared_memory"
    if s.startswith("killed"):
        return "host_oom"
    if "timed out" in text:
        return "timeout"
    if s:
        return "worker_crash"
    return "unknown"


def data_worker(ctx: CheckContext) -> Iterable[Finding]:
    signals_by_file: dict[str, str] = {}
    for h in ctx.hits.get("killed_by_signal", ()):
        signals_by_file.setdefault(h.path, group(h, "signal") or "")

    def cause(hit: Hit) -> str:
        return _worker_cause(group(hit, "signal") or signals_by_file.get(hit.path), hit.text)

    def facts(hit: Hit) -> dict[str, Any]:
        c = cause(hit)
        sig = group(hit, "signal") or signals_by_file.get(hit.path)
        if sig:  # the worker's own handler writes "segmentation fault", torch's error "Segmentation fault"
            sig = sig[0].upper() + sig[1:]
        return {"cause": c, "signal": sig, "shm_hint": c == "shared_memory"}

    def message(hit: Hit, f: Mapping[str, Any], n: int) -> str:
        c = f.get("cause")
        why = {"shared_memory": "out of shared memory (/dev/shm too small: docker --shm-size / --ipc=host, "
                                "or fewer workers)",
               "host_oom": "killed by SIGKILL, most likely the host OOM killer (fewer/lighter workers)",
               "timeout": f"timed out after {f.get('timeout_s')} s waiting for a batch",
               "worker_crash": f"killed by signal {f.get('signal')}"}.get(str(c), "exited unexpectedly")
        at = f" at step {f['step']}" if "step" in f else ""
        return f"A DataLoader worker died: {why}{at}{rank_phrase(f)} ({where(hit)})."

    found = line_rule(ctx, names=("killed_by_signal", "shm_bus_error", "worker_segfault", "shm_killed_hint",
                                  "shm_write", "loader_timeout", "exited_unexpectedly"),
                      message=message, facts=facts, key=cause)
    if not found:
        return found
    # The settings that size the workers' memory, cited from the config like oom.cuda's batch size.
    cfg_facts, cfg_evidence, cited = cite_config(ctx.run, host_config_keys(ctx.params))
    if not cited:
        return found
    tail = "; " + ", ".join(cited) + "."
    return [replace(f, facts={**f.facts, **cfg_facts}, evidence=(*f.evidence, *cfg_evidence),
                    message=f.message[:-1] + tail if f.message.endswith(".") else f.message + tail) for f in found]

