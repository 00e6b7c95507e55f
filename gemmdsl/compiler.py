"""The pipeline in one place: source -> parse -> IR -> passes -> codegen (-> build).

`compile_source` does everything that depends only on gemmdsl, so its output is
deterministic and is what the golden files hold. `build.build` adds what the
installed nvcc decides; `write_outputs` puts files on disk atomically.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__, ir
from .build import PtxasResources
from .check import Analysis, analyze, summary_lines
from .codegen import emit_cuda
from .frontend import load
from .layout import KernelLayout
from .source import CompileError, Diagnostic, SourceFile
from .validate import validate


@dataclass
class Artifacts:
    spec: ir.KernelSpec
    layout: KernelLayout
    analysis: Analysis
    cuda: str
    metadata: dict
    warnings: list[Diagnostic] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name

    def metadata_json(self) -> str:
        return json.dumps(self.metadata, indent=2, sort_keys=True) + "\n"

    def with_ptxas(self, resources: PtxasResources) -> "Artifacts":
        metadata = dict(self.metadata, ptxas=resources.as_dict())
        return dataclasses.replace(self, metadata=metadata)


def compile_path(path: str | Path, sm: int | None = None) -> Artifacts:
    return compile_source(SourceFile.read(path), sm)


def compile_text(text: str, path: str = "<string>.gemm", sm: int | None = None) -> Artifacts:
    return compile_source(SourceFile(path, text), sm)


def compile_source(source: SourceFile, sm: int | None = None) -> Artifacts:
    """Parse, validate, analyse and emit one spec; `sm` overrides the spec's target."""
    spec, warnings = load(source)
    if sm is not None and sm != spec.target.sm:
        spec = spec.with_target(sm)
        problems = validate(spec)
        errors = [d for d in problems if d.severity.value == "error"]
        if errors:
            raise CompileError(errors, source)
    layout = KernelLayout(spec)
    analysis = analyze(spec)
    warnings = warnings + analysis.warnings
    cuda = emit_cuda(spec, layout, source.text, summary_lines(analysis))
    return Artifacts(spec, layout, analysis, cuda, launch_metadata(spec, layout, source), warnings)


def spec_hash(source: SourceFile, spec: ir.KernelSpec) -> str:
    digest = hashlib.sha256(source.text.encode())
    digest.update(f"\0sm_{spec.target.sm}\0{__version__}".encode())
    return digest.hexdigest()[:16]


def launch_metadata(spec: ir.KernelSpec, layout: KernelLayout, source: SourceFile) -> dict:
    """What a caller needs to launch the kernel without reading the .cu."""
    return {
        "kernel": spec.name,
        "entry": f"{spec.name}_kernel",
        "launcher": f"{spec.name}_launch",
        "gemmdsl_version": __version__,
        "spec_hash": spec_hash(source, spec),
        "target": str(spec.target),
        "threads": layout.threads,
        "block": [layout.threads, 1, 1],
        "grid": [f"(M / {layout.bm}) * (N / {layout.bn})", 1, 1],
        "block_tile": [layout.bm, layout.bn, layout.bk],
        "dynamic_smem_bytes": layout.smem_bytes,
        "requires": {"m_multiple": layout.bm, "n_multiple": layout.bn, "k_multiple": layout.bk,
                     "alignment_bytes": 16},
        "epilogue": spec.problem.epilogue.value,
        "layouts": {"a": spec.problem.a.layout.value, "b": spec.problem.b.layout.value,
                    "c": spec.problem.c.layout.value},
        "ptxas": None,
    }


def write_outputs(directory: Path, files: dict[str, bytes]) -> list[Path]:
    """Write every file or none: each goes to a temporary name first, then all are renamed."""
    directory.mkdir(parents=True, exist_ok=True)
    staged: list[tuple[str, Path]] = []
    try:
        for name, content in files.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
            staged.append((tmp, directory / name))
    except BaseException:
        for tmp, _ in staged:
            os.unlink(tmp)
        raise
    for tmp, final in staged:
        os.replace(tmp, final)
    return [final for _, final in staged]
