"""Source text, spans and diagnostics rendered the way a C compiler prints them.

    spec.gemm:12:5: error: message
       12 |     threads  { warps: 9x1; ... }
          |     ^~~~~~~
    hint: ...
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .errors import GemmdslError


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
            data = Path(path).read_bytes()
        except OSError as err:
            raise CompileError([Diagnostic(Severity.ERROR, where, f"cannot read file: {err.strerror or err}")]) from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            line = data[: err.start].count(b"\n") + 1
            col = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
            raise CompileError([Diagnostic(Severity.ERROR, Span(name, line, col, line, col + 1),
                                           "file is not valid UTF-8")]) from None
        return cls(name, text)

    def line_text(self, line: int) -> str:
        lines = self.text.split("\n")
        return lines[line - 1] if 0 < line <= len(lines) else ""


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
        out = [f"{self.span}: {self.severity.value}: {self.message}"]
        text = source.line_text(self.span.line) if source is not None else ""
        if text:
            gutter = f"{self.span.line:>5}"
            start = max(self.span.column, 1)
            end = self.span.end_column if self.span.end_line == self.span.line else len(text) + 1
            end = min(end, len(text) + 1)
            text, start, end = _window(text, start, end)
            out.append(f"{gutter} | {text}")
            width = max(1, end - start)
            pad = "".join("\t" if ch == "\t" else " " for ch in text[: start - 1])
            out.append(f"{' ' * len(gutter)} | {pad}^{'~' * (width - 1)}")
        if self.hint:
            out.append(f"  hint: {self.hint}")
        return "\n".join(out)


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
        return "\n".join(d.render(self.source) for d in self.diagnostics)

    def __str__(self) -> str:
        return self.render()
