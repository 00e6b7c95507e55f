"""A .cu file's prelude: the device helpers its kernels call (PTX wrappers, mbarrier and TMA helpers,
shared-memory layout functions, the fuse chain's functions, the raster), each defined once, before the kernels.

A kernel's parts write the helpers they may call inside `Emitter.helpers()`, which keeps them out of the
kernel's text. From what the parts offered, the file defines:
- the helpers something in the file calls: a kernel, a launcher, or another helper that is defined. A part
  may offer one that the kernels it was chosen for do not call (the staged store offers `warpgroup_sync`,
  which its 16-bit form, by stmatrix, never calls); it is left out. Whether the code names a helper is the
  test, the one behind nvcc's "declared but never referenced", so a helper is defined exactly where the
  compiler would not warn, whatever a part's own condition for calling it.
- at file scope, once for all of a family's members, every helper that each member that offers it writes the
  same way (under its guard: the `#if` of an sm_90a member's helpers; one that members under different guards
  write alike is plain C++, for every pass). A helper that two members write differently under one name
  (their shared-memory layout functions, a store for exact and one for checked bounds), and every helper that
  calls such a one, stays in each member's namespace, where that member's kernels find it first.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..emitter import Emitter

Guard = tuple[str, str]  # the `#if` line a helper needs, and a comment on why

_NOT_CODE = re.compile(r'"(?:\\.|[^"\\\n])*"|//[^\n]*')  # string literals and comments, whichever starts first
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_STRUCT = re.compile(r"\bstruct\s+(\w+)")
_FUNCTION = re.compile(r"(\w+)\s*\(")


def identifiers(text: str) -> set[str]:
    """The identifiers of C text's code: not those in its comments or string literals (inline PTX)."""
    return set(_IDENTIFIER.findall(_NOT_CODE.sub(" ", text)))


@dataclass(frozen=True)
class Helper:
    """One definition at file scope, with the comment before it."""

    name: str
    text: str
    guard: Guard | None

    @property
    def calls(self) -> set[str]:
        """The identifiers its code names other than its own: the helpers among them are the ones it calls."""
        return identifiers(self.text) - {self.name}


def split_helpers(lines: list[str], guard: Guard | None) -> list[Helper]:
    """The definitions of a block of helper text, each with the comment and `template` line before it."""
    helpers: list[Helper] = []
    pending: list[str] = []  # comments, blank and template lines before the next definition
    current: list[str] = []
    depth, opened = 0, False
    for line in lines:
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith(("//", "template"))):
            pending.append(line)
            continue
        if not current:
            current, pending = pending + [line], []
        else:
            current.append(line)
        code = _NOT_CODE.sub(" ", line)
        depth += code.count("{") - code.count("}")
        opened = opened or "{" in code
        if opened and depth == 0:
            head = next(row for row in current if row.strip() and not row.strip().startswith(("//", "template")))
            match = _STRUCT.match(head.strip()) if head.lstrip().startswith("struct") else _FUNCTION.search(head)
            if match is None:
                raise ValueError(f"a helper whose name cannot be read: {head!r}")
            helpers.append(Helper(match.group(1), "\n".join(current).strip("\n"), guard))
            current, opened = [], False
    if current or any(row.strip() for row in pending):
        raise ValueError(f"helper text that is no whole definition: {(current or pending)!r}")
    return helpers


@dataclass(frozen=True)
class Prelude:
    shared: list[Helper]  # at file scope, in the order first offered
    local: list[list[Helper]]  # per body: the helpers that stay in its namespace


def plan_prelude(bodies: list[Emitter]) -> Prelude:
    """Which of the helpers that `bodies` (a spec's definitions, or each member's of a family) offer are defined,
    and where."""
    offered = [[helper for guard, lines in body.helper_blocks for helper in split_helpers(lines, guard)]
               for body in bodies]
    texts: dict[str, set[str]] = {}
    guards: dict[str, set[Guard | None]] = {}
    for helpers in offered:
        for helper in helpers:
            texts.setdefault(helper.name, set()).add(helper.text)
            guards.setdefault(helper.name, set()).add(helper.guard)
    local = {name for name, written in texts.items() if len(written) > 1}
    grown = True
    while grown:  # a helper that calls a member's own one is the member's own too
        callers = {h.name for helpers in offered for h in helpers if h.name not in local and h.calls & local}
        local |= callers
        grown = bool(callers)
    used: set[str] = set()
    kept_local = []
    for body, helpers in zip(bodies, offered):
        by_name = {helper.name: helper for helper in helpers}
        called: set[str] = set()
        waiting = list(identifiers(body.text()) & by_name.keys())
        while waiting:
            name = waiting.pop()
            if name not in called:
                called.add(name)
                waiting += [callee for callee in by_name[name].calls if callee in by_name]
        kept_local.append(_first_of_each([h for h in helpers if h.name in called and h.name in local]))
        used |= called - local
    # A helper that members under different guards (an mma.sync and a wgmma member) write alike is plain C++,
    # defined for every pass.
    shared = _first_of_each([h if len(guards[h.name]) == 1 else replace(h, guard=None)
                             for helpers in offered for h in helpers if h.name in used])
    return Prelude(shared, kept_local)


def _first_of_each(helpers: list[Helper]) -> list[Helper]:
    """One helper per name, in the order first offered, grouped by guard (in the order each guard first comes):
    helpers under one guard call only each other and unguarded ones, which come first."""
    first: dict[str, Helper] = {}
    for helper in helpers:
        first.setdefault(helper.name, helper)
    guards = list(dict.fromkeys(helper.guard for helper in first.values()))
    guards.sort(key=lambda guard: guard is not None)
    return [helper for guard in guards for helper in first.values() if helper.guard == guard]


def emit_helpers(helpers: list[Helper], o: Emitter) -> None:
    """The helpers' definitions, a blank line apart, each guard's `#if` around those that need it."""
    guard = None
    for index, helper in enumerate(helpers):
        if helper.guard != guard:
            if guard is not None:
                o.line("#endif")
                o.line()
            if helper.guard is not None:
                o.comment(helper.guard[1])
                o.line(helper.guard[0])
            guard = helper.guard
        elif index:
            o.line()
        o.lines(helper.text)
    if guard is not None:
        o.line("#endif")
