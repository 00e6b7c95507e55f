"""Registers per thread: an estimate from the spec, beside ptxas's figure when the kernel was compiled.

The estimate counts what the kernel must hold live in its inner loop: the
accumulators, the A and B fragments (twice with double-buffered fragments), the
next tile's global loads while the current one is computed (two stages copied
through registers), and a fixed overhead for addresses, indices and loop state
calibrated against ptxas (see the constants below).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..source import Diagnostic, Severity
from .framework import Context, PassResult

# Addresses, indices and loop counters: fitted against ptxas -v (nvcc 13, sm_90) on the specs in specs/.
OVERHEAD_REGISTERS = 30


@dataclass(frozen=True)
class RegisterEstimate:
    accumulators: int
    fragments: int
    staging: int
    overhead: int

    @property
    def total(self) -> int:
        return self.accumulators + self.fragments + self.staging + self.overhead


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


def estimate_registers(spec: ir.KernelSpec) -> RegisterEstimate:
    fragment = spec.threads.fragment
    buffers = 2 if spec.pipeline.fragments is ir.FragmentBuffering.DOUBLE else 1
    staging = 0
    if spec.pipeline.stages >= 2 and spec.pipeline.copy is ir.CopyMode.REGISTERS:
        block = spec.block
        staging = (block.m + block.n) * block.k // spec.threads.threads
    return RegisterEstimate(
        accumulators=fragment.m * fragment.n,
        fragments=(fragment.m + fragment.n) * buffers,
        staging=staging,
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
            hint="a smaller micro tile or repeat, or single-buffered fragments, needs fewer registers"))
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
            spill_store_bytes=ptxas.get("spills_stores", 0),
            spill_load_bytes=ptxas.get("spills_loads", 0),
        )
        return PassResult({"registers": registers}, self._verdict(registers),
                          register_warnings(context.spec, registers))

    @staticmethod
    def _verdict(registers: Registers) -> str:
        e = registers.estimate
        verdict = (f"estimate {e.total} registers per thread ({e.accumulators} accumulators, "
                   f"{e.fragments} fragments, {e.staging} staging, {e.overhead} addresses and loop state)")
        if registers.ptxas is not None:
            spills = "SPILLS" if registers.spills else "no spills"
            verdict += f"; ptxas {registers.ptxas}, {spills}"
        return verdict
