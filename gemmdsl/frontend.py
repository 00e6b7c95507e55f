"""Front end: a `.gemm` file -> a checked KernelSpec, or a CompileError listing every problem.

    spec, warnings = load_path("specs/sgemm_v3.gemm")

Parsing reports every syntax error it can get past: after an unexpected character
or token the damaged entry (up to its `;`, or its section's `}`) is blanked out,
positions kept, and the text parsed again, up to parser.MAX_SYNTAX_ERRORS; an
unclosed brace or text outside the kernel stops it. Every schema error (unknown
keys, bad values) of what is left is reported too, but no "missing required" one
where entries were cut out. Only a spec that parsed without errors is validated,
and then every semantic error and warning is reported, in source order.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from . import ir
from .parser import parse
from .paths import path_of, registered
from .source import CompileError, Diagnostic, Severity, SourceFile
from .targets import TargetName
from .validate import validate


def load(source: SourceFile, target: TargetName | int | None = None) -> tuple[ir.KernelSpec, list[Diagnostic]]:
    """Parse and validate; returns the spec and its warnings, or raises CompileError.

    `target` (sm_90a as TargetName(90, True); a plain number such as 80 names sm_80) overrides the
    spec's target before validation, so the new architecture's limits apply. The CompileError
    carries the errors and any warnings of the same spec, in source order."""
    if isinstance(target, int):
        target = TargetName(target)
    spec = parse(source)
    targeted = spec if target is None else spec.with_target(*target)
    diagnostics = validate(targeted, path_of(targeted), registered())
    if target is not None:
        # What is said of the target is said of the override: the line quoted names the spec's own.
        written = spec.target.at("target")
        diagnostics = [dataclasses.replace(d, hint=f"{target} replaces the spec's {spec.target} here"
                                                   f"{'; ' + d.hint if d.hint else ''}")
                       if d.span == written else d for d in diagnostics]
        spec = spec.with_target(*target)
    if any(d.severity is Severity.ERROR for d in diagnostics):
        raise CompileError(diagnostics, source)
    return spec, diagnostics


def load_path(path: str | Path) -> tuple[ir.KernelSpec, list[Diagnostic]]:
    """`load` for a file; non-.gemm, unreadable and non-UTF-8 files raise CompileError too."""
    return load(SourceFile.read(path))


def load_spec(path_or_source: str | Path | SourceFile) -> ir.KernelSpec:
    """The checked spec alone, from a path or a SourceFile (warnings are dropped)."""
    if isinstance(path_or_source, SourceFile):
        return load(path_or_source)[0]
    return load_path(path_or_source)[0]
