"""The dequantizing decode kernel on the GPU (gemmdsl/paths/dequant), compiled from specs and loaded by
gemmdsl.load like a shipped one: every weight format at decode and prefill-edge shapes, fresh random inputs
(never zero) and a NaN-poisoned C, held to float64 on the dequantized weights: its relative error within 1.1x
of dequantize-then-cuBLAS's (the weight rounded to A's type, then torch.matmul). Also: a split-K call leaves its
workspace zero again, so the next call can use it; the shipped specs; and `gemmdsl verify` and `gemmdsl bench` of
each shipped spec."""
from __future__ import annotations

import json
import zlib
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from gemmdsl.quant_layout import pack

from quant_cases import CONFIGS, canonical_weights, dequantized, device_packed, spec_text

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
pytest.importorskip("cupy")

M_VALUES = (1, 3, 8, 16, 17, 64)
# N not a multiple of 16 (1000); K = 9 groups of 128, not a multiple of the k-slice; one k-slice (K = 1024).
NK_VALUES = ((256, 1024), (8192, 8192), (1000, 4096), (1000, 1152))
TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


@pytest.fixture(scope="module")
def kernels():
    import gemmdsl

    with ThreadPoolExecutor(len(CONFIGS)) as pool:  # the builds are nvcc processes: side by side
        built = pool.map(lambda item: gemmdsl.load(f"decode_{item[0]}", text=spec_text(f"decode_{item[0]}", item[1])),
                         CONFIGS.items())
        return dict(zip(CONFIGS, built))


def relative_error(c, reference) -> float:
    return float(torch.linalg.norm(c.double() - reference) / torch.linalg.norm(reference))


@pytest.mark.parametrize("n, k", NK_VALUES)
@pytest.mark.parametrize("m", M_VALUES)
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_decode_kernel_matches_float64_as_well_as_cublas(kernels, name, m, n, k):
    config, kernel = CONFIGS[name], kernels[name]
    fmt = config.fmt
    k = k if not fmt.group else k - k % fmt.group
    rng = np.random.default_rng(zlib.crc32(f"{name} {m} {n} {k}".encode()))
    q, scales, zeros = canonical_weights(rng, n, k, fmt)
    a_dtype, c_dtype = TORCH_DTYPES[fmt.activation], TORCH_DTYPES[config.c]
    a = torch.randn(m, k, device="cuda").to(a_dtype)
    w = torch.from_numpy(dequantized(q, scales, zeros, fmt)).cuda()
    packed = device_packed(torch, pack(q, scales, zeros, fmt))
    c = torch.full((m, n), float("nan"), device="cuda", dtype=c_dtype)  # an unwritten element shows
    kernel(a, packed, c)
    again = torch.full((m, n), float("nan"), device="cuda", dtype=c_dtype)
    kernel(a, packed, again)  # on the split-K workspace the first call left: zero again, or this one is off
    torch.cuda.synchronize()
    assert not torch.isnan(c).any(), "an element of C was not written"
    reference = a.double() @ w.T
    ours = relative_error(c, reference)
    cublas = relative_error((a @ w.to(a_dtype).T).to(c_dtype), reference)
    # Both round C to its type; where ours is exact to f32 and cuBLAS's weight rounding is the larger error,
    # ours is smaller. The slack (1e-6) covers f32 C, whose errors are accumulation-order noise near 1e-7.
    assert ours <= 1.1 * cublas + 1e-6, f"{name} {m}x{n}x{k}: ours {ours:.3e}, cuBLAS after dequantizing {cublas:.3e}"
    # Split-K adds the k-slices' sums with atomics, in whatever order the blocks finish: the second call may differ
    # in C's last bits, not by a k-slice's sum (what a workspace left non-zero adds).
    second = relative_error(again, reference)
    assert second <= 1.1 * cublas + 1e-6, f"the second call is off ({second:.3e}): the workspace was not left zero"


def test_a_second_split_k_call_reuses_the_workspace(kernels):
    config, kernel = CONFIGS["s4_g128_bf16"], kernels["s4_g128_bf16"]
    m, n, k = 5, 512, 4096
    q, scales, zeros = canonical_weights(np.random.default_rng(7), n, k, config.fmt)
    packed = device_packed(torch, pack(q, scales, zeros, config.fmt))
    w = torch.from_numpy(dequantized(q, scales, zeros, config.fmt)).cuda()
    results = []
    for _ in range(2):
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        kernel(a, packed, c)
        results.append(relative_error(c, a.double() @ w.T))
    assert max(results) < 1e-2, results


SHIPPED = sorted((Path(__file__).resolve().parent.parent / "specs").glob("w*a16*_decode*.gemm"))


@pytest.mark.parametrize("m", (1, 16, 64))
@pytest.mark.parametrize("path", SHIPPED, ids=lambda path: path.stem)
def test_a_shipped_spec_matches_float64_as_well_as_cublas(path, m):
    """The shipped specs through gemmdsl.load, C left out (the kernel makes it), N odd."""
    import gemmdsl

    kernel = gemmdsl.load(path)
    fmt, n, k = kernel.format, 4000, 4096
    q, scales, zeros = canonical_weights(np.random.default_rng(m), n, k, fmt)
    a = torch.randn(m, k, device="cuda").to(TORCH_DTYPES[fmt.activation])
    packed = {**device_packed(torch, pack(q, scales, zeros, fmt)), "shape": (n, k)}
    c = kernel(a, packed)
    w = torch.from_numpy(dequantized(q, scales, zeros, fmt)).cuda()
    reference = a.double() @ w.T
    cublas = relative_error((a @ w.to(a.dtype).T).to(c.dtype), reference)
    assert c.shape == (m, n) and relative_error(c, reference) <= 1.1 * cublas + 1e-6


@pytest.mark.parametrize("path", SHIPPED, ids=lambda path: path.stem)
def test_verify_and_bench_take_a_shipped_spec_through_the_cli(path, tmp_path, capsys):
    """`gemmdsl verify` and `gemmdsl bench` of a dequantizing spec: every case passes (K = 1000 is refused where the
    group is 128, taken per channel), and bench times it beside cuBLAS (and torch._weight_int4pack_mm for s4)."""
    from gemmdsl.cli import main

    grouped = "w4" in path.stem
    verified = tmp_path / "verify.json"
    assert main(["verify", str(path), "--sizes", "1x4000x4096,16x4096x4096,5x1000x1000", "--json", str(verified)]) == 0
    records = json.loads(verified.read_text())
    assert [record["skipped"] != "" for record in records] == [False] * 4 + ([True] if grouped else [False] * 2)
    assert all(record["passed"] for record in records)
    assert "cases passed" in capsys.readouterr().out
    timed = tmp_path / "bench.json"
    assert main(["bench", str(path), "--sizes", "1x4096x4096,16x4096x4096", "--json", str(timed)]) == 0
    rows = json.loads(timed.read_text())["quantized"]["rows"]
    ours = [row for row in rows if row["name"] == path.stem]
    assert len(ours) == 2 and all(row["median_us"] > 0 and row["gbs"] > 0 for row in ours)
    assert grouped == all(row["pct_of_int4pack"] is not None for row in ours)  # 4-bit codes in groups of 128


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_dequantize_writes_the_weight_dequantize_then_cublas_multiplies(kernels, name):
    """The dequantize kernel's W (N x K, A's type) equals the dequantized weight rounded once to A's type, bit for bit
    (N off 16, K over several groups); a NaN-poisoned W shows an element left unwritten."""
    config, kernel = CONFIGS[name], kernels[name]
    fmt = config.fmt
    n, k = 1000, 4096 if not fmt.group else 4096 - 4096 % fmt.group
    q, scales, zeros = canonical_weights(np.random.default_rng(zlib.crc32(name.encode())), n, k, fmt)
    packed = {**device_packed(torch, pack(q, scales, zeros, fmt)), "shape": (n, k)}
    w = torch.full((n, k), float("nan"), device="cuda", dtype=TORCH_DTYPES[fmt.activation])
    kernel.dequantize(packed, w)
    expected = torch.from_numpy(dequantized(q, scales, zeros, fmt)).cuda().to(w.dtype)
    torch.cuda.synchronize()
    assert torch.equal(w.view(torch.int16), expected.view(torch.int16))


@pytest.mark.parametrize("m", (1, 300))
def test_quantized_linear_matches_float64_on_both_routes(m):
    """QuantizedLinear with the shipped w4a16 spec and the BF16 family, prefill from 128 rows: M = 1 decodes, M = 300
    dequantizes and runs the family; each within 1.1x of dequantize-then-cuBLAS's error against float64."""
    import gemmdsl
    from gemmdsl.runtime import QuantizedLinear

    root = Path(__file__).resolve().parent.parent / "specs"
    linear = QuantizedLinear(gemmdsl.load(root / "w4a16_decode.gemm"),
                             gemmdsl.load(root / "hgemm_h100_bf16c_family.gemmf"), prefill_from=128)
    fmt, n, k = linear.decode.format, 2000, 4096
    q, scales, zeros = canonical_weights(np.random.default_rng(m), n, k, fmt)
    packed = {**device_packed(torch, pack(q, scales, zeros, fmt)), "shape": (n, k)}
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    linear(a, packed, c)
    w = torch.from_numpy(dequantized(q, scales, zeros, fmt)).cuda()
    reference = a.double() @ w.T
    cublas = relative_error((a @ w.to(a.dtype).T).to(c.dtype), reference)
    torch.cuda.synchronize()
    assert not torch.isnan(c).any() and relative_error(c, reference) <= 1.1 * cublas + 1e-6
