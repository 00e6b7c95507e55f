"""The dequantizing decode path's rules (the generic rules of quantized weights ran before: validate_quant.py):
what the kernel computes (C = A W^T, row-major A and C, a store epilogue, no batch, no fuse chain), the keys it
reads (lowering.py's docstring) and the kernel's limits (DecodeConfig.problems, its registers)."""
from __future__ import annotations

from typing import Any

from ... import ir
from ...quant_layout import TILE_N
from ...targets import smem_limit
from .kernel import M_TILES
from .lowering import decode_config

MAX_TILES_PER_WARP = 4
EXAMPLE = ("`block { tile: 16x256x1024; }`, `threads { warps: 1x8; }`, `pipeline { stages: 4; }` "
           "(docs/quantized-kernel.md)")


def check_decode(checker: Any) -> None:
    """Every rule of the path; `checker` is validate.py's (its `error`, `warning` and `arch`)."""
    checker.check_target()
    _check_problem(checker)
    _check_sections(checker)
    if _check_shape(checker) and checker.arch is not None:
        _check_config(checker)


def _check_problem(checker: Any) -> None:
    spec, error = checker.spec, checker.error
    problem = spec.problem
    for operand in (ir.Operand.A, ir.Operand.C):
        matrix = problem.matrix(operand)
        if matrix.layout is not ir.MatrixLayout.ROW:
            error(problem.at(operand.value), f"{operand.name} must be row-major for the dequantizing decode kernel "
                                             f"(one activation row, one output row, each contiguous)",
                  f"write `{operand.value}: {matrix.dtype.value} row;`")
    if problem.c.dtype not in (ir.DType.BF16, ir.DType.F16, ir.DType.F32):
        error(problem.at("c"), f"C is {problem.c.dtype.value}: the decode kernel writes bf16, f16 or f32",
              f"write `c: {problem.a.dtype.value} row;`")
    if problem.bounds is not ir.Bounds.CHECKED:
        error(problem.at("bounds"), "the decode kernel takes any M and N (bounds: checked); it has no "
                                    "exact-bounds variant", "write `bounds: checked;` or leave it out")
    if problem.epilogue is not ir.Epilogue.STORE:
        error(problem.at("epilogue"), "the decode kernel stores C = A W^T; it has no alpha_beta epilogue",
              "write `epilogue: store;` or leave it out, and scale C afterwards")
    if problem.batch is not ir.Batch.NONE:
        error(problem.at("batch"), f"batch: {problem.batch.value} is not generated for dequantized weights: a "
                                   "decode call is one GEMM", "leave `batch` out; stack the rows of A instead")
    if spec.fuse is not None:
        error(spec.fuse.span, "the decode kernel has no fuse chain yet", "remove the `fuse` section")


def _check_sections(checker: Any) -> None:
    """Keys the path does not read: a refusal each, rather than a setting silently ignored."""
    spec, error = checker.spec, checker.error
    why = "the decode kernel streams the weights into registers and stages A itself"
    for section, node in (("smem", spec.smem_a), ("smem", spec.smem_b), ("load", spec.load_a), ("load", spec.load_b)):
        if node.key_spans:
            error(node.span, f"the decode kernel does not take `{section} {node.operand.value}`: {why}",
                  f"remove the section; the path's keys are {EXAMPLE}")
    for key, what in (("copy", "it loads the weights with ld.global.nc"), ("fragments", "it has no fragments to "
                      "buffer"), ("unroll", "it unrolls the whole k-slice"), ("store", "it stores C directly")):
        if any(name == key for name, _ in spec.pipeline.key_spans):
            error(spec.pipeline.at(key), f"`{key}` does not apply to the decode kernel: {what}",
                  "remove it; `pipeline { stages: N; }` sets the chunks of weights in flight")
    if spec.budget.registers is not None:
        error(spec.budget.at("registers"), "the decode kernel's register cap follows from `blocks_per_sm` "
                                           "(__launch_bounds__)", "write `budget { blocks_per_sm: N; }` instead")
    block = spec.block
    if any(name in ("raster", "schedule") for name, _ in block.key_spans):
        key = next(name for name, _ in block.key_spans if name in ("raster", "schedule"))
        error(block.at(key), f"`{key}` does not apply to the decode kernel: its grid is fixed (A's rows along x, "
                             "W's along y, k-slices along z)", "remove it")


def _check_shape(checker: Any) -> bool:
    """The block tile against the warps: whole 16-row tiles of W per warp, 8-row tiles of A."""
    spec, error = checker.spec, checker.error
    block, warps = spec.block, spec.threads.warps
    ok = True
    if warps.m != 1 or warps.n * 32 > 1024:
        error(spec.threads.at("warps"), f"warps: {warps} — the decode kernel's warps lie side by side along W's "
                                        "rows: 1xW with W * 32 threads at most 1024", "write `warps: 1x8;`")
        ok = False
    if block.m not in tuple(8 * m for m in M_TILES):
        error(block.at("tile"), f"the block tile's M ({block.m}) is rows of A per block: 8, 16 or 32 (8-row "
                                "tiles of the mma's N side)", "write `tile: 16x256x1024;`")
        ok = False
    tiles = block.n // (TILE_N * warps.n) if ok else 0
    if ok and (block.n % (TILE_N * warps.n) or not 1 <= tiles <= MAX_TILES_PER_WARP):
        error(block.at("tile"), f"the block tile's N ({block.n}) is rows of W per block: each of the {warps.n} warps "
                                f"takes 1 to {MAX_TILES_PER_WARP} tiles of {TILE_N} rows",
              f"write N = {TILE_N * warps.n * 2} ({warps.n} warps x 2 tiles x {TILE_N} rows)")
        ok = False
    return ok


def _check_config(checker: Any) -> None:
    """DecodeConfig's own limits, each where the spec sets it, and the registers the mainloop keeps live."""
    spec, error = checker.spec, checker.error
    config = decode_config(spec)
    where = {"k_slice": (spec.block.at("tile"), "make the block tile's K a multiple of the group and the "
                                                 "weights' 128-bit chunk, e.g. 1024"),
             "m_tiles": (spec.block.at("tile"), "write M = 8, 16 or 32"),
             "smem": (spec.block.at("tile"), "a smaller M or K: A's rows of the k-slice are staged in shared memory"),
             "prefetch": (spec.pipeline.at("stages"), "write `stages: 4;`")}
    for problem in config.problems(checker.arch.smem_per_block):
        span, hint = where[problem.setting]
        error(span, problem.message, hint)
    arch = checker.arch
    fits = smem_limit(arch, config.smem_bytes)
    if not config.problems() and fits < config.blocks_per_sm:
        checker.warning(spec.budget.at("blocks_per_sm"),
                        f"{config.blocks_per_sm} blocks per SM are asked for, but a block stages "
                        f"{config.smem_bytes:,} bytes of A and scales, and an SM's {arch.smem_per_sm:,} bytes hold "
                        f"{fits}: __launch_bounds__ caps the registers for blocks that cannot be resident",
                        f"write `budget {{ blocks_per_sm: {max(1, fits)}; }}`, or a smaller block M or K")
    if not config.problems() and config.registers > config.register_cap:
        sums = "the accumulators and a group's partial sums" if config.fmt.group else "the accumulators"
        checker.warning(spec.pipeline.at("stages"),
                        f"the mainloop keeps about {config.registers} registers live per thread (the ring of "
                        f"{config.prefetch} chunks x {config.tiles} tiles, {sums}), more than the "
                        f"{config.register_cap} that {config.blocks_per_sm} blocks of {config.warps * 32} threads "
                        "per SM leave: ptxas will likely spill",
                        "fewer stages, fewer tiles per warp (a smaller block N), or fewer blocks per SM "
                        "(`budget { blocks_per_sm: 1; }`)")
