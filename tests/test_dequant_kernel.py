"""The dequantizing decode kernel's emitter without a GPU: its configurations refuse what the kernel cannot
do; nvcc builds a spec's .cu (kernel and C launcher) for sm_90a; and the C launcher's workspace size and refusals
agree with DecodeConfig's, which the Python runtime launches by (it has no C launcher to call)."""
from __future__ import annotations

import ctypes
import re
import subprocess

import pytest
from hypothesis import given, settings, strategies as st

from gemmdsl.build import find_nvcc
from gemmdsl.api import compile_spec
from gemmdsl.paths.dequant.kernel import DecodeConfig, decode_definitions
from gemmdsl.quant_layout import QuantFormat

from quant_cases import spec_text

S4 = DecodeConfig(QuantFormat("s4", "bf16", 128, True), "bf16")
CUDA_ERROR_INVALID_VALUE = 1


@pytest.mark.parametrize("config, message", [
    (DecodeConfig(QuantFormat("s4", "bf16", 128), "bf16", k_slice=96), "multiple of 64"),
    (DecodeConfig(QuantFormat("s8", "bf16", 128), "bf16", k_slice=160), "multiple of the group"),
    (DecodeConfig(QuantFormat("s4", "bf16", 32), "bf16", m_tiles=4, k_slice=8192), "shared memory"),
    (DecodeConfig(QuantFormat("s4", "bf16", 128), "bf16", m_tiles=3), "m_tiles"),
    (DecodeConfig(QuantFormat("s4", "bf16", 128), "bf16", prefetch=33), "prefetch"),
])
def test_configurations_the_kernel_cannot_run_are_refused(config, message):
    assert any(message in problem.message for problem in config.problems())
    with pytest.raises(ValueError, match=message):
        decode_definitions("refused", config)


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    directory = tmp_path_factory.mktemp("dequant")
    (directory / "s4.cu").write_text(compile_spec("s4.gemm", text=spec_text("s4", S4)).cuda)
    result = subprocess.run([nvcc, "-arch=sm_90a", "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v", "s4.cu",
                             "-o", "libs4.so"], cwd=directory, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    library = ctypes.CDLL(str(directory / "libs4.so"))
    library.s4_workspace_bytes.restype = ctypes.c_size_t
    library.s4_workspace_bytes.argtypes = [ctypes.c_int] * 3
    library.s4_launch.restype = ctypes.c_int
    library.s4_launch.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_int] * 3 + [ctypes.c_void_p]
    library.s4_dequantize.restype = ctypes.c_int
    library.s4_dequantize.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 2 + [ctypes.c_void_p]
    return library, result.stderr


def test_ptxas_keeps_the_blocks_per_sm_the_launch_bounds_ask(launcher):
    _, log = launcher
    registers = [int(n) for n in re.findall(r"Used (\d+) registers", log)]
    assert registers and max(registers) <= S4.register_cap, log  # __launch_bounds__(256, blocks_per_sm)


@settings(max_examples=50, deadline=None)
@given(m=st.integers(0, 5000), n=st.integers(0, 40000), k=st.integers(0, 40000))
def test_the_launcher_sizes_the_workspace_as_the_python_host_does(launcher, m, n, k):
    library, _ = launcher
    assert library.s4_workspace_bytes(m, n, k) == S4.workspace_bytes(m, n, k)


@pytest.mark.parametrize("m, n, k", [(-1, 8, 128), (4, 8, 100), (4, 8, 4096)])
def test_the_launcher_refuses_before_touching_the_gpu(launcher, m, n, k):
    """K not a multiple of the group, a negative size, a split-K call without a workspace (pointers that need no
    GPU: 16-byte aligned, never dereferenced)."""
    library, _ = launcher
    pointer = 256
    result = library.s4_launch(pointer, pointer, pointer, pointer, pointer, None, m, n, k, None)
    assert result == CUDA_ERROR_INVALID_VALUE


@pytest.mark.parametrize("weights, scales, zeros, w, n, k", [
    (256, 256, 256, 256, -1, 128),  # a negative size
    (256, 256, 256, 256, 8, 100),  # K not a multiple of the group
    (264, 256, 256, 256, 8, 128),  # weights not 16-byte aligned
    (256, 256, 256, 264, 8, 128),  # W not 16-byte aligned
    (256, None, 256, 256, 8, 128),  # no scales
    (256, 256, None, 256, 8, 128),  # no zero points for a format that has them
    (256, 258, 256, 256, 8, 128),  # scales not 4-byte aligned
])
def test_the_dequantize_launcher_refuses_before_touching_the_gpu(launcher, weights, scales, zeros, w, n, k):
    library, _ = launcher
    assert library.s4_dequantize(weights, scales, zeros, w, n, k, None) == CUDA_ERROR_INVALID_VALUE


@pytest.mark.parametrize("n, k", [(0, 128), (8, 0), (0, 0)])
def test_the_dequantize_launcher_launches_nothing_for_an_empty_w(launcher, n, k):
    """cudaSuccess (0) without a launch: no GPU is needed, and the pointers are never read."""
    library, _ = launcher
    assert library.s4_dequantize(None, None, None, None, n, k, None) == 0
