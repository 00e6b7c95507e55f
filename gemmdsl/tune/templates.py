"""The template language of `gemmdsl tune`: a `.tgemm` is a spec whose values may be choice groups
`{a,b,c}`; `expand` makes one candidate spec per combination (docs/tuning.md)."""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..source import CompileError, Diagnostic, Severity, SourceFile, Span


DEFAULT_MAX_CANDIDATES = 5000


@dataclass(frozen=True)
class ChoiceGroup:
    start: int  # offset of the '{'
    end: int  # offset just past the '}'
    alternatives: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class Template:
    """A template's text cut at its kernel name and its choice groups. Every candidate holds this one
    object and renders its text on demand, so a candidate costs the same whatever the template's size."""

    text: str
    name: str  # the kernel's name in the template
    name_start: int  # offset of the name
    body_start: int  # offset of the `gemm` keyword (what precedes it is the leading comment)
    groups: tuple[ChoiceGroup, ...]
    entries: tuple[tuple[int, int, tuple[int, ...]], ...]  # (start, end, group numbers) of each entry holding choices

    def render(self, name: str, choices: Sequence[str]) -> str:
        """The template's text with the kernel named `name` and each group replaced by its choice."""
        cuts = [(self.name_start, self.name_start + len(self.name), name)]
        cuts += [(group.start, group.end, choice) for group, choice in zip(self.groups, choices)]
        out, position = [], 0
        for start, end, fill in cuts:
            out += [self.text[position:start], fill]
            position = end
        out.append(self.text[position:])
        return "".join(out)

    def entry(self, number: int, choices: Sequence[str]) -> str:
        """Entry `number` of `entries` with its groups replaced by their choices: `tile: 128x128x8`."""
        start, end, groups = self.entries[number]
        out, position = [], start
        for group in groups:
            out += [self.text[position:self.groups[group].start], choices[group]]
            position = self.groups[group].end
        out.append(self.text[position:end])
        return " ".join("".join(out).split())


@dataclass(frozen=True)
class Candidate:
    """One concrete spec of a template: its number and the alternative taken from each group."""

    index: int
    choices: tuple[str, ...]  # in source order
    template: Template = field(repr=False)

    @property
    def name(self) -> str:
        """The kernel name, NAME_tI."""
        return f"{self.template.name}_t{self.index}"

    @property
    def text(self) -> str:
        return self.template.render(self.name, self.choices)

    @property
    def name_start(self) -> int:
        """Offset of the kernel name in `text`."""
        return self.template.name_start

    @property
    def body_start(self) -> int:
        """Offset of the `gemm` keyword in `text` (what precedes it is the leading comment)."""
        return self.template.body_start

    @property
    def summary(self) -> str:
        """The entries that hold choices, concrete: `tile: 128x128x8; stages: 2`."""
        return "; ".join(self.template.entry(number, self.choices) for number in range(len(self.template.entries)))

    def describe(self) -> str:
        return self.summary or "(no choices)"


def template_error(path: str, text: str, offset: int, message: str, hint: str | None = None,
                   length: int = 1) -> CompileError:
    line, column = line_column(text, offset)
    span = Span(path, line, column, line, column + max(1, length))
    return CompileError([Diagnostic(Severity.ERROR, span, message, hint)], SourceFile(path, text))


def line_column(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def mask_comments(text: str) -> str:
    """The text with every `//` and `#` comment blanked out (same length, newlines kept)."""
    return re.sub(r"(//|#)[^\n]*", lambda match: " " * len(match.group()), text)


GROUP_HINT = "a choice group `{a,b,c}` closes on its own line and holds no '{', ';', ':' or comment"


def find_choice_groups(text: str, path: str = "<template>") -> list[ChoiceGroup]:
    """Every choice group of a template, in source order; malformed ones raise CompileError."""
    masked = mask_comments(text)
    groups = []
    position = 0
    while (start := masked.find("{", position)) >= 0:
        group = _read_group(text, masked, start, path)
        if group is None:  # a section brace
            position = start + 1
        else:
            groups.append(group)
            position = group.end
    return groups


def _read_group(text: str, masked: str, start: int, path: str) -> ChoiceGroup | None:
    """The choice group opened by the '{' at `start`, or None when that brace opens a section."""
    depth = 0
    commas: list[int] = []
    stop = start + 1
    while stop < len(masked):
        char = masked[stop]
        if char in "{};:\n" or (char == " " and text[stop] != " "):  # a structural character, or a comment
            break
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            commas.append(stop)
        stop += 1
    closer = masked[stop] if stop < len(masked) else ""
    content = text[start + 1:stop]
    if closer == "{" and (commas or not content.strip()):
        raise template_error(path, text, stop, "a choice group cannot contain another choice group", GROUP_HINT)
    if closer != "}" or not content.strip():
        if commas:
            raise template_error(path, text, start, "this choice group is not closed", GROUP_HINT)
        return None  # a section brace: `block {`, `problem { a: ...`, `gemm k { target sm_90; ...`, `{ }`
    pieces = [start, *commas, stop]
    alternatives = []
    for left, right in zip(pieces, pieces[1:]):
        alternative = text[left + 1:right].strip()
        if not alternative:
            raise template_error(path, text, left, "empty alternative in a choice group",
                                 "write alternatives as `{a,b}`; drop the extra ','")
        if alternative.count("(") != alternative.count(")"):
            raise template_error(path, text, left + 1, f"unbalanced parentheses in alternative {alternative!r}",
                                 GROUP_HINT)
        if alternative in alternatives:
            raise template_error(path, text, left + 1, f"alternative {alternative!r} appears twice in this group")
        alternatives.append(alternative)
    return ChoiceGroup(start, stop + 1, tuple(alternatives))


_KERNEL = re.compile(r"\bgemm\s+([A-Za-z_][A-Za-z0-9_]*)\b")


def kernel_name_span(text: str, path: str = "<template>") -> tuple[int, int, str]:
    """(offset of `gemm`, offset of the name, the name) of a template's or spec's kernel."""
    match = _KERNEL.search(mask_comments(text))
    if match is None:
        raise template_error(path, text, 0, "the template holds no `gemm NAME {` block",
                             "a template (.tgemm) is a spec whose values may be choice groups `{a,b}`")
    return match.start(), match.start(1), match.group(1)


def count_candidates(groups: Sequence[ChoiceGroup]) -> int:
    return math.prod(len(group.alternatives) for group in groups)


def expand(template_text: str, path: str = "<template>",
           max_candidates: int = DEFAULT_MAX_CANDIDATES) -> list[Candidate]:
    """Every concrete spec of a template, t0 first; raises CompileError on a malformed template."""
    groups = find_choice_groups(template_text, path)
    body_start, name_start, name = kernel_name_span(template_text, path)
    if groups and groups[0].start < name_start + len(name):
        raise template_error(path, template_text, groups[0].start,
                             "choice groups belong in the values of the kernel's sections",
                             "the kernel name cannot be a choice; --name sets the winner's name")
    total = count_candidates(groups)
    if total > max_candidates:
        sizes = " x ".join(str(len(group.alternatives)) for group in groups)
        raise template_error(path, template_text, groups[0].start,
                             f"the template expands to {total:,} candidates ({sizes}), more than the "
                             f"limit of {max_candidates:,}",
                             "narrow some choice groups, or raise the limit with --max-candidates")
    template = Template(template_text, name, name_start, body_start, tuple(groups),
                        choice_entries(template_text, groups))
    return [Candidate(index, choices, template)
            for index, choices in enumerate(itertools.product(*(group.alternatives for group in groups)))]


def choice_entries(text: str, groups: Sequence[ChoiceGroup]) -> tuple[tuple[int, int, tuple[int, ...]], ...]:
    """Each entry (`key: value;`) that holds choice groups, as (start, end, the numbers of its groups)."""
    masked = mask_comments(text)
    cut = [0, *(offset for group in groups for offset in (group.start, group.end)), len(text)]
    masked = "".join(masked[a:b] if i % 2 == 0 else "x" * (b - a) for i, (a, b) in enumerate(zip(cut, cut[1:])))
    spans: dict[tuple[int, int], list[int]] = {}
    for number, group in enumerate(groups):
        start = max(masked.rfind(char, 0, group.start) for char in ";{}") + 1
        ends = [e for e in (masked.find(char, group.end) for char in ";}") if e >= 0]
        spans.setdefault((start, min(ends, default=len(text))), []).append(number)
    return tuple((start, end, tuple(numbers)) for (start, end), numbers in spans.items())


def template_stem(path: str | Path) -> str:
    """`dir/sgemm_space.tgemm` -> `sgemm_space`, made a valid C identifier."""
    stem = Path(path).name.split(".")[0] or "tuned"
    stem = re.sub(r"[^A-Za-z0-9_]", "_", stem)
    return stem if not stem[0].isdigit() else f"k_{stem}"
