"""On the GPU: the BF16, FP16 and TF32 families (wgmma members and their mma.sync `fallback`) at every shape.

- The 12 awkward shapes (gemmdsl/shapes/default.txt's first 12) and the decode shapes
  (gemmdsl/shapes/decode.txt: M = 1..128 tokens, B column-major as nn.Linear stores its weight), each against
  float64 over the same operands.
- Operands TMA refuses: K = 555, a leading dimension of 1001, a pointer one element off. The family runs them on
  the rule's wgmma member over padded copies of A and B (paths/wgmma/pad.py); its `fallback` member, called
  alone, runs them on the widest of its copy kernels the alignment allows; the operands TMA takes run on a wgmma
  member as they are.
- Empty problems: M or N = 0 (an empty C, nothing launched), K = 0 (C = beta * C).

All marked `gpu`: they skip themselves without CuPy and a GPU (tests/conftest.py); PyTorch gives the
BF16 operands.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from gemmdsl.cycles import estimate
from gemmdsl.shape_sets import DEFAULT_SHAPES
from gemmdsl.family_kernel import load_family, read_shapes

ROOT = Path(__file__).resolve().parent.parent
# family -> (A and B's torch dtype, C's, the relative error allowed against float64)
FAMILIES = {"hgemm_h100_bf16c_family": ("bfloat16", "bfloat16", 1e-2),
            "hgemm_h100_family": ("bfloat16", "float32", 1e-4),
            "hgemm_h100_f16_family": ("float16", "float16", 2e-3),
            "tf32_h100_family": ("float32", "float32", 5e-3)}
AWKWARD = read_shapes(DEFAULT_SHAPES)[:12]
DECODE = read_shapes(DEFAULT_SHAPES.with_name("decode.txt"))

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request):
    return request.param, load_family(ROOT / "specs" / f"{request.param}.gemmf")


def operands(name, m, n, k, lda=None, offset=0):
    """A (M x K, row-major, leading dimension `lda`, `offset` elements into its buffer) and B (K x N,
    column-major: the transpose of an N x K weight), random, on the GPU."""
    import torch

    torch.manual_seed(m * 7 + n * 13 + k)
    dtype = getattr(torch, FAMILIES[name][0])
    lda = lda or k
    buffer = torch.randn(offset + max(m * lda, 1), device="cuda").to(dtype)
    a = buffer[offset:offset + m * lda].view(m, lda)[:, :k] if m else buffer[:0].view(0, k)
    w = torch.randn(n, k, device="cuda").to(dtype)
    return a, w.T


def relative_error(c, a, b):
    import torch

    reference = a.double() @ b.double()
    return float(torch.linalg.norm(c.double() - reference) / max(float(torch.linalg.norm(reference)), 1e-30))


@pytest.mark.parametrize("shape", AWKWARD + DECODE, ids=lambda s: "x".join(map(str, s)))
def test_every_shape(family, shape):
    name, kernel = family
    a, b = operands(name, *shape)
    c = kernel(a, b)
    assert relative_error(c, a, b) <= FAMILIES[name][2]


@pytest.mark.parametrize("shape, lda, offset", [((1000, 1000, 555), None, 0), ((777, 1024, 1000), 1001, 0),
                                                ((1024, 1024, 1024), None, 1), ((16, 4096, 4096), None, 1)],
                         ids=["K=555", "lda=1001", "A+1", "decode A+1"])
def test_what_tma_refuses_runs_on_the_fallback_or_padded_copies(family, shape, lda, offset):
    name, kernel = family
    a, b = operands(name, *shape, lda=lda, offset=offset)
    c = kernel(a, b)
    assert relative_error(c, a, b) <= FAMILIES[name][2]
    m, n, k = shape
    fallback = next(model.name for model in kernel.models if model.fallback)
    assert kernel.member_for(m, n, k).name != fallback  # the rule's pick refuses the operands themselves
    with pytest.raises(ValueError, match="TMA"):
        kernel.member_for(m, n, k).bind(a, b)


def test_the_fallback_member_is_not_run_for_aligned_operands(family):
    name, kernel = family
    a, b = operands(name, 1024, 1024, 1024)
    launch = kernel.bind(a, b)
    assert not launch.entry.startswith(next(model.name for model in kernel.models if model.fallback))


@pytest.mark.parametrize("shape", [(0, 256, 64), (256, 0, 64), (0, 0, 0), (256, 192, 0), (1, 8192, 0)],
                         ids=lambda s: "x".join(map(str, s)))
def test_empty_problems(family, shape):
    import torch

    name, kernel = family
    m, n, k = shape
    a, b = operands(name, m, n, k)
    c_dtype = getattr(torch, FAMILIES[name][1])
    assert kernel(a, b).shape == (m, n)
    if k == 0 and m * n:
        assert torch.count_nonzero(kernel(a, b).float()) == 0  # beta 0: zeros, not what the memory held
    c = torch.randn(m, n, device="cuda").to(c_dtype)
    before = c.clone()
    assert kernel(a, b, c, alpha=2.0, beta=0.5) is c
    torch.cuda.synchronize()
    expected = before.float() * 0.5 if k == 0 else before.float()
    if k == 0:
        assert torch.allclose(c.float(), expected.to(c_dtype).float())
    else:
        assert torch.equal(c, before)


@pytest.mark.parametrize("shape", [(1, 8192, 8192), (16, 4096, 4096), (200, 300, 5000), (256, 256, 65536)],
                         ids=lambda s: "x".join(map(str, s)))
def test_the_stream_k_member_adds_f32_partial_sums_and_applies_beta_once(family, shape):
    """The family's stream-K member alone, at shapes whose tiles it shares among every SM: the partial sums
    wait in the workspace as f32, the finishing block adds them and converts to C's type once, with beta
    applied once; twice in a row, so that the flags the first call lowered serve the second."""
    import torch

    name, kernel = family
    index = next(i for i, model in enumerate(kernel.models) if model.stream_k)
    member = kernel.kernels[index]
    assert estimate(kernel.models[index], *shape).sk_tiles > 0
    m, n, k = shape
    a, b = operands(name, *shape)
    c0 = torch.randn(m, n, device="cuda").to(getattr(torch, FAMILIES[name][1]))
    reference = 0.5 * (a.double() @ b.double()) - 1.5 * c0.double()
    for _ in range(2):
        c = member(a, b, c0.clone(), alpha=0.5, beta=-1.5)
        error = float(torch.linalg.norm(c.double() - reference) / torch.linalg.norm(reference))
        assert error <= FAMILIES[name][2]


# (shape, lda, A's offset in elements): every alignment the fallback meets, so each of its kernels runs (the calls are
# below launch_plan.PAD_MIN_WORK, so the family copies only what TMA refuses, not rows off a sector): 16-bit K = 700
# puts A's and B's rows 1400 bytes apart (8-byte aligned), 702 1404 (4), 77 154 (2, the scalar kernel); odd and
# even leading dimensions; A's pointer 1, 2 and 4 elements off.
MISALIGNED = [((1000, 1000, 700), None, 0), ((1000, 1000, 702), None, 0), ((2048, 2048, 77), None, 0),
              ((33, 33, 33), None, 0), ((777, 1000, 1000), 1003, 0), ((777, 1000, 1000), 1002, 0),
              ((512, 512, 512), None, 1), ((512, 512, 512), None, 2), ((512, 512, 512), None, 4)]


def fallback_kernel(name: str, m: int, n: int, k: int, lda: int, offset: int, kernel) -> str | None:
    """The kernel the fallback member's launch rule must pick: by the bytes that A's pointer, A's and B's leading
    dimensions share (C stays 16-byte aligned); None where TMA takes the operands (the family runs a wgmma member
    on them as they are; elsewhere on padded copies)."""
    size = 4 if FAMILIES[name][0] == "float32" else 2
    shared = 16
    while (offset * size) % shared or (lda * size) % shared or (k * size) % shared:
        shared //= 2
    if shared == 16:
        return None
    fallback = next(model.name for model in kernel.models if model.fallback)
    return f"{fallback}_kernel_scalar" if shared == size else f"{fallback}_kernel_{shared}byte"


@pytest.mark.parametrize("shape, lda, offset", MISALIGNED,
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_misaligned_operands_run_padded_or_on_the_widest_copies_they_allow(family, shape, lda, offset):
    """The family (the wgmma member on padded copies) and its fallback member alone (the widest copy kernel the
    operands allow), each against float64, C poisoned with NaN (beta = 0 must not read it) and padded with NaN that
    must stay; the family twice, with new values in A between, so that the padded path copies at every launch."""
    import torch

    name, kernel = family
    m, n, k = shape
    a, b = operands(name, m, n, k, lda=lda, offset=offset)
    c_dtype = getattr(torch, FAMILIES[name][1])
    padded = torch.full((m, n + 8), float("nan"), device="cuda", dtype=c_dtype)
    c = padded[:, :n]
    expected = fallback_kernel(name, m, n, k, lda or k, offset, kernel)
    launch = kernel.bind(a, b, c)
    member = kernel.member_for(m, n, k)
    entries = member.requirements.launch.entries
    if next(model.any_alignment for model in kernel.models if model.name == member.name):
        # an FMA member (short K: 33^3) reads any alignment itself: its own kernel for the operands, no copies
        assert launch.entry in (entries.vector, entries.scalar)
        assert not any(step.function.name.endswith("_pad_operands") for step in launch.launches)
        expected = None
    else:
        assert launch.entry == entries.vector
        assert launch.launches[0].function.name.endswith("_pad_operands") == (expected is not None)
    if expected is not None:
        fallback = kernel.kernels[next(i for i, model in enumerate(kernel.models) if model.fallback)]
        assert fallback.bind(a, b, c).entry == expected
        assert fallback(a, b, c) is c
        torch.cuda.synchronize()
        assert torch.isnan(padded[:, n:]).all()
        assert relative_error(c, a, b) <= FAMILIES[name][2]
        c.fill_(float("nan"))
    for _ in range(2):
        assert kernel(a, b, c, alpha=1.0, beta=0.0) is c
        torch.cuda.synchronize()
        assert not torch.isnan(c).any()
        assert torch.isnan(padded[:, n:]).all()
        assert relative_error(c, a, b) <= FAMILIES[name][2]
        a.mul_(-0.5)
    launch(None)  # the bound launch again, after A changed: it copies A again
    torch.cuda.synchronize()
    assert relative_error(c, a, b) <= FAMILIES[name][2]
