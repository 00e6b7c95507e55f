"""The Python API without a GPU, for build systems and notebooks: compile, check, and a family's choice.

    import gemmdsl
    out = gemmdsl.compile_spec("specs/sgemm_v3.gemm")            # CompiledSpec: .cuda, .header, .metadata
    out.write("build/kernels")                                   # NAME.cu, NAME.h, NAME.json, all or none
    report = gemmdsl.check_spec("specs/sgemm_v3.gemm", (4096, 4096, 4096))   # what `check --json` prints
    choice = gemmdsl.choose_member("specs/sgemm_family.gemmf", (16, 4096, 4096))
    choice["member"], choice["reason"]

Nothing here imports CuPy or needs a GPU; `ptxas=True` runs nvcc, where it is on PATH. Every error is a
`gemmdsl.GemmdslError`: a CompileError whose text is the positioned diagnostics (file:line:col, the line, a
caret, a hint), an OutputError naming the file that cannot be written, a ProblemSizeError, or a UsageError
naming what to pass or install. The commands (`gemmdsl compile`, `gemmdsl check`) print the same things.
"""
from __future__ import annotations

import operator
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .analysis import ProblemSizeError, analyze
from .build import cached_kernel_resources, find_nvcc
from .check import report_json
from .compiler import compile_source, write_outputs
from .errors import GemmdslError
from .family import FamilyArtifacts, compile_family, explain
from .file_kinds import is_family_path
from .passes import DEFAULT_PROBLEM
from .source import Diagnostic, SourceFile
from .targets import TARGETS, TargetName, parse_target

Spec = str | os.PathLike  # a .gemm spec's or .gemmf family's path (with text=: the name the text is shown as)
Target = str | TargetName | int | None  # "sm_80", TargetName(90, True) for sm_90a, 80; None: the spec's own


class UsageError(GemmdslError, ValueError):
    """An argument the API cannot take; the message says what it takes."""


@dataclass(frozen=True)
class CompiledSpec:
    """What `gemmdsl compile --no-nvcc` writes for a spec or a family, as text: `files` maps NAME.cu, NAME.h and
    NAME.json to their contents, byte for byte the command's. `warnings`: the spec's (and for a family its
    members') warnings, rendered as the command prints them."""

    name: str
    cuda: str
    header: str
    metadata: dict
    metadata_json: str
    warnings: tuple[str, ...]

    @property
    def files(self) -> dict[str, str]:
        return {f"{self.name}.cu": self.cuda, f"{self.name}.h": self.header, f"{self.name}.json": self.metadata_json}

    def write(self, directory: str | os.PathLike) -> list[Path]:
        """Write `files` into `directory` (made if missing), all or none (compiler.write_outputs); the paths."""
        return write_outputs(Path(directory), {name: text.encode() for name, text in self.files.items()})


def compile_spec(spec: Spec, *, text: str | None = None, target: Target = None,
                 output: str | os.PathLike | None = None) -> CompiledSpec:
    """Compile a `.gemm` spec or a `.gemmf` family (`text`: the source itself, `spec` the name it is shown as);
    `target` overrides the spec's (and re-checks it against that architecture's limits), as `--arch` does;
    `output`: also write the files into that directory."""
    source = _source(spec, text)
    arch = _target(target)
    if is_family_path(source.path):
        family = compile_family(source, arch)
        compiled = CompiledSpec(family.name, family.cuda, family.header, family.metadata, family.metadata_json(),
                                tuple(_rendered(warning) for member in family.members
                                      for warning in member.artifacts.warnings))
    else:
        artifacts = compile_source(source, arch)
        compiled = CompiledSpec(artifacts.name, artifacts.cuda, artifacts.header, artifacts.metadata,
                                artifacts.metadata_json(), tuple(w.render(source) for w in artifacts.warnings))
    if output is not None:
        compiled.write(output)
    return compiled


def check_spec(spec: Spec, problem: Sequence[int] | str = DEFAULT_PROBLEM, *, text: str | None = None,
               target: Target = None, ptxas: bool = False) -> dict:
    """The analysis of a spec at the problem M x N x K, as data: the object `gemmdsl check --json` prints (for
    a family, which member runs the problem and why, as `choose_member`). ptxas=True adds ptxas's registers and
    spills of the kernel nvcc builds (nvcc on PATH, else a UsageError saying so)."""
    source = _source(spec, text)
    size = _problem(problem)
    arch = _target(target)
    if is_family_path(source.path):
        return explain(compile_family(source, arch), size)
    artifacts = compile_source(source, arch)
    figures = None
    if ptxas:
        if find_nvcc() is None:
            raise UsageError("ptxas=True needs nvcc on PATH: install the CUDA toolkit (or leave ptxas out; "
                             "`gemmdsl check` reads them from NVRTC where CuPy is installed)")
        figures = cached_kernel_resources(artifacts.cuda, artifacts.name, artifacts.spec.target.code, "nvcc")
    resources = None if figures is None else figures.resources.as_dict()
    return report_json(analyze(artifacts.spec, size, resources, plan=artifacts.plan), figures, artifacts)


def choose_member(family: Spec | FamilyArtifacts, problem: Sequence[int] | str, *, text: str | None = None,
                  target: Target = None) -> dict:
    """Which member of a `.gemmf` family runs M x N x K and why, as the family's launchers decide: `member`,
    `reason`, and per member its tile and the rule's figures (`members`); what `gemmdsl check FAMILY --json`
    prints. A family already compiled (family.compile_family) is taken as it is."""
    size = _problem(problem)
    if isinstance(family, FamilyArtifacts):
        return explain(family, size)
    source = _source(family, text)
    if not is_family_path(source.path):
        raise UsageError(f"{source.path}: choose_member takes a .gemmf kernel family; a .gemm spec has one member "
                         f"(check_spec analyses it)")
    return explain(compile_family(source, _target(target)), size)


def _source(spec: Spec, text: str | None) -> SourceFile:
    """The source of a path (CompileError where it cannot be read), or `text` shown as that name."""
    if not isinstance(spec, (str, os.PathLike)):
        raise UsageError(f"expected the path of a .gemm spec or .gemmf family (or its name, with text=...), got "
                         f"{type(spec).__name__}")
    if text is not None:
        return SourceFile(os.fspath(spec), text)
    return SourceFile.read(spec, ".gemmf", "family") if is_family_path(spec) else SourceFile.read(spec)


def _target(target: Target) -> TargetName | int | None:
    if target is None or isinstance(target, (TargetName, int)) and not isinstance(target, bool):
        return target
    named = parse_target(target) if isinstance(target, str) else None
    if named is None:
        raise UsageError(f"unknown target {target!r}; the targets are {', '.join(map(str, TARGETS))}")
    return named


def _problem(problem: Sequence[int] | str) -> tuple[int, int, int]:
    """M, N, K from three integers or "MxNxK"; ProblemSizeError for anything else, sizes below 1 included."""
    parts = problem.lower().split("x") if isinstance(problem, str) else problem
    try:
        size = tuple(int(part) if isinstance(part, str) else operator.index(part) for part in parts
                     if not isinstance(part, bool))
    except (TypeError, ValueError):
        size = ()
    if len(size) != 3 or min(size) < 1:
        raise ProblemSizeError(f"a problem is three positive integers M, N, K (or \"MxNxK\"), not {problem!r}")
    return size


def _rendered(diagnostic: Diagnostic) -> str:
    """A diagnostic with its line quoted, read from the file it points at (a family member's)."""
    try:
        return diagnostic.render(SourceFile.read(diagnostic.span.file))
    except GemmdslError:
        return diagnostic.render()
