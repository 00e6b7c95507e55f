"""examples/cmake: the CMake project that builds a generated .cu into a library and calls it from C++
through the generated header. CI builds it (nvcc, no GPU); on a GPU the demo runs and checks C."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gemmdsl.build import find_nvcc

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "cmake"
# PATH's cmake, or the one `pip install cmake` put beside this Python (a venv that is not activated).
CMAKE = shutil.which("cmake") or shutil.which("cmake", path=str(Path(sys.executable).parent))
# The example's default kernel, and two that differ from it in what the demo must get right:
# checked bounds with partial edge tiles, and column-major operands with the store epilogue.
KERNELS = ("sgemm_v3", "checked_v3", "layouts_tt")
REPORT = re.compile(r"^(\w+): (\d+)x(\d+)x(\d+), max relative error (\S+) \(tolerance (\S+)\): PASSED$", re.MULTILINE)

pytestmark = pytest.mark.skipif(CMAKE is None or find_nvcc() is None, reason="needs cmake and nvcc on PATH")


def build_demo(build_dir: Path, kernel: str) -> Path:
    """Configure and build the example for `kernel` from generated/, as its README does; the demo's path."""
    for command in ([CMAKE, "-S", str(EXAMPLE), "-B", str(build_dir), f"-DGEMMDSL_KERNEL={kernel}"],
                    [CMAKE, "--build", str(build_dir)]):
        done = subprocess.run(command, capture_output=True, text=True)
        assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr}"
    return build_dir / "demo"


@pytest.mark.nvcc
def test_example_builds(tmp_path):
    assert build_demo(tmp_path, KERNELS[0]).is_file()


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", KERNELS)
def test_example_demo_runs_and_matches_the_reference(kernel, tmp_path):
    done = subprocess.run([str(build_demo(tmp_path, kernel))], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    report = REPORT.search(done.stdout)
    assert report is not None and report.group(1) == kernel, done.stdout
    assert float(report.group(5)) <= float(report.group(6))
