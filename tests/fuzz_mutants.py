"""Mutants of the shipped inputs, and the oracle that runs one through the command line in-process.

Shared by tests/test_fuzz_cli.py, where hypothesis drives the choices (and shrinks a failure), and by
scripts/fuzz_campaign.py, where `random.Random(f"{seed}:{index}")` drives them, so that a mutant is
reproduced from its seed and index alone. Nothing here needs hypothesis.

A mutant starts from a shipped spec (specs/*.gemm), family (specs/*.gemmf) or tuning template
(gemmdsl/templates/*.tgemm, narrowed to at most TEMPLATE_CANDIDATES candidates so that screening one
costs a fraction of a second) and applies one to MAX_OPERATIONS of OPERATIONS. The oracle runs
`check` or `compile --no-nvcc` (specs and families) or `tune --screen-only --no-nvcc` (templates)
through `gemmdsl.cli.main`, with nvcc and NVRTC hidden, and asks: exit status 0 or 1, no exception,
every diagnostic positioned inside the file it names, and, where the input is accepted, complete
outputs (where it is refused, none).
"""
from __future__ import annotations

import contextlib
import enum
import io
import json
import math
import random
import re
import shutil
import traceback
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Callable, Protocol, Sequence, TypeVar

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "specs"
TEMPLATES = ROOT / "gemmdsl" / "templates"
SUFFIX = {"spec": ".gemm", "family": ".gemmf", "template": ".tgemm"}
COMMANDS = {"spec": ("check", "compile"), "family": ("check", "compile"), "template": ("tune",)}
TEMPLATE_CANDIDATES = 32  # a narrowed template's most candidates (screening takes ~5-10 ms each)
MAX_CANDIDATES = 64  # `tune --max-candidates` for mutants: a mutation that grows a template past it meets the limit
MAX_OPERATIONS = 3
FUZZED = "fuzzed"  # the stem of the file a mutant is written to

T = TypeVar("T")


class Chooser(Protocol):
    """Where a mutation's choices come from: hypothesis's data, or a seeded random.Random."""

    def integer(self, low: int, high: int) -> int: ...

    def choice(self, options: Sequence[T]) -> T: ...


class RandomChooser:
    def __init__(self, seed: str):
        self.random = random.Random(seed)

    def integer(self, low: int, high: int) -> int:
        return self.random.randint(low, high)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.random.randrange(len(options))]


# --- the corpus and the language's vocabulary -----------------------------------------------------


@dataclass(frozen=True)
class Seed:
    kind: str  # spec, family or template
    name: str  # the shipped file's name
    text: str


@cache
def corpus() -> tuple[Seed, ...]:
    """Every shipped spec, family and template, in a fixed order."""
    seeds = [Seed("spec", path.name, path.read_text()) for path in sorted(SPECS.glob("*.gemm"))]
    seeds += [Seed("family", path.name, path.read_text()) for path in sorted(SPECS.glob("*.gemmf"))]
    seeds += [Seed("template", path.name, narrow_template(path.read_text()))
              for path in sorted(TEMPLATES.glob("*.tgemm"))]
    return tuple(seeds)


def seeds_of(kind: str) -> tuple[Seed, ...]:
    return tuple(seed for seed in corpus() if seed.kind == kind)


def narrow_template(text: str, limit: int = TEMPLATE_CANDIDATES) -> str:
    """The template with its longest choice groups cut (last alternatives first) until it expands to
    at most `limit` candidates; every group keeps at least one alternative, so every group stays."""
    from gemmdsl.tune import find_choice_groups

    groups = find_choice_groups(text)
    kept = [list(group.alternatives) for group in groups]
    while math.prod(len(alternatives) for alternatives in kept) > limit:
        max(kept, key=len).pop()
    for group, alternatives in reversed(list(zip(groups, kept))):
        text = text[:group.start] + "{" + ",".join(alternatives) + "}" + text[group.end:]
    return text


@cache
def vocabulary() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(names, values): the language's section names, keys, family keywords, labels and named values;
    and every value an entry of a shipped input holds, enum values and targets besides."""
    from gemmdsl import ir
    from gemmdsl.parser import SECTIONS
    from gemmdsl.targets import TARGETS

    names = {"gemm", "family", "use", "fallback", "measured", "a", "b", "c"}
    for section_name, section in SECTIONS.items():
        names.add(section_name)
        names.update(section.keys)
    named_values = {member.value for item in vars(ir).values()
                    if isinstance(item, type) and issubclass(item, enum.Enum) and item is not enum.Enum
                    for member in item if isinstance(member.value, str)}
    named_values.update(str(target) for target in TARGETS)
    values = named_values.union(*values_by_key().values())
    for seed in corpus():  # file names, as `use` lines and comments give them
        values.update(re.findall(r"[\w.]+\.gemm\b", seed.text))
    return tuple(sorted(names | named_values)), tuple(sorted(values))


# --- mutations ------------------------------------------------------------------------------------

TOKEN = re.compile(r"//[^\n]*|#[^\n]*|\s+|[0-9]+(?:x[0-9A-Za-z_]+)+|[0-9]+B?|[A-Za-z_][A-Za-z0-9_.]*|.", re.S)
NUMBER = re.compile(r"[0-9]+")
ENTRY = re.compile(r"([A-Za-z_]\w*)(\s*:\s*)([^;{}:]*)(?=;)")
SECTION_NAME = re.compile(r"(?<=[{;}\s])([A-Za-z_]\w*)(?=\s+(?:[ab]\s*)?\{)")
CONTROL = tuple(chr(code) for code in (*range(0x20), 0x7F)) + ("\x85", "\u2028", "\u2029", "\ufeff", "\u200b")
LIKELY_CONTROL = ("\x00", "\r", "\n", "\t", "\x0b", "\x0c")  # those a C compiler, a file system or a lexer treats apart


def mask_comments(text: str) -> str:
    """The text with every `//` and `#` comment blanked (same length, newlines kept)."""
    return re.sub(r"(//|#)[^\n]*", lambda match: " " * len(match.group()), text)


def items(text: str) -> list[tuple[int, int]]:
    """The spans of the statements one level inside the outermost braces (a spec's sections, a family's
    `use` lines and `measured` table), each from its first character to its `;` or closing `}`."""
    masked = mask_comments(text)
    spans, depth, start = [], 0, None
    for index, char in enumerate(masked):
        if depth == 1 and start is None and not char.isspace() and char != "}":
            start = index
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 1 and start is not None:
                spans.append((start, index + 1))
                start = None
        elif char == ";" and depth == 1 and start is not None:
            spans.append((start, index + 1))
            start = None
    return spans


def _replace(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def _token_edit(chooser: Chooser, text: str, _: Seed) -> tuple[str, str]:
    parts = TOKEN.findall(text)
    if not parts:
        return text, "no tokens"
    i, j = chooser.integer(0, len(parts) - 1), chooser.integer(0, len(parts) - 1)
    action = chooser.choice(("delete", "duplicate", "swap", "insert"))
    if action == "delete":
        del parts[i]
    elif action == "duplicate":
        parts.insert(i, parts[i])
    elif action == "swap":
        parts[i], parts[j] = parts[j], parts[i]
    else:
        names, values = vocabulary()
        parts.insert(i, chooser.choice((" ", ";", ":", "{", "}", "(", ")", ",", "x", *names, *values)))
    return "".join(parts), f"{action} token {i}" + (f" with {j}" if action == "swap" else "")


def perturbed(chooser: Chooser, number: int) -> str:
    """0, 1, huge, negative, off by one, halved, doubled or a power of two."""
    action = chooser.choice(("zero", "one", "minus1", "plus1", "negative", "half", "double", "pow2", "huge",
                             "digits"))
    return {"zero": lambda: "0", "one": lambda: "1", "minus1": lambda: str(number - 1),
            "plus1": lambda: str(number + 1), "negative": lambda: f"-{number}", "half": lambda: str(number // 2),
            "double": lambda: str(number * 2), "pow2": lambda: str(2 ** chooser.integer(0, 64)),
            "huge": lambda: str(10 ** chooser.integer(6, 40)), "digits": lambda: "9" * chooser.integer(20, 400),
            }[action]()


def _number(chooser: Chooser, text: str, _: Seed) -> tuple[str, str]:
    numbers = list(NUMBER.finditer(mask_comments(text)))
    if not numbers:
        return text, "no numbers"
    match = chooser.choice(numbers)
    new = perturbed(chooser, int(match.group()))
    return _replace(text, match.start(), match.end(), new), f"number {match.group()} -> {new[:24]}"


def _key(chooser: Chooser, text: str, _: Seed) -> tuple[str, str]:
    """A key or a section name replaced by a word of the language."""
    masked = mask_comments(text)
    spots = [(m.start(1), m.end(1)) for m in ENTRY.finditer(masked)]
    spots += [(m.start(1), m.end(1)) for m in SECTION_NAME.finditer(masked)]
    if not spots:
        return text, "no keys"
    start, end = chooser.choice(spots)
    new = chooser.choice(vocabulary()[0])
    return _replace(text, start, end, new), f"key {text[start:end]} -> {new}"


@cache
def values_by_key() -> dict[str, tuple[str, ...]]:
    """Every value the shipped inputs give each key, in a fixed order."""
    found: dict[str, set[str]] = {}
    for seed in corpus():
        for match in ENTRY.finditer(mask_comments(seed.text)):
            found.setdefault(match.group(1), set()).add(match.group(3).strip())
    return {key: tuple(sorted(values)) for key, values in found.items()}


def _value(chooser: Chooser, text: str, _: Seed) -> tuple[str, str]:
    """An entry's value replaced by one the shipped inputs give the same key (so that most mutants still
    parse and reach the validator and the lowering), or by any value or named value of the language."""
    entries = list(ENTRY.finditer(mask_comments(text)))
    if not entries:
        return text, "no entries"
    match = chooser.choice(entries)
    same_key = values_by_key().get(match.group(1), ())
    new = chooser.choice(same_key if same_key and chooser.integer(0, 3) else vocabulary()[1])
    return _replace(text, match.start(3), match.end(3), new), f"value of {match.group(1)} -> {new}"


def _item(chooser: Chooser, text: str, _: Seed) -> tuple[str, str]:
    """A section (or a family's statement) removed, duplicated or moved."""
    spans = items(text)
    if not spans:
        return text, "no sections"
    start, end = chooser.choice(spans)
    action = chooser.choice(("remove", "duplicate", "move"))
    piece = text[start:end]
    if action == "remove":
        return _replace(text, start, end, ""), f"remove section at {start}"
    if action == "duplicate":
        return text[:end] + "\n" + piece + text[end:], f"duplicate section at {start}"
    rest = _replace(text, start, end, "")
    where = chooser.choice([s for s, _ in items(rest)] or [start])
    return rest[:where] + piece + "\n" + rest[where:], f"move section at {start} to {where}"


def _splice(chooser: Chooser, text: str, seed: Seed) -> tuple[str, str]:
    """Two inputs joined: this one's head and another's tail at line boundaries, or another's section
    grafted in."""
    same = seeds_of(seed.kind)
    other = chooser.choice(same if chooser.integer(0, 3) else corpus())
    if chooser.integer(0, 1):
        spans = items(other.text)
        if spans:
            start, end = chooser.choice(spans)
            where = chooser.choice([s for s, _ in items(text)] or [0])
            return text[:where] + other.text[start:end] + "\n" + text[where:], f"graft a section of {other.name}"
    lines, other_lines = text.split("\n"), other.text.split("\n")
    head, tail = chooser.integer(0, len(lines)), chooser.integer(0, len(other_lines))
    return "\n".join(lines[:head] + other_lines[tail:]), f"splice {head} lines + {other.name} from line {tail}"


def _control(chooser: Chooser, text: str, _: Seed) -> tuple[str, str]:
    """A control character (or a Unicode line or format character) in a comment, in a name or file name,
    or anywhere."""
    char = chooser.choice(CONTROL if chooser.integer(0, 1) else LIKELY_CONTROL)
    place = chooser.choice(("comment", "name", "anywhere"))
    pattern = {"comment": r"(?://|#)[^\n]*", "name": r"[A-Za-z_][\w.]*"}.get(place)  # names outside comments
    spots = list(re.finditer(pattern, text if place == "comment" else mask_comments(text))) if pattern else []
    if spots:
        match = chooser.choice(spots)
        where = chooser.integer(match.start(), match.end())
    else:
        where = chooser.integer(0, len(text))
    return text[:where] + char * chooser.integer(1, 3) + text[where:], f"control {char!r} at {where}"


OPERATIONS: dict[str, Callable[[Chooser, str, Seed], tuple[str, str]]] = {
    "token": _token_edit, "number": _number, "key": _key, "value": _value, "section": _item,
    "splice": _splice, "control": _control,
}
BYTES = "bytes"  # byte-level noise, applied to the encoded text after the others


def byte_noise(chooser: Chooser, data: bytes) -> tuple[bytes, str]:
    """Random bytes inserted or overwritten (invalid UTF-8 included), a bit flipped, or a cut."""
    where = chooser.integer(0, len(data))
    action = chooser.choice(("insert", "overwrite", "flip", "truncate"))
    junk = bytes(chooser.integer(0, 255) for _ in range(chooser.integer(1, 4)))
    if action == "insert":
        data = data[:where] + junk + data[where:]
    elif action == "overwrite":
        data = data[:where] + junk + data[where + len(junk):]
    elif action == "flip" and where < len(data):
        data = data[:where] + bytes([data[where] ^ (1 << chooser.integer(0, 7))]) + data[where + 1:]
    else:
        data = data[:where]
    return data, f"bytes {action} at {where}"


@dataclass(frozen=True)
class Mutant:
    seed: Seed
    command: str  # check, compile or tune
    operations: tuple[str, ...]  # what was done, in order, for the record
    data: bytes

    @property
    def kind(self) -> str:
        return self.seed.kind

    @property
    def file_name(self) -> str:
        return FUZZED + SUFFIX[self.kind]


def mutate(chooser: Chooser, kind: str | None = None, command: str | None = None,
           operations: Sequence[str] | None = None) -> Mutant:
    """A mutant of a shipped input of `kind` (chosen when None: specs half the time), for `command`, by
    `operations` (names of OPERATIONS or BYTES; chosen when None, a single one half the time)."""
    kind = kind or chooser.choice(("spec", "spec", "family", "template"))
    seed = chooser.choice(seeds_of(kind))
    command = command or chooser.choice(COMMANDS[kind])
    text, done = seed.text, []
    if operations is None:
        count = 1 if chooser.integer(0, 1) else chooser.integer(2, MAX_OPERATIONS)
        operations = [chooser.choice((*OPERATIONS, BYTES)) for _ in range(count)]
    chosen = list(operations)
    for name in chosen:
        if name != BYTES:
            text, what = OPERATIONS[name](chooser, text, seed)
            done.append(what)
    data = text.encode("utf-8", "surrogatepass")
    for _ in range(chosen.count(BYTES)):
        data, what = byte_noise(chooser, data)
        done.append(what)
    return Mutant(seed, command, tuple(done), data)


# --- the oracle -----------------------------------------------------------------------------------

FINDINGS = ("traceback", "exit status", "unpositioned", "incomplete output")
HEADER = re.compile(r"^(?P<where>\S.*?): (?P<severity>error|warning|note): ", re.M)
POSITION = re.compile(r"(?P<file>.+):(?P<line>\d+):(?P<column>\d+)")
# a file's summary after its first errors (source.CompileError.render): of the file, not of a place in it
LEFT_OUT = re.compile(r"^\S.*?: note: and [\d,]+ more (error|warning)", re.M)


@dataclass(frozen=True)
class Outcome:
    verdict: str  # accepted, refused, or one of FINDINGS
    exit_status: int | None
    detail: str = ""  # the traceback, or what is wrong

    @property
    def finding(self) -> bool:
        return self.verdict in FINDINGS


def prepare_workdir(directory: Path) -> Path:
    """A directory to run mutants in: links to every shipped spec (a family's `use` lines name them)."""
    directory.mkdir(parents=True, exist_ok=True)
    for path in SPECS.glob("*.gemm"):
        link = directory / path.name
        if not link.exists():
            link.symlink_to(path)
    return directory


@contextlib.contextmanager
def toolkit_hidden():
    """nvcc and NVRTC out of sight, so that `check` reports the analysis alone and builds nothing."""
    from gemmdsl import build

    saved = build.find_nvcc, build.nvrtc_available
    build.find_nvcc, build.nvrtc_available = (lambda: None), (lambda: False)
    try:
        yield
    finally:
        build.find_nvcc, build.nvrtc_available = saved


def argv_for(mutant: Mutant, path: Path, output: Path) -> list[str]:
    if mutant.command == "compile":
        return ["compile", "--no-nvcc", "-o", str(output), str(path)]
    if mutant.command == "tune":
        return ["tune", "--screen-only", "--no-nvcc", "--max-candidates", str(MAX_CANDIDATES),
                "--db", str(output / "tune.sqlite"), "--json", str(output / "tune.json"), str(path)]
    return ["check", str(path)]


def run_mutant(mutant: Mutant, workdir: Path) -> Outcome:
    """Write the mutant into `workdir` (prepared by prepare_workdir), run its command in-process and judge it."""
    from gemmdsl.cli import main

    path = workdir / mutant.file_name
    path.write_bytes(mutant.data)
    output = workdir / "out"
    shutil.rmtree(output, ignore_errors=True)
    output.mkdir()
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        with toolkit_hidden(), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            status = main(argv_for(mutant, path, output))
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else 1
        if status not in (0, 1):
            return Outcome("exit status", status, stderr.getvalue()[-2000:])
    except Exception:  # noqa: BLE001 - any exception reaching the command line is the finding
        return Outcome("traceback", None, traceback.format_exc())
    if status not in (0, 1):
        return Outcome("exit status", status, stderr.getvalue()[-2000:])
    text = mutant.data.decode("utf-8", "replace")
    problem = (unpositioned(stderr.getvalue(), path, text)
               or (status == 1 and not HEADER.search(stderr.getvalue()) and "no diagnostic for exit status 1"))
    if problem:
        return Outcome("unpositioned", status, f"{problem}\n--- stderr:\n{stderr.getvalue()[-4000:]}")
    problem = incomplete(mutant.command, status, stdout.getvalue(), output)
    if problem:
        return Outcome("incomplete output", status, f"{problem}\n--- stdout:\n{stdout.getvalue()[-2000:]}")
    return Outcome("accepted" if status == 0 else "refused", status)


def unpositioned(stderr: str, path: Path, text: str) -> str | None:
    """What is wrong with the diagnostics' positions: each names FILE:LINE:COLUMN, and in the mutant's
    own file a line that exists."""
    lines = text.count("\n") + 1
    for match in HEADER.finditer(stderr):
        if LEFT_OUT.match(stderr, match.start()):
            continue
        where = POSITION.fullmatch(match.group("where"))
        if where is None:
            return f"a diagnostic without a line and column: {match.group(0)!r}"
        line, column = int(where.group("line")), int(where.group("column"))
        if line < 1 or column < 1 or (where.group("file") == str(path) and line > lines):
            return f"a diagnostic outside its file ({lines} lines): {match.group(0)!r}"
    return None


def incomplete(command: str, status: int, stdout: str, output: Path) -> str | None:
    """What is missing from an accepted run's outputs, or what a refused one left behind."""
    files = sorted(path.name for path in output.iterdir())
    if command == "check":
        return "check accepted the input but printed no report" if status == 0 and not stdout.strip() else None
    if command == "tune":
        if status == 1:
            return None  # screening writes --json before it can refuse only when something survived
        try:
            report = json.loads((output / "tune.json").read_text())
        except (OSError, ValueError) as err:
            return f"tune --json: {err}"
        if not report.get("kept"):
            return "tune accepted the template but kept no candidate"
        if len(report.get("candidates", ())) != report.get("generated"):
            return f"tune --json lists {len(report.get('candidates', ()))} of {report.get('generated')} candidates"
        return None
    if status == 1:
        return f"compile refused the input but wrote {files}" if files else None
    wrote = re.findall(r"^(\w+): wrote ", stdout, re.M)
    if len(wrote) != 1:
        return f"compile accepted the input but reported writing {len(wrote)} kernels"
    name = wrote[0]
    expected = [f"{name}.cu", f"{name}.h", f"{name}.json"]
    if files != expected:
        return f"compile wrote {files}, not {expected}"
    metadata = json.loads((output / f"{name}.json").read_text())
    cuda = (output / f"{name}.cu").read_text()
    header = (output / f"{name}.h").read_text()
    if name not in (metadata.get("kernel"), metadata.get("family")):
        return f"{name}.json names neither kernel nor family {name}"
    if f"{name}_launch" not in cuda or f"{name}_launch" not in header:
        return f"{name}_launch is missing from {name}.cu or {name}.h"
    return None


def mutant_at(seed: str | int, index: int) -> Mutant:
    """The campaign's mutant number `index` of seed `seed`: the same on every machine and run."""
    return mutate(RandomChooser(f"{seed}:{index}"))
