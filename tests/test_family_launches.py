"""A family's call launches what its chosen member's own call launches (the fake GPU of tests/fake_gpu.py records
each launch): the same kernels with the same grids, padded copies included, at aligned and misaligned shapes."""
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fake_gpu import FakeGpu, fake_family, matrix

SPECS = Path(__file__).resolve().parent.parent / "specs"
FAMILIES = {"hgemm_h100_family": "float32", "hgemm_h100_bf16c_family": "bfloat16"}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_family_call_launches_its_members_call(name, monkeypatch):
    gpu = FakeGpu().install(monkeypatch)
    family = fake_family(SPECS / f"{name}.gemmf")

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(shape=st.tuples(st.integers(1, 5000), st.integers(1, 5000), st.integers(1, 5000)))
    def check(shape):
        m, n, k = shape
        a, b, c = matrix(m, k, "bfloat16"), matrix(k, n, "bfloat16", "col"), matrix(m, n, FAMILIES[name])

        def launches(bound) -> list[tuple]:
            before = len(gpu.launched)
            bound()
            return [(launch.entry, launch.grid, launch.block) for launch in gpu.launched[before:]]

        member = family.member_for(m, n, k)
        assert launches(family.bind(a, b, c)) == launches(member.bind_padded(a, b, c) or member.bind(a, b, c)), shape

    check()
