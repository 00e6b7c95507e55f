"""Every GPU of a host, and CUDA graphs: a call runs on its operands' GPU or is refused before anything
launches, one kernel object serves every GPU and every thread, and captured calls replay exactly.

The multi-GPU cases skip where fewer than two GPUs are present; the graph cases run on one. The rules
are gemmdsl/devices.py's (docs/python-api.md, "Devices and streams"); their CPU tests are
tests/test_devices.py.
"""
from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest

from gemmdsl.precisions import comparison

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"

pytestmark = pytest.mark.gpu

# One spec per path and schedule, and a family: (label, file, a shape that exercises it).
KERNELS = [
    ("fma", "checked_v3.gemm", (300, 200, 70)),
    ("fma_stream_k", "sgemm_any.gemm", (256, 256, 4096)),
    ("mma_sync", "hgemm_mma.gemm", (333, 517, 129)),
    ("wgmma", "hgemm_h100_bf16c.gemm", (1000, 1000, 1000)),
    ("wgmma_stream_k", "sgemm_3xtf32_h100_sk.gemm", (256, 256, 8192)),
    ("family", "sgemm_family.gemmf", (1000, 700, 900)),
]
# The FP32 error of SGEMM on such inputs is about 1e-6: 3xTF32 is held to twice a generous bound of it.
SGEMM_ERROR = 5e-6


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    pytest.importorskip("cupy")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    return torch


@pytest.fixture(scope="module")
def two_gpus(torch):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    return torch


@pytest.fixture(scope="module")
def kernels(torch):
    import gemmdsl

    with torch.cuda.device(0):
        return {label: gemmdsl.load(SPECS / name) for label, name, _ in KERNELS}


def torch_dtype(torch, name):
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def operands(torch, kernel, size, device, seed):
    """Fresh random A and B in the kernel's layouts and types on `device`, and C poisoned with NaN."""
    m, n, k = size
    req = kernel.requirements
    generator = torch.Generator(device=f"cuda:{device}").manual_seed(seed)

    def matrix(name, rows, cols):
        dtype = torch_dtype(torch, req.dtypes[name])
        if req.layouts[name] == "row":
            return torch.rand(rows, cols, device=f"cuda:{device}", generator=generator).mul_(2).sub_(1).to(dtype)
        return torch.rand(cols, rows, device=f"cuda:{device}", generator=generator).mul_(2).sub_(1).to(dtype).t()

    a, b = matrix("A", m, k), matrix("B", k, n)
    c = matrix("C", m, n).fill_(float("nan"))
    return a, b, c


def relative_error(torch, c, a, b):
    reference = a.double() @ b.double()
    return ((c.double() - reference).norm() / reference.norm()).item()


def tolerance(kernel):
    compared = comparison(kernel.metadata)
    c_dtype = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}[kernel.requirements.dtypes["C"]]
    return compared.tolerance(c_dtype, SGEMM_ERROR)


def context_alive(torch, device):
    """A CUDA context that survived: a small product on `device` runs and synchronises."""
    x = torch.ones(8, 8, device=f"cuda:{device}")
    torch.cuda.synchronize(device)
    return (x @ x).sum().item() == 512


STREAMS = ["none", "current_of_operands", "explicit_same", "explicit_other"]


@pytest.mark.parametrize("label", [label for label, _, _ in KERNELS])
@pytest.mark.parametrize("operand_device,current_device,stream", list(itertools.product((0, 1), (0, 1), STREAMS)))
def test_device_matrix(two_gpus, kernels, label, operand_device, current_device, stream):
    """Operand device x current device x stream: C matches float64, or the call is refused with a clear
    error before anything launches, and every context survives."""
    torch = two_gpus
    kernel = kernels[label]
    size = dict((l, s) for l, _, s in KERNELS)[label]
    a, b, c = operands(torch, kernel, size, operand_device, seed=operand_device * 8 + current_device)
    other = 1 - operand_device
    with torch.cuda.device(current_device):
        if stream == "explicit_other":
            with pytest.raises(ValueError, match=f"the stream is on GPU {other} but the operands are on GPU "
                                                 f"{operand_device}"):
                kernel(a, b, c, stream=torch.cuda.Stream(device=other))
            assert torch.isnan(c).all(), "a refused call wrote C"
        else:
            side = torch.cuda.Stream(device=operand_device)
            if stream == "none":
                kernel(a, b, c)
            elif stream == "current_of_operands":
                with torch.cuda.stream(side):  # makes operand_device current too, as PyTorch does
                    kernel(a, b, c)
            else:
                side.wait_stream(torch.cuda.current_stream(operand_device))
                kernel(a, b, c, stream=side)
            torch.cuda.synchronize(operand_device)
            assert not torch.isnan(c).any(), "C was not written everywhere"
            assert relative_error(torch, c, a, b) < tolerance(kernel)
        assert torch.cuda.current_device() == current_device  # the caller's device, restored
    assert context_alive(torch, 0) and context_alive(torch, 1)


@pytest.mark.parametrize("label", ["fma", "wgmma", "family"])
def test_operands_on_two_gpus_are_refused_and_the_contexts_survive(two_gpus, kernels, label):
    torch = two_gpus
    kernel = kernels[label]
    size = dict((l, s) for l, _, s in KERNELS)[label]
    a, b, c = operands(torch, kernel, size, 0, seed=1)
    b1 = b.to("cuda:1")
    with pytest.raises(ValueError, match="A is on GPU 0 but B is on GPU 1"):
        kernel(a, b1, c)
    with pytest.raises(ValueError, match="A is on GPU 0 but C is on GPU 1"):
        kernel(a, b, c.to("cuda:1"))
    assert torch.isnan(c).all()
    assert context_alive(torch, 0) and context_alive(torch, 1)


@pytest.mark.parametrize("label", ["fma", "wgmma", "family"])
def test_threads_on_different_gpus_share_one_kernel(two_gpus, kernels, label):
    """4 threads x 200 calls of varying shapes, two threads per GPU, one kernel object: all correct."""
    torch = two_gpus
    kernel = kernels[label]
    failures, errors = [], []
    # Odd M; N and K whole 16-byte units, which the wgmma spec's TMA loads need (it has no fallback).
    shapes = [(96, 80, 40), (257, 136, 72), (512, 256, 128), (1000, 64, 304)]

    def work(thread):
        device = thread % 2
        try:
            with torch.cuda.device(device):
                stream = torch.cuda.Stream()
                with torch.cuda.stream(stream):
                    for call in range(200):
                        size = shapes[(thread + call) % len(shapes)]
                        a, b, c = operands(torch, kernel, size, device, seed=thread * 1000 + call)
                        kernel(a, b, c)
                        stream.synchronize()
                        error = relative_error(torch, c, a, b)
                        if not error < tolerance(kernel):
                            failures.append((thread, call, size, error))
        except Exception as err:  # noqa: BLE001 - reported below, with the thread
            errors.append((thread, repr(err)))

    threads = [threading.Thread(target=work, args=(thread,)) for thread in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and not failures


GRAPH_KERNELS = [label for label, _, _ in KERNELS]


@pytest.mark.parametrize("device", [0, 1])
@pytest.mark.parametrize("label", GRAPH_KERNELS)
def test_a_captured_call_replays_as_eager_calls_compute(torch, kernels, label, device):
    """100 replays of a CUDA graph holding the call give eager's C: bitwise where the kernel adds its
    partial sums in a fixed order, to rounding where FP32 stream-K adds them with atomics (the FMA
    stream-K spec, and the family, whose member for this shape splits K that way)."""
    if device >= torch.cuda.device_count():
        pytest.skip("needs two GPUs")
    kernel = kernels[label]
    size = dict((l, s) for l, _, s in KERNELS)[label]
    a, b, eager = operands(torch, kernel, size, device, seed=7)
    with torch.cuda.device(device):
        kernel(a, b, eager)
        torch.cuda.synchronize()
        replayed = torch.full_like(eager, float("nan"))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the capture, as PyTorch asks
            kernel(a, b, replayed)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # PyTorch's default capture stream is made once per process, on the GPU current then: name one here.
        with torch.cuda.graph(graph, stream=torch.cuda.Stream()):
            kernel(a, b, replayed)
        bitwise = label not in ("fma_stream_k", "family")
        for _ in range(100):
            replayed.fill_(float("nan"))
            graph.replay()
        torch.cuda.synchronize()
        if bitwise:
            assert torch.equal(replayed, eager)
        else:
            assert relative_error(torch, replayed, a, b) < tolerance(kernel)


def custom_op_example():
    """examples/torch_custom_op.py, imported once per process (torch.library registers its op once)."""
    import importlib.util
    import sys

    if "torch_custom_op" not in sys.modules:
        spec = importlib.util.spec_from_file_location("torch_custom_op", ROOT / "examples" / "torch_custom_op.py")
        example = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = example  # torch.library keeps the module's functions by qualified name
        spec.loader.exec_module(example)
    return sys.modules["torch_custom_op"]


@pytest.mark.parametrize("device", [0, 1])
@pytest.mark.parametrize("label", ["fma", "mma_sync", "wgmma"])
def test_the_custom_op_runs_under_torch_compile_with_cuda_graphs(torch, kernels, label, device):
    """The example's op in a function compiled with mode="reduce-overhead" (PyTorch records a CUDA graph
    and replays it), on each path, on the default GPU and on another."""
    if device >= torch.cuda.device_count():
        pytest.skip("needs two GPUs")
    example = custom_op_example()
    name = dict((l, n) for l, n, _ in KERNELS)[label]
    kernel = kernels[label]
    size = dict((l, s) for l, _, s in KERNELS)[label]
    spec = str(SPECS / name)
    compiled = torch.compile(lambda x, y: example.matmul(x, y, spec), mode="reduce-overhead")
    for seed in range(4):  # warm-up, recording, then replays of the graph on new inputs
        a, b, _ = operands(torch, kernel, size, device, seed=seed)
        c = compiled(a, b).clone()  # the graph's output buffer is reused by the next replay
        torch.cuda.synchronize(device)
        assert c.device == a.device
        assert relative_error(torch, c, a, b) < tolerance(kernel)
