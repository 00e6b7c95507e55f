"""Problem sizes beyond what the C launchers take (their M, N, K are int, and so are the kernels' tile
coordinates, up to each size plus its block tile): refused by every command and by the analysis."""
from pathlib import Path

import pytest

from gemmdsl.abi import MAX_INT
from gemmdsl.analysis import ProblemSizeError, analyze
from gemmdsl.cli import main
from gemmdsl.errors import GemmdslError
from gemmdsl.family import compile_family_path, explain
from gemmdsl.frontend import load_spec
from gemmdsl.runtime import parse_sizes

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "specs" / "checked_v3.gemm"  # checked bounds, 128x128x8 blocks
FAMILY = ROOT / "specs" / "sgemm_family.gemmf"
HUGE = "4294967296x4294967296x4294967296"


@pytest.mark.parametrize("command", [["check", str(SPEC)], ["check", str(FAMILY)], ["profile", str(SPEC)]])
def test_a_problem_beyond_the_launchers_int_is_a_usage_error(command, capsys):
    with pytest.raises(SystemExit) as exited:
        main([*command, "--problem", HUGE])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"M=4294967296 is more than {MAX_INT}" in err and "int" in err and "Traceback" not in err


@pytest.mark.parametrize("text", [HUGE, f"{MAX_INT + 1}", f"64x64x{MAX_INT + 1}"])
def test_sizes_beyond_the_launchers_int_are_refused_for_verify_bench_and_tune(text):
    with pytest.raises(ValueError, match=rf"is more than {MAX_INT}"):
        parse_sizes(text)


def test_sizes_up_to_the_launchers_int_parse():
    assert parse_sizes(f"{MAX_INT}x1x1") == [(MAX_INT, 1, 1)]


def test_the_analysis_refuses_what_the_tile_coordinates_cannot_hold():
    spec = load_spec(SPEC)
    for size, dim in (((MAX_INT - 127, 128, 8), "M"), ((128, 2**40, 8), "N"), ((128, 128, MAX_INT), "K")):
        with pytest.raises(ProblemSizeError, match=rf"^{dim}=\d+ is more than \d+: .*32-bit"):
            analyze(spec, size)
    analyze(spec, (MAX_INT - 128, 128, 8))  # the launchers take it


def test_the_analysis_refuses_a_launch_of_more_blocks_than_an_int_counts():
    with pytest.raises(ProblemSizeError, match=r"a launch of more blocks than the launchers count in an int"):
        analyze(load_spec(SPEC), (2**30, 2**30, 8))


def test_the_family_rule_refuses_sizes_beyond_the_launchers_int():
    with pytest.raises(GemmdslError, match=rf"M=4294967296 is more than {MAX_INT}"):
        explain(compile_family_path(FAMILY), (2**32, 4096, 4096))
