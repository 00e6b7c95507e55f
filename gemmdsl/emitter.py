"""A line-oriented text emitter with indentation helpers, for generated C code."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from .source import printable


class Emitter:
    def __init__(self, indent: str = "    "):
        self._lines: list[str] = []
        self._depth = 0
        self._indent = indent
        # The instructions the text uses that not every target has (keys of targets.INSTRUCTION_TARGETS):
        # the file's architecture guard reads them.
        self.instructions: set[str] = set()
        # Device helpers, kept apart from the text for the file's prelude (emit/prelude.py), which defines each
        # once and only where something calls it: (the guard they were written under, their lines).
        self.helper_blocks: list[tuple[tuple[str, str] | None, list[str]]] = []
        # The `#if` line (and a comment on why) that the helpers written from here on need, or None.
        self.helper_guard: tuple[str, str] | None = None

    def uses(self, instruction: str) -> None:
        self.instructions.add(instruction)

    def extend(self, other: "Emitter") -> None:
        """Append `other`'s lines (at their own indentation), instructions and helpers."""
        self._lines.extend(other._lines)
        self.instructions |= other.instructions
        self.helper_blocks += other.helper_blocks

    @contextmanager
    def helpers(self) -> Iterator[None]:
        """Definitions of device helpers (functions and structs at file scope): what is written inside goes to
        `helper_blocks`, under the current `helper_guard`, not to the text."""
        lines, depth = self._lines, self._depth
        self._lines, self._depth = [], 0
        try:
            yield
        finally:
            self.helper_blocks.append((self.helper_guard, self._lines))
            self._lines, self._depth = lines, depth

    def line(self, text: str = "") -> None:
        self._lines.append(f"{self._indent * self._depth}{text}" if text else "")

    def lines(self, text: str) -> None:
        """Several lines at the current depth (a dedented block of text)."""
        for row in text.strip("\n").split("\n"):
            self.line(row)

    def comment(self, text: str) -> None:
        """`text` as `//` lines, one per line of it, each made safe to end there (`comment_row`)."""
        for row in text.split("\n"):
            row = comment_row(row)
            self.line(f"// {row}" if row else "//")

    @contextmanager
    def block(self, header: str, close: str = "}") -> Iterator[None]:
        """`header {` ... `}` with the body indented one level."""
        self.line(f"{header} {{" if header else "{")
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            self.line(close)

    @contextmanager
    def unrolled(self, var: str, stop: str, step: int = 1) -> Iterator[None]:
        """A fully unrolled counted loop: its index must be a compile-time constant in each copy."""
        self.line("#pragma unroll")
        increment = f"++{var}" if step == 1 else f"{var} += {step}"
        with self.block(f"for (int {var} = 0; {var} < {stop}; {increment})"):
            yield

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"


def comment_row(row: str) -> str:
    """One line of text as the body of a `//` comment that nothing in it can end early or extend: characters
    that end a line for some compiler or tool (a lone CR ends one for nvcc, GCC and Clang) are escaped
    (`source.printable`), and so is a backslash at the end, which would join the next line to the comment,
    and the trigraph `??/` (a backslash where trigraphs are on: GCC's -std=c++14). Trailing blanks are dropped."""
    row = printable(row).replace("??/", "?\\?/").rstrip()
    return row[:-1] + "\\x5c" if row.endswith("\\") else row
