"""Configuration that training programs print into their logs, as config entries.

What a program prints is what it really used (after defaults, overrides and launchers),
so rules may read ``max_steps`` or ``min_lr`` from a log when no config file was kept:

* nanoGPT's ``configurator.py``: ``Overriding config with config/x.py:`` followed by the
  file's text (``name = value  # comment`` lines), then ``Overriding: key = value`` for
  each ``--key=value`` flag; ``train.py`` prints ``found vocab_size = 65 (inside .../meta.pkl)``.
* HF ``Trainer``: the ``***** Running training *****`` block (``  Num Epochs = 3``,
  ``  Total optimization steps = 500``...), with or without a logging prefix. The numbers of
  ``***** Running Evaluation *****`` blocks are not training config and are skipped.

Values are parsed without ``eval`` (:func:`~autopsy.parsers.launch_script.parse_value`;
``5 * 8`` products of integers are multiplied, as nanoGPT configs write them).
"""

from __future__ import annotations

import re

from autopsy.parsers.config_aliases import canonical_key
from autopsy.parsers.launch_script import parse_value
from autopsy.parsers.types import ConfigEntry

MAX_ENTRIES = 2000  # per file: a log that prints its config every restart stays bounded
MAX_BLOCK_LINES = 400  # a nanoGPT config file dump longer than this is not one

# Substrings one of which a line must hold to be worth a regex (checked by the scanner too).
TRIGGERS = (b"Overriding", b"found vocab_size", b"***** Running", b"Num examples", b"Num Epochs",
            b"batch size per device", b"Total train batch size", b"Gradient Accumulation steps",
            b"Total optimization steps", b"Number of trainable parameters")

_CONFIG_FILE = re.compile(r"^Overriding config with (?P<file>\S.*?):\s*$")
_OVERRIDE = re.compile(r"^Overriding: (?P<key>[A-Za-z_]\w*) = (?P<value>(?:.*\S)?)\s*$")
_ASSIGN = re.compile(r"^(?P<key>[A-Za-z_]\w*)\s*=\s*+(?P<value>(?:[^#]*[^\s#])?)\s*(?:#.*)?$")
_FOUND_VOCAB = re.compile(r"\bfound vocab_size = (?P<value>\d+)")
_HF_SECTION = re.compile(r"\*{5} Running (?P<name>[A-Za-z ]+?) \*{5}")
_HF_FIELD = re.compile(
    r"(?<![\w])(?P<key>Num examples|Num Epochs|Instantaneous batch size per device"
    r"|Total train batch size(?: \([^)=]*\))?|Gradient Accumulation steps|Total optimization steps"
    r"|Number of trainable parameters) = (?P<value>\d[\d,]*(?:\.\d+)?)\s*$"
)
_HF_KEYS = {
    "Num examples": "num_examples",
    "Num Epochs": "num_train_epochs",
    "Instantaneous batch size per device": "per_device_train_batch_size",
    "Total train batch size": "total_train_batch_size",
    "Gradient Accumulation steps": "gradient_accumulation_steps",
    "Total optimization steps": "max_steps",
    "Number of trainable parameters": "num_trainable_parameters",
}
_INT64 = 2**63
_PRODUCT = re.compile(r"^\d{1,12}(?:\s*\*\s*\d{1,12}){1,4}$")


def _value(text: str) -> object:
    if _PRODUCT.match(text):
        out = 1
        for part in text.split("*"):
            out *= int(part)
        return out
    return parse_value(text)


# The section before the first line a tracker sees is unknown when a parallel scan starts
# in the middle of a log: entries that depend on it are kept as provisional (log_parallel).
SECTION_UNKNOWN = "\x00unknown"


class LogConfigTracker:
    """Collects config entries from the lines of one log, fed in order."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.entries: list[ConfigEntry] = []
        self.block_left = 0  # lines left in a nanoGPT config-file dump
        self.section: str | None = None  # the last HF "***** Running X *****" section
        self.provisional: list[int] = []  # entries added while the section was SECTION_UNKNOWN
        self.refused = 0  # entries not kept because MAX_ENTRIES were

    @property
    def active(self) -> bool:
        """True while inside a config dump: every line must be fed, not only triggered ones."""
        return self.block_left > 0

    def _add(self, key: str, raw_key: str, value: object, text: str, line: int) -> None:
        if isinstance(value, int) and not -_INT64 <= value < _INT64:
            return  # "max_iters = 99999999999999999999999": no setting, and no int64 column holds it
        if len(self.entries) < MAX_ENTRIES:
            self.entries.append(ConfigEntry(key, raw_key, value, text, self.path, line, "log"))
        else:
            self.refused += 1

    def feed(self, lineno: int, text: str) -> None:
        if self.block_left:
            self._block_line(lineno, text)
            return
        if "Overriding" in text:
            m = _CONFIG_FILE.match(text.strip())
            if m:
                self.block_left = MAX_BLOCK_LINES
                return
            m = _OVERRIDE.match(text.strip())
            if m:
                self._assignment(m.group("key"), m.group("value"), lineno)
            return
        if "vocab_size" in text:
            m = _FOUND_VOCAB.search(text)
            if m:
                self._add("vocab_size", "vocab_size", int(m.group("value")), m.group("value"), lineno)
            return
        if "*****" in text:
            m = _HF_SECTION.search(text)
            if m:
                self.section = m.group("name").strip().lower()
            return
        if " = " in text and self.section in (None, "training", SECTION_UNKNOWN):
            m = _HF_FIELD.search(text)
            if m:
                if self.section == SECTION_UNKNOWN and len(self.entries) < MAX_ENTRIES:
                    self.provisional.append(len(self.entries))
                raw = m.group("key")
                base = "Total train batch size" if raw.startswith("Total train batch size") else raw
                written = m.group("value")
                self._add(_HF_KEYS[base], raw, _value(written.replace(",", "")), written, lineno)

    def _assignment(self, raw_key: str, written: str, lineno: int) -> None:
        value = _value(written)
        self._add(canonical_key(raw_key, value), raw_key, value, written, lineno)

    def _block_line(self, lineno: int, text: str) -> None:
        stripped = text.strip()
        if not stripped or stripped.startswith("#"):
            self.block_left -= 1
            return
        m = _ASSIGN.match(stripped)
        if m is None or not m.group("value"):
            self.block_left = 0  # the file's text ended: this line is the program's own output
            self.feed(lineno, text)
            return
        self.block_left -= 1
        self._assignment(m.group("key"), m.group("value"), lineno)
