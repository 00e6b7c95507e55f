"""The GEMV path's rules: what its kernel computes (A and B read along K, of one 16-bit or f32 type; no fuse chain, no
grouped batch), the keys it reads (config.py's docstring) and the configuration's own limits."""
from __future__ import annotations

from typing import Any

from ... import ir
from ...targets import launch_register_cap
from .config import MAX_SMALL_ROWS, gemv_config, streamed_operand

EXAMPLE = "`mma { shape: gemv; }`, `block { tile: 1x16x1024; }`, `threads { warps: 1x8; }`, `pipeline { stages: 2; }`"
TYPES = (ir.DType.BF16, ir.DType.F16, ir.DType.F32)


def check_gemv(checker: Any) -> None:
    """Every rule of the path; `checker` is validate.py's (its `spec`, `error`, `warning` and `arch`)."""
    checker.check_target()
    _check_problem(checker)
    _check_sections(checker)
    if _check_shape(checker):
        _check_config(checker)


def _check_problem(checker: Any) -> None:
    spec, error = checker.spec, checker.error
    problem = spec.problem
    a, b = problem.a, problem.b
    if a.dtype not in TYPES or b.dtype is not a.dtype:
        error(problem.at("b"), f"the GEMV kernel multiplies A and B of one type, bf16, f16 or f32 (here "
                               f"{a.dtype.value} and {b.dtype.value})", f"write `b: {a.dtype.value} col;`")
    if a.layout is not ir.MatrixLayout.ROW:
        error(problem.at("a"), "the GEMV kernel reads A along K: A must be row-major",
              f"write `a: {a.dtype.value} row;`")
    if b.layout is not ir.MatrixLayout.COL:
        error(problem.at("b"), "the GEMV kernel reads B along K: B must be column-major (N x K, as nn.Linear stores "
                               "its weight)", f"write `b: {b.dtype.value} col;`")
    if spec.mma.shape.tensor and a.dtype is ir.DType.F32:
        error(spec.mma.at("shape"), f"{spec.mma.shape} multiplies 16-bit A and B (bf16 or f16) on the tensor cores; "
                                    "here they are f32", "write `shape: gemv;` (CUDA-core FMAs) for f32 operands")
    if problem.c.dtype not in TYPES:
        error(problem.at("c"), f"C is {problem.c.dtype.value}: the GEMV kernel writes bf16, f16 or f32",
              f"write `c: {a.dtype.value} row;`")
    if problem.grouped:
        error(problem.at("batch"), "batch: grouped is generated on the wgmma path only",
              "write `batch: strided;` or leave `batch` out")
    if spec.fuse is not None:
        error(spec.fuse.span, "the GEMV kernel has no fuse chain", "remove the `fuse` section")


def _check_sections(checker: Any) -> None:
    """Keys the path does not read: a refusal each, rather than a setting silently ignored."""
    spec, error = checker.spec, checker.error
    why = "the GEMV kernel reads both operands from global memory into registers, 16 bytes a lane"
    for section, node in (("smem", spec.smem_a), ("smem", spec.smem_b), ("load", spec.load_a), ("load", spec.load_b)):
        if node.key_spans:
            error(node.span, f"the GEMV kernel does not take `{section} {node.operand.value}`: {why}",
                  f"remove the section; the path's keys are {EXAMPLE}")
    for key in ("copy", "fragments", "unroll", "store"):
        if any(name == key for name, _ in spec.pipeline.key_spans):
            error(spec.pipeline.at(key), f"`{key}` does not apply to the GEMV kernel: {why}",
                  "remove it; `pipeline { stages: N; }` sets the chunks of each row a lane keeps in flight")
    for key in ("repeat", "precision", "accumulate"):
        if any(name == key for name, _ in spec.mma.key_spans):
            error(spec.mma.at(key), f"`{key}` does not apply to the GEMV kernel: it multiplies with f32 FMAs or, "
                                    "with `gemv_m16n8k16`, one mma.sync per 16-row tile and k-step into f32",
                  "remove it")
    for key in ("raster", "schedule"):
        if any(name == key for name, _ in spec.block.key_spans):
            error(spec.block.at(key), f"`{key}` does not apply to the GEMV kernel: a block takes whole rows of K, "
                                      "its small operand's row-blocks fastest", "remove it")


def _check_shape(checker: Any) -> bool:
    spec, error = checker.spec, checker.error
    block, warps = spec.block, spec.threads.warps
    streamed = streamed_operand(spec)
    if streamed is None:
        error(block.at("tile"), f"the block tile's M and N are both {block.m} and the warps ({warps}) lie along "
                                "neither: the GEMV kernel streams the operand on the tile's longer side, or on a "
                                "square tile's the one its warps lie along", "write `tile: 1x16x1024;` (B streams) "
                                "or `tile: 16x1x1024;` (A streams), or for a square tile `warps: 1x8;` (B streams)")
        return False
    small = min(block.m, block.n)
    ok = True
    if small > MAX_SMALL_ROWS:
        error(block.at("tile"), f"the tile's shorter side ({small}) is rows of the small operand per block: at most "
                                f"{MAX_SMALL_ROWS}, each a sum per streamed row in every thread's registers",
              "the GEMV path serves a few rows against many; write 1, 2, 4 or 8 (8 or 16 with `gemv_m16n8k16`)")
        ok = False
    across = warps.m if streamed is ir.Operand.B else warps.n
    if across != 1 or warps.m * warps.n * 32 > 1024:
        want = f"1x{warps.m * warps.n}" if streamed is ir.Operand.B else f"{warps.m * warps.n}x1"
        error(spec.threads.at("warps"), f"warps: {warps} — the GEMV kernel's warps lie along the streamed operand's "
                                        "rows and K, none across the small one: at most 1024 threads",
              f"write `warps: {want};`" if warps.m * warps.n * 32 <= 1024 else "write `warps: 1x8;`")
        ok = False
    return ok


def _check_config(checker: Any) -> None:
    spec = checker.spec
    config = gemv_config(spec)
    problems = config.problems()
    for key, message, hint in problems:
        checker.error(spec.block.at(key), message, hint)
    if problems or checker.arch is None:
        return
    cap = launch_register_cap(checker.arch, config.threads, config.blocks_per_sm or 1)
    if config.registers > cap:
        checker.warning(spec.pipeline.at("stages"),
                        f"the main loop keeps about {config.registers} registers live per thread "
                        f"({config.register_parts}), more than the {cap} that {config.blocks_per_sm or 1} block(s) of "
                        f"{config.threads} threads per SM leave: ptxas will likely spill",
                        "fewer stages, fewer streamed rows per warp (more warps along the rows) or fewer small rows")
