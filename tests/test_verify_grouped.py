"""gemmdsl.verify on a `batch: grouped` kernel, on the CPU: verify draws its own offs, makes B one matrix per
group and checks C against each group's rows of the references. The kernel is a stand-in with the shipped
moe_grouped spec's requirements that computes in NumPy; the arrays are NumPy's in CuPy's place."""
from pathlib import Path

import numpy
import pytest

from gemmdsl import verify
from gemmdsl.compiler import compile_path
from gemmdsl.grouped_bench import verify_group_ends
from gemmdsl.grouped_schedule import group_rows
from gemmdsl.runtime import KernelRequirements

ROOT = Path(__file__).resolve().parents[1]
# tests/test_gpu_wgmma.py's odd shapes: K = 129 leaves a contiguous A's rows off TMA's 16 bytes.
SHAPES = [(333, 517, 136), (64, 48, 40), (333, 517, 129)]


class NumpyArrays(verify.CupyArrays):
    """verify's FP32 arrays, in NumPy."""

    def __init__(self, seed):
        self.xp = numpy
        self.rng = numpy.random.RandomState(seed)

    def random(self, elements, dtype, wide=False):
        return self.rng.uniform(-1.0, 1.0, elements).astype(numpy.float32)

    def host(self, x):
        return numpy.asarray(x)


class GroupedKernel:
    """What verify reads of a grouped Kernel; a call computes C = A's rows of group g times B[g] (or, `mixed_up`,
    times B[0] for every group: the bug of a kernel that ignores offs)."""

    def __init__(self, mixed_up=False):
        metadata = compile_path(ROOT / "specs" / "moe_grouped.gemm").metadata
        self.name, self.epilogue, self.mixed_up = "moe_grouped", metadata["epilogue"], mixed_up
        self.requirements = KernelRequirements.from_metadata(metadata)
        self.metadata = {**metadata, "dtypes": dict.fromkeys("abc", "f32"), "unit": "fma"}
        self.calls = []

    def bind(self, a, b, c, alpha, beta, offs=None, **chain):
        assert offs is not None and offs.dtype == numpy.int32 and b.shape[0] == len(offs)
        self.calls.append(list(offs))
        return GroupedLaunch(a, b[:1].repeat(len(offs), axis=0) if self.mixed_up else b, c, list(offs))


class GroupedLaunch:
    entry = "moe_grouped_kernel"

    def __init__(self, a, b, c, offs):
        self.a, self.b, self.c, self.offs = a, b, c, offs

    def __call__(self):
        for g, (start, end) in enumerate(group_rows(self.offs, self.a.shape[0])):
            self.c[start:end] = self.a[start:end] @ self.b[g]


@pytest.fixture(autouse=True)
def numpy_arrays(monkeypatch):
    monkeypatch.setattr(verify, "arrays_for", lambda compared, seed: NumpyArrays(seed))


def test_verify_makes_its_own_offs_and_passes_a_correct_grouped_kernel():
    kernel = GroupedKernel()
    results = verify.verify(kernel, SHAPES, seed=3)
    assert [verify.format_result(result) for result in results if not result.passed] == []
    assert [result.k for result in results if result.skipped] == [129]  # contiguous K = 129: TMA refuses lda
    assert kernel.calls == [verify_group_ends(m, 3) for m, _, _ in SHAPES for _ in range(2)][:len(kernel.calls)]
    assert any(0 in numpy.diff([0] + ends) for ends in kernel.calls)  # empty groups ran
    assert all("offs [" in result.case for result in results if not result.skipped)


def test_verify_fails_a_grouped_kernel_that_mixes_up_the_groups():
    results = verify.verify(GroupedKernel(mixed_up=True), SHAPES[:1], seed=3)
    assert results and all(not result.passed for result in results)
