"""Readers of a key's value that the parser's schema and the fuse ops (gemmdsl/fuse_ops/) share.

A reader is called as `read(reader, value)`: `reader` is the parser's section reader (its `name`, `one`,
`span`, `element_type`), `value` one entry's atoms and span. A value that does not fit raises BadValue.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import ir
from .source import Diagnostic, Severity, Span


class BadValue(Exception):
    """A value that does not fit its key; carries the diagnostic to report."""

    def __init__(self, span: Span, message: str, hint: str | None = None):
        super().__init__(message)
        self.diagnostic = Diagnostic(Severity.ERROR, span, message, hint)


@dataclass(frozen=True)
class Value:
    """One entry's value: its atoms (tokens or call trees) and the span they cover."""

    atoms: tuple[Any, ...]
    span: Span


@dataclass(frozen=True)
class Choice:
    """A value naming one of an enum's members (`choices`, their spellings): the one statement of the
    words a key takes, which docs/language.md's tables are checked against."""

    enum_type: type
    what: str
    choices: tuple[str, ...]

    def __call__(self, reader: Any, value: Value) -> Any:
        return self.enum_type(reader.name(value, self.choices, self.what))


def matrix(reader: Any, value: Value) -> ir.MatrixType:
    """A type and a layout, as `f32 row`."""
    if len(value.atoms) != 2:
        raise BadValue(value.span, "expected a type and a layout, as in `f32 row`")
    dtype = reader.name(Value(value.atoms[:1], reader.span(value.atoms[0])),
                        tuple(t.value for t in ir.DType), "an element type")
    layout = reader.name(Value(value.atoms[1:], reader.span(value.atoms[1])), ("row", "col"), "a layout")
    return ir.MatrixType(ir.DType(dtype), ir.MatrixLayout(layout))
