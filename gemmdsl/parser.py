"""Parse stage: `.gemm` text -> KernelSpec (the IR), or a CompileError with every problem found.

Lark (LALR) checks the shape of the text: sections of `key: value;` entries. This
module then reads each section against a schema (which keys exist, what values
they take), so mistakes are reported in the user's terms with a position, and
all of them at once. What a key takes may depend on the operand's element type
(read first, from `problem`) and on whether the spec has an `mma` section.
Cross-field rules (tile products, limits) live in `validate.py`.
"""
from __future__ import annotations

import difflib
import enum
import hashlib
import os
import re
import tempfile
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import lark
from lark import Token, Tree

from . import fuse_ops, ir
from .cache_root import cache_dir
from .paths import path_taking, registered
from .source import (CompileError, Diagnostic, Severity, SourceFile, Span, beyond_token_limit, blank_comments,
                     word_list)
from .targets import ARCH_SPECIFIC, ARCHS, MAX_REGISTERS_PER_THREAD, TARGETS, WARPGROUP, TargetName, parse_target
from .value_readers import BadValue, Choice, Value, matrix

GRAMMAR_PATH = Path(__file__).with_name("gemm.lark")
MAX_INT = 1 << 20  # no sane tiling parameter is larger; keeps arithmetic bounded
MAX_UNROLL = 16  # k-tiles per main-loop iteration; more only grows the code
MAX_STAGES = 64  # pipeline stages; shared memory runs out long before
MIN_REGISTERS = 16  # the fewest registers per thread a budget may ask ptxas for
MIN_QUANT_GROUP = 32  # the fewest weights along K sharing a scale: 16 bytes of 4-bit codes, so no vector straddles two
# What no target exceeds: a spec beyond it fails on every target, so the parser's range says so.
MAX_BLOCKS_PER_SM = max(arch.max_blocks_per_sm for arch in ARCHS.values())
MAX_BLOCK_THREADS = max(arch.max_threads_per_block for arch in ARCH_SPECIFIC.values())
MAX_CONSUMER_WARPGROUPS = MAX_BLOCK_THREADS // WARPGROUP - 1  # beside the one producer

# How Lark's terminal names read in a message.
TERMINAL_WORDS = {
    "SEMICOLON": "';'",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "COLON": "':'",
    "LPAR": "'('",
    "RPAR": "')'",
    "COMMA": "','",
    "NAME": "a name",
    "COUNTED_NAME": "a name",
    "INT": "a number",
    "DIMS": "dimensions such as 128x128",
    "BYTES": "a size in bytes such as 128B",
    "GEMM": "'gemm'",
    "$END": "end of file",
    "<END-OF-FILE>": "end of file",
}
MAX_SYNTAX_ERRORS = 20  # syntax errors one run reports before it stops cutting out damaged entries
# Pieces of the text the syntax-error helpers look for (each a regex, so that they stay linear in the text).
STRUCTURAL = re.compile(r"[{};]")
BRACE = re.compile(r"[{}]")
WORD = re.compile(r"[{};:]|[^\s{};:]+")
MAX_SHOWN = 40  # longest piece of source quoted in a message
WORD_TERMINALS = ("NAME", "COUNTED_NAME")  # tokens a named value may be (`row`, `3xtf32`)


LARK_OPTIONS = {"parser": "lalr", "propagate_positions": True, "maybe_placeholders": False}
_parser: lark.Lark | None = None
_parser_lock = threading.Lock()


def _lark() -> lark.Lark:
    """The one parser of the process, built once even when threads ask for it at the same time."""
    global _parser
    with _parser_lock:
        if _parser is None:
            _parser = _load_or_build_parser()
        return _parser


def _load_or_build_parser() -> lark.Lark:
    """Building the LALR tables takes a quarter of a second, most of what a second `gemmdsl check` spends, so
    they are kept in the user's cache folder, named by the grammar's, the options' and lark's hash. The file
    is written under another name and renamed into place: a reader in another process sees all of it or
    none (lark's own `cache=True` writes in place, and a half-written file read back broke the parser)."""
    grammar = GRAMMAR_PATH.read_text()
    key = hashlib.sha256(repr((grammar, sorted(LARK_OPTIONS.items()), lark.__version__)).encode()).hexdigest()
    path = cache_dir() / f"grammar-{key[:24]}.lark"
    try:
        with path.open("rb") as tables:
            return lark.Lark.load(tables)
    except Exception:  # noqa: BLE001 - missing, damaged or unreadable: build the tables instead
        pass
    parser = lark.Lark(grammar, **LARK_OPTIONS)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as tables:
            parser.save(tables)
        os.replace(tables.name, path)
    except OSError:  # a read-only or full disk: every process builds its own tables
        pass
    return parser


def parse_file(path: str | Path) -> ir.KernelSpec:
    return parse(SourceFile.read(path))


def parse_text(text: str, path: str = "<string>.gemm") -> ir.KernelSpec:
    return parse(SourceFile(path, text))


def parse(source: SourceFile) -> ir.KernelSpec:
    """Parse and read one spec; raises CompileError (carrying `source`) on any error.

    After a syntax error the damaged entry is blanked out (see `_blank_damaged`) and the text is
    parsed again, so one run reports every syntax error it can get past, and then the schema
    errors of what is left."""
    too_long = beyond_token_limit(source, "spec")
    if too_long is not None:
        raise CompileError([too_long], source)
    syntax: list[Diagnostic] = []
    # Lark parses the text with its comments blanked (every offset kept, and so every token and position):
    # it skips them all the same, and the syntax-error helpers below, which look around an error, then
    # find no comment to skip either.
    text = blank_comments(source.text)
    while True:
        try:
            tree = _lark().parse(text)
            break
        except lark.exceptions.UnexpectedInput as err:
            syntax.append(_syntax_error(err, SourceFile(source.path, text)))
            blanked = _blank_damaged(text, err) if len(syntax) < MAX_SYNTAX_ERRORS else None
            if blanked is None:
                raise CompileError(sort_diagnostics(syntax), source) from None
            text = blanked
        except RecursionError:  # pragma: no cover - LALR does not recurse on nesting
            raise CompileError([_too_deep(source)], source) from None
    # A blanked entry or section is not missing, and the path it chose (its mma shape) is unknown:
    # the syntax error already stands for it.
    reader = _SpecReader(source, whole=not syntax)
    try:
        spec = reader.read(tree)
    except RecursionError:  # pragma: no cover - the reader does not recurse on nesting either
        raise CompileError([_too_deep(source)], source) from None
    if syntax or reader.diagnostics:
        raise CompileError(sort_diagnostics(syntax + reader.diagnostics), source)
    return spec


def sort_diagnostics(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Source order (line, then column); the sort is stable, so one position keeps its rule order."""
    return sorted(diagnostics, key=lambda d: (d.span.line, d.span.column))


def _too_deep(source: SourceFile) -> Diagnostic:
    return Diagnostic(Severity.ERROR, Span(source.path, 1, 1, 1, 2), "input nests too deeply")


# --- syntax errors --------------------------------------------------------------------------
# The helpers below read the text as `parse` hands it to Lark, its comments blanked.


def _blank_damaged(text: str, err: lark.exceptions.UnexpectedInput) -> str | None:
    """`text` with the entry holding a syntax error replaced by blanks, or None where no safe cut exists.

    Inside a section the entry runs from the `;`, `{` or `}` before the error to its `;` (or, with
    the `;` missing, to the section's `}`); at the kernel's level only a stray character is cut
    past: its section up to its `;` (`target sm_9$0;`) or through its matching `}`. Blanks keep
    every other character's line and column. Anything else (an unclosed or missing brace, text
    outside the kernel, the end of the file) stops the recovery, since cutting there would only
    report the cut's own damage."""
    pos = getattr(err, "pos_in_stream", None)
    token = getattr(err, "token", None)
    if isinstance(err, lark.exceptions.UnexpectedToken) and token is not None and token.type != "$END":
        pos = token.start_pos
    if pos is None or not 0 <= pos < len(text):
        return None
    depth = text.count("{", 0, pos) - text.count("}", 0, pos)
    start = max(text.rfind(mark, 0, pos) for mark in "{};") + 1
    stray_char = isinstance(err, lark.exceptions.UnexpectedCharacters)
    if not (depth == 2 or (depth == 1 and stray_char)):
        return None
    structural = STRUCTURAL.search(text, pos)
    if structural is None:
        return None
    stop = structural.start()
    if text[stop] == ";":
        end = stop + 1
    elif text[stop] == "}" and depth == 2:
        end = stop
    elif text[stop] == "{" and depth == 1:
        end = _matching_brace(text, stop)
        if end is None:
            return None
    else:
        return None
    entry = text[start:end]
    if not entry.strip():
        return None
    first, last = start + len(entry) - len(entry.lstrip()), start + len(entry.rstrip())  # blanks stay blanks
    return text[:first] + re.sub(r"\S+", lambda word: " " * len(word.group()), text[first:last]) + text[last:]


def _matching_brace(text: str, opening: int) -> int | None:
    """The offset just past the `}` closing the `{` at `opening`, if any."""
    depth = 0
    for brace in BRACE.finditer(text, opening):
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            return brace.end()
    return None


def _syntax_error(err: lark.exceptions.UnexpectedInput, source: SourceFile) -> Diagnostic:
    line, col = max(err.line, 1), max(err.column, 1)
    if isinstance(err, lark.exceptions.UnexpectedCharacters):
        char = source.text[err.pos_in_stream] if 0 <= err.pos_in_stream < len(source.text) else "?"
        return Diagnostic(Severity.ERROR, Span(source.path, line, col, line, col + 1),
                          f"unexpected character {char!r}",
                          hint="names are letters, digits and '_'; comments start with // or #")
    expected = sorted(getattr(err, "accepts", None) or getattr(err, "expected", None) or [])
    words = sorted({TERMINAL_WORDS.get(t, t.lower()) for t in expected})
    want = " or ".join(words) if len(words) <= 3 else ", ".join(words[:-1]) + " or " + words[-1]
    token = getattr(err, "token", None)
    if token is None or token.type == "$END":
        if not source.text.strip() or _previous_token_end(source.text, len(source.text)) is None:
            return Diagnostic(Severity.ERROR, Span(source.path, 1, 1, 1, 2), "the file holds no kernel",
                              hint="a spec is one `gemm NAME { ... }` block; see specs/*.gemm")
        # Point just after the last token, so the rendered line shows where the text stops.
        pl, pc = _previous_token_end(source.text, len(source.text)) or (1, 1)
        hint = None
        if "RBRACE" in expected:
            unclosed = _unclosed_brace(source.text)
            hint = (f"is a closing '}}' missing? the '{{' at line {unclosed[0]}, column {unclosed[1]} "
                    "is never closed") if unclosed else "is a closing '}' missing?"
        return Diagnostic(Severity.ERROR, Span(source.path, pl, pc, pl, pc + 1),
                          f"unexpected end of file; expected {want}", hint=hint)
    found = _quote(str(token.value))
    if expected in (["$END"], ["<END-OF-FILE>"]):
        span = Span(source.path, token.line, token.column, token.line, token.column + 1)
        return Diagnostic(Severity.ERROR, span, f"unexpected {found} after the end of the kernel",
                          hint="a file holds exactly one `gemm NAME { ... }` block; is there an extra '}'?")
    if "SEMICOLON" in expected:
        # The ';' belongs right after the previous token, which is where the user must type it;
        # when a `{` follows, the words before it open the next section (`block {`, `smem a {`),
        # so the ';' goes before them.
        # Likewise a `:` follows the next entry's key (`tile: 8x8x8 raster: row;`).
        pos = token.start_pos
        words = _previous_words(source.text, pos, 3)
        if token.type == "LBRACE":
            for index in range(len(words) - 1, max(len(words) - 3, 0), -1):
                if words[index][0] in SECTIONS and _is_name(words[index - 1][0]):
                    pos = words[index][1]
                    break
        elif token.type == "COLON" and len(words) >= 2 and _is_name(words[-1][0]):
            if words[-2][0] in SECTIONS or words[-2][0] == "{" or (
                    len(words) == 3 and words[-3][0] in SECTIONS and words[-2][0] in ("a", "b")):
                # `block tile: ...`: the section's `{` is what is missing.
                span = Span(source.path, token.line, token.column, token.line, token.column + 1)
                return Diagnostic(Severity.ERROR, span, f"expected '{{' to open the section, found {found}",
                                  hint="a section's entries go inside braces: `block { tile: 128x128x8; }`")
            pos = words[-1][1]
        prev = _previous_token_end(source.text, pos)
        if prev is not None:
            pl, pc = prev
            return Diagnostic(Severity.ERROR, Span(source.path, pl, pc, pl, pc + 1),
                              f"expected ';' after this value, found {found}",
                              hint="every entry ends with ';', as in `tile: 128x128x8;`")
    end_column = token.end_column if token.end_line == token.line and token.end_column else token.column + 1
    span = Span(source.path, token.line, token.column, token.line, end_column)
    hint = None
    words = _previous_words(source.text, token.start_pos, 1)
    if expected == ["COLON"] and words and words[0][0] in SECTIONS:
        # `smem a {` read as an entry `smem: ...` of the section before it.
        hint = f"'{words[0][0]}' starts a section; is the '}}' closing the section before it missing?"
    elif token.type == "COLON" and "LBRACE" in expected:
        hint = "`key: value;` entries go inside a section, as in `block { tile: 128x128x8; }`"
    return Diagnostic(Severity.ERROR, span, f"expected {want}, found {found}", hint=hint)


def _unclosed_brace(text: str) -> tuple[int, int] | None:
    """Line and column of the innermost '{' that is still open at the end of the text."""
    stack: list[int] = []
    for brace in BRACE.finditer(text):
        if brace.group() == "{":
            stack.append(brace.start())
        elif stack:
            stack.pop()
    return _line_and_column(text, stack[-1]) if stack else None


def _previous_words(text: str, pos: int, count: int) -> list[tuple[str, int]]:
    """Up to `count` blank-separated words right before `pos` (nearest last), with their offsets.

    `{`, `}`, `;` and `:` count as words of their own (the comments are blanks already)."""
    words = WORD.finditer(text, 0, pos)
    return [(match.group(), match.start()) for match in deque(words, maxlen=count)]


def _is_name(word: str) -> bool:
    return re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", word) is not None


def _line_and_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of `offset` in `text`."""
    return text.count("\n", 0, offset) + 1, offset - text.rfind("\n", 0, offset)


def _quote(text: str) -> str:
    """repr() of a piece of source, shortened for a one-line message."""
    if len(text) > MAX_SHOWN:
        text = text[: MAX_SHOWN - 3] + "..."
    return repr(text)


def _previous_token_end(text: str, pos: int) -> tuple[int, int] | None:
    """Line and column just after the last non-blank, non-comment character before `pos`."""
    end = len(text[:pos].rstrip())
    return _line_and_column(text, end) if end else None


# --- reading sections against the schema -----------------------------------------------------


_Bad = BadValue
_Value = Value


Reader = Callable[["_SpecReader", _Value], Any]


@dataclass(frozen=True)
class KeySet:
    """Keys that only some instruction paths take: those whose `key_sets` name it (paths/__init__.py). In a spec
    of another path such a key is an error, "'KEY' {refusal}: {the key's reason}", with `hint`; a required one
    is required only where it is taken."""

    name: str
    refusal: str
    hint: str | None = None  # None: the keys of the section outside `listed_without`, as fma threads' hint says


# The key sets, each named by the paths that take it.
FMA_THREADS = KeySet("fma threads", "does not apply to an mma spec")  # lanes and micro tiles of FMA threads
WARP_TILES = KeySet("warp tiles", "does not apply to a wgmma spec",  # warps with register fragments
                    "remove it; see docs/language.md for what a wgmma spec holds")
WARPGROUPS = KeySet("warpgroups", "applies to wgmma specs only",  # producer and consumer warpgroups
                    "Hopper's own path takes `mma { shape: m64n256k16; }` with `target sm_90a;`")
KEY_SETS = (FMA_THREADS, WARP_TILES, WARPGROUPS)


@dataclass(frozen=True)
class _Key:
    read: Reader
    required: bool = False
    only: KeySet | None = None  # the key set it belongs to, taken by some paths only
    why: str | None = None  # with `only`: why the other paths' specs do not take it


@dataclass(frozen=True)
class _Section:
    keys: Mapping[str, _Key]
    labels: tuple[str, ...] = ()  # allowed labels, e.g. `smem a`; empty = no label
    labels_why: str | None = None  # why only `labels` are allowed, where the other operands' are plausible
    required: bool = False
    short: bool = False  # `target sm_90;` form


_NO_PATH = object()  # _SpecReader.path where no registered path takes the spec


class _SpecReader:
    def __init__(self, source: SourceFile, whole: bool = True):
        self.source = source
        self.whole = whole  # False where syntax errors cut entries out of the text
        self.diagnostics: list[Diagnostic] = []
        # What the value readers may depend on: whether the spec has an `mma` section, the
        # element types of the problem section (read before the others), and the operand
        # label of the section being read.
        self.has_mma = False
        # The mma section's shape as a type (ir.MmaShape, or a path's own; None without the section), which with
        # the operand types chooses the path whose keys the spec may hold (`path`).
        self.shape: type | None = None
        self._path: Any = None
        self.found: dict[str, tuple] = {}
        self.rejected: set[tuple[str, str]] = set()  # (section, key) of values reported as errors
        self.operand: str | None = None

    @property
    def path(self) -> Any:
        """The instruction path the spec takes (paths/__init__.py), asked once the problem section is read; None
        where no registered path takes its operand types with its `mma` section or without one (`read` says so)."""
        if self._path is None:
            a, b = self.element_type("a"), self.element_type("b")
            self._path = next((path for path in registered() if path.takes(self.shape, a, b)), _NO_PATH)
        return None if self._path is _NO_PATH else self._path

    def _refuse_operand_types(self) -> None:
        """The error of a spec no path takes, at B's type; its hint names the paths that take B with another A
        (a path's `takes` routes by the `mma` section's shape too, and a tensor-core path's validation refuses
        the types it routes but cannot multiply, so other shapes are pointed to only in words)."""
        a, b = self.element_type("a"), self.element_type("b")
        _, section_span, spans, _ = self.found["problem"]
        hints = [f"the {path.name} path takes {b.value} B with {word_list(others, 'or')} A"
                 for path in registered()
                 for others in [[dtype.value for dtype in ir.DType if path.takes(self.shape, dtype, b)]] if others]
        section = "without an `mma` section" if self.shape is None else "with this `mma` section"
        self.error(dict(spans).get("b", section_span), f"no instruction path multiplies {a.value} A by {b.value} B "
                   f"{section}", "; ".join(hints + ["docs/language.md lists the element types each path takes"]))

    def element_type(self, operand: str | None) -> ir.DType | None:
        """The element type of operand 'a', 'b' or 'c' (default f32); None when its value is in error."""
        values = self.found.get("problem", ({},))[0]
        if operand in values:
            return values[operand].dtype
        return None if operand is None or ("problem", operand) in self.rejected else ir.DType.F32

    # spans
    def span(self, item: Any) -> Span:
        if isinstance(item, Token):
            return Span(self.source.path, item.line, item.column, item.end_line, item.end_column)
        meta = item.meta
        return Span(self.source.path, meta.line, meta.column, meta.end_line, meta.end_column)

    def text(self, item: Any) -> str:
        """The source text of a token or tree, quoted and shortened for a message."""
        if isinstance(item, Token):
            start, end = item.start_pos, item.end_pos
        else:
            start, end = item.meta.start_pos, item.meta.end_pos
        return _quote(self.source.text[start:end])

    def error(self, span: Span, message: str, hint: str | None = None) -> None:
        self.diagnostics.append(Diagnostic(Severity.ERROR, span, message, hint))

    # value readers: each takes a _Value and returns a Python value or raises _Bad
    def one(self, value: _Value, what: str) -> Any:
        if len(value.atoms) != 1:
            raise _Bad(value.span, f"expected {what}")
        return value.atoms[0]

    def name(self, value: _Value, choices: tuple[str, ...], what: str) -> str:
        atom = self.one(value, what)
        if not (isinstance(atom, Token) and atom.type in WORD_TERMINALS and atom.value in choices):
            word = atom.value if isinstance(atom, Token) else ""
            raise _Bad(value.span, f"expected {what}, found {self.text(atom)}",
                       _did_you_mean(word, choices) or f"one of: {', '.join(choices)}")
        return atom.value

    def integer(self, atom: Any, what: str, low: int = 0, high: int = MAX_INT, hint: str | None = None,
                choices: tuple[int, ...] | None = None) -> int:
        """A number in [low, high], or one of `choices` when given; the message states exactly what is taken."""
        if not (isinstance(atom, Token) and atom.type == "INT"):
            raise _Bad(self.span(atom), f"expected {what}, found {self.text(atom)}")
        number = _number(atom.value)
        if choices is not None:
            if number not in choices:
                raise _Bad(self.span(atom), f"{what} must be {word_list(choices)}, found {self.text(atom)[1:-1]}", hint)
        elif number is None or not low <= number <= high:
            allowed = f"be {low}" if low == high else f"be between {low} and {high}"
            raise _Bad(self.span(atom), f"{what} must {allowed}, found {self.text(atom)[1:-1]}", hint)
        return number

    def dims(self, atom: Any, count: int, what: str) -> tuple[int, ...]:
        example = "x".join(["4", "8", "8"][:count])
        if not (isinstance(atom, Token) and atom.type == "DIMS"):
            raise _Bad(self.span(atom), f"expected {what} such as {example}, found {self.text(atom)}")
        parts = atom.value.split("x")
        if len(parts) != count:
            raise _Bad(self.span(atom), f"expected {count} sizes for {what} ({example}), found {len(parts)}")
        numbers = tuple(_number(p) for p in parts)
        if any(n is None or not 1 <= n <= MAX_INT for n in numbers):
            raise _Bad(self.span(atom), f"each size in {what} must be between 1 and {MAX_INT}")
        return numbers

    def call(self, atom: Any, fname: str, arity: int, what: str) -> tuple[int, ...]:
        if not (isinstance(atom, Tree) and atom.data == "call" and atom.children[0].value == fname):
            raise _Bad(self.span(atom), f"expected {what}, found {self.text(atom)}")
        args = atom.children[1:]
        if len(args) != arity:
            raise _Bad(self.span(atom), f"{fname}(...) takes {arity} numbers, found {len(args)}")
        return tuple(self.integer(a, f"an argument of {fname}(...)") for a in args)  # type: ignore[misc]

    # the walk
    def read(self, tree: Tree) -> ir.KernelSpec:
        kernel = tree.children[0]
        name_token = kernel.children[0]
        seen: dict[str, Span] = {}
        found = self.found
        self.typos: set[str] = set()  # sections an unknown name was probably meant to be
        # The problem section first: the element types decide which values other keys take.
        sections = sorted(kernel.children[1:], key=lambda section: section.children[0].value != "problem")
        # A misspelt `mma` section still makes an mma spec, so its threads are not asked for lanes.
        self.has_mma = any(_section_meant(section.children[0].value) == "mma" for section in sections)
        self.shape = _shape_type(sections) if self.has_mma else None
        for section in sections:
            self._read_section(section, seen, found)
        if self.whole and "problem" in found and self.path is None:
            self._refuse_operand_types()
        for key, schema in SECTIONS.items():
            if (self.whole and schema.required and key not in found and key not in seen
                    and key not in self.typos):
                self.error(self.span(name_token), f"missing required section '{key}'",
                           hint=f"add `{key} {{ ... }}`; see docs/language.md")
        if self.diagnostics or not self.whole:  # a text with entries cut out builds no spec
            return None  # type: ignore[return-value]
        return _build_spec(name_token.value, self.span(kernel), self.span(name_token), found)

    def takes(self, key: _Key) -> bool:
        """Whether the spec's path takes the key (a path's own key: not where no path takes the spec)."""
        return key.only is None or (self.path is not None and key.only.name in self.path.key_sets)

    def _read_section(self, section: Tree, seen: dict[str, Span], found: dict) -> None:
        head = section.children[0]
        kind = head.value
        schema = SECTIONS.get(kind)
        if schema is None:
            self.typos.update(filter(None, [_section_meant(kind)]))
            self.error(self.span(head), f"unknown section '{kind}'",
                       _did_you_mean(kind, tuple(SECTIONS)) or
                       "sections are: problem, target, block, threads, mma, smem a|b, load a|b, pipeline, fuse, "
                       "quant b, budget")
            return
        children = section.children[1:]
        label = None
        if section.data == "braced_section" and children and isinstance(children[0], Token):
            label = children[0]
            children = children[1:]
        key = kind
        if schema.labels:
            if label is None or label.value not in schema.labels:
                where = self.span(label) if label is not None else self.span(head)
                why = f" ({schema.labels_why})" if schema.labels_why else ""
                self.error(where, f"section '{kind}' needs an operand label: {' or '.join(schema.labels)}{why}",
                           hint=f"write `{kind} {schema.labels[0]} {{ ... }}`")
                return
            key = f"{kind} {label.value}"
        elif label is not None:
            self.error(self.span(label), f"section '{kind}' takes no label")
            return
        if (section.data == "short_section") != schema.short:
            form = f"`{kind} VALUE;`" if schema.short else f"`{kind} {{ key: value; ... }}`"
            self.error(self.span(head), f"section '{kind}' is written as {form}")
            return
        if key in seen:
            self.error(self.span(head), f"duplicate section '{key}'",
                       hint=f"first defined at line {seen[key].line}")
            return
        seen[key] = self.span(head)
        span = self.span(section)
        self.operand = label.value if label is not None else None
        if schema.short:
            entries = [(head, _Value(tuple(children[0].children), self.span(children[0])))]
            names = {kind: head}
        else:
            entries = []
            names = {}
            typos: set[str] = set()
            for entry in children:
                key_token, value_tree = entry.children
                if key_token.value not in schema.keys:
                    typos.update(difflib.get_close_matches(key_token.value, tuple(schema.keys), n=1))
                    self.error(self.span(key_token), f"unknown key '{key_token.value}' in section '{kind}'",
                               _did_you_mean(key_token.value, tuple(schema.keys)) or
                               f"keys of '{kind}': {', '.join(schema.keys)}")
                    continue
                if key_token.value in names:
                    self.error(self.span(key_token), f"duplicate key '{key_token.value}' in section '{kind}'",
                               hint=f"first set at line {names[key_token.value].line}")
                    continue
                spec_key = schema.keys[key_token.value]
                if self.whole and not self.takes(spec_key) and self.path is not None:
                    only = spec_key.only
                    hint = only.hint or (f"remove it; in an mma spec '{kind}' holds only "
                                         f"{', '.join(k for k, v in schema.keys.items() if v.only in (None, WARP_TILES))}, "
                                         "and `mma { shape: ...; repeat: ...; }` sets each warp's tile")
                    self.error(self.span(key_token), f"'{key_token.value}' {only.refusal}: {spec_key.why}", hint=hint)
                    continue
                names[key_token.value] = key_token
                entries.append((key_token, _Value(tuple(value_tree.children), self.span(value_tree))))
        values: dict[str, Any] = {}
        spans: list[tuple[str, Span]] = []
        for key_token, value in entries:
            try:
                values[key_token.value] = schema.keys[key_token.value].read(self, value)
                spans.append((key_token.value, value.span))
            except _Bad as bad:
                self.diagnostics.append(bad.diagnostic)
                self.rejected.add((key, key_token.value))
        for name, spec_key in schema.keys.items():
            if not self.takes(spec_key):
                continue
            if (self.whole and spec_key.required and name not in names
                    and (schema.short or name not in typos)):
                self.error(self.span(head), f"section '{kind}' is missing required key '{name}'")
        found[key] = (values, span, tuple(spans), label.value if label is not None else None)


def _number(digits: str) -> int | None:
    """int(digits), or None when it is far beyond any limit (also avoids Python's 4300-digit cap)."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= 18 else None


def _shape_type(sections: list[Tree]) -> type:
    """The type of shape the `mma` section's `shape` reads as (`_mma_shape`), before it is read: its sizes may
    still be out of range; ir.MmaShape where the section or its shape is misspelt."""
    for section in sections:
        if section.children[0].value != "mma":
            continue
        for entry in section.children[1:]:
            if isinstance(entry, Tree) and entry.data == "entry" and entry.children[0].value == "shape":
                atoms = entry.children[1].children
                form = _shape_form(atoms[0].value) if len(atoms) == 1 and isinstance(atoms[0], Token) else None
                if form is not None:
                    return form[0]
                break
    return ir.MmaShape


def _shape_form(word: str) -> tuple[type, re.Match] | None:
    """The shape type a path's own syntax reads `word` as (its `shape_syntax`: wgmma's m64nNk16) and the match of
    its sizes; None for any other word (ir.MmaShape's names)."""
    for path in registered():
        match = path.shape_syntax.fullmatch(word) if path.shape_syntax is not None else None
        if match:
            return path.shape_type, match
    return None


def _section_meant(word: str) -> str | None:
    """The section a section name is, or most likely was meant to be."""
    return word if word in SECTIONS else next(iter(difflib.get_close_matches(word, tuple(SECTIONS), n=1)), None)


def _did_you_mean(word: str, choices: tuple[str, ...]) -> str | None:
    close = difflib.get_close_matches(word, choices, n=1)
    return f"did you mean '{close[0]}'?" if close else None


# --- the schema -----------------------------------------------------------------------------


_matrix = matrix


def _enum(enum_type: type, what: str, members: tuple[enum.Enum, ...] | None = None) -> Choice:
    """A value naming one of `members` (default: every member of the enum)."""
    return Choice(enum_type, what, tuple(member.value for member in (members or enum_type)))


@dataclass(frozen=True)
class IntRange:
    """An integer in [low, high]: the one statement of a key's range, which validate does not narrow
    for every spec (only for some, with its reason: a target's limit, a path's rule), and which
    docs/language.md's tables are checked against."""

    what: str
    low: int = 0
    high: int = MAX_INT
    hint: str | None = None

    def __call__(self, reader: _SpecReader, value: _Value) -> int:
        return reader.integer(reader.one(value, self.what), self.what, self.low, self.high, self.hint)



def _pair_with_word(what: str, enum_type: type | None, default: Any = None) -> Reader:
    def read(reader: _SpecReader, value: _Value) -> Any:
        m, n = reader.dims(value.atoms[0], 2, what)
        if enum_type is None:
            if len(value.atoms) != 1:
                raise _Bad(value.span, f"expected only {what} such as 4x8")
            return ir.Pair(m, n)
        if len(value.atoms) > 2:
            raise _Bad(value.span, f"expected {what} and an optional order")
        word = default
        if len(value.atoms) == 2:
            choices = tuple(member.value for member in enum_type)
            word = enum_type(reader.name(_Value(value.atoms[1:], reader.span(value.atoms[1])), choices,
                                         f"one of {', '.join(choices)}"))
        return ir.Pair(m, n), word

    return read


def _tile(reader: _SpecReader, value: _Value) -> tuple[int, int, int]:
    if len(value.atoms) != 1:
        raise _Bad(value.span, "expected a block tile such as 128x128x8")
    return reader.dims(value.atoms[0], 3, "a block tile BMxBNxBK")


def _raster(reader: _SpecReader, value: _Value) -> ir.Raster:
    atom = reader.one(value, "a raster order")
    if isinstance(atom, Tree):
        (group,) = reader.call(atom, "group", 1, "row, col or group(G)")
        return ir.Raster(ir.RasterKind.GROUP, group)
    return ir.Raster(ir.RasterKind(reader.name(value, ("row", "col"), "row, col or group(G)")))


def _swizzle(reader: _SpecReader, value: _Value) -> ir.Swizzle | int:
    """xor(B, M, S) (an ir.Swizzle), or a TMA/wgmma swizzle mode in bytes (`128B`, an int)."""
    atom = reader.one(value, "xor(B, M, S) or a swizzle mode such as 128B")
    if isinstance(atom, Token) and atom.type == "BYTES":
        span = int(atom.value[:-1])
        if span not in SWIZZLE_MODES:
            raise _Bad(value.span, f"swizzle mode {atom.value} does not exist; TMA and wgmma swizzle 32B, 64B or 128B "
                                   "spans", hint="use `swizzle: 128B;`")
        return span
    bits, base, shift = reader.call(atom, "xor", 3, "xor(B, M, S) or a swizzle mode such as 128B")
    return ir.Swizzle(bits, base, shift)


SWIZZLE_MODES = (32, 64, 128)  # bytes of one swizzle span: the modes TMA and the wgmma descriptor share


def _mma_shape(reader: _SpecReader, value: _Value) -> Any:
    """An mma.sync shape (an ir.MmaShape: m16n8k16, m16n8k8), or a shape a path's own syntax reads (`_shape_form`:
    a wgmma shape m64nNk16 / m64nNk8, whose N and k validate checks)."""
    atom = reader.one(value, "an mma shape")
    if isinstance(atom, Token) and atom.type in WORD_TERMINALS:
        form = _shape_form(atom.value)
        if form is not None:
            shape_type, match = form
            # A group the word leaves out (an optional part of the syntax) takes the shape type's default.
            sizes = {name: _number(digits) for name, digits in match.groupdict().items() if digits is not None}
            if any(size is None or not 1 <= size <= MAX_INT for size in sizes.values()):
                raise _Bad(value.span, f"the sizes of {atom.value} are out of range")
            return shape_type(**sizes)
    # The paths' own words (GEMV's) are read above; here they only name what else was meant.
    words = tuple(word for path in registered() for word in path.shape_words)
    choices = tuple(shape.value for shape in ir.MmaShape) + words
    return ir.MmaShape(reader.name(value, choices, "m16n8k16, m16n8k8, a wgmma shape m64nNk16"
                                   + "".join(f", {word}" for word in words)))


def _smem_read(reader: _SpecReader, value: _Value) -> int | ir.SmemRead:
    """FMA specs: a width in bits (32, 64, 128); mma specs: `ldmatrix` or `32` (an ir.SmemRead)."""
    atom = reader.one(value, "a read width")
    mma_choices = "`read: ldmatrix;` or `read: 32;`"
    if isinstance(atom, Token) and atom.type in WORD_TERMINALS:
        reader.name(value, (ir.SmemRead.LDMATRIX.value,), "ldmatrix or a width in bits")
        if not reader.has_mma:
            raise _Bad(value.span, "read: ldmatrix needs an `mma` section; the FMA path reads fragments with "
                                   "32-, 64- or 128-bit loads", hint="use `read: 32;`, `read: 64;` or `read: 128;`")
        return ir.SmemRead.LDMATRIX  # f32 (TF32) operands: validate requires k contiguous
    if reader.has_mma:
        reader.integer(atom, "an mma spec's read width in bits", choices=(32,),
                       hint=f"its fragments are read with ldmatrix or 32-bit loads: use {mma_choices}")
        return ir.SmemRead.LDS32
    return reader.integer(atom, "a read width in bits", choices=(32, 64, 128))


def _vector(reader: _SpecReader, value: _Value) -> int:
    dtype = reader.element_type(reader.operand)
    typed = dtype or ir.DType.F16  # an operand in error: the widest any type allows
    widths = reader.path.load_vectors(typed) if dtype is not None and reader.path is not None else typed.vector_widths
    of = f" x {dtype.value}" if dtype else " elements"
    capped = "" if widths == typed.vector_widths else " the path's registers take"
    return reader.integer(reader.one(value, "a vector width"), "a vector width in elements", choices=widths,
                          hint=f"{widths[-1]}{of} = {widths[-1] * typed.bits // 8} bytes is the widest global load{capped}")


def _quant_group(reader: _SpecReader, value: _Value) -> int | None:
    """`group: N` (weights along K per scale, a power of two of at least MIN_QUANT_GROUP), or `group: channel`
    (None: one scale per output column)."""
    atom = reader.one(value, "a group size such as 128, or channel")
    hint = (f"scales are shared by a power of two of at least {MIN_QUANT_GROUP} weights along K (GPTQ and AWQ "
            "use 128), or write `group: channel;` for one scale per output column")
    if isinstance(atom, Token) and atom.type in WORD_TERMINALS:
        reader.name(value, ("channel",), "a group size such as 128, or channel")
        return None
    group = reader.integer(atom, "a quantization group", MIN_QUANT_GROUP, MAX_INT, hint)
    if group & (group - 1):
        raise _Bad(value.span, f"a quantization group must be a power of two, found {group}", hint)
    return group


def _yes_no(reader: _SpecReader, value: _Value) -> bool:
    return reader.name(value, ("yes", "no"), "yes or no") == "yes"


def _target(reader: _SpecReader, value: _Value) -> TargetName:
    """`sm_90` -> (90, False), `sm_90a` -> (90, True)."""
    atom = reader.one(value, "a target such as sm_90")
    target = parse_target(atom.value) if isinstance(atom, Token) and atom.type == "NAME" else None
    if target is None:
        raise _Bad(value.span, f"unknown target {reader.text(atom)}",
                   f"supported targets: {', '.join(map(str, TARGETS))}")
    return target


class _FuseKeys(Mapping):
    """The `fuse` section's keys: the registered ops' (gemmdsl/fuse_ops/), read when asked, in chain order."""

    def __getitem__(self, key: str) -> _Key:
        if key not in ir.FUSE_KEYS:
            raise KeyError(key)
        return _Key(fuse_ops.op(key).syntax)

    def __iter__(self) -> Iterator[str]:
        return (op.key for op in fuse_ops.ops())

    def __len__(self) -> int:
        return len(fuse_ops.ops())


SECTIONS: dict[str, _Section] = {
    "problem": _Section({
        "a": _Key(_matrix), "b": _Key(_matrix), "c": _Key(_matrix),
        "epilogue": _Key(_enum(ir.Epilogue, "store or alpha_beta")),
        "bounds": _Key(_enum(ir.Bounds, "checked or exact")),
        "batch": _Key(_enum(ir.Batch, "none, strided or grouped")),
    }, required=True),
    "target": _Section({"target": _Key(_target)}, short=True),
    "block": _Section({"tile": _Key(_tile, required=True), "raster": _Key(_raster),
                       "schedule": _Key(_enum(ir.Schedule, "tiles, stream_k, persistent or pingpong"))}, required=True),
    "threads": _Section({
        "warps": _Key(_pair_with_word("a warp grid", None), required=True,
                      only=WARP_TILES, why="wgmma runs on warpgroups of 4 warps; count them with `warpgroups` and `producer`"),
        "warpgroups": _Key(IntRange("a consumer warpgroup count", 1, MAX_CONSUMER_WARPGROUPS,
                                f"a block holds at most {MAX_CONSUMER_WARPGROUPS + 1} warpgroups of "
                                f"{WARPGROUP} threads ({MAX_BLOCK_THREADS}), one of them the producer"),
                           required=True, only=WARPGROUPS, why="consumer warpgroups issue wgmma, an sm_90a instruction"),
        "producer": _Key(IntRange("a producer warpgroup count", 1, 1,
                              "the wgmma path has exactly one producer warpgroup (one thread of it issues every "
                              "TMA copy): write `producer: 1;` or leave it out"),
                         only=WARPGROUPS, why="producer warpgroups issue TMA copies for the wgmma consumers"),
        "lanes": _Key(_pair_with_word("a lane grid", ir.LaneOrder, ir.LaneOrder.ROW), required=True,
                      only=FMA_THREADS, why="the mma instruction fixes which lane holds which element"),
        "micro": _Key(_pair_with_word("a micro tile", None), required=True,
                      only=FMA_THREADS, why="each warp's tile is the mma shape times the mma section's `repeat`"),
        "repeat": _Key(_pair_with_word("a repeat", ir.RepeatLevel, ir.RepeatLevel.BLOCK),
                       only=FMA_THREADS, why="the mma section's `repeat` says how often each warp repeats the instruction"),
        "fma_order": _Key(_enum(ir.FmaOrder, "row, col or snake"),
                          only=FMA_THREADS, why="tensor-core instructions multiply, not FMAs"),
    }, required=True),
    "mma": _Section({
        "shape": _Key(_mma_shape, required=True),
        "repeat": _Key(_pair_with_word("an mma repeat", None),
                       only=WARP_TILES, why="each consumer warpgroup's tile is BM / warpgroups rows by BN columns"),
        "precision": _Key(_enum(ir.Precision, "tf32 or 3xtf32", (ir.Precision.TF32, ir.Precision.TF32X3))),
        "accumulate": _Key(_enum(ir.Accumulate, "fast or promoted"),
                           only=WARPGROUPS, why="FP8 operands are multiplied by wgmma only (sm_90a)"),
    }),
    "smem": _Section({
        "order": _Key(_enum(ir.SmemOrder, "an order")), "pad": _Key(IntRange("a padding in elements", 0, 1024)),
        "swizzle": _Key(_swizzle),
        "read": _Key(_smem_read, only=WARP_TILES, why="wgmma reads its operands from shared memory itself, through descriptors"),
    }, labels=("a", "b")),
    "load": _Section({"vector": _Key(_vector)}, labels=("a", "b")),
    "pipeline": _Section({
        "stages": _Key(IntRange("a stage count", 1, MAX_STAGES,
                            "1 = load then compute; 2 = double buffering; more need `copy: cp_async`")),
        "copy": _Key(_enum(ir.CopyMode, "registers, cp_async or tma")),
        "fragments": _Key(_enum(ir.FragmentBuffering, "single or double"),
                          only=WARP_TILES, why="wgmma reads shared memory directly: there are no register fragments"),
        "unroll": _Key(IntRange("an unroll factor", 1, MAX_UNROLL)),
        "store": _Key(_enum(ir.StoreMode, "direct or tma"),
                      only=WARPGROUPS, why="C goes through shared memory and TMA on Hopper's own path"),
    }),
    "fuse": _Section(_FuseKeys()),
    "quant": _Section({"group": _Key(_quant_group, required=True), "zeros": _Key(_yes_no)}, labels=("b",),
                      labels_why="only B, the weights, is quantized; A holds the activations"),
    "budget": _Section({
        "registers": _Key(IntRange("a register count", MIN_REGISTERS, MAX_REGISTERS_PER_THREAD)),
        "blocks_per_sm": _Key(IntRange("a block count", 1, MAX_BLOCKS_PER_SM)),
    }),
}


# The threads section's keys and the ir.ThreadLayout fields they set (a key read as a pair with a word sets two).
_THREAD_FIELDS = {"warps": ("warps",), "lanes": ("lanes", "lane_order"), "micro": ("micro",),
                  "repeat": ("repeat", "repeat_level"), "fma_order": ("fma_order",), "warpgroups": ("warpgroups",),
                  "producer": ("producers",)}


def _build_spec(name: str, span: Span, name_span: Span, found: dict) -> ir.KernelSpec:
    """Turn the checked section values into IR nodes, filling documented defaults."""

    def section(key: str) -> tuple[dict[str, Any], dict[str, Any]]:
        values, sec_span, spans, _ = found.get(key, ({}, span, (), None))
        return values, {"span": sec_span, "key_spans": spans}

    values, where = section("problem")
    problem = ir.Problem(**where, **{k: v for k, v in values.items()})

    values, where = section("target")
    sm, arch_specific = values.get("target", (90, False))
    target = ir.Target(**where, sm=sm, arch_specific=arch_specific)

    values, where = section("block")
    bm, bn, bk = values["tile"]
    block = ir.BlockTile(**where, m=bm, n=bn, k=bk, raster=values.get("raster", ir.Raster(ir.RasterKind.ROW)),
                         schedule=values.get("schedule", ir.Schedule.TILES))

    # The path the spec takes says what the keys it leaves out default to.
    shape = found["mma"][0]["shape"] if "mma" in found else None
    path = path_taking(None if shape is None else type(shape), problem.a.dtype, problem.b.dtype)
    mma = None
    if "mma" in found:
        values, where = section("mma")
        mma = ir.MmaTile(**where, shape=values["shape"], repeat=values.get("repeat", ir.Pair(1, 1)),
                         precision=values.get("precision", ir.Precision.NATIVE),
                         accumulate=values.get("accumulate", path.default_accumulate))

    values, where = section("threads")
    # The keys the path took (the parser refused the others), the rest the IR's defaults. Consumer warpgroups
    # come with one producer unless said otherwise.
    fields = {field: value for key, names in _THREAD_FIELDS.items() if key in values
              for field, value in zip(names, values[key] if len(names) > 1 else (values[key],))}
    if "warpgroups" in fields:
        fields.setdefault("producers", 1)
    threads = ir.ThreadLayout(**where, **fields)

    def smem(operand: ir.Operand, default: ir.SmemOrder) -> ir.SmemLayout:
        values, where = section(f"smem {operand.value}")
        dtype = problem.matrix(operand).dtype
        swizzle = values.get("swizzle", path.default_swizzle_bytes)
        if path.smem_in_global_order(dtype):  # the order that keeps the operand as it lies in global memory
            row = problem.matrix(operand).layout is ir.MatrixLayout.ROW
            if operand is ir.Operand.A:
                default = ir.SmemOrder.MK if row else ir.SmemOrder.KM
            else:
                default = ir.SmemOrder.KN if row else ir.SmemOrder.NK
        layout = dict(**where, operand=operand, order=values.get("order", default), pad=values.get("pad", 0),
                      swizzle=None if isinstance(swizzle, int) else swizzle)
        if isinstance(swizzle, int):
            layout["swizzle_bytes"] = swizzle
        return ir.SmemLayout(**layout, **path.smem_read(values.get("read"), dtype))

    def load(operand: ir.Operand) -> ir.GlobalLoad:
        values, where = section(f"load {operand.value}")
        # Default: the widest vector the contiguous extent of the global tile allows.
        _, extent = block.global_tile(operand, problem.matrix(operand).layout)
        default = next(w for w in reversed(path.load_vectors(problem.matrix(operand).dtype)) if extent % w == 0)
        return ir.GlobalLoad(**where, operand=operand, vector=values.get("vector", default))

    values, where = section("pipeline")
    stages = values.get("stages", path.default_stages)
    copy = values.get("copy", path.default_copy)
    pipeline = ir.Pipeline(**where, stages=stages, copy=copy,
                           fragments=values.get("fragments", ir.FragmentBuffering.SINGLE),
                           unroll=values.get("unroll", 1), store=values.get("store", ir.StoreMode.DIRECT))

    values, where = section("budget")
    budget = ir.Budget(**where, registers=values.get("registers"), blocks_per_sm=values.get("blocks_per_sm"))

    fuse = None
    if "fuse" in found:
        values, where = section("fuse")
        spans = dict(where["key_spans"])
        steps = sorted((fuse_ops.op(key).from_value(value, spans[key]) for key, value in values.items()),
                       key=lambda step: step.order)
        fuse = ir.FuseChain(**where, steps=tuple(steps))

    quant = None
    if "quant b" in found:
        values, where = section("quant b")
        quant = ir.WeightQuant(**where, group=values["group"], zeros=values.get("zeros", False))

    return ir.KernelSpec(span=span, key_spans=(("name", name_span),), name=name, problem=problem, target=target, block=block, threads=threads,
                         smem_a=smem(ir.Operand.A, ir.SmemOrder.MK), smem_b=smem(ir.Operand.B, ir.SmemOrder.KN),
                         load_a=load(ir.Operand.A), load_b=load(ir.Operand.B),
                         pipeline=pipeline, budget=budget, mma=mma, fuse=fuse, quant=quant)
