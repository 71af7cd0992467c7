"""File-system and environment failures: ``io.not_found``, ``io.permission``, ``env.import``, ``env.cuda``.

All four are "this exception line means this failure" rules built on
:func:`autopsy.checks.common.line_rule`: hits followed by training progress were handled
and are dropped, one finding per distinct failure (same path / module / error), with the
ranks that saw it and the innermost project frame of the traceback holding the line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import regex

from autopsy.checks.common import group, line_rule, normalise_key, rank_phrase, where
from autopsy.engine.types import CheckContext
from autopsy.model import Confidence, Finding
from autopsy.parsers.types import Hit

_WARNING_MARKERS = ("Warning:", "WARNING", "warnings.warn", "[W ")
_SIGILL = regex.compile(r"(?i:illegal instruction)|illegal hardware instruction|signal 4: SIGILL"
                        r"|-1073741795|3221225501|0x[Cc]000001[Dd]")


def _path_of(hit: Hit) -> str | None:
    for name in ("path", "file", "tokenizer"):
        value = group(hit, name)
        if value:
            return value
    return None


def _at(facts: Mapping[str, Any]) -> str:
    return f" at step {facts['step']}" if "step" in facts else ""


def not_found(ctx: CheckContext) -> Iterable[Finding]:
    def facts(hit: Hit) -> dict[str, Any]:
        return {"path": _path_of(hit)}

    def message(hit: Hit, f: Mapping[str, Any], n: int) -> str:
        what = f"'{f['path']}'" if f.get("path") else "a needed file"
        return f"The run stopped because {what} does not exist{_at(f)}{rank_phrase(f)} ({where(hit)})."

    def key(hit: Hit) -> str:
        path = _path_of(hit)
        return normalise_key(path) if path else normalise_key(hit.text)

    def skip(hit: Hit) -> bool:
        return any(m in hit.text for m in _WARNING_MARKERS) or "cannot open shared object file" in hit.text

    return line_rule(ctx, names=("checkpoint_not_found", "lightning_ckpt_not_found", "hf_missing_file",
                                 "hf_no_file_in_dir", "hf_repo_not_found", "hf_repository_error",
                                 "tokenizer_not_found", "file_not_found",
                                 "errno_2", "python_cannot_open", "shell_not_found", "missing_path_message"),
                     message=message, facts=facts, key=key, skip=skip)


def permission(ctx: CheckContext) -> Iterable[Finding]:
    def facts(hit: Hit) -> dict[str, Any]:
        return {"path": group(hit, "path"), "read_only": "Read-only file system" in hit.text}

    def message(hit: Hit, f: Mapping[str, Any], n: int) -> str:
        what = f"'{f['path']}'" if f.get("path") else "a path"
        why = "is on a read-only file system" if f.get("read_only") else "is not accessible (permission denied)"
        return f"The run stopped because {what} {why}{_at(f)}{rank_phrase(f)} ({where(hit)})."

    def key(hit: Hit) -> str:
        path = group(hit, "path")
        return normalise_key(path) if path else normalise_key(hit.text)

    return line_rule(ctx, names=("permission_error", "errno_13", "read_only_fs", "shell_denied"),
                     message=message, facts=facts, key=key)


def env_import(ctx: CheckContext) -> Iterable[Finding]:
    def facts(hit: Hit) -> dict[str, Any]:
        module = group(hit, "module")
        out: dict[str, Any] = {}
        if module:
            out["package"] = module.split(".")[0]
        if _SIGILL.search(hit.text):
            out["kind"] = "cpu_instruction"
        elif "undefined symbol" in hit.text or "numpy" in hit.text.lower() or "GLIBCXX" in hit.text:
            out["kind"] = "abi"
        elif "cannot open shared object file" in hit.text:
            out["kind"] = "missing_library"
        elif "ModuleNotFoundError" in hit.text:
            out["kind"] = "missing_module"
        else:
            out["kind"] = "import_error"
        return out

    def message(hit: Hit, f: Mapping[str, Any], n: int) -> str:
        kind = f.get("kind")
        if kind == "cpu_instruction":
            what = ("a compiled binary uses an instruction this CPU does not have: the process died of SIGILL "
                    f"({hit.text.strip()[:120]!r}); a wheel or extension built for a newer CPU (AVX/AVX2) or for "
                    "another architecture")
        elif kind == "missing_module":
            what = f"module '{f.get('module')}' is not installed"
        elif kind == "missing_library":
            what = f"shared library {f.get('library')} cannot be found"
        elif kind == "abi":
            lib = f.get("library")
            what = (f"a compiled extension ({lib}) does not match the installed packages" if lib
                    else "a compiled extension was built against other package versions (ABI mismatch)")
        elif f.get("name"):
            what = f"'{f['name']}' cannot be imported from {f.get('module')} (version mismatch)"
        else:
            what = f"an import failed: {str(f.get('message', hit.text.strip()))[:160]}"
        return f"The environment is broken: {what}{rank_phrase(f)} ({where(hit)})."

    def key(hit: Hit) -> str:
        for name in ("module", "library", "name"):
            if group(hit, name):
                return f"{name}:{normalise_key(group(hit, name) or '')}"
        return normalise_key(hit.text)

    def skip(hit: Hit) -> bool:
        return any(m in hit.text for m in _WARNING_MARKERS)

    found = line_rule(ctx, names=("module_not_found", "module_not_found_flattened", "cannot_import_name",
                                  "undefined_symbol", "shared_object", "glibcxx", "numpy_abi", "cython_dtype_size",
                                  "numpy_c_api_version", "import_error", "sigill_zsh", "sigill_fatal", "sigill_shell",
                                  "sigill_windows"),
                      message=message, facts=facts, key=key, skip=skip)
    # SIGILL is nearly always a binary built for another CPU, but a program can also trap on purpose
    # (an abort compiled to an illegal instruction): likely, not certain.
    return [replace(f, confidence=Confidence.MEDIUM) if f.facts.get("kind") == "cpu_instruction" else f
            for f in found]


def env_cuda(ctx: CheckContext) -> Iterable[Finding]:
    arch_hits = ctx.hits.get("arch_unsupported", [])
    arch = group(arch_hits[0], "arch") if arch_hits else None
    gpu_name = group(arch_hits[0], "gpu_name") if arch_hits else None

    def facts(hit: Hit) -> dict[str, Any]:
        out: dict[str, Any] = {"arch": arch, "gpu_name": gpu_name}
        if "no kernel image" in hit.text or "capability" in hit.text or "hipErrorNoBinaryForGpu" in hit.text:
            out["kind"] = "arch_not_in_build"
            if "hipErrorNoBinaryForGpu" in hit.text:
                out["platform"] = "rocm"
        elif group(hit, "needed") or group(hit, "needed_min"):
            out["kind"] = "cuda_too_old"
            out["cuda_needed"] = group(hit, "needed") or group(hit, "needed_min")
        elif "driver" in hit.text.lower():
            out["kind"] = "driver"
        elif "Not compiled with" in hit.text:
            out["kind"] = "extension_cpu_only"
        elif "not compiled" in hit.text or "is_available() is False" in hit.text:
            out["kind"] = "cpu_only_build"
        elif "mismatches" in hit.text:
            out["kind"] = "cuda_version_mismatch"
        else:
            out["kind"] = "no_gpu"
        return out

    def message(hit: Hit, f: Mapping[str, Any], n: int) -> str:
        kind = f.get("kind")
        if kind == "arch_not_in_build":
            gpu = f" ({f['gpu_name'].strip()}, {f['arch']})" if f.get("gpu_name") and f.get("arch") else ""
            what = ("the installed ROCm build has no code object for this GPU's architecture (hipErrorNoBinaryForGpu)"
                    if f.get("platform") == "rocm" else f"the installed PyTorch build has no kernels for this GPU{gpu}")
        elif kind == "driver":
            drv = f" (driver {f['driver_version']})" if f.get("driver_version") else ""
            what = f"the NVIDIA driver is too old for this PyTorch/CUDA build{drv}"
        elif kind == "cpu_only_build":
            what = "PyTorch has no usable CUDA (CPU-only build or no GPU) but the run needs it"
        elif kind == "extension_cpu_only":
            what = ("a compiled extension was built without its CUDA kernels and a GPU tensor reached it: rebuild "
                    "it against the installed CUDA (FORCE_CUDA=1) or install its CUDA wheel")
        elif kind == "cuda_too_old":
            what = (f"the installed CUDA is older than an operation of the run needs (CUDA {f.get('cuda_needed')} or "
                    "newer): upgrade the CUDA toolkit/driver, or turn the feature off")
        elif kind == "cuda_version_mismatch":
            what = f"the CUDA toolkit ({f.get('detected')}) differs from PyTorch's ({f.get('torch_cuda')})"
        else:
            what = "no usable GPU was visible to the job"
        return f"CUDA is unusable: {what}{rank_phrase(f)} ({where(hit)})."

    def key(hit: Hit) -> str:
        return str(facts(hit)["kind"])

    return line_rule(ctx, names=("no_kernel_image", "driver_too_old", "driver_insufficient", "not_compiled",
                                 "deserialize_on_cpu", "cuda_version_mismatch", "no_driver", "no_gpus", "devices_busy",
                                 "no_device",
                                 "gpu_required", "bf16_unsupported", "cuda_init", "device_count_error",
                                 "arch_unsupported", "hip_no_binary", "cuda_too_old_for_feature",
                                 "extension_not_compiled"),
                     message=message, facts=facts, key=key)
