"""A family's call launches what its chosen member's own call launches (the fake GPU of tests/fake_gpu.py records
each launch): the same kernels with the same grids, padded copies included, at aligned and misaligned shapes and
empty ones (M, N or K of 0)."""
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fake_gpu import FakeGpu, FakeTensor, fake_family, matrix

SPECS = Path(__file__).resolve().parent.parent / "specs"
# A family's operands' and C's types, and its scales: rowwise (row_scale M, col_scale N) or per tensor (a_scale and
# b_scale, 0-dim), the FP8 families'.
FAMILIES = {"hgemm_h100_family": ("bfloat16", "float32", None),
            "hgemm_h100_bf16c_family": ("bfloat16", "bfloat16", None),
            "fp8_rowwise_family": ("float8_e4m3fn", "bfloat16", "rowcol"),
            "fp8_fast_family": ("float8_e4m3fn", "bfloat16", "rowcol"),
            "fp8_tensorwise_family": ("float8_e4m3fn", "bfloat16", "tensor"),
            "fp8_tensorwise_fast_family": ("float8_e4m3fn", "bfloat16", "tensor")}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_family_call_launches_its_members_call(name, monkeypatch):
    gpu = FakeGpu().install(monkeypatch)
    family = fake_family(SPECS / f"{name}.gemmf")

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(shape=st.tuples(st.integers(0, 5000), st.integers(0, 5000), st.integers(0, 5000)))
    def check(shape):
        m, n, k = shape
        operands, c_type, scaled = FAMILIES[name]
        a, b, c = matrix(m, k, operands), matrix(k, n, operands, "col"), matrix(m, n, c_type)
        scales = {"rowcol": dict(row_scale=FakeTensor((m,), "float32"), col_scale=FakeTensor((n,), "float32")),
                  "tensor": dict(a_scale=FakeTensor((), "float32"), b_scale=FakeTensor((), "float32")),
                  None: {}}[scaled]

        def launches(bound) -> list[tuple]:
            before = len(gpu.launched)
            bound()
            return [(launch.entry, launch.grid, launch.block) for launch in gpu.launched[before:]]

        member = family.member_for(m, n, k)
        assert launches(family.bind(a, b, c, **scales)) == launches(member.bind_padded(a, b, c, **scales)
                                                                    or member.bind(a, b, c, **scales)), shape

    check()


def test_a_family_answers_what_verify_and_bench_ask_of_a_kernel(monkeypatch):
    """verify's reference reads the kernel's epilogue: a family has its members' (FP8: store)."""
    FakeGpu().install(monkeypatch)
    family = fake_family(SPECS / "fp8_rowwise_family.gemmf")
    assert family.epilogue == family.kernels[0].epilogue == "store"
    assert fake_family(SPECS / "hgemm_h100_family.gemmf").epilogue == "alpha_beta"


def test_a_family_names_the_member_it_picks_as_the_c_rule_does(monkeypatch):
    """member_index is what the study scripts record as `chosen`: the index of member_for's kernel."""
    FakeGpu().install(monkeypatch)
    family = fake_family(SPECS / "hgemm_h100_bf16c_family.gemmf")
    for shape in ((1, 8192, 8192), (4096, 4096, 4096), (1000, 1000, 1000)):
        assert family.kernels[family.member_index(*shape)] is family.member_for(*shape)
    assert family.member_index(1, 8192, 8192) != family.member_index(4096, 4096, 4096)
