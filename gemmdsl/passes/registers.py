"""Registers per thread: an estimate from the spec, beside ptxas's figure when the kernel was compiled.

The estimate counts what the main loop keeps live, with constants fitted to
ptxas -v (nvcc 13.0, sm_90) over the specs in specs/ and about forty variants
of them (see the calibration table in tests/test_analysis.py):

- the accumulators, frag_m x frag_n;
- the A and B fragments twice over: the k loop is fully unrolled and ptxas loads
  step kk+1's fragments while step kk multiplies, so two sets are live whether or
  not the spec asks for double-buffered fragments (asking changes nothing);
- with two or more stages copied through registers, the next tile's global loads
  and the two 64-bit source pointers kept across the compute;
- for an operand stored k-contiguous (A mk, B nk), a thread's row runs along k,
  and nvcc merges the unrolled k steps of it into wide loads that bring several
  k steps in at once;
- for a swizzled operand, addresses are no longer base + immediate, so ptxas
  keeps a table of precomputed addresses;
- a fixed remainder for indices, the loop counter and the block's base pointers.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..source import Diagnostic, Severity
from .framework import Context, PassResult

FRAGMENT_SETS = 2  # live fragment sets in ptxas's schedule of the unrolled k loop
STAGING_POINTERS = 4  # two 64-bit global source pointers live across the compute
MERGED_K_LOADS_PER_ROW = 5  # per fragment row of a k-contiguous operand
SWIZZLE_ADDRESSES = 30  # per swizzled operand
OVERHEAD_REGISTERS = 23  # indices, loop counter, base pointers


@dataclass(frozen=True)
class RegisterEstimate:
    accumulators: int
    fragments: int
    staging: int
    merged_k_loads: int
    swizzle_addresses: int
    overhead: int

    @property
    def total(self) -> int:
        return (self.accumulators + self.fragments + self.staging + self.merged_k_loads
                + self.swizzle_addresses + self.overhead)


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


def staged_registers(spec: ir.KernelSpec) -> int:
    pipeline = spec.pipeline
    if pipeline.stages < 2 or pipeline.copy is not ir.CopyMode.REGISTERS:
        return 0
    block = spec.block
    return (block.m + block.n) * block.k // spec.threads.threads + STAGING_POINTERS


def estimate_registers(spec: ir.KernelSpec) -> RegisterEstimate:
    fragment = spec.threads.fragment
    rows = {ir.Operand.A: fragment.m, ir.Operand.B: fragment.n}
    k_contiguous = [op for op in rows if not spec.smem(op).order.k_major]
    swizzled = [op for op in rows if spec.smem(op).swizzle is not None]
    return RegisterEstimate(
        accumulators=fragment.m * fragment.n,
        fragments=(fragment.m + fragment.n) * FRAGMENT_SETS,
        staging=staged_registers(spec),
        merged_k_loads=sum(rows[op] for op in k_contiguous) * MERGED_K_LOADS_PER_ROW,
        swizzle_addresses=len(swizzled) * SWIZZLE_ADDRESSES,
        overhead=OVERHEAD_REGISTERS,
    )


def register_warnings(spec: ir.KernelSpec, registers: Registers) -> tuple[Diagnostic, ...]:
    warnings = []
    micro = spec.threads.at("micro")
    if registers.estimate.total > registers.limit:
        warnings.append(Diagnostic(
            Severity.WARNING, micro,
            f"estimated {registers.estimate.total} registers per thread exceed the limit of {registers.limit}; "
            "ptxas will spill to local memory",
            hint="a smaller micro tile or repeat needs fewer registers"))
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
            estimate=estimate_registers(context.spec),
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
        parts = [f"{e.accumulators} accumulators", f"{e.fragments} fragments"]
        optional = [(e.staging, "staging"), (e.merged_k_loads, "merged k loads"),
                    (e.swizzle_addresses, "swizzled addresses")]
        parts += [f"{count} {what}" for count, what in optional if count]
        parts.append(f"{e.overhead} indices and loop state")
        verdict = f"estimate {e.total} registers per thread ({', '.join(parts)})"
        if registers.ptxas is not None:
            spills = "SPILLS" if registers.spills else "no spills"
            verdict += f"; ptxas {registers.ptxas}, {spills}"
        return verdict
