"""The mma.sync path's rules (validate.py's checker collects their diagnostics): the mma section against the
operands, the target and the block tile; the fragment reads, cp.async's copies and the stages' shared memory."""
from __future__ import annotations

from ... import ir
from ...layout import STAGE_ALIGN_BYTES
from ...targets import MAX_REGISTERS_PER_THREAD, WARP
from ...validate import SMEM_READ_BYTES


def check_mma_stages(checker) -> int:
    """The mma.sync path's stages: their shared memory, fragment reads and copies; their bytes."""
    smem_bytes = mma_smem_bytes(checker.spec)
    check_mma_smem_size(checker, smem_bytes)
    check_mma_reads(checker, ir.Operand.A)
    check_mma_reads(checker, ir.Operand.B)
    check_mma_copy(checker, ir.Operand.A)
    check_mma_copy(checker, ir.Operand.B)
    return smem_bytes


def check_stream_k_c(checker) -> None:
    """A tile path's stream-K adds partial sums into C with atomics (the FMA path's C is f32 anyway)."""
    block, problem = checker.spec.block, checker.spec.problem
    if block.stream_k and problem.c.dtype is not ir.DType.F32:
        checker.error(block.at("schedule"), f"schedule: stream_k adds partial sums into C with f32 atomics, "
                                            f"but C is {problem.c.dtype.value}",
                      hint=f"use `c: f32 {problem.c.layout.value};` or `schedule: tiles;`")


def check_mma(checker, mma: ir.MmaTile) -> bool:
    """The mma section against the operands, the target and the block tile."""
    t, block, arch = checker.spec.threads, checker.spec.block, checker.arch
    dtype = checker.spec.problem.a.dtype
    if dtype.fp8:
        checker.error(checker.spec.problem.at("a"),
                      f"{dtype.value} operands are multiplied by wgmma only; mma.sync has no FP8 form on this path",
                      hint="use Hopper's path: `target sm_90a;`, `mma { shape: m64n256k32; }`, "
                           "`threads { warpgroups: 2; producer: 1; }` (docs/fp8.md)")
        return False
    if arch is not None and not arch.has_mma_sync:
        checker.error(mma.span, f"mma needs sm_80 or newer; sm_{arch.sm} has no mma.sync for these types",
                      hint="use `target sm_80;` or newer")
    if dtype is ir.DType.F32:
        if mma.precision is ir.Precision.NATIVE:
            checker.error(mma.span, "f32 operands on tensor cores need a precision: tf32 or 3xtf32",
                          hint="add `precision: tf32;` (one product, 10-bit mantissa) or `precision: 3xtf32;` "
                               "(three products, about FP32 accuracy)")
        if mma.shape is not ir.MmaShape.M16N8K8:
            checker.error(mma.at("shape"), f"shape {mma.shape.value} takes 16-bit operands; TF32 mma is m16n8k8",
                          hint="use `shape: m16n8k8;`")
    elif mma.precision is not ir.Precision.NATIVE:
        checker.error(mma.at("precision"), f"precision: {mma.precision.value} applies to f32 operands; "
                                           f"{dtype.value} operands are multiplied as {dtype.value}",
                      hint="remove `precision`")
    ok = checker.check_thread_count("mma repeat")
    shape = ir.Pair(mma.shape.m, mma.shape.n)
    factors = {"warps": t.warps, "repeat": mma.repeat, "shape": shape}
    ok = checker.check_products(factors, (("repeat", mma), ("warps", t)), fallback=("warps", t)) and ok
    if block.k % mma.shape.k:
        fix = "" if dtype is ir.DType.F32 or mma.shape.k == 8 else " or `shape: m16n8k8;`"
        checker.error(block.at("tile"), f"BK = {block.k} is not a multiple of the k of {mma.shape.value} "
                                        f"({mma.shape.k})",
                      hint=f"use a BK that is a multiple of {mma.shape.k}, e.g. "
                           f"{block.m}x{block.n}x{-(-block.k // mma.shape.k) * mma.shape.k}{fix}")
        ok = False
    accumulators = mma.warp_tile.m * mma.warp_tile.n // WARP
    if accumulators > (arch.max_registers_per_thread if arch else MAX_REGISTERS_PER_THREAD):
        checker.warning(mma.at("repeat"), f"each thread accumulates {accumulators} values of its warp's "
                                          f"{mma.warp_tile} tile, more than the registers a thread can have; "
                                          "nvcc will spill", hint="use more warps or a smaller repeat")
    return ok


def check_mma_reads(checker, operand: ir.Operand) -> None:
    """The swizzle and the padding must keep each lane's fragment read in one piece."""
    smem = checker.spec.smem(operand)
    assert smem.read is not None  # the parser sets it for every mma spec
    dtype = checker.spec.problem.matrix(operand).dtype
    group = SMEM_READ_BYTES[smem.read] // dtype.bytes  # elements one lane reads at once
    if group == 1:
        return
    if smem.read is ir.SmemRead.LDMATRIX and dtype.bytes == 4 and smem.order.k_major:
        contiguous = "m" if operand is ir.Operand.A else "n"
        k_first = "mk" if operand is ir.Operand.A else "nk"
        checker.error(smem.at("read"), f"read: ldmatrix gives f32 (TF32) fragments only from rows that run along k, "
                                       f"but order {smem.order.value} keeps {contiguous} contiguous; "
                                       "ldmatrix.trans moves 16-bit elements only",
                      hint=f"use `order: {k_first};` (k contiguous), or `read: 32;` (one 32-bit load per "
                           "fragment register)")
        return
    if smem.read is ir.SmemRead.LDS32 and smem.order.k_major:
        contiguous = "m" if operand is ir.Operand.A else "n"
        k_first = "mk" if operand is ir.Operand.A else "nk"
        checker.error(smem.at("read"), f"read: 32 loads {group} {dtype.value} that lie along k, but order "
                                       f"{smem.order.value} keeps {contiguous} contiguous",
                      hint=f"use `read: ldmatrix;` (it transposes), or `order: {k_first};`")
        return
    how = (f"ldmatrix reads rows of 16 bytes ({group} {dtype.value})" if smem.read is ir.SmemRead.LDMATRIX
           else f"32-bit reads take {group} {dtype.value} at once")
    s, need = smem.swizzle, group.bit_length() - 1
    if s is not None and s.base < need:
        checker.error(smem.at("swizzle"), f"the swizzle {s} moves elements in groups of 2^{s.base} = "
                                          f"{1 << s.base}, but {how}",
                      hint=f"use M >= {need}, e.g. xor({s.bits}, {need}, {max(s.shift, s.bits)})")
    mn = checker.spec.block.m if operand is ir.Operand.A else checker.spec.block.n
    ld = (mn if smem.order.k_major else checker.spec.block.k) + smem.pad
    if ld % group:
        checker.error(smem.at("pad"), f"rows of {ld} {dtype.value} ({ld * dtype.bytes} bytes) break the "
                                      f"alignment of the reads: {how}",
                      hint=f"use a pad that keeps rows a multiple of {group} elements "
                           f"({group * dtype.bytes} bytes)")


def check_mma_copy(checker, operand: ir.Operand) -> None:
    """cp.async copies 4, 8 or 16 bytes: a 16-bit tile read one element per global load, or transposed
    on its way to shared memory, would need one 2-byte copy per element."""
    dtype = checker.spec.problem.matrix(operand).dtype
    smem, load = checker.spec.smem(operand), checker.spec.load(operand)
    if dtype.bytes >= 4:
        return
    if load.vector * dtype.bytes < 4:
        written = any(key == "vector" for key, _ in load.key_spans)
        checker.error(load.at("vector") if written else checker.spec.block.at("tile"),
                      f"vector {load.vector} copies {load.vector * dtype.bytes}-byte pieces of {dtype.value}, "
                      "but cp.async copies 4, 8 or 16 bytes",
                      hint=f"use `vector: {4 // dtype.bytes};` or wider in `load {operand.value}`")
        return
    if checker.spec.k_contiguous(operand) != smem.order.k_major:
        return
    keep = {(ir.Operand.A, True): "mk", (ir.Operand.A, False): "km",
            (ir.Operand.B, True): "nk", (ir.Operand.B, False): "kn"}[operand, checker.spec.k_contiguous(operand)]
    layout = checker.spec.problem.matrix(operand).layout.value
    checker.error(smem.at("order"), f"order {smem.order.value} transposes the {layout}-major {dtype.value} tile of "
                                    f"{operand.value.upper()} on its way to shared memory, which cp.async cannot "
                                    "do for 2-byte elements",
                  hint=f"use `order: {keep};` (ldmatrix transposes where the instruction needs it)")


def check_mma_smem_size(checker, used: int) -> None:
    arch, p = checker.arch, checker.spec.pipeline
    assert arch is not None
    limit = arch.smem_per_block
    if used <= limit:
        return
    block, a, b = checker.spec.block, checker.spec.problem.a.dtype, checker.spec.problem.b.dtype
    per_stage = used // p.stages
    fit = limit // per_stage
    hint = (f"use `stages: {fit};`, the most that fit, a smaller BK or a smaller block tile" if fit
            else "one stage alone is too large; use a smaller BK or a smaller block tile")
    checker.error(p.at("stages"),
                  f"the tiles of A ({block.m}x{block.k} {a.value}) and B ({block.k}x{block.n} {b.value}) in "
                  f"{p.stages} stage(s) need {used} bytes of shared memory ({used / 1024:.1f} KiB), more than the "
                  f"{limit} bytes ({limit // 1024} KiB) sm_{arch.sm} allows per block", hint=hint)


def mma_smem_bytes(spec: ir.KernelSpec) -> int:
    """Shared memory of an mma spec's A and B stages, with element sizes (the FMA path's is KernelLayout's).

    A stage is outer x (inner + pad) elements, rounded up to 128 bytes or to the swizzle's period,
    as layout.py rounds the FMA path's stages; a later layout for mma specs replaces this."""
    block, total = spec.block, 0
    for operand in (ir.Operand.A, ir.Operand.B):
        smem, dtype = spec.smem(operand), spec.problem.matrix(operand).dtype
        mn = block.m if operand is ir.Operand.A else block.n
        outer, inner = (block.k, mn) if smem.order.k_major else (mn, block.k)
        align = STAGE_ALIGN_BYTES // dtype.bytes
        if smem.swizzle is not None:
            s = smem.swizzle
            align = max(align, 1 << (s.bits + s.base + s.shift))
        stage = -(-outer * (inner + smem.pad) // align) * align
        total += stage * spec.pipeline.stages * dtype.bytes
    return total
