"""Environment facts of a run: library and driver versions, hardware, world size.

Read from what runs leave behind without an SDK: ``pip freeze`` / ``conda list`` files,
``requirements*.txt`` pins, W&B's ``wandb-metadata.json``, and the banners programs print
(``torch 2.3.0``, ``NCCL version 2.18.1+cuda12.1``, ``CUDA Version: 12.2``, ``nvidia-smi``'s
driver line, GPU names, ``world_size=8``). Each fact keeps where it was read (file:line).
The banner patterns are data with sample lines, checked by the tests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

# (category, name or None = from the match, regex with group "v" [and "name"], samples)
BANNERS: tuple[tuple[str, str | None, re.Pattern[str], tuple[str, ...]], ...] = (
    # NCCL's own init banner (NCCL_DEBUG=INFO) and torch.cuda.nccl.version() prints
    ("driver", "nccl", re.compile(r"\bNCCL version (?P<v>\d+\.\d+\.\d+)"),
     ("gpu0:1:1 [0] NCCL INFO NCCL version 2.18.1+cuda12.1",)),
    # nvidia-smi header
    ("driver", "nvidia-driver", re.compile(r"Driver Version: (?P<v>\d+(?:\.\d+)+)"),
     ("| NVIDIA-SMI 535.54.03    Driver Version: 535.54.03    CUDA Version: 12.2     |",)),
    ("driver", "cuda", re.compile(r"\bCUDA Version:? (?P<v>\d+\.\d+)"), ("CUDA Version: 12.2",)),
    # torch.utils.collect_env and many training banners
    ("package", "torch", re.compile(r"\b(?:PyTorch|torch)(?: version)?[ :=]+v?(?P<v>\d+\.\d+(?:\.\d+)?(?:[+.]\w+)?)\b"),
     ("PyTorch version: 2.1.0+cu121", "[env] python 3.11.7 | torch 2.13.0+cpu | yaml 6.0.2")),
    ("package", "python", re.compile(r"\bPython(?: version)?[ :]+(?P<v>3\.\d+\.\d+)", re.I),
     ("Python version: 3.10.12 (main, Nov 20 2023)", "[env] python 3.11.7 | torch 2.13.0")),
    # `- `transformers` version: 4.36.2` (transformers-cli env) and "transformers version 4.36"
    ("package", None, re.compile(r"`?(?P<name>transformers|accelerate|deepspeed|datasets|tokenizers|peft|trl|"
                                 r"lightning|pytorch_lightning|keras|tensorflow|jax|jaxlib|numpy|flash_attn|"
                                 r"xformers|bitsandbytes|vllm|megatron-core|apex)`?(?: version)?[ :=]+v?"
                                 r"(?P<v>\d+\.\d+(?:\.\d+)?(?:[.+-]?\w+)?)\b", re.I),
     ("- `transformers` version: 4.36.2", "deepspeed version 0.12.6", "numpy==1.26.4")),
    # GPU model names as nvidia-smi, torch.cuda.get_device_name and Lightning print them
    ("hardware", "gpu", re.compile(r"\b(?P<v>(?:NVIDIA )?(?:A100|H100|H200|A10G?|A40|A6000|L4|L40S?|T4|V100|"
                                   r"P100|K80|"
                                   r"RTX ?\d{4}(?: Ti)?|GeForce [A-Z]+ ?\d{3,4}(?: Ti)?|Tesla [A-Z]\d+)"
                                   r"(?:[- ]SXM\d?|[- ]PCIE)?(?:-\d+GB)?)\b"),
     ("|   0  NVIDIA A100-SXM4-80GB  On |", "device: Tesla V100-SXM2-32GB")),
    ("world", "world_size",
     re.compile(r"\b(?:world[_ ]size|WORLD_SIZE|num_processes|nproc_per_node)\s*[=:]\s*(?P<v>\d+)\b"),
     ("Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8 world_size=8", "num_processes: 4")),
)
# pip freeze / requirements pins: `name==1.2.3`, `name @ file://...` has no version
_PIN = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*(?P<v>[^\s;#]+)")
# conda list: `name   1.2.3   build   channel`
_CONDA = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s+(?P<v>\d[\w.+!-]*)\s+\S+(?:\s+\S+)?\s*$")
_FREEZE_NAME = re.compile(
    r"(?:freeze|requirements|environment|conda[-_]list|pip[-_]list|packages|env)[^/]*\.(?:txt|lock)$", re.I)
MAX_ENV_FILE_BYTES = 2 << 20


@dataclass(frozen=True)
class EnvFact:
    category: str  # package, driver, hardware, world
    name: str
    value: str
    where: str


def normalise_package(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def facts_from_line(text: str, where: str) -> Iterator[EnvFact]:
    """Every banner fact one log line carries (cheap: a literal pre-check per pattern family)."""
    low = text.lower()
    if not any(word in low for word in ("version", "==", "torch", "python", "nvidia", "gpu", "world", "cuda",
                                        "tesla", "rtx", "a100", "h100", "num_processes", "nproc")):
        return
    for category, name, pattern, _samples in BANNERS:
        for m in pattern.finditer(text):
            found = name or normalise_package(m.group("name"))
            yield EnvFact(category, found, m.group("v"), where)


def is_env_file(rel_path: str) -> bool:
    """pip freeze, requirements pins, conda list, or a file named like an environment dump."""
    return bool(_FREEZE_NAME.search(rel_path.rsplit("/", 1)[-1]))


def facts_from_env_file(text: str, rel_path: str) -> Iterator[EnvFact]:
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            continue
        m = _PIN.match(line) or _CONDA.match(line)
        if m:
            yield EnvFact("package", normalise_package(m.group("name")), m.group("v"), f"{rel_path}:{lineno}")


def facts_from_wandb_metadata(text: str, rel_path: str) -> Iterator[EnvFact]:
    """W&B's wandb-metadata.json: python, cuda, gpu, gpu_count, os, host count."""
    try:
        meta = json.loads(text)
    except ValueError:
        return
    if not isinstance(meta, dict):
        return
    for key, category, name in (("python", "package", "python"), ("cuda", "driver", "cuda"),
                                ("gpu", "hardware", "gpu"), ("gpu_count", "hardware", "gpu_count"),
                                ("os", "hardware", "os"), ("cpu_count", "hardware", "cpu_count")):
        value = meta.get(key)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            shown = str(value).split(" ", 1)[0] if key == "python" else str(value)
            yield EnvFact(category, name, shown, rel_path)
