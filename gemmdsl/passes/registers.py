"""Registers per thread: an estimate from the spec, beside ptxas's figure when the kernel was compiled.

Two figures. The *demand* counts what the main loop keeps live:

- the accumulators, frag_m x frag_n;
- one set of A and B fragments, frag_m + frag_n;
- with two stages copied through registers, the next tile's global loads, held while the
  current tile is multiplied;
- half a register per global load per k-tile (its precomputed 64-bit address, one per two loads);
- under `bounds: checked`, two more per global load (its bound and predicate);
- for a swizzled operand, an address per unrolled fragment load (XOR-ed addresses are not
  base + immediate, so ptxas precomputes each one outside the k-tile loop) and a few
  registers for the XOR arithmetic;
- a fixed remainder for indices, the loop counter and the block's base pointers.

With a fuse section the epilogue keeps the values of the thread's rows and columns (a bias, a scale;
passes/fuse.py) beside the accumulators, after the main loop's fragments and staging are dead; the
demand is the larger of the two live sets. ptxas agrees (nvcc 13.0): sgemm_fused keeps 8 values and
uses 125 registers to sgemm_v3's 127 (sm_90); hgemm_mma_fused keeps 16 and uses 222 to hgemm_mma's 226
(sm_80, vector kernels); linear_gelu and linear_bf16 both use the launch's 168 (sm_90a).

Above the cap that `__launch_bounds__` leaves (255, or the register file shared by the block's
threads times the budget's blocks per SM), ptxas spills. Below it ptxas spends spare registers on
scheduling (hoisted loads, kept addresses) up to the next occupancy cliff, as far as it can use
them; so the *estimate* of ptxas's figure is the demand raised towards the cliff by at most
HEADROOM of itself.

How good that is: scripts/register_study.py compiles random valid specs from the fuzzer's
generator and compares (docs/analysis.md, "Register estimate vs ptxas"). It is a rough guide: ptxas's
scheduling decides much of the figure, and the constants are fitted on the study's training
half and the shipped specs. ESTIMATE_BAND is the widest error the study measured; the tuner
prunes on registers only where even the demand less that band (or the accumulators and one
fragment set, which every FMA step needs at once) exceeds the cap.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import ir
from ..layout import KernelLayout
from ..mma_layout import MmaLayout
from ..source import Diagnostic, Severity
from ..plan import min_blocks_per_sm
from ..targets import Arch, launch_register_cap, occupancy_of
from .framework import Context, PassResult
from .fuse import kept_registers

if TYPE_CHECKING:
    from ..paths.interface import InstructionPath  # the plan's, handed over

SWIZZLE_ARITHMETIC = 8  # per swizzled operand, beside one register per precomputed address
ADDRESS_REGISTERS = 0.5  # per global load a thread issues per k-tile: a 64-bit address for every two
CHECKED_REGISTERS = 2  # per global load under `bounds: checked`: its bound and predicate
OVERHEAD_REGISTERS = 20  # indices, loop counter, base pointers
HEADROOM = 0.3  # ptxas spends up to this share of the demand more, short of the occupancy cliff
# The widest relative error of the estimate against ptxas -v that scripts/register_study.py measured:
# 60.0% over 239 random FP32 specs that do not spill (nvcc 13.0.88, sm_90, seed 0, 2026-11-23), rounded
# up to the next 5%. The tuner prunes on registers only beyond this band.
ESTIMATE_BAND = 0.65


@dataclass(frozen=True)
class RegisterEstimate:
    accumulators: int
    fragment_sets: int
    fragments: int
    staging: int
    swizzle_addresses: int
    overhead: int
    addresses: int = 0
    checked: int = 0
    chain: int = 0  # the fuse chain's row and column values the epilogue keeps
    cap: int = 255  # the most ptxas may use: 255, or less under `__launch_bounds__`
    band: float = ESTIMATE_BAND  # the widest relative error measured for this model
    cliff: int = 0  # the most registers at which as many blocks fit per SM as with `demand`

    @property
    def demand(self) -> int:
        """Registers the kernel keeps live where it needs most: the main loop, or, with a fuse chain, the
        epilogue (the accumulators, the chain's values, the indices; the fragments are dead there). Above
        `cap`, ptxas spills."""
        main_loop = (self.accumulators + self.fragments + self.staging + self.swizzle_addresses + self.addresses
                     + self.checked + self.overhead)
        return max(main_loop, self.accumulators + self.chain + self.overhead)

    @property
    def floor(self) -> int:
        """Registers every FMA step needs at once: the accumulators and a set of fragments (ptxas used
        at least 6 more than this on every study spec it compiled without spilling)."""
        return self.accumulators + self.fragments

    @property
    def low(self) -> int:
        """The fewest registers the main loop can do with, as far as the measured band allows: the
        demand less ESTIMATE_BAND, and never under the floor. Above the cap, ptxas will spill."""
        return max(self.floor, math.floor(self.demand * (1 - self.band)))

    @property
    def total(self) -> int:
        """What ptxas -v is expected to report: the demand raised towards its occupancy cliff by at most
        HEADROOM of itself, and at most `cap`."""
        return min(max(self.demand, self.cliff), self.demand + math.ceil(HEADROOM * self.demand), self.cap)


@dataclass(frozen=True)
class Registers:
    estimate: RegisterEstimate
    limit: int  # the architecture's per-thread maximum
    ptxas: int | None = None
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0

    @property
    def per_thread(self) -> int:
        """The figure occupancy is computed from: ptxas's when known, else the estimate capped at the limit."""
        return self.ptxas if self.ptxas is not None else min(self.estimate.total, self.limit)

    @property
    def spills(self) -> bool:
        return bool(self.spill_store_bytes or self.spill_load_bytes)


def launch_bounds_cap(arch: Arch, spec: ir.KernelSpec, threads: int) -> int:
    """The most registers per thread ptxas may use under `__launch_bounds__(threads, blocks)` (blocks as the
    plan derives them from the budget; 1 without one), at most the architecture's limit."""
    return launch_register_cap(arch, threads, min_blocks_per_sm(spec, arch) or 1)


def occupancy_cliff(arch: Arch, registers: int, threads: int) -> int:
    """The most registers per thread at which as many blocks of `threads` fit on an SM as with `registers`.

    ptxas knows the block size (`__launch_bounds__`) but not the dynamic shared memory, and it spends
    registers freely (hoisting loads, keeping addresses) up to the next point where one block fewer
    would fit; so its figure lies just under such a cliff far more often than at the bare demand."""
    limit = arch.max_registers_per_thread
    registers = max(1, min(registers, limit))

    def blocks(count: int) -> int:
        return occupancy_of(arch, count, threads, 0).blocks_per_sm

    top, fit = registers, blocks(registers)
    while top < limit and blocks(top + 1) == fit:
        top += 1
    return top


def fragment_sets(layout: KernelLayout) -> int:
    """Fragment sets counted in the demand. ptxas often loads step kk+1's fragments while step kk
    multiplies, but whether it does is part of what it decides within the headroom; counting a second
    set (always, or unless A is read one float per load) fit the study's training half worse."""
    return 1


def staged_registers(spec: ir.KernelSpec) -> int:
    pipeline = spec.pipeline
    if pipeline.stages < 2 or pipeline.copy is not ir.CopyMode.REGISTERS:
        return 0
    block = spec.block
    return (block.m + block.n) * block.k // spec.threads.threads


def swizzle_address_registers(layout: KernelLayout) -> int:
    total = 0
    for operand in (ir.Operand.A, ir.Operand.B):
        if layout.smem[operand].swizzle is not None:
            total += SWIZZLE_ARITHMETIC + len(layout.fragment_loads(operand, 0)) * layout.bk
    return total


def global_loads(layout: KernelLayout) -> int:
    return sum(len(layout.global_chunks(operand)) for operand in (ir.Operand.A, ir.Operand.B))


def estimate_fma_registers(layout: KernelLayout) -> RegisterEstimate:
    spec = layout.spec
    fragment = spec.threads.fragment
    sets = fragment_sets(layout)
    checked = spec.problem.bounds is ir.Bounds.CHECKED
    estimate = RegisterEstimate(
        accumulators=fragment.m * fragment.n,
        fragment_sets=sets,
        fragments=(fragment.m + fragment.n) * sets,
        staging=staged_registers(spec),
        swizzle_addresses=swizzle_address_registers(layout),
        overhead=OVERHEAD_REGISTERS,
        addresses=round(ADDRESS_REGISTERS * global_loads(layout)),
        checked=CHECKED_REGISTERS * global_loads(layout) if checked else 0,
        chain=kept_registers(spec, layout.chain_reads()),
        cap=launch_bounds_cap(layout.arch, spec, layout.threads),
    )
    return dataclasses.replace(estimate, cliff=occupancy_cliff(layout.arch, estimate.demand, layout.threads))


# Tensor-core kernels (checked against ptxas -v, nvcc 13.0, sm_80 code, on the mma specs in specs/):
# indices, pointers and loop state beside the accumulators, fragments and addresses.
MMA_OVERHEAD_REGISTERS = 30
# The widest error of the tensor-core model against ptxas -v that scripts/register_study.py measured over
# 276 random mma.sync specs that do not spill (its `mma` generator; nvcc 13.0.88, sm_90, seed 0,
# 2026-11-25): 75.0% (70 estimated against 40); within 10% for 33%, within 20% for 57%. On the shipped
# tensor-core specs it is within 10% but for tf32_ldmatrix (238 against 204) and tf32_ldmatrix_nt (254
# against 223). A least-squares fit of ten terms to the study's training half reached only 38% within
# 10% on the held-out half, so ptxas's scheduling, not the live set, decides much of the count.
MMA_ESTIMATE_BAND = 0.75


def estimate_mma_registers(layout: MmaLayout) -> RegisterEstimate:
    """Accumulators (4 per instruction block); fragment words in one set, or two when the spec
    double-buffers them; TF32's rounded copies of one set (big, and for 3xtf32 small); and for a
    swizzled operand read by ldmatrix an address per load of a k-tile (XOR-ed addresses are not
    base + immediate, so ptxas precomputes each)."""
    blocks = layout.blocks
    accumulators = 4 * blocks[ir.Operand.A] * blocks[ir.Operand.B]
    words = sum(blocks[op] * layout.registers[op] for op in blocks)
    sets = 2 if layout.spec.pipeline.fragments is ir.FragmentBuffering.DOUBLE else 1
    rounded = {ir.Precision.NATIVE: 0, ir.Precision.TF32: 1, ir.Precision.TF32X3: 2}[layout.mma.precision]
    addresses = sum(len(layout.matrix_loads(op, 0)) * layout.k_steps for op in blocks
                    if layout.read[op] is ir.SmemRead.LDMATRIX and layout.smem[op].swizzle is not None)
    return RegisterEstimate(accumulators=accumulators, fragment_sets=sets, fragments=(sets + rounded) * words,
                            staging=0, swizzle_addresses=addresses, overhead=MMA_OVERHEAD_REGISTERS,
                            chain=kept_registers(layout.spec, layout.chain_reads()),
                            cap=launch_bounds_cap(layout.arch, layout.spec, layout.threads), band=MMA_ESTIMATE_BAND)


def register_warnings(spec: ir.KernelSpec, registers: Registers, path: InstructionPath) -> tuple[Diagnostic, ...]:
    """The budget's warnings, with the advice of the spec's path (`register_advice`)."""
    warnings = []
    micro, smaller, spills_can_pay = path.register_advice(spec)
    if registers.estimate.demand > registers.estimate.cap:
        warnings.append(Diagnostic(
            Severity.WARNING, micro,
            f"estimated {registers.estimate.demand} registers per thread exceed the limit of {registers.estimate.cap}; "
            "ptxas will spill to local memory",
            hint=smaller))
    if registers.spills:
        warnings.append(Diagnostic(
            Severity.WARNING, micro,
            f"ptxas spills registers: {registers.spill_store_bytes} bytes stored and "
            f"{registers.spill_load_bytes} bytes loaded per thread", hint=spills_can_pay))
    budget = spec.budget.registers
    used = registers.ptxas if registers.ptxas is not None else registers.estimate.demand
    if budget is not None and used > budget:
        source = "ptxas reports" if registers.ptxas is not None else "the estimate is"
        warnings.append(Diagnostic(
            Severity.WARNING, spec.budget.at("registers"),
            f"{source} {used} registers per thread, over the budget of {budget}"))
    return tuple(warnings)


class RegisterPass:
    name = "registers"
    needs: frozenset[str] = frozenset()
    provides = frozenset({"registers"})

    def run(self, context: Context) -> PassResult:
        ptxas = context.ptxas or {}
        registers = Registers(
            estimate=context.plan.path.register_estimate(context.layout),  # the FMA model or the tensor cores'

            limit=context.layout.arch.max_registers_per_thread,
            ptxas=ptxas.get("registers"),
            spill_store_bytes=ptxas.get("spill_stores", 0),
            spill_load_bytes=ptxas.get("spill_loads", 0),
        )
        return PassResult({"registers": registers}, self._verdict(registers),
                          register_warnings(context.spec, registers, context.plan.path))

    @staticmethod
    def _verdict(registers: Registers) -> str:
        e = registers.estimate
        parts = [f"{e.accumulators} accumulators", f"{e.fragments} fragments"]
        optional = [(e.staging, "staging"), (e.addresses, "global addresses"), (e.checked, "bound checks"),
                    (e.swizzle_addresses, "swizzled addresses")]
        parts += [f"{count} {what}" for count, what in optional if count]
        parts.append(f"{e.overhead} indices and loop state")
        epilogue = (f"; the epilogue {e.accumulators + e.chain + e.overhead}, with {e.chain} fuse chain values"
                    if e.chain else "")
        verdict = (f"estimate {e.total} registers per thread (+-{100 * e.band:.0f}%; "
                   f"demand {e.demand}: {', '.join(parts)}{epilogue})")
        if registers.ptxas is not None:
            spills = "SPILLS" if registers.spills else "no spills"
            verdict += f"; ptxas {registers.ptxas}, {spills}"
        return verdict
