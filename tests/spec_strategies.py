"""Hypothesis strategies that write random valid `.gemm` specs as text.

Candidates are built from parameters that usually fit together and then passed
through the real front end; the strategy keeps only those it accepts, so every
spec drawn is valid by the compiler's own rules.
"""
from __future__ import annotations

from hypothesis import assume
from hypothesis import strategies as st

from gemmdsl.frontend import load
from gemmdsl.source import CompileError, SourceFile

POW2 = (1, 2, 4, 8)


@st.composite
def spec_texts(draw: st.DrawFn, name: str = "random_spec") -> str:
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
    copy = draw(st.sampled_from(("registers", "cp_async")))
    stages = draw(st.sampled_from((1, 2) if copy == "registers" else (1, 2, 3, 4)))
    fragments = draw(st.sampled_from(("single", "double")))
    raster = draw(st.sampled_from(("row", "col", "group(2)", "group(8)")))
    epilogue = draw(st.sampled_from(("store", "alpha_beta")))
    a, b, c = (draw(st.sampled_from(("row", "col"))) for _ in range(3))
    bounds = draw(st.sampled_from(("checked", "exact")))
    batch = draw(st.sampled_from(("none", "strided")))
    fma_order = draw(st.sampled_from(("row", "col", "snake")))
    unroll = draw(st.sampled_from((1, 2, 4)))
    # stream_k takes exact, unbatched problems only; drawing it elsewhere would just be rejected
    schedule = draw(st.sampled_from(("tiles", "stream_k"))) if (bounds, batch) == ("exact", "none") else "tiles"
    swizzle_a = ""
    if draw(st.booleans()) and a_order == "km":
        swizzle_a = " swizzle: xor(1, 4, 5);"
    text = f"""gemm {name} {{
    problem  {{ a: f32 {a}; b: f32 {b}; c: f32 {c}; epilogue: {epilogue}; bounds: {bounds}; batch: {batch}; }}
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
