"""Registers per thread: an estimate from the spec, beside ptxas's figure when the kernel was compiled.

The estimate counts what the main loop keeps live, with constants fitted to
ptxas -v (nvcc 13.0, sm_90) over the specs in specs/ and about forty variants
of them, on kernels whose shared-memory accesses are volatile PTX (so ptxas
keeps them as emitted):

- the accumulators, frag_m x frag_n;
- the A and B fragments, in as many sets as ptxas keeps live: it loads step
  kk+1's fragments while step kk multiplies (two sets), whether or not the spec
  asks for double-buffered fragments (asking changes nothing); when a third set
  costs no resident block (the next occupancy cliff is far, as with 128
  accumulators), it prefetches further still; and when A is read one float per
  load it does not prefetch at all (measured: 102 registers for 8x8 tiles,
  against 127 with float4 reads of A);
- with two stages copied through registers, the next tile's global loads, held
  while the current tile is multiplied;
- for a swizzled operand, an address per unrolled fragment load (XOR-ed
  addresses are not base + immediate, so ptxas precomputes each one outside the
  k-tile loop) and a few registers for the XOR arithmetic;
- a fixed remainder for indices, the loop counter and the block's base pointers.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..layout import KernelLayout, TileLayout
from ..mma_layout import MmaLayout
from ..source import Diagnostic, Severity
from ..targets import occupancy_of
from .framework import Context, PassResult

SWIZZLE_ARITHMETIC = 8  # per swizzled operand, beside one register per precomputed address
OVERHEAD_REGISTERS = 23  # indices, loop counter, base pointers


@dataclass(frozen=True)
class RegisterEstimate:
    accumulators: int
    fragment_sets: int
    fragments: int
    staging: int
    swizzle_addresses: int
    overhead: int

    @property
    def total(self) -> int:
        return self.accumulators + self.fragments + self.staging + self.swizzle_addresses + self.overhead


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


def fragment_sets(layout: KernelLayout, others: int) -> int:
    """Fragment sets live at once in ptxas's schedule; `others` counts every other register."""
    if layout.read_width(ir.Operand.A) == 1:
        return 1
    fragment = layout.spec.threads.fragment
    per_set = fragment.m + fragment.n

    def blocks(registers: int) -> int:
        return occupancy_of(layout.arch, registers, layout.threads, layout.smem_bytes).blocks_per_sm

    two, three = others + 2 * per_set, others + 3 * per_set
    return 3 if three <= layout.arch.max_registers_per_thread and blocks(three) == blocks(two) else 2


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
            total += SWIZZLE_ARITHMETIC + len(layout.fragment_reads(operand, 0)) * layout.bk
    return total


def estimate_registers(layout: TileLayout) -> RegisterEstimate:
    if isinstance(layout, MmaLayout):
        return estimate_mma_registers(layout)
    assert isinstance(layout, KernelLayout)
    fragment = layout.spec.threads.fragment
    accumulators = fragment.m * fragment.n
    staging = staged_registers(layout.spec)
    swizzle = swizzle_address_registers(layout)
    sets = fragment_sets(layout, accumulators + staging + swizzle + OVERHEAD_REGISTERS)
    return RegisterEstimate(
        accumulators=accumulators,
        fragment_sets=sets,
        fragments=(fragment.m + fragment.n) * sets,
        staging=staging,
        swizzle_addresses=swizzle,
        overhead=OVERHEAD_REGISTERS,
    )


# Tensor-core kernels (checked against ptxas -v, nvcc 13.0, sm_80 code, on the mma specs in specs/):
# indices, pointers and loop state beside the accumulators, fragments and addresses.
MMA_OVERHEAD_REGISTERS = 30


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
                            staging=0, swizzle_addresses=addresses, overhead=MMA_OVERHEAD_REGISTERS)


def register_warnings(spec: ir.KernelSpec, registers: Registers) -> tuple[Diagnostic, ...]:
    warnings = []
    if spec.mma is None:
        micro, smaller = spec.threads.at("micro"), "a smaller micro tile or repeat needs fewer registers"
    else:
        micro, smaller = spec.mma.at("repeat"), "a smaller mma repeat (more warps for the same tile) needs fewer registers"
    if registers.estimate.total > registers.limit:
        warnings.append(Diagnostic(
            Severity.WARNING, micro,
            f"estimated {registers.estimate.total} registers per thread exceed the limit of {registers.limit}; "
            "ptxas will spill to local memory",
            hint=smaller))
    if registers.spills:
        warnings.append(Diagnostic(
            Severity.WARNING, micro,
            f"ptxas spills registers: {registers.spill_store_bytes} bytes stored and "
            f"{registers.spill_load_bytes} bytes loaded per thread"))
    budget = spec.budget.registers
    if budget is not None and registers.per_thread > budget:
        source = "ptxas reports" if registers.ptxas is not None else "the estimate is"
        warnings.append(Diagnostic(
            Severity.WARNING, spec.budget.at("registers"),
            f"{source} {registers.per_thread} registers per thread, over the budget of {budget}"))
    return tuple(warnings)


class RegisterPass:
    name = "registers"
    needs: frozenset[str] = frozenset()
    provides = frozenset({"registers"})

    def run(self, context: Context) -> PassResult:
        ptxas = context.ptxas or {}
        registers = Registers(
            estimate=estimate_registers(context.layout),
            limit=context.layout.arch.max_registers_per_thread,
            ptxas=ptxas.get("registers"),
            spill_store_bytes=ptxas.get("spill_stores", 0),
            spill_load_bytes=ptxas.get("spill_loads", 0),
        )
        return PassResult({"registers": registers}, self._verdict(registers),
                          register_warnings(context.spec, registers))

    @staticmethod
    def _verdict(registers: Registers) -> str:
        e = registers.estimate
        parts = [f"{e.accumulators} accumulators", f"{e.fragments} fragments ({e.fragment_sets} sets)"]
        optional = [(e.staging, "staging"), (e.swizzle_addresses, "swizzled addresses")]
        parts += [f"{count} {what}" for count, what in optional if count]
        parts.append(f"{e.overhead} indices and loop state")
        verdict = f"estimate {e.total} registers per thread ({', '.join(parts)})"
        if registers.ptxas is not None:
            spills = "SPILLS" if registers.spills else "no spills"
            verdict += f"; ptxas {registers.ptxas}, {spills}"
        return verdict
