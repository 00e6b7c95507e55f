"""On an H100/H200: every kind of Python call (a spec, a family, fused operands, FP8 scales, grouped offs, the
padded launcher, C left out) computes through its plan (call_plan.py) exactly what the call checked in full
computes; inside a CUDA graph and under torch.compile(mode="reduce-overhead") its replays give eager's C.

Each case's operands are made by `make(torch, seed)`; its calls run on PyTorch's current stream. The CPU twins
of these tests (tests/test_call_plan.py) check the launches' arguments; these check the results.
"""
from pathlib import Path
from typing import Optional

import pytest

from gemmdsl import runtime

pytestmark = pytest.mark.gpu

SPECS = Path(__file__).resolve().parent.parent / "specs"
M, N, K, GROUPS = 320, 512, 384, 4


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    pytest.importorskip("cupy")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the wgmma specs target sm_90a: an H100 or H200")
    return torch


def uniform(torch, generator, *shape):
    return torch.rand(*shape, device="cuda", generator=generator).mul_(2).sub_(1)


def bf16(torch, generator, *shape):
    return uniform(torch, generator, *shape).to(torch.bfloat16)


def e4m3(torch, generator, *shape):
    return uniform(torch, generator, *shape).mul_(4).to(torch.float8_e4m3fn)


def scales(torch, generator, *shape):
    return torch.rand(*shape, device="cuda", generator=generator).add_(0.5)


def offs(torch):
    sizes = [0, 100, 157, M - 257]  # an empty group, and groups that end inside tiles
    return torch.tensor([sum(sizes[:g + 1]) for g in range(GROUPS)], dtype=torch.int32, device="cuda")


def case_spec(torch, generator):
    return (bf16(torch, generator, M, K), bf16(torch, generator, N, K).t()), {}


def case_fma(torch, generator):
    return (uniform(torch, generator, M + 3, K - 5), uniform(torch, generator, K - 5, N + 7)), {}


def case_bias(torch, generator):
    return (bf16(torch, generator, M, K), bf16(torch, generator, N, K).t()), {"bias": bf16(torch, generator, N)}


def case_residual(torch, generator):
    return (bf16(torch, generator, M, K), bf16(torch, generator, N, K).t()), {"residual": bf16(torch, generator, M, N)}


def case_rowwise(torch, generator):
    return ((e4m3(torch, generator, M, K), e4m3(torch, generator, N, K).t()),
            {"row_scale": scales(torch, generator, M), "col_scale": scales(torch, generator, N)})


def case_blockwise(torch, generator):
    blocks = -(-K // 128)
    return ((e4m3(torch, generator, M, K), e4m3(torch, generator, N, K).t()),
            {"a_scale": scales(torch, generator, M, blocks), "b_scale": scales(torch, generator, -(-N // 128), blocks)})


def case_grouped(torch, generator):
    return (bf16(torch, generator, M, K), bf16(torch, generator, GROUPS, N, K).mT), {"offs": offs(torch)}


def case_grouped_fp8(torch, generator):
    return ((e4m3(torch, generator, M, K), e4m3(torch, generator, GROUPS, N, K).mT),
            {"offs": offs(torch), "row_scale": scales(torch, generator, M),
             "col_scale": scales(torch, generator, GROUPS, N)})


def case_family(torch, generator):
    return (bf16(torch, generator, 1000, 1000), bf16(torch, generator, 1000, 1000).t()), {}


def case_padded(torch, generator):
    """A whose rows are 1001 elements apart: TMA refuses it, the family's TMA member runs on a padded copy."""
    return (bf16(torch, generator, 1000, 1001)[:, :1000], bf16(torch, generator, 1000, 1000).t()), {}


# (label, file, operands): one per kind of call.
CASES = [
    ("spec", "hgemm_h100_bf16c.gemm", case_spec),
    ("fma spec", "checked_v3.gemm", case_fma),
    ("fused bias", "linear_gelu.gemm", case_bias),
    ("fused residual", "hgemm_h100_relu_residual.gemm", case_residual),
    ("fp8 row and column scales", "fp8_rowwise.gemm", case_rowwise),
    ("fp8 block scales", "fp8_blockwise.gemm", case_blockwise),
    ("grouped offs", "moe_grouped.gemm", case_grouped),
    ("grouped fp8", "moe_grouped_fp8.gemm", case_grouped_fp8),
    ("family", "hgemm_h100_bf16c_family.gemmf", case_family),
    ("family, padded copies", "hgemm_h100_bf16c_family.gemmf", case_padded),
]
IDS = [label for label, _, _ in CASES]


@pytest.fixture(scope="module")
def kernels(torch):
    import gemmdsl

    return {name: gemmdsl.load(SPECS / name) for name in {name for _, name, _ in CASES}}


def make(torch, case, seed):
    return case(torch, torch.Generator(device="cuda").manual_seed(seed))


def empty_c(torch, kernel, a, b):
    """A C poisoned with NaN, of the kernel's type and layout."""
    req = kernel.requirements
    dtype = getattr(torch, req.dtypes["C"])
    m, n = a.shape[-2], b.shape[-1]
    if req.layouts["C"] == "row":
        return torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
    return torch.full((n, m), float("nan"), dtype=dtype, device="cuda").t()


def without_plans(kernel):
    """Forget every plan (and a family's routes): the next call is checked in full."""
    for member in getattr(kernel, "kernels", [kernel]):
        member._plans.clear()
    getattr(kernel, "_routes", {}).clear()


def checked_calls(monkeypatch):
    seen = []
    check_call = runtime.check_call
    monkeypatch.setattr(runtime.kernel, "check_call", lambda *args: seen.append(1) or check_call(*args))
    return seen


@pytest.mark.parametrize("c_given", [True, False], ids=["C given", "C left out"])
@pytest.mark.parametrize("label,name,case", CASES, ids=IDS)
def test_a_planned_call_computes_what_the_call_checked_in_full_computes(torch, kernels, monkeypatch, label, name,
                                                                        case, c_given):
    kernel = kernels[name]
    (a, b), chain = make(torch, case, seed=1)
    kernel(a, b, empty_c(torch, kernel, a, b) if c_given else None, **chain)  # the plan of this signature
    (a, b), chain = make(torch, case, seed=2)
    checks = checked_calls(monkeypatch)
    c = empty_c(torch, kernel, a, b) if c_given else None
    planned = kernel(a, b, c, **chain).clone()
    assert checks == []
    without_plans(kernel)
    checked = kernel(a, b, empty_c(torch, kernel, a, b) if c_given else None, **chain)
    torch.cuda.synchronize()
    assert checks, "the second call was not checked in full"
    assert torch.equal(planned, checked)  # no stream-K among the cases: every element summed in one order
    assert not torch.isnan(planned.float()).any()


@pytest.mark.parametrize("c_given", [True, False], ids=["C given", "C left out"])
@pytest.mark.parametrize("label,name,case", CASES, ids=IDS)
def test_a_captured_call_replays_what_eager_calls_compute(torch, kernels, label, name, case, c_given):
    """Captured once, replayed on new values written into the captured operands: each replay gives the eager
    call's C on those values, bitwise."""
    kernel = kernels[name]
    (a, b), chain = make(torch, case, seed=3)
    c = empty_c(torch, kernel, a, b) if c_given else None
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as PyTorch asks
        kernel(a, b, c, **chain)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=torch.cuda.Stream()):
        out = kernel(a, b, c, **chain)
    for seed in (4, 5):
        (new_a, new_b), new_chain = make(torch, case, seed)
        for captured, new in zip((a, b, *chain.values()), (new_a, new_b, *new_chain.values())):
            captured.copy_(new)
        graph.replay()
        eager = kernel(new_a, new_b, empty_c(torch, kernel, a, b) if c_given else None, **new_chain)
        torch.cuda.synchronize()
        assert torch.equal(out, eager), seed


CALL_OPERANDS = ("bias", "residual", "row_scale", "col_scale", "a_scale", "b_scale", "offs")


def compiled_op(torch, kernels):
    """`gemmdsl_test::call`, a custom op over every case's kernel (C left out), registered once per process."""
    import sys

    module = sys.modules[__name__]
    if not hasattr(module, "_call_op"):
        @torch.library.custom_op("gemmdsl_test::call", mutates_args=())
        def call(name: str, a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor] = None,
                 residual: Optional[torch.Tensor] = None, row_scale: Optional[torch.Tensor] = None,
                 col_scale: Optional[torch.Tensor] = None, a_scale: Optional[torch.Tensor] = None,
                 b_scale: Optional[torch.Tensor] = None, offs: Optional[torch.Tensor] = None) -> torch.Tensor:
            values = (bias, residual, row_scale, col_scale, a_scale, b_scale, offs)
            return kernels[name](a, b, **{key: value for key, value in zip(CALL_OPERANDS, values) if value is not None})

        @call.register_fake
        def _(name, a, b, bias=None, residual=None, row_scale=None, col_scale=None, a_scale=None, b_scale=None,
              offs=None):
            req = kernels[name].requirements
            dtype = getattr(torch, req.dtypes["C"])
            m, n = a.shape[-2], b.shape[-1]
            if req.layouts["C"] == "row":
                return a.new_empty((m, n), dtype=dtype)
            return a.new_empty((n, m), dtype=dtype).t()

        module._call_op = call
    return module._call_op


@pytest.mark.parametrize("label,name,case", CASES, ids=IDS)
def test_torch_compile_reduce_overhead_replays_what_eager_calls_compute(torch, kernels, label, name, case):
    """The call as a custom op in a function compiled with mode="reduce-overhead": PyTorch records a CUDA graph
    and replays it on each new input; every output equals the eager call's."""
    op = compiled_op(torch, kernels)
    compiled = torch.compile(lambda a, b, chain: op(name, a, b, **chain), mode="reduce-overhead")
    for seed in range(6, 10):  # warm-up, recording, then replays
        (a, b), chain = make(torch, case, seed)
        out = compiled(a, b, chain).clone()  # the graph's output buffer is the next replay's
        eager = kernels[name](a, b, **chain)
        torch.cuda.synchronize()
        assert torch.equal(out, eager), seed
