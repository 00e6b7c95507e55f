"""Hypothesis strategies that write random valid `.gemm` specs as text.

Candidates are built from parameters that usually fit together and then passed
through the real front end; the strategy keeps only those it accepts, so every
spec drawn is valid by the compiler's own rules.
"""
from __future__ import annotations

from hypothesis import assume
from hypothesis import strategies as st

from gemmdsl import ir
from gemmdsl.frontend import load
from gemmdsl.source import CompileError, SourceFile
from gemmdsl.targets import ARCHS

POW2 = (1, 2, 4, 8)


@st.composite
def spec_texts(draw: st.DrawFn, name: str = "random_spec", operands: tuple[str, ...] = ("f32",)) -> str:
    """A random valid FMA spec of A and B of one of `operands`' types (bf16 and f16 ones widened by the register
    copy: C f32 or their type, `copy: registers`, stream-K only with f32 C)."""
    operand = draw(st.sampled_from(operands)) if len(operands) > 1 else operands[0]
    c_type = "f32" if operand == "f32" else draw(st.sampled_from(("f32", operand)))
    warps = (draw(st.sampled_from((1, 2, 4))), draw(st.sampled_from((1, 2, 4))))
    lanes_m = draw(st.sampled_from((1, 2, 4, 8, 16)))
    lanes = (lanes_m, 32 // lanes_m)
    order = draw(st.sampled_from(("row", "col", "zigzag")))
    micro = (draw(st.sampled_from((1, 2, 4, 8))), draw(st.sampled_from((1, 2, 4, 8))))
    repeat = (draw(st.sampled_from((1, 2))), draw(st.sampled_from((1, 2))))
    level = draw(st.sampled_from(("block", "warp")))
    bm = warps[0] * lanes[0] * micro[0] * repeat[0]
    bn = warps[1] * lanes[1] * micro[1] * repeat[1]
    bk = draw(st.sampled_from((4, 8, 16)))
    a_order = draw(st.sampled_from(("mk", "km")))
    b_order = draw(st.sampled_from(("kn", "nk")))
    pad_a = draw(st.sampled_from((0, 1, 4)))
    pad_b = draw(st.sampled_from((0, 4)))
    vec_a = draw(st.sampled_from((1, 2, 4)))
    vec_b = draw(st.sampled_from((1, 2, 4)))
    copy = draw(st.sampled_from(("registers", "cp_async"))) if operand == "f32" else "registers"
    stages = draw(st.sampled_from((1, 2) if copy == "registers" else (1, 2, 3, 4)))
    fragments = draw(st.sampled_from(("single", "double")))
    raster = draw(st.sampled_from(("row", "col", "group(2)", "group(8)")))
    epilogue = draw(st.sampled_from(("store", "alpha_beta")))
    a, b, c = (draw(st.sampled_from(("row", "col"))) for _ in range(3))
    bounds = draw(st.sampled_from(("checked", "exact")))
    batch = draw(st.sampled_from(("none", "strided")))
    fma_order = draw(st.sampled_from(("row", "col", "snake")))
    unroll = draw(st.sampled_from((1, 2, 4)))
    schedule = draw(st.sampled_from(("tiles", "stream_k"))) if c_type == "f32" else "tiles"
    swizzle_a = ""
    if draw(st.booleans()) and a_order == "km":
        swizzle_a = " swizzle: xor(1, 4, 5);"
    text = f"""gemm {name} {{
    problem  {{ a: {operand} {a}; b: {operand} {b}; c: {c_type} {c}; epilogue: {epilogue}; bounds: {bounds}; batch: {batch}; }}
    target   sm_90;
    block    {{ tile: {bm}x{bn}x{bk}; raster: {raster}; schedule: {schedule}; }}
    threads  {{ warps: {warps[0]}x{warps[1]}; lanes: {lanes[0]}x{lanes[1]} {order}; micro: {micro[0]}x{micro[1]}; repeat: {repeat[0]}x{repeat[1]} {level}; fma_order: {fma_order}; }}
    smem a   {{ order: {a_order}; pad: {pad_a};{swizzle_a} }}
    smem b   {{ order: {b_order}; pad: {pad_b}; }}
    load a   {{ vector: {vec_a}; }}
    load b   {{ vector: {vec_b}; }}
    pipeline {{ stages: {stages}; copy: {copy}; fragments: {fragments}; unroll: {unroll}; }}
}}
"""
    try:
        load(SourceFile(f"{name}.gemm", text))
    except CompileError:
        assume(False)
    return text


# Shared memory per block on the smallest target; stages are drawn to fit it.
SMALLEST_SMEM = min(arch.smem_per_block for arch in ARCHS.values())


@st.composite
def mma_spec_texts(draw: st.DrawFn, name: str = "random_mma", dtypes: tuple[str, ...] = ("f16", "bf16", "f32"),
                   reads: tuple[str, ...] = ("", "32", "ldmatrix")) -> str:
    """Valid tensor-core specs, built by the language's rules (not filtered through the front end).

    The hierarchy covers the block (warps x repeat x instruction), BK is a multiple of the
    instruction's k, global vectors of 4 bytes or more (what cp.async copies) divide their runs and
    share out over the threads, pads and swizzles keep each lane's fragment read in one piece, and
    the stages fit in shared memory. `dtypes` and `reads` narrow the draw (a `read:` value outside
    `reads` is not written; an order that allows none of them is not drawn)."""
    dtype = draw(st.sampled_from(dtypes))
    size = ir.DType(dtype).bytes
    shape = "m16n8k8" if dtype == "f32" else draw(st.sampled_from(("m16n8k16", "m16n8k8")))
    k = int(shape.rsplit("k", 1)[1])
    precision = f" precision: {draw(st.sampled_from(('tf32', '3xtf32')))};" if dtype == "f32" else ""
    warps = (draw(st.sampled_from((1, 2, 4))), draw(st.sampled_from((1, 2, 4))))
    repeat = (draw(st.sampled_from((1, 2, 4))), draw(st.sampled_from((1, 2, 4, 8))))
    bm, bn = warps[0] * repeat[0] * 16, warps[1] * repeat[1] * 8
    threads = warps[0] * warps[1] * 32
    layouts = {key: draw(st.sampled_from(("row", "col"))) for key in "abc"}
    extent = {"a": bm, "b": bn}
    k_contiguous = {"a": layouts["a"] == "row", "b": layouts["b"] == "col"}  # in global memory

    def vectors(operand: str, bk: int) -> list[int]:
        rows, cols = (extent[operand], bk) if k_contiguous[operand] else (bk, extent[operand])
        return [w for w in ir.DType(dtype).vector_widths
                if w * size >= 4 and cols % w == 0 and (rows * cols // w) % threads == 0]  # cp.async: 4 bytes or more

    bks = [b for b in (k, 2 * k, 4 * k) if vectors("a", b) and vectors("b", b)]
    assume(bks)
    bk = draw(st.sampled_from(bks))
    c = draw(st.sampled_from(("f32", "f16", "bf16")))
    bounds = draw(st.sampled_from(("checked", "exact")))
    batch = draw(st.sampled_from(("none", "strided")))
    stream_k = (bounds, batch, c) == ("exact", "none", "f32") and draw(st.booleans())

    def allowed(order: str) -> tuple[str, ...]:
        """The reads drawn for a shared-memory order: where m or n is contiguous, a 16-bit pair along
        k needs ldmatrix.trans, which has no 32-bit form for f32."""
        if order in ("km", "kn"):
            choices = ("", "32") if dtype == "f32" else ("", "ldmatrix")
        else:
            choices = ("", "32", "ldmatrix")
        return tuple(r for r in choices if r in reads)

    sections, stage_bytes = [], 0
    for operand, orders in (("a", ("mk", "km")), ("b", ("kn", "nk"))):
        # 16-bit tiles keep their global contiguous index in shared memory (cp.async cannot transpose).
        kept = {"a": "mk" if k_contiguous["a"] else "km", "b": "nk" if k_contiguous["b"] else "kn"}[operand]
        candidates = [o for o in (orders if dtype == "f32" else (kept,)) if allowed(o)]
        assume(candidates)
        order = draw(st.sampled_from(candidates))
        read = draw(st.sampled_from(allowed(order)))
        default = "32" if dtype == "f32" else "ldmatrix"
        group = {"32": 4, "ldmatrix": 16}[read or default] // size  # elements one lane reads at once
        pad = draw(st.sampled_from((0, group, 4 * group)))
        entries = [f"order: {order};", f"pad: {pad};"]
        period = 0
        if draw(st.booleans()):
            bits = draw(st.integers(1, 3))
            base = draw(st.integers(group.bit_length() - 1, group.bit_length()))
            shift = draw(st.integers(bits, bits + 2))
            entries.append(f"swizzle: xor({bits}, {base}, {shift});")
            period = 1 << (bits + base + shift)
        if read:
            entries.append(f"read: {read};")
        sections.append(f"    smem {operand}   {{ {' '.join(entries)} }}")
        sections.append(f"    load {operand}   {{ vector: {draw(st.sampled_from(vectors(operand, bk)))}; }}")
        # an upper bound of the stage: the tile with its pad, plus the rounding to 128 bytes or the period
        stage_bytes += (max(extent[operand], bk) * (min(extent[operand], bk) + pad)
                        + max(period, 128 // size)) * size
    stages = draw(st.integers(1, max(1, min(4, SMALLEST_SMEM // stage_bytes))))
    assume(stages * stage_bytes <= SMALLEST_SMEM)
    copy = draw(st.sampled_from(("", " copy: cp_async;")))
    schedule = "stream_k" if stream_k else "tiles"
    return f"""gemm {name} {{
    problem  {{ a: {dtype} {layouts['a']}; b: {dtype} {layouts['b']}; c: {c} {layouts['c']}; bounds: {bounds}; batch: {batch}; }}
    target   sm_{draw(st.sampled_from(sorted(ARCHS)))};
    block    {{ tile: {bm}x{bn}x{bk}; raster: {draw(st.sampled_from(("row", "col", "group(8)")))}; schedule: {schedule}; }}
    threads  {{ warps: {warps[0]}x{warps[1]}; }}
    mma      {{ shape: {shape}; repeat: {repeat[0]}x{repeat[1]};{precision} }}
{chr(10).join(sections)}
    pipeline {{ stages: {stages};{copy} fragments: {draw(st.sampled_from(("single", "double")))}; }}
}}
"""
