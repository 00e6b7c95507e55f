"""The pipeline in one place: source -> parse -> IR -> validate -> plan -> analysis -> emit (-> build).

`compile_source` does everything that depends only on gemmdsl, so its output is
deterministic and is what the golden files hold. `build.build` adds what the
installed nvcc decides; `write_outputs` puts files on disk atomically.
"""
from __future__ import annotations

import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from . import fuse_ops, ir
from .build import PtxasFigures, PtxasResources, cached_kernel_resources, ptxas_compiler
from .analysis import Analysis, analyze, default_problem, summary_lines
from .emit import emit_cuda
from .emit.header import emit_header
from .errors import GemmdslError
from .frontend import load
from .layout import TileLayout
from .paths import plan_kernel
from .plan import KernelPlan
from .source import Diagnostic, SourceFile
from .targets import TargetName
from .version import __version__


@dataclass
class Artifacts:
    spec: ir.KernelSpec
    plan: KernelPlan
    analysis: Analysis
    cuda: str
    metadata: dict
    warnings: list[Diagnostic] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def layout(self) -> TileLayout:
        return self.plan.layout

    @property
    def header(self) -> str:
        """NAME.h, declaring the launchers of `cuda`; made when written, not on every compile (tune)."""
        return emit_header(self.plan)

    def metadata_json(self) -> str:
        return json.dumps(self.metadata, indent=2, sort_keys=True) + "\n"

    def with_ptxas(self, resources: PtxasResources) -> "Artifacts":
        metadata = dict(self.metadata, ptxas=resources.as_dict())
        return dataclasses.replace(self, metadata=metadata)


def compile_path(path: str | Path, target: TargetName | int | None = None) -> Artifacts:
    return compile_source(SourceFile.read(path), target)


def compile_text(text: str, path: str = "<string>.gemm", target: TargetName | int | None = None) -> Artifacts:
    return compile_source(SourceFile(path, text), target)


def compile_source(source: SourceFile, target: TargetName | int | None = None) -> Artifacts:
    """Parse, validate, analyse and emit one spec; `target` overrides the spec's target."""
    spec, warnings = load(source, target)
    plan = plan_kernel(spec)
    analysis = analyze(spec, problem=default_problem(spec), plan=plan)
    warnings = warnings + analysis.warnings
    cuda = emit_cuda(plan, source.text, summary_lines(analysis))
    return Artifacts(spec, plan, analysis, cuda, launch_metadata(plan, source), warnings)


def ptxas_figures(artifacts: Artifacts) -> PtxasFigures | None:
    """ptxas's registers and spills for a compiled spec's kernel: nvcc's where it is on PATH, else NVRTC's
    where CuPy loads it (`build.ptxas_compiler`), else None; kept in the cache by the .cu's hash and the
    compiler's release (`build.cached_kernel_resources`)."""
    compiler = ptxas_compiler()
    if compiler is None:
        return None
    return cached_kernel_resources(artifacts.cuda, artifacts.name, artifacts.spec.target.code, compiler)


def ptxas_resources(path: str) -> dict | None:
    """`ptxas_figures` of the spec at `path`, as the analysis takes them."""
    figures = ptxas_figures(compile_path(path))
    return None if figures is None else figures.resources.as_dict()


def spec_hash(source: SourceFile, spec: ir.KernelSpec) -> str:
    # surrogatepass: text given to the Python API may hold a lone surrogate, which a file read never does
    digest = hashlib.sha256(source.text.encode("utf-8", "surrogatepass"))
    digest.update(f"\0{spec.target}\0{__version__}".encode())
    return digest.hexdigest()[:16]


def launch_metadata(plan: KernelPlan, source: SourceFile) -> dict:
    """What a caller needs to launch the kernel without reading the .cu."""
    spec, launch = plan.spec, plan.launch
    entries, requirements = launch.entries, launch.requirements
    return {
        "kernel": spec.name,
        "entry": entries.vector,
        # entries["scalar"]: the kernel with one-element global accesses, run when an operand
        # is not vector-aligned (checked bounds only; null when the vector kernel is scalar already).
        # entries["stream_k"] and ["prepare"]: schedule: stream_k's kernel for the last wave's tiles and the
        # one that sets those tiles to beta * C first (null otherwise); entries["stream_k_scalar"]: the
        # stream-K kernel of calls on the scalar kernel (null without a scalar kernel). entries["interior"]:
        # checked bounds' exact-bounds kernel for the tiles inside C (schedule.interior_launches);
        # entries["interior_partial_k"]: the same for K % BK != 0, with a partial last k-tile. entries["scale_c"]:
        # the K = 0 kernel (C = beta * C and the fuse chain), in every file.
        # entries["narrow"] (checked cp.async kernels with narrower copies only): the kernels with 8- or
        # 4-byte accesses, widest first, each with what its operands must be a multiple of and its stream-K twin.
        "entries": entries.to_json(),
        # schedule: stream_k: the grid above is split between the two kernels (gemmdsl/schedule.py).
        "schedule": spec.block.schedule.value,
        **launch.launchers,
        "arguments": [{"name": name, "type": ctype} for ctype, name in launch.parameters],
        "gemmdsl_version": __version__,
        "spec_hash": spec_hash(source, spec),
        "target": str(spec.target),
        "threads": launch.threads,
        "block": [launch.threads, 1, 1],
        "grid": list(launch.grid),
        "block_tile": list(launch.block_tile),
        "dynamic_smem_bytes": launch.smem_bytes,
        "bounds": spec.problem.bounds.value,
        "batch": spec.problem.batch.value,
        # Shapes: multiples of 1 for checked kernels. vector_elements: what each operand's pointer
        # (in floats), leading dimension and batch stride must be a multiple of for the vector kernel.
        "requires": {"m_multiple": requirements.m_multiple, "n_multiple": requirements.n_multiple,
                     "k_multiple": requirements.k_multiple, "vector_elements": requirements.vector_elements,
                     "max_leading_dimension": requirements.max_leading_dimension},
        "epilogue": spec.problem.epilogue.value,
        "layouts": {op.value: spec.problem.matrix(op).layout.value for op in ir.Operand},
        # What multiplies (fma | bf16 | f16 | tf32 | 3xtf32): verify and bench compare with cuBLAS at that precision.
        "unit": plan.path.unit(spec),
        # Element types of A, B, C (f32 | f16 | bf16); the launchers' pointers are of these types.
        "dtypes": {op.value: spec.problem.matrix(op).dtype.value for op in ir.Operand},
        "ptxas": None,
        # The launch rule (launch_plan.LaunchPlan.to_json): what the C launchers decide, read back by the runtime.
        "launch": launch.to_json(),
        **plan.path.metadata(plan),
        **fuse_metadata(spec),
    }


def fuse_metadata(spec: ir.KernelSpec) -> dict:
    """The fuse chain (docs/fusion.md), for the runtime's checks and verify's reference; absent without one."""
    fuse = spec.fuse
    if fuse is None:
        return {}
    steps = {step.key: step.metadata() for step in fuse.steps}
    return {"fuse": {"formula": fuse.describe(spec.problem.epilogue is ir.Epilogue.ALPHA_BETA),
                     **{op.key: steps.get(op.key) for op in fuse_ops.ops()}}}


class OutputError(GemmdslError):
    """A file that cannot be written: the CLI prints it as `error: cannot write PATH: reason`."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"cannot write {path}: {reason}")
        self.path = path


def write_outputs(directory: Path, files: dict[str, bytes]) -> list[Path]:
    """Write every file or none: each goes to a temporary name first, then all are renamed, holding the
    directory's lock (`renaming_lock`), so that writers of the same set at once leave one writer's whole set.

    Files get the mode a plain `open` would (0666 less the umask). Anything the file system refuses
    raises OutputError, with no temporary file left behind."""
    staged: list[tuple[Path, Path]] = []
    target = directory
    try:
        if directory.exists() and not directory.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        directory.mkdir(parents=True, exist_ok=True)
        mode = 0o666 & ~_umask()
        for name, content in files.items():
            target = directory / name
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
            staged.append((Path(tmp), target))
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(handle.fileno(), mode)
                handle.write(content)
        for tmp, final in staged:
            target = final
            if final.is_dir():
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        with renaming_lock(directory):
            for tmp, final in staged:
                target = final
                os.replace(tmp, final)
    except OSError as err:
        _remove(tmp for tmp, _ in staged)
        raise OutputError(target, err.strerror or str(err)) from None
    except BaseException:
        _remove(tmp for tmp, _ in staged)
        raise
    return [final for _, final in staged]


@contextmanager
def renaming_lock(directory: Path) -> Iterator[None]:
    """An exclusive flock on the directory itself, held while a set's files are renamed into it: nothing to
    create or clean up, and released by the kernel when a writer dies. Where the file system has no flock
    (some network mounts), the renames go ahead unlocked, as atomic per file as before."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _umask() -> int:
    """The process's umask; reading it means setting it, so it is set straight back."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _remove(paths) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:  # renamed already, or never created
            pass
