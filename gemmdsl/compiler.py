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
from .codegen import (emit_cuda, kernel_parameters, kernel_variants, launcher_names, leading_dimension_limit,
                      prepare_entry, scalar_entry, stream_k_entry, tile_count)
from .frontend import load, require_fma
from .layout import KernelLayout
from .source import Diagnostic, SourceFile


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
    spec, warnings = load(source, sm)
    require_fma(spec, source)
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
    checked = spec.problem.checked
    variants = kernel_variants(spec, layout)
    tiles = " * ".join(f"({tile_count(spec, extent, str(size))})"
                       for extent, size in (("M", layout.bm), ("N", layout.bn)))
    return {
        "kernel": spec.name,
        "entry": variants[0].entry,
        # entries["scalar"]: the kernel with one-element global accesses, run when an operand
        # is not vector-aligned (checked bounds only; null when the vector kernel is scalar already).
        # entries["stream_k"] and ["prepare"]: schedule: stream_k's kernel for the last wave's tiles and the
        # one that sets those tiles to beta * C first (null otherwise).
        "entries": {"vector": variants[0].entry, "scalar": scalar_entry(variants),
                    "stream_k": stream_k_entry(spec) if spec.block.stream_k else None,
                    "prepare": prepare_entry(spec)},
        # schedule: stream_k: the grid above is split between the two kernels (gemmdsl/schedule.py).
        "schedule": spec.block.schedule.value,
        **launcher_names(spec),
        "arguments": [{"name": name, "type": ctype} for ctype, name in kernel_parameters(spec)],
        "gemmdsl_version": __version__,
        "spec_hash": spec_hash(source, spec),
        "target": str(spec.target),
        "threads": layout.threads,
        "block": [layout.threads, 1, 1],
        "grid": [tiles, 1, "batch" if spec.problem.batched else 1],
        "block_tile": [layout.bm, layout.bn, layout.bk],
        "dynamic_smem_bytes": layout.smem_bytes,
        "bounds": spec.problem.bounds.value,
        "batch": spec.problem.batch.value,
        # Shapes: multiples of 1 for checked kernels. vector_elements: what each operand's pointer
        # (in floats), leading dimension and batch stride must be a multiple of for the vector kernel.
        "requires": {"m_multiple": 1 if checked else layout.bm, "n_multiple": 1 if checked else layout.bn,
                     "k_multiple": 1 if checked else layout.bk,
                     "vector_elements": {op.value: layout.global_vector(op) for op in ir.Operand},
                     "max_leading_dimension": {op.value: leading_dimension_limit(spec, op) for op in ir.Operand}},
        "epilogue": spec.problem.epilogue.value,
        "layouts": {op.value: spec.problem.matrix(op).layout.value for op in ir.Operand},
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
