"""Configuration a run wrote into its TensorBoard event files: text and hparams summaries.

HF's Trainer writes its TrainingArguments as a text summary (tag ``args/text_summary``, the
JSON of the arguments) and the model config likewise (``model_config/text_summary``);
Lightning's ``TensorBoardLogger`` writes ``save_hyperparameters()`` as an hparams summary
(plugin ``hparams``: ``HParamsPluginData.session_start_info.hparams``, a map of
``google.protobuf.Value``). Both are written when training starts, so only the first
``SCAN_BYTES`` of an event file are looked at: the scalar reader already read the rest.

Decoded fields (tensorboard/compat/proto/*.proto, tensorboard/plugins/hparams/*.proto)::

    Event: summary=5 -> Summary.value=1 -> Value: tag=1, tensor=8, metadata=9
    SummaryMetadata: plugin_data=1 -> PluginData: plugin_name=1, content=2
    TensorProto: string_val=8 (repeated bytes)
    HParamsPluginData: session_start_info=3 -> SessionStartInfo.hparams=1 (map<string, Value>)
    google.protobuf.Value: number_value=2, string_value=3, bool_value=4
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from autopsy.parsers.config_aliases import canonical_key
from autopsy.parsers.launch_script import parse_value
from autopsy.parsers.safe_open import open_binary
from autopsy.parsers.tb_proto import ProtoError
from autopsy.parsers.types import ConfigEntry
from autopsy.parsers.wandb_records import proto_fields

SCAN_BYTES = 4 * 1024 * 1024
MAX_TEXT_BYTES = 1024 * 1024
_LEN = struct.Struct("<Q")


def read_tb_config(fs_path: Path, rel_path: str) -> list[ConfigEntry]:
    """Config entries from the text and hparams summaries near the start of an event file."""
    try:
        with open_binary(fs_path) as fh:
            data = fh.read(SCAN_BYTES)
    except OSError:
        return []
    if b"text_summary" not in data and b"hparams" not in data and b"\x04text" not in data:
        return []
    out: list[ConfigEntry] = []
    pos = 0
    while pos + 12 <= len(data):
        (length,) = _LEN.unpack_from(data, pos)
        start, end = pos + 12, pos + 12 + length
        if end + 4 > len(data):
            break
        try:
            _event(memoryview(data)[start:end], rel_path, out)
        except ProtoError:
            pass  # a record that is not an Event of the expected shape: not configuration
        pos = end + 4
    return out


def _event(buf: Any, rel_path: str, out: list[ConfigEntry]) -> None:
    for f, w, v in proto_fields(buf):
        if f == 5 and w == 2:
            for sf, sw, sv in proto_fields(v):
                if sf == 1 and sw == 2:
                    _value(sv, rel_path, out)


def _value(buf: Any, rel_path: str, out: list[ConfigEntry]) -> None:
    tag, plugin, content, texts = "", "", b"", []
    for f, w, v in proto_fields(buf):
        if w != 2:
            continue
        if f == 1:
            tag = bytes(v).decode("utf-8", "replace")
        elif f == 9:
            for mf, mw, mv in proto_fields(v):
                if mf == 1 and mw == 2:
                    for pf, pw, pv in proto_fields(mv):
                        if pf == 1 and pw == 2:
                            plugin = bytes(pv).decode("utf-8", "replace")
                        elif pf == 2 and pw == 2:
                            content = bytes(pv)
        elif f == 8:
            for tf, tw, tv in proto_fields(v):
                if tf == 8 and tw == 2 and len(tv) <= MAX_TEXT_BYTES:
                    texts.append(bytes(tv).decode("utf-8", "replace"))
    if plugin == "text" and texts:
        _text(tag, texts[0], rel_path, out)
    elif plugin == "hparams" and content:
        _hparams(content, rel_path, out)


def _text(tag: str, text: str, rel_path: str, out: list[ConfigEntry]) -> None:
    """A text summary holding a JSON object (HF's ``args``) becomes one entry per value."""
    prefix = tag[: -len("/text_summary")] if tag.endswith("/text_summary") else tag
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return  # free text (a markdown note): not configuration
    if isinstance(obj, dict):
        _flat(prefix, obj, rel_path, out, 0)


def _flat(prefix: str, obj: dict[str, Any], rel_path: str, out: list[ConfigEntry], depth: int) -> None:
    for k, v in obj.items():
        raw = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and depth < 6:
            _flat(raw, v, rel_path, out, depth + 1)
            continue
        if isinstance(v, list):
            v = json.dumps(v)[:200]
        parent = raw.rsplit(".", 2)[-2] if raw.count(".") >= 2 else None
        out.append(ConfigEntry(canonical_key(str(k), v, parent=parent), raw, v, str(v)[:200], rel_path, None,
                               "tensorboard"))


def _hparams(content: bytes, rel_path: str, out: list[ConfigEntry]) -> None:
    for f, w, v in proto_fields(content):
        if f != 3 or w != 2:
            continue
        for sf, sw, sv in proto_fields(v):
            if sf != 1 or sw != 2:
                continue
            key, value = "", None
            for ef, ew, ev in proto_fields(sv):
                if ef == 1 and ew == 2:
                    key = bytes(ev).decode("utf-8", "replace")
                elif ef == 2 and ew == 2:
                    value = _pb_value(ev)
            if key:
                out.append(ConfigEntry(canonical_key(key.rsplit(".", 1)[-1].rsplit("/", 1)[-1], value), key, value,
                                       str(value)[:200], rel_path, None, "tensorboard"))


def _pb_value(buf: Any) -> Any:
    mv = memoryview(buf)
    for f, w, v in proto_fields(mv):
        if f == 2 and w == 1:
            return struct.unpack_from("<d", mv, v)[0]
        if f == 3 and w == 2:
            return parse_value(bytes(v).decode("utf-8", "replace"))
        if f == 4 and w == 0:
            return bool(v)
    return None
