"""The cross-field rules of a wgmma spec (Hopper's own path), called from validate.py.

What would give wrong answers is an error: a swizzle the wgmma descriptor cannot express, a stage
ring over the shared-memory limit, a tile the TMA box cannot describe, accumulators that overflow
the consumer's registers, a ring too shallow to make progress. What this first landing does not
generate yet is an error that says so ("not supported yet"), so no spec silently gets other code.
"""
from __future__ import annotations

from typing import Callable

from ... import ir
from ...source import Span
from .layout import CONSUMER_RESERVE, MAX_BOX, SWIZZLE_SPAN, WGMMA_M, WgmmaLayout
from ...targets import ARCH_SPECIFIC, WARPGROUP

MAX_WGMMA_N = 256
WGMMA_K_BYTES = 32  # one wgmma k-step reads 32 bytes of each row of A and B: k16 (16-bit), k8 (TF32), k32 (FP8)

Report = Callable[[Span, str, str | None], None]


def check_wgmma(spec: ir.KernelSpec, error: Report, warning: Report, lowering: type = WgmmaLayout) -> None:
    """Every rule of the wgmma path; `error` and `warning` take (span, message, hint). `lowering` is the
    path's layout class (the FP8 path's holds promoted accumulators), which the shared-memory and register
    fit is measured on."""
    assert spec.mma is not None and isinstance(spec.mma.shape, ir.WgmmaShape)
    ok = _check_target(spec, error)
    ok = _check_problem(spec, error) and ok
    ok = _check_shape(spec, error) and ok
    ok = _check_smem(spec, error) and ok
    ok = _check_pipeline(spec, error) and ok
    _check_unused_sections(spec, error)
    if not ok:
        return
    ok = _check_tile(spec, error)
    if ok:
        _check_fit(lowering(spec), error)


def _check_target(spec: ir.KernelSpec, error: Report) -> bool:
    target = spec.target
    if target.arch_specific and target.sm in ARCH_SPECIFIC:
        return True
    names = ", ".join(f"sm_{sm}a" for sm in ARCH_SPECIFIC)
    error(target.at("target"),
          f"wgmma ({spec.mma.shape}) needs an arch-specific target ({names}); {target} has no wgmma",
          "write `target sm_90a;` (the code then runs on sm_90 GPUs only), or use an mma.sync shape "
          "such as m16n8k16")
    return False


def _check_problem(spec: ir.KernelSpec, error: Report) -> bool:
    problem, ok = spec.problem, True
    a, b = problem.a, problem.b
    if a.dtype is not b.dtype and not (a.dtype.fp8 and b.dtype.fp8):
        ok = False  # validate.py's problem check reports it
    if a.dtype is ir.DType.F32 or a.dtype.fp8:  # TF32 and FP8 wgmma have no transpose: both operands k-major
        kind = "TF32" if a.dtype is ir.DType.F32 else "FP8"
        for operand, matrix, k_major in ((ir.Operand.A, a, ir.MatrixLayout.ROW), (ir.Operand.B, b, ir.MatrixLayout.COL)):
            if matrix.layout is not k_major:
                usage = " (W as nn.Linear stores it, N x K row-major)" if operand is ir.Operand.B else ""
                error(problem.at(operand.value), f"{kind} wgmma reads k-major operands only (it has no transpose); a "
                                                 f"{matrix.layout.value}-major {operand.value.upper()} is MN-major",
                      f"store {operand.value.upper()} with k contiguous: `{operand.value}: {matrix.dtype.value} "
                      f"{k_major.value};`{usage}")
                ok = False
    if problem.c.layout is not ir.MatrixLayout.ROW:
        error(problem.at("c"), "a column-major C is not supported yet on the wgmma path",
              f"write `c: {problem.c.dtype.value} row;`")
        ok = False
    if problem.batched and spec.block.stream_k:
        error(problem.at("batch"), "batch: strided with schedule: stream_k is not supported yet on the wgmma path",
              "use `schedule: persistent` (its blocks walk the tiles of every GEMM of the batch)")
        ok = False
    ok = _check_grouped(spec, error) and ok
    ok = _check_pingpong(spec, error) and ok
    return ok


def _check_pingpong(spec: ir.KernelSpec, error: Report) -> bool:
    """`schedule: pingpong` (paths/wgmma/pingpong.py): consumers that take turns need two of them, and the splitter
    warps of 3xTF32 and the batch walks of strided and grouped GEMMs are not generated with it yet."""
    block, problem = spec.block, spec.problem
    if block.schedule is not ir.Schedule.PINGPONG:
        return True
    if spec.threads.warpgroups < 2:
        error(block.at("schedule"), "schedule: pingpong alternates consumer warpgroups' main loops, and this spec has "
                                    "one", "use `warpgroups: 2;` (each warpgroup then multiplies a whole tile), or "
                                           "`schedule: persistent;`")
        return False
    if spec.mma.precision is ir.Precision.TF32X3:
        error(block.at("schedule"), "schedule: pingpong with precision: tf32x3 is not supported yet (its splitter "
                                    "warps split each stage for every consumer)", "use `schedule: persistent;`")
        return False
    if problem.batched:
        error(problem.at("batch"), "batch: strided with schedule: pingpong is not supported yet on the wgmma path",
              "use `schedule: persistent;`")
        return False
    return True


def _check_grouped(spec: ir.KernelSpec, error: Report) -> bool:
    """`batch: grouped` (paths/wgmma/grouped.py): one persistent launch over every group's tiles, 16-bit or FP8
    operands."""
    problem, block = spec.problem, spec.block
    if not problem.grouped:
        return True
    if block.schedule is not ir.Schedule.PERSISTENT:
        error(block.at("schedule"), f"batch: grouped walks every group's tiles in one persistent launch; "
                                    f"schedule: {block.schedule.value} is not supported with it",
              "write `schedule: persistent;`")
        return False
    if not problem.checked:
        error(problem.at("bounds"), "batch: grouped needs bounds: checked: a group's rows end anywhere, and its last "
                                    "tile's stores stop at that row", "write `bounds: checked;`")
        return False
    dtype = problem.a.dtype
    if dtype not in (ir.DType.BF16, ir.DType.F16) and not dtype.fp8:
        error(problem.at("a"), f"batch: grouped is generated for bf16, f16 and FP8 operands only (so far), not "
                               f"{dtype.value}", "write `a: bf16 row; b: bf16 col;`")
        return False
    return True


def _check_shape(spec: ir.KernelSpec, error: Report) -> bool:
    mma = spec.mma
    shape = mma.shape
    ok = True
    dtype = spec.problem.a.dtype
    f32 = dtype is ir.DType.F32
    k = WGMMA_K_BYTES // dtype.bytes  # wgmma's k is 32 bytes of the operand type
    if shape.k != k:
        what = f"{dtype.value} operands" + (" (as TF32)" if f32 else "")
        error(mma.at("shape"), f"wgmma {shape} has k{shape.k}; {what} take m64nNk{k}",
              f"use `shape: m64n{shape.n}k{k};`")
        ok = False
    if mma.accumulate is not None and not dtype.fp8:
        error(mma.at("accumulate"), f"accumulate: {mma.accumulate.value} applies to FP8 operands; {dtype.value} "
                                    "wgmma accumulates in full f32", "remove `accumulate`")
        ok = False
    if shape.n % 8 or not 8 <= shape.n <= MAX_WGMMA_N:
        near = min(MAX_WGMMA_N, max(8, shape.n // 8 * 8))
        error(mma.at("shape"), f"wgmma has no N = {shape.n}: N is a multiple of 8 from 8 to {MAX_WGMMA_N}",
              f"use `shape: m64n{near}k{k};`")
        ok = False
    if f32 and mma.precision is ir.Precision.NATIVE:
        error(mma.span, "f32 operands on tensor cores need a precision; the wgmma path multiplies them as TF32",
              "add `precision: tf32;` (one product, 10-bit mantissa) or `precision: 3xtf32;` (three products, "
              "about FP32 accuracy)")
        ok = False
    elif not f32 and mma.precision is not ir.Precision.NATIVE:
        dtype = spec.problem.a.dtype.value
        error(mma.at("precision"), f"precision: {mma.precision.value} applies to f32 operands; {dtype} operands "
                                   f"are multiplied as {dtype}", "remove `precision`")
        ok = False
    return ok


def _check_smem(spec: ir.KernelSpec, error: Report) -> bool:
    ok = True
    for operand in (ir.Operand.A, ir.Operand.B):
        smem, matrix = spec.smem(operand), spec.problem.matrix(operand)
        order = _landing_order(operand, matrix.layout)
        if smem.order is not order:
            error(smem.at("order"), f"TMA lands a box as it lies in global memory: a {matrix.layout.value}-major "
                                    f"{operand.value.upper()} arrives {order.value[1]}-contiguous, not "
                                    f"{smem.order.value[1]}-contiguous",
                  f"write `order: {order.value};`, or store {operand.value.upper()} the other way in global memory")
            ok = False
        if smem.pad:
            error(smem.at("pad"), "TMA writes each box densely; a padded stage would put rows where the wgmma "
                                  "descriptor does not look", "remove `pad`: the 128-byte swizzle already keeps "
                                                              "wgmma's reads free of bank conflicts")
            ok = False
        if smem.swizzle is not None:
            s = smem.swizzle
            # On 16-bit elements xor(3, 3, 3) is the 128-byte mode itself: 16-byte chunks (2^3 elements),
            # xor-ed with the row (2^3 chunks of 8 elements = 128 bytes per row), 8 rows.
            if (s.bits, s.base, s.shift) == (3, 3, 3) and spec.problem.matrix(operand).dtype.bytes == 2:
                error(smem.at("swizzle"), f"write the wgmma path's swizzle as a mode: {s} on 16-bit elements is "
                                          "the 128-byte swizzle", "write `swizzle: 128B;`")
            else:
                error(smem.at("swizzle"), f"the wgmma descriptor cannot express {s}: TMA and wgmma swizzle only "
                                          "32-, 64- or 128-byte spans (16-byte chunks xor-ed with the row)",
                      "write `swizzle: 128B;`")
            ok = False
        elif smem.swizzle_bytes != SWIZZLE_SPAN:
            error(smem.at("swizzle"), f"swizzle: {smem.swizzle_bytes}B is not supported yet; this landing "
                                      f"emits the {SWIZZLE_SPAN}-byte mode, whose rows hold one k-tile row",
                  "write `swizzle: 128B;`")
            ok = False
    return ok


def _landing_order(operand: ir.Operand, layout: ir.MatrixLayout) -> ir.SmemOrder:
    """The shared-memory order in which TMA delivers an operand stored with `layout`."""
    row = layout is ir.MatrixLayout.ROW
    if operand is ir.Operand.A:
        return ir.SmemOrder.MK if row else ir.SmemOrder.KM
    return ir.SmemOrder.KN if row else ir.SmemOrder.NK


def _check_pipeline(spec: ir.KernelSpec, error: Report) -> bool:
    p = spec.pipeline
    ok = True
    if p.copy is not ir.CopyMode.TMA:
        error(p.at("copy"), f"copy: {p.copy.value} does not feed wgmma: its operands reach shared memory by TMA "
                            "in the layout its descriptors read", "write `copy: tma;` (the default for wgmma specs)")
        ok = False
    if p.stages < 2:
        error(p.at("stages"), f"stages: {p.stages}: a consumer releases a stage only once the next k-tile's "
                              "wgmma is issued, so the ring needs at least 2 stages or it deadlocks",
              "use `stages: 4;`")
        ok = False
    if p.unroll != 1:
        error(p.at("unroll"), "unroll does not apply to the wgmma path: its k-loop waits on barriers",
              "remove `unroll`")
        ok = False
    return ok


def _check_unused_sections(spec: ir.KernelSpec, error: Report) -> None:
    for operand in (ir.Operand.A, ir.Operand.B):
        load = spec.load(operand)
        if load.key_spans:
            error(load.at("vector"), "TMA copies whole boxes; a wgmma spec has no `load` vector width",
                  f"remove `load {operand.value} {{ ... }}`")
    budget = spec.budget
    if budget.registers is not None or budget.blocks_per_sm is not None:
        key = "registers" if budget.registers is not None else "blocks_per_sm"
        error(budget.at(key), "a wgmma spec's registers are set by setmaxnreg (one block per SM, registers "
                              "moved from the producer to the consumers); a budget does not apply",
              "remove the `budget` section")


def _check_tile(spec: ir.KernelSpec, error: Report) -> bool:
    """The block tile against the consumers, the wgmma shape, the swizzle span and the TMA box."""
    block, t, shape = spec.block, spec.threads, spec.mma.shape
    element = spec.problem.a.dtype.bytes
    ok = True
    if block.schedule is ir.Schedule.PINGPONG:  # each consumer multiplies the whole tile
        if block.m % WGMMA_M:
            error(block.at("tile"), f"BM = {block.m} is not a whole number of {WGMMA_M}-row wgmma tiles",
                  f"use BM = {max(WGMMA_M, block.m // WGMMA_M * WGMMA_M)}")
            ok = False
    elif block.m % (rows := WGMMA_M * t.warpgroups):
        error(block.at("tile"), f"BM = {block.m} does not split into {t.warpgroups} consumer warpgroups of "
                                f"whole {WGMMA_M}-row wgmma tiles (a multiple of {rows})",
              f"use BM = {max(rows, block.m // rows * rows)}, or {max(1, block.m // WGMMA_M)} warpgroups")
        ok = False
    if block.n % shape.n:
        error(block.at("tile"), f"BN = {block.n} is not a multiple of the N of {shape} ({shape.n})",
              f"use BN = {max(shape.n, block.n // shape.n * shape.n)} or a wgmma N that divides {block.n}")
        ok = False
    k_major = {op: spec.smem(op).order in (ir.SmemOrder.MK, ir.SmemOrder.NK) for op in (ir.Operand.A, ir.Operand.B)}
    panel = SWIZZLE_SPAN // element  # elements of m or n in one 128-byte row of an MN-major operand
    if any(k_major.values()) and block.k * element != SWIZZLE_SPAN:
        bk = SWIZZLE_SPAN // element
        error(block.at("tile"), f"BK = {block.k} makes a k-tile row {block.k * element} bytes; the TMA box's "
                                f"inner extent must be the {SWIZZLE_SPAN}-byte swizzle span ({bk} elements)",
              f"use {block.m}x{block.n}x{bk} (deeper k-tiles as several 128-byte panels are not supported yet)")
        ok = False
    if not any(k_major.values()) and (block.k % shape.k or block.k > MAX_BOX):
        error(block.at("tile"), f"BK = {block.k}: MN-major operands come in boxes of BK rows of k, a multiple "
                                f"of the wgmma k ({shape.k}) and at most {MAX_BOX}",
              f"use {block.m}x{block.n}x{SWIZZLE_SPAN // element}")
        ok = False
    for operand, extent, name in ((ir.Operand.A, block.m, "BM"), (ir.Operand.B, block.n, "BN")):
        if not k_major[operand] and extent % panel:
            error(block.at("tile"), f"{name} = {extent}: an MN-major {operand.value.upper()} comes in {panel}-wide "
                                    f"panels (128 bytes of {spec.problem.a.dtype.value})",
                  f"use a {name} that is a multiple of {panel}")
            ok = False
    c_span = SWIZZLE_SPAN // spec.problem.c.dtype.bytes
    if spec.pipeline.store is ir.StoreMode.TMA and block.n % c_span:
        error(spec.pipeline.at("store"), f"store: tma writes C in boxes of {c_span} columns (128 bytes of "
                                         f"{spec.problem.c.dtype.value}), and BN = {block.n} is not a multiple",
              f"use a BN that is a multiple of {c_span}, or `store: direct;`")
        ok = False
    if not k_major[ir.Operand.B] and shape.n % panel:
        error(spec.mma.at("shape"), f"an MN-major B is read in whole {panel}-column panels, and {shape} covers "
                                    f"{shape.n} columns", f"use a wgmma N that is a multiple of {panel}")
        ok = False
    for extent, name in ((block.m, "BM"), (block.n, "BN")):
        if extent > MAX_BOX:
            error(block.at("tile"), f"{name} = {extent}: a TMA box spans at most {MAX_BOX} rows, so one copy "
                                    f"cannot bring the tile", f"use {name} <= {MAX_BOX}")
            ok = False
    return ok


def _check_fit(layout: WgmmaLayout, error: Report) -> None:
    """Shared memory and registers, from the lowering everything else reads."""
    spec = layout.spec
    arch, p = layout.arch, spec.pipeline
    if layout.smem_bytes > arch.smem_per_block:
        room = arch.smem_per_block - layout.smem_bytes + layout.ring_bytes
        most = room // (layout.stage_bytes + 16)
        error(p.at("stages"), f"{layout.stages} stages of {layout.stage_bytes} bytes ({layout.stage_bytes // 1024} "
                              f"KiB: A {layout.stage_bytes_of(ir.Operand.A)} + B {layout.stage_bytes_of(ir.Operand.B)}) "
                              + (f", the {layout.split_bytes}-byte split buffer (3xTF32)" if layout.split else "")
                              + (f", {layout.staging_bytes} bytes of C staging (store: tma)" if layout.tma_store
                                 else "")
                              + (f", {layout.vector_bytes} bytes of the fuse chain's staged vectors"
                                 if layout.staged_vectors else "")
                              + f" and the barriers need {layout.smem_bytes} bytes, more than the "
                              f"{arch.smem_per_block} an sm_{arch.sm} block may have",
              f"use at most stages: {most}, or a smaller block tile")
    if layout.split and layout.staged_vectors:
        error(spec.fuse.span, "the fuse chain's vectors are staged by the producer warpgroup's warp 1, which 3xTF32's "
                              "splitting occupies",
              "use `precision: tf32;`, or a chain without a bias or scales")
    needed, have = layout.consumer_registers_needed, layout.consumer_registers
    where = spec.mma.at("shape")
    # No warning below `have`: ptxas allocates the code after setmaxnreg.inc up to its count, not the
    # launch cap (sgemm_3xtf32_h100_128x192 keeps 224 values live in its main loop, where the launch cap
    # is 168, without spilling, and verified on the H100).
    accumulators = layout.main_loop_registers - layout.a_fragment_registers
    fragments = f" and {layout.a_fragment_registers} of A's fragment words" if layout.a_fragment_registers else ""
    if needed > have:
        error(where, f"each consumer thread holds {accumulators} f32 accumulators ({layout.m_repeat} x "
                     f"{layout.n_repeat} {spec.mma.shape} per warpgroup{layout.accumulator_sets}){fragments}, and "
                     f"needs {needed} registers in all, but setmaxnreg can give a consumer only {have}",
              layout.fewer_registers_hint(have))
    if layout.instruction_registers() > layout.entry_registers:
        shape = spec.mma.shape
        narrower = [n for n in (192, 128, 64) if n < shape.n and layout.bn % n == 0
                    and layout.instruction_registers(n) <= layout.entry_registers]
        error(where, f"one {shape} needs about {layout.instruction_registers()} registers per thread to compile, but "
                     f"{layout.threads} threads leave {layout.entry_registers} at launch: ptxas stops (C7602) before "
                     "setmaxnreg can raise the consumers",
              (f"use a narrower instruction (m64n{narrower[0]}k{shape.k}, more of them per k-step) " if narrower
               else "use a narrower instruction ") + "or fewer consumer warpgroups")
