"""The hardware numbers of gemmdsl/targets.py: the register cap, computed once, against what ptxas does and what
each of its readers needs."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl.cost_model import register_cap
from gemmdsl.frontend import load_spec
from gemmdsl.passes.registers import launch_bounds_cap
from gemmdsl.plan import min_blocks_per_sm
from gemmdsl.source import CompileError, SourceFile
from gemmdsl.targets import ARCHS, ARCH_SPECIFIC, WARP, WARPGROUP, launch_register_cap, register_limit

H100 = ARCHS[90]

# ptxas -v's register count for a kernel that wants more than it may have, under __launch_bounds__(threads,
# blocks) (nvcc 13.0, -arch=sm_90; a loop over 200 live floats): the cap it compiles under.
PTXAS_CAPS = {(32, 1): 255, (128, 1): 255, (256, 1): 255, (320, 1): 168, (384, 1): 168, (192, 2): 168,
              (224, 2): 128, (288, 2): 96, (160, 3): 128, (192, 3): 96, (96, 5): 128, (64, 7): 128}


@pytest.mark.parametrize("threads, blocks", sorted(PTXAS_CAPS))
def test_the_cap_is_what_ptxas_compiles_under(threads, blocks):
    assert launch_register_cap(H100, threads, blocks) == PTXAS_CAPS[threads, blocks]


archs = st.sampled_from(sorted(ARCHS.values(), key=lambda arch: arch.sm))


@st.composite
def launches(draw):
    """An architecture and blocks of warps that its SM can hold at once."""
    arch = draw(archs)
    warps = draw(st.integers(1, arch.max_threads_per_block // WARP))
    blocks = draw(st.integers(1, max(1, min(arch.max_blocks_per_sm, arch.max_threads_per_sm // (warps * WARP)))))
    return arch, warps, blocks


@settings(max_examples=300, deadline=None)
@given(launches())
def test_the_cap_is_the_most_registers_at_which_the_blocks_are_resident(launch):
    """The inverse of the occupancy arithmetic: at the cap `blocks` blocks fit, at one register more they do not
    (unless the cap is the per-thread maximum); counts below the maximum are whole allocation units."""
    arch, warps, blocks = launch
    cap = launch_register_cap(arch, warps * WARP, blocks)
    assert register_limit(arch, cap, warps) >= blocks
    assert cap == arch.max_registers_per_thread or register_limit(arch, cap + 1, warps) < blocks
    assert cap == arch.max_registers_per_thread or cap % (arch.register_alloc_unit // WARP) == 0


def whole_file_cap(threads: int, blocks: int) -> int:
    """What passes/registers, cost_model, validate and targets.registers_for_blocks computed before: the
    register file shared evenly by every thread, in multiples of 8, at most 255."""
    return min(255, 65536 // (blocks * threads) // 8 * 8)


@settings(max_examples=300, deadline=None)
@given(launches())
def test_where_every_scheduler_holds_as_many_warps_the_whole_file_formula_agrees(launch):
    """Launch-bounds caps, the tuner's spill rule and the budget's hint read the cap for any block: where the
    warps fill the SM's four schedulers evenly it is the old whole-file figure; elsewhere it is lower or the
    same, since the fullest scheduler's quarter of the file is what runs out (the old figure let ptxas plan
    for a block that could not be resident)."""
    arch, warps, blocks = launch
    if arch.sm != 90:
        return
    cap, whole = launch_register_cap(arch, warps * WARP, blocks), whole_file_cap(warps * WARP, blocks)
    assert cap == whole if warps * blocks % 4 == 0 else cap <= whole


@pytest.mark.parametrize("warpgroups", range(2, 9))
def test_a_warpgroup_kernel_holds_the_cap_at_launch(warpgroups):
    """What paths/wgmma/layout.py computed before, min(65536 / threads, 255) rounded down to 8, is the cap, but
    for 256 threads: ptxas lets such a kernel use 255 registers at launch (setmaxnreg.inc 256 compiles to 255)."""
    threads = warpgroups * WARPGROUP
    cap = launch_register_cap(ARCH_SPECIFIC[90], threads)
    assert cap == (255 if threads == 256 else min(65536 // threads, 255) // 8 * 8)


# sgemm_v3 in blocks of 6 warps, whose warps fill the SM's four schedulers unevenly.
SIX_WARPS = (Path(__file__).resolve().parent.parent / "specs" / "sgemm_v3.gemm").read_text()
for old, new in (("warps: 4x2", "warps: 3x2"), ("tile: 128x128x8", "tile: 96x128x24"),
                 ("bounds: exact", "bounds: checked"), ("fragments: double; }", "fragments: double; }\n    budget   { BUDGET }")):
    assert old in SIX_WARPS
    SIX_WARPS = SIX_WARPS.replace(old, new)


def six_warps(budget: str):
    return load_spec(SourceFile("six.gemm", SIX_WARPS.replace("BUDGET", budget)))


def test_a_register_budget_asks_for_the_blocks_that_fit_it():
    """100 registers hold two blocks of 192 threads: a third would put five warps on one scheduler, 5 x 3,328 >
    16,384. Asking ptxas for three (the whole-file count, 65,536 / (104 x 192)) capped it at 96, below the
    budget: it spilled 624 bytes (nvcc 13.0); for two its cap is 168."""
    spec = six_warps("registers: 100;")
    assert min_blocks_per_sm(spec, H100) == 2
    assert launch_bounds_cap(H100, spec, 192) == 168
    assert register_cap(spec, 192) == 100  # the tuner holds a candidate to its budget


def test_a_budget_the_schedulers_cannot_hold_is_refused_with_the_cap():
    with pytest.raises(CompileError) as error:
        six_warps("registers: 112; blocks_per_sm: 3;")
    [diagnostic] = [d for d in error.value.diagnostics if "registers x" in d.message]
    assert diagnostic.message == ("112 registers x 192 threads x 3 block(s) per SM do not fit an sm_90 SM: each of "
                                  "its 4 schedulers holds 16384 registers, 4 warps of 3584, and 18 warps put 5 on "
                                  "one of them")
    assert diagnostic.hint == "use at most 96 registers, fewer blocks_per_sm or fewer warps"
    spec = six_warps("registers: 96; blocks_per_sm: 3;")
    assert register_cap(spec, 192) == launch_bounds_cap(H100, spec, 192) == 96
