"""Fused epilogues on the GPU: every shipped fused spec against a float64 reference of the same chain
(gemmdsl/fuse_reference.py) at odd shapes, through `verify` (fresh random inputs, C poisoned with NaN,
writes outside C caught), and the PyTorch view of the same calls.

Tolerances are verify's, by the unit the kernel multiplies on (gemmdsl/precisions.py): the chain runs in
f32 on the accumulators, so the product's own error (f32 accumulation) plus the rounding of C to its type
bounds it; the activations' device functions (erff, tanhf: 2 ulp; __expf for silu) stay below bf16's
and f16's rounding of C.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Grouped specs take offs and G x N column scales: tests/test_gpu_grouped.py runs their chains.
FUSED = sorted(path for path in (ROOT / "specs").glob("*.gemm")
               if ("fuse " in path.read_text() or "fuse{" in path.read_text()) and "grouped" not in path.read_text())
# The last two give a persistent wgmma block several tiles (its staged vectors' buffer used again), N not a
# multiple of the tile, with C stored by TMA (N = 3000) and by the direct stores (N = 3001).
ODD_SIZES = [(333, 517, 129), (1000, 1000, 1000), (129, 257, 4096), (2049, 3000, 72), (1999, 3001, 64)]

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    pytest.importorskip("cupy")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    return torch


def test_the_fused_specs_are_found():
    names = {path.stem for path in FUSED}
    assert {"linear_gelu", "sgemm_fused", "hgemm_mma_fused", "hgemm_h100_relu_residual"} <= names


@pytest.mark.parametrize("spec", FUSED, ids=lambda path: path.stem)
def test_a_fused_spec_matches_float64_at_odd_shapes(torch, spec):
    import gemmdsl
    from gemmdsl.verify import format_result, verify

    kernel = gemmdsl.load(spec)
    results = [result for result in verify(kernel, ODD_SIZES, seed=3) if not result.skipped]
    assert results, "every case was skipped"
    failed = [format_result(result) for result in results if not result.passed]
    assert not failed, "\n".join(failed)


def test_linear_gelu_is_nn_linear_then_gelu(torch):
    """C = gelu_tanh(X @ W^T + bias) with W as nn.Linear keeps it (N x K, row-major: B = W.T, column-major)."""
    import gemmdsl

    kernel = gemmdsl.load(ROOT / "specs" / "linear_gelu.gemm")
    x = torch.randn(1000, 1024, device="cuda", dtype=torch.bfloat16)
    linear = torch.nn.Linear(1024, 768, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        c = kernel(x, linear.weight.T, bias=linear.bias)
        reference = torch.nn.functional.gelu(x.double() @ linear.weight.double().T + linear.bias.double(),
                                             approximate="tanh")
    error = ((c.double() - reference).norm() / reference.norm()).item()
    assert c.dtype == torch.bfloat16 and error < 1e-5 + 2 ** -8


def test_a_residual_may_be_c_itself(torch):
    """C = relu(A @ B) + C, in place: the residual is C, element for element."""
    import gemmdsl

    kernel = gemmdsl.load(ROOT / "specs" / "hgemm_h100_relu_residual.gemm")
    metadata = kernel.metadata["fuse"]
    assert metadata["residual"] == {"dtype": "bf16", "layout": "row"}
    a = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(384, 256, device="cuda", dtype=torch.bfloat16).T
    c = torch.randn(512, 384, device="cuda", dtype=torch.bfloat16)
    reference = torch.relu(a.double() @ b.double()) + c.double()
    kernel(a, b, c, residual=c)
    torch.cuda.synchronize()
    error = ((c.double() - reference).norm() / reference.norm()).item()
    assert error < 1e-5 + 2 ** -8


@pytest.mark.parametrize("n, offset", [(3000, 8), (3000, 1), (3001, 8)],
                         ids=["copied-through-shared-memory", "R-misaligned-read-per-pair", "C-not-staged"])
def test_a_residual_has_its_own_leading_dimension(torch, n, offset):
    """R a view of a wider matrix (ldr > N) at an N that is no multiple of the tile, several tiles per block:
    16-byte aligned R (ldr = N + 40) goes through C's staging buffers, R one element off is read per pair, and
    an N that TMA cannot store takes the direct stores."""
    import gemmdsl

    kernel = gemmdsl.load(ROOT / "specs" / "hgemm_h100_relu_residual.gemm")
    m, k = 2049, 136
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).T
    wide = torch.randn(m, n + 40, device="cuda", dtype=torch.bfloat16)
    residual = wide[:, offset:n + offset]
    with torch.no_grad():
        c = kernel(a, b, residual=residual)
    reference = torch.relu(a.double() @ b.double()) + residual.double()
    error = ((c.double() - reference).norm() / reference.norm()).item()
    assert error < 1e-5 + 2 ** -8


def test_the_fuse_metadata_names_the_chain():
    record = json.loads((ROOT / "generated" / "linear_gelu.json").read_text())["fuse"]
    assert record["formula"] == "gelu_tanh(acc + bias[n])"


def test_the_fused_mlp_example_matches_pytorch_eagerly_and_compiled(torch):
    """examples/torch_fused_mlp.py: the MLP with its up projection and GELU fused is as close to float64 as
    PyTorch's own (both round the hidden activations to BF16), eagerly and under torch.compile."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("torch_fused_mlp", ROOT / "examples" / "torch_fused_mlp.py")
    example = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = example  # torch.library keeps the module's functions by qualified name
    spec.loader.exec_module(example)
    errors = example.main(tokens=333)
    assert errors["PyTorch"] < 1e-2
    assert errors["gemmdsl"] < 1.5 * errors["PyTorch"] and errors["gemmdsl, torch.compile"] < 1.5 * errors["PyTorch"]


def test_a_fused_family_runs_its_members_with_the_bias(torch):
    """linear_gelu_family from Python: the member the rule picks (128x128 tiles at 1024^3, 128x256 at
    2048x2048x512), given the bias, bit for bit that member's result and as close to float64 as linear_gelu."""
    from gemmdsl.family_kernel import load_family

    family = load_family(ROOT / "specs" / "linear_gelu_family.gemmf")
    assert family.metadata["fuse"]["formula"] == "gelu_tanh(acc + bias[n])"
    generator = torch.Generator(device="cuda").manual_seed(5)
    for (m, n, k), member_name in [((1024, 1024, 1024), "linear_gelu_128x128"), ((2048, 2048, 512), "linear_gelu")]:
        x = torch.randn(m, k, device="cuda", generator=generator).to(torch.bfloat16)
        w = torch.randn(n, k, device="cuda", generator=generator).to(torch.bfloat16)
        bias = torch.randn(n, device="cuda", generator=generator).to(torch.bfloat16)
        member = family.member_for(m, n, k)
        assert member.name == member_name
        c = family(x, w.T, bias=bias)
        assert torch.equal(c, member(x, w.T, bias=bias))
        reference = torch.nn.functional.gelu(x.double() @ w.double().T + bias.double(), approximate="tanh")
        assert ((c.double() - reference).norm() / reference.norm()).item() < 1e-5 + 2 ** -8
        with pytest.raises(TypeError, match="bias"):
            family(x, w.T)
