"""Random valid specs (tests/spec_strategies.py) must give CUDA that nvcc compiles, host launchers
included. A few per run, different each run, so CI covers the generator's space over time (the full run
draws 6, spilling kernels included); tests/test_gpu_shapes.py runs many more on the GPU. Skipped without nvcc."""
import pytest
from hypothesis import HealthCheck, assume, given, settings

import budget
from budget import examples
from gemmdsl.build import build, find_nvcc
from gemmdsl.compiler import compile_text
from spec_strategies import spec_texts

SPECS_PER_RUN = examples(2, 6)

pytestmark = [pytest.mark.nvcc, pytest.mark.skipif(find_nvcc() is None, reason="nvcc not on PATH")]


@settings(max_examples=SPECS_PER_RUN, deadline=None, database=None,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(spec_texts(name="fuzzed"))
def test_random_specs_compile_with_nvcc(text):
    artifacts = compile_text(text, "fuzzed.gemm")
    if not budget.FULL:  # ptxas takes minutes on a kernel that spills: those are drawn in the full run only
        estimate = artifacts.plan.path.register_estimate(artifacts.layout)
        assume(estimate.demand <= estimate.cap)
    result = build(artifacts.cuda, artifacts.name, artifacts.spec.target.sm)
    assert 0 < result.resources.registers <= 255, text
