"""On the GPU: kernels called with PyTorch, CuPy, JAX and Numba arrays, and a spec for an older target.

- Zero copies: the kernel gets the operands' own addresses; a C the caller passes is written in
  place; a C left out is made in A's library.
- Streams: a PyTorch caller's current stream, CuPy's current stream, and `stream=` over both.
- Errors with the real libraries: dtype (float64, bfloat16), host memory, overlapping C, a JAX C.
- A spec compiled for sm_80 runs on a newer GPU, built for that GPU, with a one-line note.
- examples/torch_custom_op.py: the kernel as a torch.library custom op, eager and under torch.compile.

All marked `gpu`; each library's tests skip themselves when it is not installed.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from pathlib import Path

import numpy
import pytest

from gemmdsl import runtime
from gemmdsl.compiler import compile_path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ROOT / "specs" / "checked_v3.gemm"  # NN, alpha_beta, any shape
BATCHED = ROOT / "specs" / "batched_v3.gemm"
OLDER_TARGET = 80
TOLERANCE = 1e-5

pytestmark = pytest.mark.gpu
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX would otherwise take most of the GPU


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    return torch


def close(actual, expected) -> bool:
    actual, expected = numpy.asarray(actual, dtype=numpy.float64), numpy.asarray(expected, dtype=numpy.float64)
    return numpy.linalg.norm(actual - expected) <= TOLERANCE * numpy.linalg.norm(expected)


def test_torch_tensors_read_from_attributes_agree_with_dlpack(torch):
    from gemmdsl.arrays import view_of_dlpack, view_of_torch_tensor

    base = torch.rand(4, 96, 80, device="cuda")
    for tensor in (base, base.to(torch.bfloat16).mT, base.half()[1:, 8:40, ::2], base[2].t(), base[:, 5]):
        expected = view_of_dlpack("A", tensor.__dlpack__(), "torch", tensor.device.index)
        assert view_of_torch_tensor(tensor) == expected


def test_cupy_arrays_read_from_attributes_agree_with_the_interface_and_the_driver(cupy):
    from gemmdsl.arrays import view_of_cupy_array, view_of_interface

    base = cupy.random.rand(4, 96, 80, dtype=cupy.float32)
    for array in (base, base.astype(cupy.float16).swapaxes(-1, -2), base[1:, 8:40, ::2], base[2].T, base[:, 5]):
        expected = view_of_interface("A", array.__cuda_array_interface__, "cupy")
        device = cupy.cuda.runtime.pointerGetAttributes(expected.pointer).device
        assert view_of_cupy_array(array) == dataclasses.replace(expected, device=device)


def test_torch_operands_are_used_in_place(load_kernel, torch):
    kernel = load_kernel(CHECKED)
    a = torch.rand(300, 70, device="cuda")
    b = torch.rand(70, 200, device="cuda")
    launch = kernel.bind(a, b)
    pointers = [int(pointer) for pointer in launch.launches[0].args[:3]]
    assert isinstance(launch.c, torch.Tensor) and launch.c.device == a.device
    assert pointers == [a.data_ptr(), b.data_ptr(), launch.c.data_ptr()]
    c = torch.full((300, 200), 1.0, device="cuda")
    written = kernel(a, b, c, alpha=2.0, beta=-1.0)
    assert written is c
    torch.cuda.synchronize()
    assert close(c.cpu(), (2 * a @ b - 1).cpu())


def test_a_repeated_call_takes_its_plan_and_computes_on_its_own_operands(load_kernel, torch, monkeypatch):
    kernel = load_kernel(CHECKED)
    checked = []
    check_call = runtime.check_call
    monkeypatch.setattr(runtime.kernel, "check_call", lambda *args: checked.append(args) or check_call(*args))
    a, b = torch.rand(300, 70, device="cuda"), torch.rand(70, 200, device="cuda")
    c, other_c = torch.zeros(300, 200, device="cuda"), torch.zeros(300, 200, device="cuda")
    kernel._plans.clear()  # the module's kernel: no plan of an earlier test's
    kernel.bind(a, b, c)
    kernel.bind(a.clone(), b, other_c)  # new A and C, one signature: the plan, no checks
    assert len(checked) == 1
    for beta, out in [(0.0, c), (0.0, other_c), (-1.0, c)]:  # new C, then new scalars: each launches anew
        out.fill_(1.0)
        kernel(a, b, out, alpha=2.0, beta=beta)
        torch.cuda.synchronize()
        assert close(out.cpu(), (2 * a @ b + beta).cpu())


def test_a_wgmma_stream_k_call_gets_a_workspace_every_time(load_kernel, cupy):
    """Two calls of one stream-K binding may run on two streams at once: they must not share partial sums."""
    kernel = load_kernel(ROOT / "specs" / "sgemm_3xtf32_h100_sk.gemm")
    a, b, c = (cupy.ones((1000, 1000), dtype="float32") for _ in range(3))
    first, second = kernel.bind(a, b.T, c), kernel.bind(a, b.T, c)
    assert len(first.workspace) == 2 and first.workspace[0] is not second.workspace[0]


def test_torch_bfloat16_float64_and_host_tensors_are_refused(load_kernel, torch):
    kernel = load_kernel(CHECKED)
    b = torch.rand(64, 64, device="cuda")
    with pytest.raises(TypeError, match="A must be float32, got bfloat16"):  # read through DLPack
        kernel(torch.rand(64, 64, device="cuda", dtype=torch.bfloat16), b)
    with pytest.raises(TypeError, match="A must be float32, got float64"):
        kernel(torch.rand(64, 64, device="cuda", dtype=torch.float64), b)
    with pytest.raises(TypeError, match="A must be in GPU memory, got a torch.Tensor in host memory"):
        kernel(torch.rand(64, 64), b)


def test_torch_launch_goes_on_the_callers_stream(load_kernel, torch):
    kernel = load_kernel(CHECKED)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        a = torch.full((512, 512), 2.0, device="cuda")  # made on `side`: only that stream orders it
        launch = kernel.bind(a, a)
        used = launch()
        done = torch.cuda.Event()
        done.record(side)
    assert used == side.cuda_stream
    done.synchronize()  # nothing else synchronised: the kernel ran in `side`'s order
    assert bool((launch.c == 2 * 2 * 512).all())
    other = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert launch(stream=other) == other.cuda_stream  # an explicit stream wins
    other.synchronize()


def test_c_overlapping_a_is_refused_with_torch(load_kernel, torch):
    kernel = load_kernel(CHECKED)
    a = torch.rand(128, 128, device="cuda")
    with pytest.raises(ValueError, match="C overlaps A"):
        kernel(a, torch.rand(128, 128, device="cuda"), a)
    buffer = torch.rand(128, 256, device="cuda")
    kernel(buffer[:, :128], torch.rand(128, 128, device="cuda"), torch.empty(128, 128, device="cuda"))  # fine
    batched = load_kernel(BATCHED)
    shared_c = torch.empty(64, 64, device="cuda").expand(3, 64, 64)  # batch stride 0
    with pytest.raises(ValueError, match="C's 3 matrices overlap"):
        batched(torch.rand(3, 64, 64, device="cuda"), torch.rand(64, 64, device="cuda"), shared_c)


def test_cupy_callers_keep_their_stream_and_get_cupy(load_kernel, cupy):
    kernel = load_kernel(CHECKED)
    with cupy.cuda.Stream(non_blocking=True) as stream:
        a = cupy.random.uniform(-1, 1, (100, 60), dtype=cupy.float32)  # made on `stream`, as the launch runs
        b = cupy.random.uniform(-1, 1, (60, 80), dtype=cupy.float32)
        launch = kernel.bind(a, b)
        assert launch() == stream.ptr
        stream.synchronize()
    assert isinstance(launch.c, cupy.ndarray)
    assert int(launch.launches[0].args[2]) == launch.c.data.ptr
    assert close(cupy.asnumpy(launch.c), cupy.asnumpy(a) @ cupy.asnumpy(b))


def test_jax_arrays_in_and_a_new_jax_array_out(load_kernel):
    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError as err:  # JAX without its CUDA plugin
        pytest.skip(f"JAX has no GPU: {err}")
    kernel = load_kernel(CHECKED)
    a = jax.device_put(numpy.random.default_rng(0).uniform(-1, 1, (96, 48)).astype(numpy.float32), gpu)
    b = jax.device_put(numpy.random.default_rng(1).uniform(-1, 1, (48, 64)).astype(numpy.float32), gpu)
    c = kernel(a, b)
    assert isinstance(c, jax.Array) and c.shape == (96, 64)
    assert close(numpy.asarray(c), numpy.asarray(a) @ numpy.asarray(b))
    with pytest.raises(TypeError, match="C is a JAX array, and JAX arrays are immutable"):
        kernel(a, b, c)


def test_numba_arrays_in_and_out(load_kernel):
    numba_cuda = pytest.importorskip("numba.cuda")
    kernel = load_kernel(CHECKED)
    a_host = numpy.random.default_rng(2).uniform(-1, 1, (70, 30)).astype(numpy.float32)
    b_host = numpy.random.default_rng(3).uniform(-1, 1, (30, 90)).astype(numpy.float32)
    a, b = numba_cuda.to_device(a_host), numba_cuda.to_device(b_host)
    c = kernel(a, b)
    assert numba_cuda.is_cuda_array(c) and c.shape == (70, 90)
    numba_cuda.synchronize()
    assert close(c.copy_to_host(), a_host @ b_host)


def test_a_spec_for_an_older_target_runs_built_for_this_gpu(cupy, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMDSL_CACHE", str(tmp_path))
    device = cupy.cuda.Device().compute_capability
    if int(device) <= OLDER_TARGET:
        pytest.skip(f"needs a GPU newer than sm_{OLDER_TARGET}")
    kernel = runtime.load(compile_path(CHECKED, OLDER_TARGET))
    note = f"note: checked_v3 targets sm_{OLDER_TARGET}; built for this GPU's sm_{device}"
    assert capsys.readouterr().err.splitlines().count(note) == 1
    assert kernel.built_for == f"sm_{device}" and [p.name.split("-")[1] for p in tmp_path.glob("*.cubin")] == [
        f"sm_{device}"]
    a = cupy.random.uniform(-1, 1, (333, 129), dtype=cupy.float32)
    b = cupy.random.uniform(-1, 1, (129, 517), dtype=cupy.float32)
    assert close(cupy.asnumpy(kernel(a, b)), cupy.asnumpy(a) @ cupy.asnumpy(b))


def test_torch_custom_op_example_runs_eagerly_and_compiled(torch, tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMDSL_CACHE", str(tmp_path))
    spec = importlib.util.spec_from_file_location("torch_custom_op", ROOT / "examples" / "torch_custom_op.py")
    example = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = example  # torch.library keeps the module's functions by qualified name
    spec.loader.exec_module(example)
    errors = example.main()
    assert max(errors.values()) < TOLERANCE, errors
