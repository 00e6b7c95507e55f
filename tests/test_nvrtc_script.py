"""scripts/nvrtc_vs_nvcc.py's comparison of two builds' machine code, on cubins nvcc makes here."""
import importlib.util
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE = 'extern "C" __global__ void scale(float* x, float a) { x[threadIdx.x] = a * x[threadIdx.x] + 1.0f; }\n'

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def _script():
    spec = importlib.util.spec_from_file_location("nvrtc_vs_nvcc", ROOT / "scripts" / "nvrtc_vs_nvcc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cubin(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cubin")
    (directory / "k.cu").write_text(SOURCE)
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-o", str(directory / "k.cubin"), str(directory / "k.cu")],
                   check=True, capture_output=True, timeout=120)
    return (directory / "k.cubin").read_bytes()


def _flipped(cubin: bytes, bit: int) -> bytes:
    """The cubin with one bit of the kernel's first instruction flipped (0-63: low word, 64-127: high)."""
    at = cubin.index(_script().text_sections(cubin)[".text.scale"])
    word = at + 8 * (bit // 64)
    value, = struct.unpack_from("<Q", cubin, word)
    return cubin[:word] + struct.pack("<Q", value ^ (1 << bit % 64)) + cubin[word + 8:]


def test_sass_difference_tells_barrier_numbering_from_code(cubin):
    script = _script()
    total = len(script.text_sections(cubin)[".text.scale"]) // 16
    assert script.sass_difference(cubin, cubin) == "same"
    assert script.sass_difference(cubin, _flipped(cubin, 64 + 46)) == f"1 barrier-only, 0 other of {total}"
    assert script.sass_difference(cubin, _flipped(cubin, 64 + 41)) == f"0 barrier-only, 1 other of {total}"  # stall
    assert script.sass_difference(cubin, _flipped(cubin, 3)) == f"0 barrier-only, 1 other of {total}"  # opcode
