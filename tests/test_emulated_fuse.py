"""Fused FMA kernels run on the CPU (tests/host_emulation.py) against the chain's float64 reference.

Each case is sgemm_fused with one fuse section: every activation, a bias along m and along n, the row and
column scales, the per-tensor scales (alone, and beside a column or a row scale), a row- and a column-major
residual. The calls are the odd shapes of test_emulated.py (edge
blocks on both axes, a partial last k-tile, padded leading dimensions, a misaligned A for the scalar
kernel), each launched as the C launcher launches it (the interior kernel and the edge strips, whose
fuse operands are offset like A, B and C). C's buffer starts as NaN outside C: a write there shows.
The reference is gemmdsl/fuse_reference.py on the product in float64.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import host_emulation
from gemmdsl.compiler import compile_text
from gemmdsl.fuse_reference import apply_chain
from gemmdsl.runtime import KernelRequirements
from test_emulated import as_launched, footprint, natural

ROOT = Path(__file__).resolve().parent.parent
FUSED = (ROOT / "specs" / "sgemm_fused.gemm").read_text()
FUSE_LINE = "fuse     { bias: m; activation: relu; residual: f32 row; }"
STORE = "epilogue: alpha_beta; "
# (id, fuse section, whether the spec keeps epilogue: alpha_beta)
CHAINS = [
    ("relu_bias_m_residual_row", "bias: m; activation: relu; residual: f32 row;", True),
    ("gelu_bias_n", "bias: n; activation: gelu;", True),
    ("gelu_tanh_residual_col", "activation: gelu_tanh; residual: f32 col;", False),
    ("silu_scales", "scale: rowcol; bias: n f32; activation: silu;", False),
    ("tensor_scales", "scale: tensor; bias: n f32;", False),
    ("tensor_col_scales", "scale: tensor col; activation: relu;", False),
    ("row_tensor_scales", "scale: row tensor;", False),
]
TOLERANCE = 1e-5  # f32 accumulation over K <= 43 and f32 activations, against float64: relative to C's norm

pytestmark = pytest.mark.skipif(host_emulation.find_cxx() is None, reason="g++ not on PATH")


def spec_text(fuse: str, alpha_beta: bool) -> str:
    text = FUSED.replace(FUSE_LINE, f"fuse     {{ {fuse} }}")
    return text if alpha_beta else text.replace(STORE, "")


@pytest.fixture(scope="module", params=CHAINS, ids=[c[0] for c in CHAINS])
def runner(request):
    _, fuse, alpha_beta = request.param
    artifacts = compile_text(spec_text(fuse, alpha_beta), "sgemm_fused.gemm")
    binary = host_emulation.shared_build(artifacts.cuda, artifacts.metadata)
    return binary, artifacts.metadata, KernelRequirements.from_metadata(artifacts.metadata)


def random_matrix(rng: np.random.Generator, rows: int, cols: int, ld: int, row_major: bool,
                  offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(buffer, view): a float32 buffer as long as the operand's footprint (plus `offset` floats before it),
    NaN in its padding, and the rows x cols matrix in it."""
    outer, inner = (rows, cols) if row_major else (cols, rows)
    buffer = np.full(offset + (outer - 1) * ld + inner, np.nan, dtype=np.float32)
    strides = (ld * 4, 4) if row_major else (4, ld * 4)
    view = np.lib.stride_tricks.as_strided(buffer[offset:], (rows, cols), strides)
    view[...] = rng.uniform(-1, 1, (rows, cols)).astype(np.float32)
    return buffer, view


def run_fused(binary: Path, metadata: dict, req: KernelRequirements, directory: Path, m: int, n: int, k: int, pad: int,
              offset_a: int = 0, alpha: float = 1.0, beta: float = 0.0, seed: int = 0) -> tuple[float, int]:
    """(relative error against float64, floats written outside C) of one call."""
    rng = np.random.default_rng(seed)
    rows = {op: metadata["layouts"][op] == "row" for op in "abc"}
    fuse = metadata["fuse"]
    lds = natural(req, m, n, k, pad=pad)
    a_buffer, a = random_matrix(rng, m, k, lds["lda"], rows["a"], offset_a)
    b_buffer, b = random_matrix(rng, k, n, lds["ldb"], rows["b"])
    c_buffer, c = random_matrix(rng, m, n, lds["ldc"], rows["c"])
    c_in = c.astype(np.float64)
    if beta == 0.0:
        c[...] = np.nan  # not read: a kernel that reads it anyway shows NaN
    inside = np.zeros(c_buffer.shape, dtype=bool)
    np.lib.stride_tricks.as_strided(inside, c.shape, tuple(s // 4 for s in c.strides))[...] = True
    operands = {"A": a_buffer[offset_a:], "B": b_buffer, "C": c_buffer}
    vectors = {}
    if fuse["bias"]:
        vectors["bias"] = rng.uniform(-1, 1, m if fuse["bias"]["along"] == "m" else n).astype(np.float32)
    scales = fuse["scale"].split() if fuse["scale"] else []  # A's, then B's (`rowcol`: both vectors)
    if {"row", "rowcol"} & set(scales[:1]):
        vectors["row_scale"] = rng.uniform(0.5, 2, m).astype(np.float32)
    if {"col", "rowcol"} & set(scales[-1:]):
        vectors["col_scale"] = rng.uniform(0.5, 2, n).astype(np.float32)
    for name, present in (("a_scale", scales[:1] == ["tensor"]), ("b_scale", scales[-1:] == ["tensor"])):
        if present:  # one float, read by the kernel through its pointer
            vectors[name] = rng.uniform(0.5, 2, 1).astype(np.float32)
    ldr = 0
    if fuse["residual"]:
        r_row = fuse["residual"]["layout"] == "row"
        ldr = (n if r_row else m) + pad
        vectors["R"], residual = random_matrix(rng, m, n, ldr, r_row)
        vectors["residual"] = residual.astype(np.float64)
    for name, values in {**operands, **vectors}.items():
        if name != "residual":
            values.tofile(directory / f"{name}.bin")
    call = as_launched(req, host_emulation.Call(m, n, k, **lds, alpha=alpha, beta=beta, offset_a=offset_a))
    sub = [str(v) for interior, row, col, sm, sn, partial_k in call.sub_launches
           for v in ((host_emulation.INTERIOR_PARTIAL_K_ENTRY if partial_k else host_emulation.INTERIOR_ENTRY)
                     if interior else call.entry, row, col, sm, sn)]
    argv = ["fused", str(directory), m, n, k, lds["lda"], lds["ldb"], lds["ldc"], ldr, alpha, beta, call.entry, *sub]
    passed, output = host_emulation.run_argv(binary, [str(v) for v in argv])
    assert passed, output
    out = np.fromfile(directory / "C.out", dtype=np.float32)
    got = np.lib.stride_tricks.as_strided(out, c.shape, c.strides).astype(np.float64)
    expected = apply_chain(fuse, a.astype(np.float64) @ b.astype(np.float64), alpha=alpha, beta=beta, c=c_in,
                           bias=vectors.get("bias"), residual=vectors.get("residual"),
                           row_scale=vectors.get("row_scale"), col_scale=vectors.get("col_scale"),
                           a_scale=vectors.get("a_scale"), b_scale=vectors.get("b_scale"),
                           alpha_beta=metadata["epilogue"] == "alpha_beta")
    error = np.linalg.norm(got - expected) / max(np.linalg.norm(expected), 1e-30)
    return float(error), int(np.count_nonzero(~np.isnan(out[~inside])))


ODD_CALLS = [  # (m, n, k, pad, offset_a)
    (1, 1, 1, 0, 0),
    (7, 13, 5, 0, 0),
    (133, 261, 37, 4, 0),  # edge blocks along m and n, a partial last k-tile
    (133, 261, 37, 4, 1),  # a misaligned A: the scalar kernel
    (261, 131, 43, 4, 0),  # the interior kernel (partial k) and both edge strips
    (256, 128, 32, 0, 0),  # whole tiles
]


@pytest.mark.parametrize("m, n, k, pad, offset_a", ODD_CALLS)
def test_fused_chain_matches_float64(runner, tmp_path, m, n, k, pad, offset_a):
    binary, metadata, req = runner
    scalars = {"alpha": 1.5, "beta": -0.5} if metadata["epilogue"] == "alpha_beta" else {}
    error, outside = run_fused(binary, metadata, req, tmp_path, m, n, k, pad, offset_a, **scalars, seed=m * n + k)
    assert outside == 0
    assert error <= TOLERANCE, error


def test_beta_zero_reads_no_c(runner, tmp_path):
    """With beta = 0 the kernel must not read C, which starts as NaN inside too."""
    binary, metadata, req = runner
    if metadata["epilogue"] != "alpha_beta":
        pytest.skip("C is never read without alpha_beta")
    error, outside = run_fused(binary, metadata, req, tmp_path, 133, 261, 37, 4, alpha=2.0, beta=0.0)
    assert outside == 0 and error <= TOLERANCE
