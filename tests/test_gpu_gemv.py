"""The GEMV path's specs on the GPU: every case `verify` makes (packed operands, whose odd K puts each row off 16
bytes, so the windowed kernel runs; padded ones, the aligned kernel; alpha/beta; poisoned C) at shapes of a few rows
or columns against many, held to each precision's tolerance."""
from __future__ import annotations

from pathlib import Path

import pytest

from gemmdsl.frontend import load_spec
from gemmdsl.paths import path_of
from gemmdsl.verify import format_result, verify

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]
GEMV_SPECS = [path for path in sorted((ROOT / "specs").glob("*.gemm")) if path_of(load_spec(path)).name == "gemv"]
# One row or column against many (the member's own regime), a few more than a block's (its small rows' blocks),
# odd K and K below one chunk (the elements past the whole chunks), and a tile past both edges.
SHAPES = [(1, 1000, 1003), (3, 517, 129), (1000, 1, 1003), (517, 2, 33), (1, 7, 5), (5, 9, 4097)]


@pytest.mark.parametrize("path", GEMV_SPECS, ids=lambda path: path.stem)
def test_gemv_spec_is_correct(path, load_kernel):
    kernel = load_kernel(path)
    results = verify(kernel, SHAPES, seed=7)
    failed = [format_result(result) for result in results if not result.passed]
    assert results and not failed, "\n".join(failed)
    # Odd leading dimensions run the windowed kernel; padded ones the aligned one: both ran.
    assert {result.entry for result in results} == {kernel.requirements.launch.entries.vector,
                                                    kernel.requirements.launch.entries.scalar}


def test_the_16_bit_and_f32_gemv_members_are_verified():
    assert {"hgemv_1x4", "hgemv_4x1", "sgemv_1x4", "sgemv_4x1"} <= {path.stem for path in GEMV_SPECS}
