"""Source text, spans and diagnostics rendered the way a C compiler prints them.

    spec.gemm:12:5: error: message
       12 |     threads  { warps: 9x1; ... }
          |     ^~~~~~~
    hint: ...
"""
from __future__ import annotations

import enum
import errno
import os
import re
import stat
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterable

from .errors import GemmdslError

MAX_ERRORS_SHOWN = 20  # errors a rendering shows per file before it counts the rest (clang's default limit)
MAX_SOURCE_BYTES = 64 * 2**20  # the largest spec or family file read (comments included)
MAX_TOKENS = 20_000  # tokens a spec or family may hold; the largest shipped file holds a few hundred
BOM = "\ufeff"


@dataclass(frozen=True)
class Span:
    """A 1-based, end-exclusive range in a source file."""

    file: str
    line: int
    column: int
    end_line: int
    end_column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class SourceFile:
    path: str
    text: str

    @classmethod
    def read(cls, path: str | Path, suffix: str = ".gemm", kind: str = "spec") -> "SourceFile":
        """Read a spec file (or, with suffix=".gemmf", a family file); unreadable paths and paths
        without the suffix raise CompileError."""
        name = str(path)
        where = Span(name, 1, 1, 1, 1)
        if not name.endswith(suffix):
            raise CompileError([Diagnostic(Severity.ERROR, where, f"not a {suffix} file",
                                           hint=f"{kind} files end in {suffix}")])
        try:
            data = _read_regular_file(name)
        except OSError as err:
            raise CompileError([Diagnostic(Severity.ERROR, where, f"cannot read file: {err.strerror or err}")]) from None
        except ValueError:  # os.open's refusal of a NUL byte, which no file name holds
            raise CompileError([Diagnostic(Severity.ERROR, where, "cannot read file: its name holds a NUL byte",
                                           hint="no file name holds one; is the path mistyped?")]) from None
        if len(data) > MAX_SOURCE_BYTES:
            raise CompileError([Diagnostic(Severity.ERROR, where, f"the file is larger than "
                                           f"{MAX_SOURCE_BYTES // 2**20} MiB, the most gemmdsl reads",
                                           hint=f"a {kind} is a few kilobytes; is this the right file?")]) from None
        try:
            text = data.decode("utf-8-sig")  # a byte order mark before the first line is dropped
        except UnicodeDecodeError as err:
            line = data[: err.start].count(b"\n") + 1
            col = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
            raise CompileError([Diagnostic(Severity.ERROR, Span(name, line, col, line, col + 1),
                                           "file is not valid UTF-8")]) from None
        return cls(name, text)

    def __post_init__(self) -> None:
        if self.text.startswith(BOM):  # text given directly (the Python API, the tuner), as `read` drops it
            object.__setattr__(self, "text", self.text[len(BOM):])

    @cached_property
    def _lines(self) -> list[str]:
        return self.text.split("\n")

    def line_text(self, line: int) -> str:
        lines = self._lines
        return lines[line - 1] if 0 < line <= len(lines) else ""


# A comment (`//` or `#` to the end of the line, in specs and families alike) and the lines of comments only
# that follow it, blanked in one piece.
_COMMENTS = re.compile(r"(?://|#)[^\n]*(?:\n[ \t]*(?://|#)[^\n]*)*")
_COUNTED = re.compile(r"\s*(\w+|[^\s\w])")  # a word or a mark, and the blanks before it


def blank_comments(text: str) -> str:
    """`text` with its comments replaced by blanks: every other character keeps its offset, line and column."""
    return _COMMENTS.sub(lambda run: "\n".join(" " * len(line) for line in run.group().split("\n")), text)


def beyond_token_limit(source: SourceFile, kind: str) -> Diagnostic | None:
    """An error at the first token past MAX_TOKENS (words and punctuation marks; comments are free), or None.

    Checked before parsing: parsing and checking take time per token, and a file of megabytes of tokens
    (440,000 repeated keys) is no spec, so it gets one error at once."""
    for count, match in enumerate(_COUNTED.finditer(blank_comments(source.text)), start=1):
        if count > MAX_TOKENS:
            offset = match.start(1)
            line = source.text.count("\n", 0, offset) + 1
            column = offset - (source.text.rfind("\n", 0, offset) + 1) + 1
            return Diagnostic(Severity.ERROR, Span(source.path, line, column, line, column + 1),
                              f"the {kind} holds more than {MAX_TOKENS:,} tokens; gemmdsl reads no further",
                              hint=f"a {kind} holds a few hundred names, numbers and marks (comments are not "
                                   "counted); see docs/language.md, \"Input limits\"")
    return None


def _read_regular_file(path: str) -> bytes:
    """Up to MAX_SOURCE_BYTES + 1 bytes of a regular file: a directory, a FIFO or a device (a path that would
    block, or never end) raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO without a writer opens and is then refused
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            code = errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL
            raise OSError(code, os.strerror(code) if stat.S_ISDIR(mode) else "not a regular file")
        return handle.read(MAX_SOURCE_BYTES + 1)


class Severity(enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


@dataclass(frozen=True)
class Diagnostic:
    severity: Severity
    span: Span
    message: str
    hint: str | None = None

    def render(self, source: SourceFile | None = None) -> str:
        """The diagnostic as a terminal shows it; what it quotes of the input (the file's name, the line, the
        message's and hint's pieces of source) has its control characters escaped (`printable`)."""
        out = [f"{printable(str(self.span))}: {self.severity.value}: {printable(self.message)}"]
        text = source.line_text(self.span.line) if source is not None else ""
        if text:
            gutter = f"{self.span.line:>5}"
            start = max(self.span.column, 1)
            end = self.span.end_column if self.span.end_line == self.span.line else len(text) + 1
            end = min(end, len(text) + 1)
            text, start, end = _window(text, start, end)
            shown = [printable(char) for char in text]  # an escaped character is wider: the caret follows
            out.append(f"{gutter} | {''.join(shown)}")
            width = max(1, sum(map(len, shown[start - 1:end - 1])))
            pad = "".join("\t" if char == "\t" else " " * len(escaped)
                          for char, escaped in zip(text[: start - 1], shown))
            out.append(f"{' ' * len(gutter)} | {pad}^{'~' * (width - 1)}")
        if self.hint:
            out.append(f"  hint: {printable(self.hint)}")
        return "\n".join(out)


# What `printable` escapes: C0 and C1 controls (a tab is kept), DEL, the line and paragraph separators
# (U+2028/9), format characters (bidi overrides, zero-width marks) and surrogates. Some of them end a
# line for C compilers (a lone CR) or other tools, some drive a terminal (ESC), some hide text from a reader.
_UNPRINTABLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_MAYBE_UNPRINTABLE = re.compile(r"[^\t\x20-\x7e]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\f": "\\f", "\v": "\\v"}


def printable(text: str) -> str:
    """`text` with every character `_UNPRINTABLE_CATEGORIES` names written as an escape: `\\r`, `\\n`, `\\f`,
    `\\v`, else its code (`\\x00`, `\\x1b`, `\\x7f`, `\\u2028`). A surrogate that stands for an undecodable
    byte of a file name (Python's surrogateescape) is written as that byte, `\\xff`. Printable text, non-ASCII
    letters included, is kept."""
    return _MAYBE_UNPRINTABLE.sub(_escape, text)


def _escape(match: re.Match) -> str:
    char = match.group()
    if unicodedata.category(char) not in _UNPRINTABLE_CATEGORIES:
        return char
    if char in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's stand-in for the byte code - 0xDC00
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


WINDOW = 100  # columns of a long source line a diagnostic quotes, around its caret
ELLIPSIS = "..."


def _window(text: str, start: int, end: int) -> tuple[str, int, int]:
    """A line of at most about WINDOW columns around columns [start, end) (1-based), with `...` where it
    was cut, and the columns moved to match: a 5 MB line is not echoed whole."""
    if len(text) <= WINDOW:
        return text, start, end
    first = max(0, min(start - 1 - WINDOW // 3, len(text) - WINDOW))
    last = first + WINDOW
    head, tail = (ELLIPSIS if first > 0 else ""), (ELLIPSIS if last < len(text) else "")
    shift = len(head) - first
    return head + text[first:last] + tail, start + shift, min(end, last + 1) + shift


def word_list(words: Iterable[object], last: str = "or") -> str:
    """Words as a message lists them: `1, 2 or 4`, `A and B`."""
    words = [str(w) for w in words]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"


class CompileError(GemmdslError):
    """One or more error diagnostics; the CLI prints them and exits with status 1. Its text (`str`) is the
    rendered diagnostics, as the CLI prints them: file:line:col, the line, a caret and the hint."""

    def __init__(self, diagnostics: list[Diagnostic], source: SourceFile | None = None):
        super().__init__("\n".join(d.message for d in diagnostics))
        self.diagnostics = diagnostics
        self.source = source

    def render(self) -> str:
        """Every diagnostic, each against its file's text, up to MAX_ERRORS_SHOWN errors per file; then, per
        file, a note of how many more errors (and warnings) were left out."""
        rendered: list[str] = []
        shown: Counter[str] = Counter()
        left_out: dict[str, Counter[Severity]] = {}
        for diagnostic in self.diagnostics:
            file = diagnostic.span.file
            if shown[file] >= MAX_ERRORS_SHOWN:
                left_out.setdefault(file, Counter())[diagnostic.severity] += 1
                continue
            shown[file] += diagnostic.severity is Severity.ERROR
            rendered.append(diagnostic.render(self.source_of(diagnostic)))
        for file, counts in left_out.items():
            parts = [f"{count:,} more {severity.value}{'s' if count > 1 else ''}"
                     for severity, count in sorted(counts.items(), key=lambda item: list(Severity).index(item[0]))]
            rendered.append(f"{printable(file)}: note: and {' and '.join(parts)} (the first {MAX_ERRORS_SHOWN} "
                            "errors of a file are shown)")
        return "\n".join(rendered)

    def source_of(self, diagnostic: Diagnostic) -> SourceFile | None:
        """The text `diagnostic` quotes a line of."""
        return self.source

    def __str__(self) -> str:
        return self.render()
