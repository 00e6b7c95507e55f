"""Fuzzing the commands: mutants of every shipped spec, family and tuning template (tests/fuzz_mutants.py)
through `check`, `compile --no-nvcc` and `tune --screen-only --no-nvcc`, in-process, as the command line
runs them. Each run must exit 0 or 1 without a traceback, position every diagnostic inside its file,
and write complete outputs when it accepts the input (none when it refuses it).

Derandomized (a fixed seed per test, no example database), so CI sees the same mutants every run.
Budget: under 45 s for this module on the 2-core machine when it is quiet (31 s of CPU for its 1,570
mutants, measured while the machine was shared); with tests/test_fuzz.py, tests/test_fuzz_campaign.py and
tests/test_fuzz_nvcc.py the fuzz suite takes about 70 s (docs/fuzzing.md has the figures).
scripts/fuzz_campaign.py runs the same mutants by the thousand.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzz_mutants
from fuzz_mutants import (BYTES, OPERATIONS, Outcome, RandomChooser, incomplete, mutant_at, mutate, narrow_template,
                          prepare_workdir, run_mutant, unpositioned)
from gemmdsl.tune import expand


def fuzz_settings(examples: int):
    return settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class DrawChooser:
    """A mutation's choices drawn from hypothesis, which can then shrink a failing mutant."""

    def __init__(self, data):
        self.data = data

    def integer(self, low: int, high: int) -> int:
        return self.data.draw(st.integers(low, high))

    def choice(self, options):
        return self.data.draw(st.sampled_from(list(options)))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return prepare_workdir(tmp_path_factory.mktemp("fuzz"))


def assert_holds(mutant, outcome: Outcome) -> None:
    assert not outcome.finding, (f"{outcome.verdict} for a mutant of {mutant.seed.name} ({mutant.command}; "
                                 f"{'; '.join(mutant.operations)}):\n{mutant.data!r}\n{outcome.detail}")


# --- every kind of input through its commands -----------------------------------------------------


@pytest.mark.parametrize("kind, command, examples", [
    ("spec", "check", 300), ("spec", "compile", 300), ("family", "check", 120), ("family", "compile", 120),
    ("template", "tune", 250)])
def test_mutants(workdir, kind, command, examples):
    @fuzz_settings(examples)
    @given(st.data())
    def run(data):
        mutant = mutate(DrawChooser(data), kind, command)
        assert_holds(mutant, run_mutant(mutant, workdir))

    run()


@pytest.mark.parametrize("operation", [*OPERATIONS, BYTES])
def test_each_operation(workdir, operation):
    """Each mutation alone, on any kind of input, so that none is drowned by the others."""
    @fuzz_settings(60)
    @given(st.data())
    def run(data):
        mutant = mutate(DrawChooser(data), operations=[operation])
        assert_holds(mutant, run_mutant(mutant, workdir))

    run()


# --- the machinery: mutants reproduce, the oracle sees what it must ----------------------------------


def test_mutants_reproduce_from_seed_and_index():
    first = [mutant_at(7, index) for index in range(30)]
    again = [mutate(RandomChooser(f"7:{index}")) for index in range(30)]
    assert first == again
    assert len({mutant.data for mutant in first}) == 30
    assert {mutant.kind for mutant in first} == {"spec", "family", "template"}


def test_templates_are_narrowed_but_keep_every_group():
    for seed in fuzz_mutants.seeds_of("template"):
        original = (fuzz_mutants.TEMPLATES / seed.name).read_text()
        candidates = expand(seed.text)
        assert 1 < len(candidates) <= fuzz_mutants.TEMPLATE_CANDIDATES, seed.name
        assert seed.text.count("{") == original.count("{")
        assert narrow_template(seed.text) == seed.text


def test_the_oracle_flags_unpositioned_and_out_of_file_diagnostics(tmp_path):
    path = tmp_path / "fuzzed.gemm"
    assert unpositioned(f"{path}:2:5: error: bad\n    2 | x: error: y\n  hint: z", path, "a\nb\n") is None
    assert "without a line" in unpositioned(f"{path}: error: no position", path, "a\n")
    assert "outside its file" in unpositioned(f"{path}:9:1: error: past the end", path, "a\nb\n")
    assert "outside its file" in unpositioned(f"{path}:0:1: error: line 0", path, "a\n")


def test_the_oracle_flags_incomplete_outputs(tmp_path):
    (tmp_path / "k.cu").write_text("void k_launch();")
    assert "wrote ['k.cu']" in incomplete("compile", 1, "", tmp_path)
    assert "not ['k.cu', 'k.h', 'k.json']" in incomplete("compile", 0, "k: wrote x\n", tmp_path)
    (tmp_path / "k.h").write_text("void k_launch();")
    (tmp_path / "k.json").write_text('{"kernel": "k"}')
    assert incomplete("compile", 0, "k: wrote x\n", tmp_path) is None
    (tmp_path / "k.h").write_text("")
    assert "missing" in incomplete("compile", 0, "k: wrote x\n", tmp_path)
    assert "no report" in incomplete("check", 0, "\n", tmp_path)


def test_the_oracle_flags_a_traceback(workdir, monkeypatch):
    import gemmdsl.check

    monkeypatch.setattr(gemmdsl.check, "check_main", lambda args: 1 / 0)
    mutant = mutate(RandomChooser("oracle"), "spec", "check")
    outcome = run_mutant(mutant, workdir)
    assert outcome.verdict == "traceback" and "ZeroDivisionError" in outcome.detail
