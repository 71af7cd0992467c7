"""Header checks for checkpoint formats beyond safetensors and torch zips, and a look at a
torch file's pickle *opcodes* (never its objects).

- HDF5 (Keras ``.weights.h5`` / ``.h5``): the 8-byte signature at offset 0 and the
  superblock's end-of-file address against the file size (a file cut mid-write is shorter
  than the address its superblock promises).
- Keras ``.keras``: a zip archive (checked like a torch zip: central directory, members
  inside the data area) that must hold ``config.json`` and the weights
  (``model.weights.h5`` or ``model.weights.npz``).
- :func:`pickle_facts`: a torch zip's ``data.pkl`` walked with :func:`pickletools.genops`,
  which only decodes opcodes: no class is imported and nothing is constructed. It yields
  the top-level keys written as strings and the small integers stored right after chosen
  keys (``global_step``, ``iter_num``, ``epoch``): what tells a Lightning checkpoint from a
  nanoGPT one, and the step of a ``last.ckpt``.
"""

from __future__ import annotations

import io
import os
import pickletools
import struct
import zipfile
from dataclasses import dataclass, field

from autopsy.parsers.safe_open import open_binary
from autopsy.parsers.types import FileCheck
from autopsy.parsers.zipcheck import check_torch_file

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
MAX_PICKLE_BYTES = 16 * 1024 * 1024
_STRING_OPS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING",
                         "BINSTRING", "STRING"})
_INT_OPS = frozenset({"BININT", "BININT1", "BININT2", "LONG1", "INT", "LONG", "LONG4"})
_FLOAT_OPS = frozenset({"BINFLOAT", "FLOAT"})
_MEMO_OPS = frozenset({"MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT"})


def check_hdf5(path: str, fd: int, size: int) -> FileCheck:
    """An HDF5 file: signature and superblock end-of-file address (versions 0-3)."""
    if size == 0:
        return FileCheck(path, size, "hdf5", False, "empty file (0 bytes)")
    head = os.pread(fd, 128, 0)
    if not head.startswith(HDF5_SIGNATURE):
        if HDF5_SIGNATURE.startswith(head):
            return FileCheck(path, size, "hdf5", False, f"only {size} bytes of an HDF5 file: the file was cut short")
        return FileCheck(path, size, "hdf5", False,
                         f"unreadable as HDF5: no HDF5 signature (starts with {head[:8].hex(' ')})")
    eof = _hdf5_eof(head)
    if eof is None:
        return FileCheck(path, size, "hdf5", True, note="HDF5 superblock not understood; only the signature checked")
    if eof > size:
        return FileCheck(path, size, "hdf5", False,
                         f"HDF5 superblock says the file ends at byte {eof}, file has {size}: cut short")
    return FileCheck(path, size, "hdf5", True)


def _hdf5_eof(head: bytes) -> int | None:
    """The end-of-file address of an HDF5 superblock at offset 0, or None if not understood."""
    if len(head) < 9:
        return None
    version = head[8]
    try:
        if version in (0, 1):
            off_size = head[13]
            pos = 24 + (4 if version == 1 else 0)  # after the B-tree K values and consistency flags
            if off_size not in (2, 4, 8):
                return None
            fmt = {2: "<H", 4: "<I", 8: "<Q"}[off_size]
            base = struct.unpack_from(fmt, head, pos)[0]
            eof = struct.unpack_from(fmt, head, pos + 2 * off_size)[0]
            return base + eof
        if version in (2, 3):
            off_size = head[9]
            if off_size not in (2, 4, 8):
                return None
            fmt = {2: "<H", 4: "<I", 8: "<Q"}[off_size]
            base = struct.unpack_from(fmt, head, 12)[0]
            eof = struct.unpack_from(fmt, head, 12 + 2 * off_size)[0]
            return base + eof
    except struct.error:
        return None
    return None


def check_keras_archive(path: str, fs_path: str, fd: int, size: int) -> FileCheck:
    """A Keras 3 ``.keras`` file: a complete zip holding ``config.json`` and the weights."""
    fc = check_torch_file(path, fs_path, fd, size)
    if fc.format != "zip":
        if fc.ok:  # a pickle or tar under a .keras name
            return FileCheck(path, size, fc.format, False, "not a zip archive: a .keras file is a zip")
        return fc
    if not fc.ok:
        return fc
    try:
        with os.fdopen(os.dup(fd), "rb") as fh, zipfile.ZipFile(fh) as zf:
            names = set(zf.namelist())
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        return FileCheck(path, size, "zip", False, f"zip archive unreadable: {exc}")
    lacking = [n for n in ("config.json", "metadata.json") if n not in names]
    if not names & {"model.weights.h5", "model.weights.npz"}:
        lacking.append("model.weights.h5")
    if lacking:
        return FileCheck(path, size, "zip", False, "Keras archive lacks " + ", ".join(lacking), entries=len(names))
    return FileCheck(path, size, "zip", True, entries=len(names))


@dataclass
class PickleFacts:
    """What the opcodes of a torch file's ``data.pkl`` say, without building any object."""

    strings: set[str] = field(default_factory=set)  # every string the pickle writes (keys, names)
    numbers: dict[str, float] = field(default_factory=dict)  # key -> the number stored right after it
    problem: str | None = None  # why it could not be read (then the sets are partial)


def pickle_facts(fs_path: str, keys: frozenset[str]) -> PickleFacts:
    """Strings and ``key -> number`` pairs of the ``data.pkl`` in a torch zip archive."""
    facts = PickleFacts()
    try:
        with open_binary(fs_path) as fh, zipfile.ZipFile(fh) as zf:
            members = [i for i in zf.infolist() if i.filename.endswith("data.pkl")]
            if not members:
                facts.problem = "no data.pkl in the archive"
                return facts
            member = min(members, key=lambda i: i.filename.count("/"))
            if member.file_size > MAX_PICKLE_BYTES:
                facts.problem = f"data.pkl larger than {MAX_PICKLE_BYTES} bytes; not scanned"
                return facts
            data = zf.read(member)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError) as exc:
        facts.problem = f"archive unreadable: {exc}"
        return facts
    pending: str | None = None
    try:
        for op, arg, _pos in pickletools.genops(io.BytesIO(data)):
            name = op.name
            if name in _STRING_OPS and isinstance(arg, (str, bytes)):
                text = arg if isinstance(arg, str) else arg.decode("latin-1")
                if len(text) <= 256:
                    facts.strings.add(text)
                pending = text if text in keys else None
            elif name in _INT_OPS or name in _FLOAT_OPS:
                if pending is not None and isinstance(arg, (int, float)) and not isinstance(arg, bool):
                    facts.numbers.setdefault(pending, float(arg))
                pending = None
            elif name not in _MEMO_OPS:
                pending = None
    except (ValueError, EOFError, struct.error) as exc:  # genops on malformed bytes
        facts.problem = f"data.pkl not a well-formed pickle: {exc}"
    return facts


# What a weights/state file named .bin starts with: a torch zip (PK), a legacy torch pickle
# (protocol 2+: 0x80), GGML/GGUF magic; a safetensors file under that name has its JSON header at 8.
_BIN_MAGIC = (b"PK\x03\x04", b"PK\x05\x06", b"\x80", b"ggml", b"ggjt", b"ggmf", b"ggla", b"GGUF")


def raw_data_bin(head: bytes) -> bool:
    """A ``.bin`` whose first bytes are none of a weights file's: a raw array (nanoGPT's token ids in
    ``train.bin``, Megatron's ``.bin`` beside its ``.idx``), not a checkpoint. An empty or zeroed
    head stays a checkpoint file, so that damage is reported."""
    if not head or not any(head):
        return False
    if head.startswith(_BIN_MAGIC):
        return False
    return not (len(head) >= 10 and head[8:10] == b'{"')
