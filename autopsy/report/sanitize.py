"""Make text read from a run safe to show: terminals, Markdown, XML and CI annotations.

Log lines are hostile input as far as a renderer is concerned: they carry ANSI colour and
cursor codes, OSC sequences (window titles, hyperlinks, clipboard writes), stray control
bytes, Unicode direction overrides, and text such as ``<script>`` or a line of backticks
that would end a Markdown code fence. Each output format gets its own neutraliser here,
so that renderers never paste raw excerpts.
"""

from __future__ import annotations

import re

# ESC-introduced sequences: OSC (ESC ] ... BEL | ESC \), DCS/SOS/PM/APC (ESC P|X|^|_ ... ESC \),
# CSI (ESC [ params final) and two-byte escapes (ESC + one char). The string-type sequences come
# first so that their payload (a title, a hyperlink target) is removed with them, not left behind.
_ESC_SEQ = re.compile(
    r"""
    \x1b\][^\x07\x1b]*(?:\x07|\x1b\\|$)        # OSC ... BEL / ST (or cut off at the end)
  | \x1b[PX^_][^\x1b]*(?:\x1b\\|$)             # DCS, SOS, PM, APC ... ST
  | \x1b\[[0-?]*[ -/]*[@-~]                     # CSI: colours, cursor moves, erase
  | \x1b[ -/]*[0-~]                             # two-byte and nF escapes
  | \x1b                                        # a lone ESC
  | \x9b[0-?]*[ -/]*[@-~]                       # 8-bit CSI
  | \x9d[^\x07\x9c]*(?:\x07|\x9c|$)             # 8-bit OSC
    """,
    re.VERBOSE,
)
# C0 controls except TAB and LF, DEL, the C1 block, and the Unicode bidirectional overrides
# and isolates that can make an excerpt display differently from what it says.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_ONE_LINE = re.compile("[\x00-\x1f\x7f\x80-\x9f\u202a-\u202e\u2066-\u2069]")


def strip_terminal(text: str, *, one_line: bool = False) -> str:
    """Remove escape sequences and control characters; keep TAB and (unless one_line) LF.

    A CR that ends a progress-bar segment is dropped (``\\r`` is a control), which shows the
    text as it was written rather than as a terminal would overdraw it.
    """
    text = _ESC_SEQ.sub("", text)
    if one_line:
        text = text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
        return _CONTROL_ONE_LINE.sub("", text.replace("\t", " "))
    return _CONTROL.sub("", text.replace("\r\n", "\n"))


def truncate(text: str, limit: int) -> str:
    """Cut to ``limit`` characters with an ellipsis marker that says how much was cut."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 1)] + "…"


# ------------------------------------------------------------------------ Markdown

_MD_HTML = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
# Characters that start Markdown constructs inside a line of prose.
_MD_INLINE_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_BACKTICK_RUN = re.compile(r"`+")
_MD_LINE_START = re.compile(r"#{1,6}(?:\s|$)|>|[-+*](?:\s|$)|\d{1,9}[.)](?:\s|$)|[=-]+\s*$")


def md_text(text: str) -> str:
    """Prose for Markdown: one line, no raw HTML, no emphasis/link/table syntax from the log."""
    text = strip_terminal(text, one_line=True)
    text = text.translate(_MD_HTML)
    text = _MD_INLINE_SPECIAL.sub(r"\\\1", text)
    # At the start of a line these would make a heading, quote, list item or setext underline.
    if _MD_LINE_START.match(text):
        num = re.match(r"\d+", text)  # a digit cannot be escaped: escape the '.' or ')' after it
        text = f"{text[:num.end()]}\\{text[num.end():]}" if num else "\\" + text
    return text


def _longest_backtick_run(text: str) -> int:
    return max((len(m.group()) for m in _BACKTICK_RUN.finditer(text)), default=0)


def md_code(text: str) -> str:
    """An inline code span that cannot be closed early by backticks inside ``text``."""
    text = strip_terminal(text, one_line=True)
    fence = "`" * (_longest_backtick_run(text) + 1)
    # CommonMark strips one space each side when both are present: pad when the content
    # starts or ends with a backtick (or a space) so the content survives unchanged.
    if text.startswith(("`", " ")) or text.endswith(("`", " ")):
        text = f" {text} "
    return f"{fence}{text}{fence}"


def md_code_block(text: str, lang: str = "") -> str:
    """A fenced block whose fence is longer than any backtick run in ``text`` (at least 3).

    Nothing inside a fenced block is interpreted as HTML or Markdown, so ``<script>`` and
    headings in a log excerpt stay inert; the longer fence keeps the block from ending early.
    """
    text = strip_terminal(text).rstrip("\n")
    fence = "`" * max(3, _longest_backtick_run(text) + 1)
    return f"{fence}{lang}\n{text}\n{fence}"


# ---------------------------------------------------------------------------- XML

# XML 1.0 allows TAB, LF, CR and characters from U+0020 on, minus the surrogates and U+FFFE/F.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """Text that an XML 1.0 document may hold (escaping is left to the XML writer)."""
    return _XML_INVALID.sub("", strip_terminal(valid_utf8(text)))


# ---------------------------------------------------------------- GitHub workflow commands


def gh_escape_data(text: str) -> str:
    """Escape the message of a ``::error ...::message`` workflow command (actions/toolkit rules)."""
    text = strip_terminal(text)
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def gh_escape_property(text: str) -> str:
    """Escape a property value (``file=``, ``title=``) of a workflow command."""
    return gh_escape_data(text).replace(":", "%3A").replace(",", "%2C")


# ----------------------------------------------------------- names, messages, UTF-8

_SURROGATE = re.compile("[\ud800-\udfff]")
_NAME_CONTROL = re.compile("[\x00-\x1f\x7f\x80-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape_char(ch: str) -> str:
    o = ord(ch)
    if 0xDC80 <= o <= 0xDCFF:  # a byte that was not UTF-8 (os.fsdecode's surrogateescape)
        return f"\\x{o - 0xDC00:02x}"
    if o <= 0xFF:
        return f"\\x{o:02x}"
    return f"\\u{o:04x}"


def term_name(text: str) -> str:
    """A file or run name (or an error message naming one) for one line of a terminal.

    Control characters, escape sequences' ESC, direction overrides and undecodable bytes
    become visible ``\\xNN`` escapes instead of acting on the terminal or vanishing.
    """
    return _NAME_CONTROL.sub(lambda m: _escape_char(m.group()), str(text))


def valid_utf8(text: str, *, json_doc: bool = False) -> str:
    """``text`` with every lone surrogate made visible (``\\xNN``), so it encodes as UTF-8.

    In a JSON document the backslash is itself escaped: the string then reads ``\\xNN``.
    """
    if not _SURROGATE.search(text):
        return text
    slash = "\\\\" if json_doc else "\\"
    return _SURROGATE.sub(lambda m: slash + _escape_char(m.group())[1:], text)


_GH_LINE_COMMAND = re.compile(r"^(\s*)::", re.MULTILINE)
_GH_V1_COMMAND = re.compile(r"##\[")
_GH_NEUTRAL = {"md": ("\\:", "\\#"), "html": ("&#58;", "&#35;"), "junit": ("&#58;", "&#35;"),
               "json": ("\\u003a", "\\u0023"), "jsonl": ("\\u003a", "\\u0023"), "sarif": ("\\u003a", "\\u0023")}


def gh_stdout(text: str, fmt: str) -> str:
    """A document printed where GitHub Actions reads workflow commands (``--github``, ``GITHUB_ACTIONS``).

    No line may start with ``::`` (after blanks) nor hold ``##[`` unless autopsy wrote it as
    a command: the colon or hash is written in the format's own escape (Markdown ``\\:``,
    HTML/XML ``&#58;``), which renders the same; JSON/SARIF never start a line with run text.
    """
    colon, hashmark = _GH_NEUTRAL.get(fmt, ("\\:", "\\#"))
    text = _GH_LINE_COMMAND.sub(lambda m: m.group(1) + colon + ":", text)
    return _GH_V1_COMMAND.sub(lambda _m: hashmark + "#[", text)
