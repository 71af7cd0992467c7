"""Integrity of ``.pt``/``.bin``/``.pth``/``.ckpt`` files without unpickling anything.

``torch.save`` (since 1.6) writes a zip archive: ``<name>/data.pkl``, one member per
storage, and the central directory at the very end. A save that died part-way leaves no
end-of-central-directory record, so reading the directory (what ``zipfile`` does on
open: a seek to the end, never the members) tells a complete file from a cut one in
constant time. Older files are a bare pickle stream: listed, never loaded.
"""

from __future__ import annotations

import os
import re
import struct
import zipfile

from autopsy.parsers.types import FileCheck

PICKLE_NOTE = "legacy pickle format (not a zip archive), not inspected: autopsy never unpickles"
# torch.save before 1.6 (or with _use_new_zipfile_serialization=False) pickles with protocol 2
# ("\x80\x02"); pickle_protocol up to 5 is allowed. Protocol 0/1 streams start with torch's
# MAGIC_NUMBER written as a text long; torch < 0.4 wrote a tar archive.
_PICKLE_P01 = b"L119547037146038801333356"
JUNK = "neither a zip archive nor a pickle"
# ".bin" is also raw data (nanoGPT's train.bin, llama.cpp files): only these names are torch files
_TORCH_BIN = re.compile(r"^(?:pytorch_model|adapter_model|optimizer|scheduler|training_args|model[-_.]"
                        r"|mp_rank_|zero_pp_rank_|bf16_zero_pp_rank_)")


MAX_CENTRAL_DIRECTORY = 64 * 2**20  # a torch archive's directory is KBs; zipfile would read what is claimed
MAX_MEMBERS = 1_000_000
_EOCD = struct.Struct("<4s4H2LH")
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")


def central_directory_claim(fd: int, size: int) -> str | None:
    """Why the end records' claim about the central directory cannot be true (None: plausible).

    ``zipfile`` reads as many bytes as the end record (or its zip64 form) says the directory
    has: a 6 GB claim in a sparse file is 6 GB of memory. The claim is checked first, from at
    most the last 64 KB of the file: it must fit in the file, below a size no real
    checkpoint's directory comes near.
    """
    tail_len = min(size, 65536 + _EOCD.size)
    tail = os.pread(fd, tail_len, size - tail_len)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < _EOCD.size:
        return None  # zipfile reports a missing end record itself
    _sig, _d, _dcd, _n_disk, n_total, cd_size, cd_offset, clen = _EOCD.unpack_from(tail, at)
    if at + _EOCD.size + clen != len(tail):
        return None  # not the record that ends the file: zipfile decides
    if 0xFFFF in (n_total,) or 0xFFFFFFFF in (cd_size, cd_offset):
        loc_at = at - _ZIP64_LOCATOR.size
        if loc_at >= 0 and tail[loc_at:loc_at + 4] == b"PK\x06\x07":
            _s, _disk, eocd64_offset, _disks = _ZIP64_LOCATOR.unpack_from(tail, loc_at)
            if eocd64_offset + _ZIP64_EOCD.size > size:
                return f"zip64 end record claimed at byte {eocd64_offset:,}, past the end of the file ({size:,} bytes)"
            rec = os.pread(fd, _ZIP64_EOCD.size, eocd64_offset)
            if len(rec) == _ZIP64_EOCD.size and rec[:4] == b"PK\x06\x06":
                (_s, _rs, _v, _vn, _disk, _dcd, _nd, n_total, cd_size, cd_offset) = _ZIP64_EOCD.unpack(rec)
    if cd_size > MAX_CENTRAL_DIRECTORY:
        return (f"zip end record claims a {cd_size:,}-byte central directory (over "
                f"{MAX_CENTRAL_DIRECTORY // 2**20} MB): damaged or forged; not read")
    if cd_offset + cd_size > size:
        return (f"zip end record claims a central directory at {cd_offset:,}+{cd_size:,} bytes, "
                f"past the end of the file ({size:,} bytes): the file was cut short")
    if n_total > MAX_MEMBERS:
        return f"zip end record claims {n_total:,} members (over {MAX_MEMBERS:,}): damaged or forged; not read"
    return None


def check_torch_file(path: str, fs_path: str, fd: int, size: int) -> FileCheck:
    """Check a torch-style archive; ``fd`` is open on ``fs_path`` (``path`` is for the record)."""
    if size == 0:
        return FileCheck(path, size, "zip", False, "empty file (0 bytes)")
    lead = os.pread(fd, 512, 0)
    head = lead[:4]
    if head[:1] == b"\x80" and len(head) >= 2 and 2 <= head[1] <= 5:
        return FileCheck(path, size, "pickle", True, note=PICKLE_NOTE)
    if lead.startswith(_PICKLE_P01):
        return FileCheck(path, size, "pickle", True, note=PICKLE_NOTE)
    if lead[257:262] == b"ustar":
        return FileCheck(path, size, "other", True, note="legacy tar format (torch < 0.4), not inspected")
    if head != b"PK\x03\x04":
        if len(head) < 4 and b"PK\x03\x04".startswith(head):  # cut within the first local header
            return FileCheck(path, size, "zip", False, f"only {size} bytes of a zip archive: the file was cut short")
        if head == b"\x80":
            return FileCheck(path, size, "pickle", False, "only 1 byte of a pickle: the file was cut short")
        if head == b"\0\0\0\0" and not os.pread(fd, 4096, max(0, size - 4096)).strip(b"\0"):
            # space allocated (fallocate, a copy that died) but never written
            return FileCheck(path, size, "other", False, "zero bytes at its start and end: never written")
        if head[:4] == b"PK\x05\x06":  # an empty zip: only the end record
            return FileCheck(path, size, "zip", False, "zip archive with no members")
        name = path.rsplit("/", 1)[-1].lower()
        if name.endswith(".bin") and not _TORCH_BIN.match(name):
            return FileCheck(path, size, "other", True, note=f"{JUNK}; not inspected")
        # torch.save has written zip archives since 1.6 and pickles before: anything else is
        # overwritten, mis-copied or random bytes, and cannot be loaded. "unreadable" leads so
        # the artifact list reports it as such (Run maps problem text to a status).
        return FileCheck(path, size, "other", False,
                         f"unreadable as a torch file: {JUNK} (starts with {head.hex(' ')})")
    claim = central_directory_claim(fd, size)
    if claim is not None:
        return FileCheck(path, size, "zip", False, claim)
    try:
        # read from the descriptor the caller checked, not by reopening the path
        with os.fdopen(os.dup(fd), "rb") as fh, zipfile.ZipFile(fh) as zf:
            infos = zf.infolist()
            cd_start = getattr(zf, "start_dir", size)
    except zipfile.BadZipFile as exc:
        return FileCheck(path, size, "zip", False,
                         f"zip central directory missing or damaged ({exc}): the file was cut short")
    except (OSError, ValueError, EOFError, OverflowError, NotImplementedError) as exc:
        return FileCheck(path, size, "zip", False, f"zip archive unreadable: {type(exc).__name__}: {exc}")
    if not infos:
        return FileCheck(path, size, "zip", False, "zip archive with no members")
    limit = min(cd_start, size)
    for info in infos:
        # 30-byte local header + name; the member's data must end before the central directory
        end = info.header_offset + 30 + len(info.filename.encode("utf-8", "replace")) + info.compress_size
        if info.header_offset < 0 or end > limit:
            return FileCheck(path, size, "zip", False,
                             f"member {info.filename!r} runs past the data area ({end} > {limit} bytes)",
                             entries=len(infos))
    note = None
    if not any(i.filename.endswith("data.pkl") for i in infos):
        note = "zip archive without data.pkl (not written by torch.save?)"
    return FileCheck(path, size, "zip", True, note=note, entries=len(infos))
