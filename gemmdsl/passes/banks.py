"""Shared-memory bank conflicts of every shared-memory instruction the kernel executes.

For each unrolled instruction (`TileLayout.smem_accesses()`: the A and B tile
stores and the fragment loads of one k-tile) this evaluates the very offset
expression the emitter prints, for every thread of a block, and turns it into
byte addresses (operand base, padding and swizzle included). Each warp's access
is split into the phases the hardware serves one after another; within a phase
every bank delivers one 4-byte word per wavefront, lanes reading the same word
share it (broadcast), so the phase costs as many wavefronts as the most distinct
words any one bank must deliver.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache, partial
from typing import TYPE_CHECKING

import numpy as np

from .. import ir
from ..layout import WARP, SmemAccess, TileLayout
from ..source import Diagnostic, Severity
from ..validate import validate
from .framework import Context, PassResult

if TYPE_CHECKING:
    from ..paths.interface import InstructionPath

BANKS = 32
BANK_BYTES = 4
WAVEFRONT_BYTES = BANKS * BANK_BYTES  # one word from every bank: what one wavefront moves


def phase_of_each_lane(op: str, width_bytes: int, addresses: np.ndarray) -> np.ndarray:
    """The phase (0, 1, ...) in which the hardware serves each lane; same shape as `addresses` (warps, 32).

    This is THE phase rule of the model; everything else follows from it. Checked
    with Nsight Compute on an H100 against 106 single-warp probes, all matched in
    wavefronts and in bank conflicts (the telling ones are H100_PROBES in
    tests/test_analysis.py):

    - A phase returns at most 128 bytes of lane data, one register per lane, so a
      32-bit access is one phase of 32 lanes, a 64-bit access two half-warps and a
      128-bit access four quarter-warps, in lane order (the classic SGEMM write-ups' rule).
    - Loads (not stores) in which every lane n reads the same address as lane n^1,
      or every lane the same as lane n^2, return one value to two lanes, so each
      phase holds twice the lanes: 64-bit loads take one phase, 128-bit loads two
      half-warps. 4x8 row lanes reading A, and the zigzag order reading A and B,
      halve their float4 fragment loads this way; lanes that merely share 128
      bytes across quarter-warps gain nothing.
    - ldmatrix: each lane supplies the address of one 16-byte row, so a phase serves eight rows
      (lanes 8q..8q+7 address matrix q); x1 and x2 use only the first 8 or 16 lanes, which is
      all `addresses` holds for them.
    """
    lanes_per_phase = np.full(addresses.shape[0], WAVEFRONT_BYTES // width_bytes)
    lane = np.arange(addresses.shape[1])
    if op == "load":
        paired = (np.all(addresses == addresses[:, lane ^ 1], axis=1)
                  | np.all(addresses == addresses[:, lane ^ 2], axis=1))
        lanes_per_phase = np.where(paired, np.minimum(2 * lanes_per_phase, WARP), lanes_per_phase)
    return lane[None, :] // lanes_per_phase[:, None]


def bank_demand(addresses: np.ndarray, width_bytes: int, op: str) -> np.ndarray:
    """Distinct words each bank must deliver, per warp and phase: shape (warps, phases, BANKS).

    `addresses` holds each lane's first byte, shape (warps, 32); a lane touches
    width_bytes / 4 consecutive words. Warps with fewer phases than others have
    all-zero rows for the phases they lack.
    """
    warps = addresses.shape[0]
    phase = phase_of_each_lane(op, width_bytes, addresses)
    phases = int(phase.max()) + 1
    words = addresses[:, :, None] // BANK_BYTES + np.arange(width_bytes // BANK_BYTES)
    group = np.arange(warps)[:, None, None] * phases + phase[:, :, None]
    # One integer key per (warp, phase, word), so np.unique drops broadcast duplicates at once.
    stride = int(words.max()) + 1
    group_of, word_of = np.divmod(np.unique(group * stride + words), stride)
    demand = np.bincount(group_of * BANKS + word_of % BANKS, minlength=warps * phases * BANKS)
    return demand.reshape(warps, phases, BANKS)


def phase_costs(demand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Wavefronts and ideal wavefronts per (warp, phase) of a `bank_demand` array.

    A phase takes as many wavefronts as its busiest bank has distinct words; with
    no conflicts its words would need only ceil(words / 32). A phase a warp lacks costs 0.
    """
    return demand.max(axis=2), -(-demand.sum(axis=2) // BANKS)


def lanes_by_bank(addresses: np.ndarray, width_bytes: int, op: str, phase: int) -> dict[int, dict[int, list[int]]]:
    """For one warp's lane addresses (32,) and one phase: bank -> word -> lanes that read it."""
    banks: dict[int, dict[int, list[int]]] = {}
    for lane in np.flatnonzero(phase_of_each_lane(op, width_bytes, addresses[None, :])[0] == phase):
        first = int(addresses[lane]) // BANK_BYTES
        for word in range(first, first + width_bytes // BANK_BYTES):
            banks.setdefault(word % BANKS, {}).setdefault(word, []).append(int(lane))
    return dict(sorted(banks.items()))


@dataclass(frozen=True)
class AccessCost:
    """One unrolled shared-memory instruction, costed over all warps of a block for one k-tile."""

    access: SmemAccess
    instructions: int  # warp-level instructions per block and k-tile: every warp issues it once
    wavefronts: int  # summed over the block's warps
    ideal_wavefronts: int  # what the same bytes would cost with no conflicts
    max_ways: int  # worst n-way conflict in any warp and phase (1 = none)
    worst_warp: int
    worst_phase: int

    @property
    def width_bits(self) -> int:
        return self.access.width_bytes * 8

    @property
    def excess_wavefronts(self) -> int:
        return self.wavefronts - self.ideal_wavefronts


def lane_byte_addresses(layout: TileLayout, access: SmemAccess, env: dict) -> np.ndarray:
    """Each lane's byte address in the kernel's shared array, shape (warps, lanes the instruction uses).

    Stage 0 stands for all stages: stages start on 128-byte boundaries, so they map to banks alike.
    """
    offsets = np.broadcast_to(access.offset.evaluate(env), (layout.threads,))
    elements = (layout.smem[access.operand].base_elems + offsets).reshape(-1, WARP)[:, :access.lanes]
    return elements * access.element_bytes


def cost_access(layout: TileLayout, access: SmemAccess, env: dict) -> AccessCost:
    width_bytes = access.width_bytes
    demand = bank_demand(lane_byte_addresses(layout, access, env), width_bytes, access.op)
    wavefronts, ideal = phase_costs(demand)
    warp, phase = np.unravel_index(int(np.argmax(wavefronts - ideal)), wavefronts.shape)
    return AccessCost(access, demand.shape[0], int(wavefronts.sum()), int(ideal.sum()),
                      int(wavefronts.max()), int(warp), int(phase))


def conflict_groups(costs: list[AccessCost]) -> dict[tuple[ir.Operand, str, int], list[AccessCost]]:
    """Conflicting instructions grouped by (operand, load/store, width bits), in program order."""
    groups: dict[tuple[ir.Operand, str, int], list[AccessCost]] = {}
    for cost in costs:
        if cost.excess_wavefronts:
            groups.setdefault((cost.access.operand, cost.access.op, cost.width_bits), []).append(cost)
    return groups


# What to try where no pad or swizzle of the operand's tile does better (`remedy`).
STRUCTURAL_HINTS = {
    "store": "the copy's stores put a warp's elements in few banks: an order that keeps the operand's global "
             "layout stores whole rows, or a pad that is not a multiple of the accesses' width, at the cost of "
             "narrower fragment reads",
    "load": "try a squarer lane grid (4x8), a lane order whose neighbours share a row (col, zigzag), "
            "a k-major order so fragments are read as float4, or `repeat` to split the micro tile",
    "ldmatrix": "rows of a k-step's ldmatrix phases fall in the same banks whatever the padding: try another "
                "mma repeat or warp grid",
}
# The candidates `remedy` costs: pads of 1 to PAD_STEPS times the accesses' widest width, and swizzles
# xor(B, M, S) with M at that width, B in SWIZZLE_BITS, B <= S in SWIZZLE_SHIFTS.
PAD_STEPS = 8
SWIZZLE_BITS = (1, 2, 3)
SWIZZLE_SHIFTS = range(1, 9)


@dataclass(frozen=True)
class Remedy:
    """A change to one operand's `smem` section, as a hint writes it, and the excess wavefronts (beyond ideal, per
    block and k-tile) of that operand's shared-memory accesses under it; `change` is None for the section as
    written."""

    change: str | None
    excess: int


class RelaidAddresses:
    """One operand's shared-memory accesses (a k-tile's, every warp's), with the excess wavefronts they would
    cost under another pad or swizzle of its tile: each lane's element offset, unswizzled, is the tile's
    row * ld + column, laid out again with the new row length and swizzle. Stages start on 128-byte
    boundaries, so the operand's base changes no bank."""

    def __init__(self, layout: TileLayout, operand: ir.Operand):
        self.geometry = geometry = layout.smem[operand]
        env = layout.thread_env()
        self.accesses = [access for access in layout.smem_accesses() if access.operand is operand]
        groups: dict[tuple[str, int], list[np.ndarray]] = {}
        for access in self.accesses:  # accesses of one op and width are costed together, a warp per row
            offsets = np.broadcast_to(access.offset.evaluate(env), (layout.threads,)).reshape(-1, WARP)
            groups.setdefault((access.op, access.width_bytes, access.lanes), []).append(offsets[:, :access.lanes])
        self.tile = {key: divmod(_unswizzled(np.concatenate(rows), geometry.swizzle), geometry.ld)
                     for key, rows in groups.items()}

    @property
    def widest(self) -> int:
        """The widest access, in elements."""
        return max(access.width for access in self.accesses)

    def excess(self, pad: int, swizzle: ir.Swizzle | None) -> int:
        """Wavefronts beyond ideal, per block and k-tile, under this pad and swizzle."""
        total = 0
        for (op, width_bytes, _), (row, column) in self.tile.items():
            offsets = _unswizzled(row * (self.geometry.inner + pad) + column, swizzle)
            wavefronts, ideal = phase_costs(bank_demand(offsets * self.geometry.element_bytes, width_bytes, op))
            total += int((wavefronts - ideal).sum())
        return total


def remedy(layout: TileLayout, operand: ir.Operand, path: InstructionPath) -> tuple[Remedy, Remedy, int]:
    """(the layout as written, the pad or swizzle of the operand's tile that leaves the fewest excess wavefronts,
    the accesses' widest width in elements). Candidates keep every access as wide (pads a multiple of that
    width, swizzles moving whole accesses) and must validate with no more warnings; each is costed with the
    bank model on the lowering's own addresses (RelaidAddresses). On a tie the first of: smaller pads, then
    swizzles of fewer bits. `path`: the plan's, whose rules the candidates are validated by."""
    addresses = RelaidAddresses(layout, operand)
    widest = addresses.widest
    smem = layout.spec.smem(operand)
    written = Remedy(None, addresses.excess(smem.pad, smem.swizzle))
    base = widest.bit_length() - 1
    candidates = [(f"`pad: {widest * step};`", replace(smem, pad=widest * step, swizzle=None))
                  for step in range(1, PAD_STEPS + 1)]
    candidates += [(f"`swizzle: {swizzle};` (pad 0)", replace(smem, pad=0, swizzle=swizzle))
                   for swizzle in (ir.Swizzle(bits, base, shift) for bits in SWIZZLE_BITS for shift in SWIZZLE_SHIFTS
                                   if shift >= bits)]
    costed = sorted((addresses.excess(changed.pad, changed.swizzle), index, change, changed)
                    for index, (change, changed) in enumerate(candidates)
                    if (changed.pad, changed.swizzle) != (smem.pad, smem.swizzle))
    warnings = _validation_warnings(layout.spec, path)
    for cost, _, change, changed in costed:
        if cost >= written.excess:
            break
        found = _validation_warnings(replace(layout.spec, **{f"smem_{operand.value}": changed}), path)
        if found is not None and found <= warnings:
            return written, Remedy(change, cost), widest
    return written, written, widest


def _unswizzled(offsets: np.ndarray, swizzle: ir.Swizzle | None) -> np.ndarray:
    """Offsets under (or, applied again, without) an xor swizzle: it xors bits [M, M+B) with [M+S, M+S+B),
    which S >= B leaves unchanged, so it is its own inverse."""
    if swizzle is None:
        return offsets
    mask = ((1 << swizzle.bits) - 1) << swizzle.base
    return offsets ^ ((offsets >> swizzle.shift) & mask)


def _validation_warnings(spec: ir.KernelSpec, path: InstructionPath) -> int | None:
    """How many warnings the validator gives the spec; None where it refuses it."""
    diagnostics = validate(spec, path)
    if any(d.severity is Severity.ERROR for d in diagnostics):
        return None
    return len(diagnostics)


def conflict_hint(found: tuple[Remedy, Remedy, int], smem: ir.SmemLayout, op: str) -> str:
    """What `remedy` found for the operand of `smem`: the change and what it does, or, where none does better,
    that none does and what to try."""
    written, best, widest = found
    name = smem.operand.name
    if best.change is not None and best.excess == 0:
        return f"{best.change} removes every bank conflict of {name}'s shared-memory accesses"
    if best.change is not None:
        return (f"{best.change} cuts the excess wavefronts of {name}'s shared-memory accesses from "
                f"{written.excess} to {best.excess} per block and k-tile, the fewest of the pads and swizzles "
                f"that keep them as wide")
    current = (f"its swizzle {smem.swizzle}" if smem.swizzle is not None else
               f"its pad {smem.pad}" if smem.pad else "no pad")
    pads = f"no pad (a multiple of {widest} elements)" if widest > 1 else "no pad"
    return (f"{pads} or swizzle xor(B, {widest.bit_length() - 1}, S) that keeps {name}'s accesses as wide does "
            f"better than {current}; {STRUCTURAL_HINTS[op]}")


def conflict_warning(layout: TileLayout, key: tuple[ir.Operand, str, int], costs: list[AccessCost],
                     hint: str | None) -> Diagnostic:
    operand, op, bits = key
    ways = max(c.max_ways for c in costs)
    wavefronts = sum(c.wavefronts for c in costs)
    ideal = sum(c.ideal_wavefronts for c in costs)
    message = (f"{ways}-way bank conflict on {operand.name} {op}s ({bits}-bit, {len(costs)} per thread): "
               f"{wavefronts} shared wavefronts per block and k-tile where {ideal} would do")
    return Diagnostic(Severity.WARNING, layout.spec.smem(operand).span, message, hint=hint)


class BankConflictPass:
    name = "bank_conflicts"
    needs: frozenset[str] = frozenset()
    provides = frozenset({"smem_accesses"})

    def run(self, context: Context) -> PassResult:
        layout = context.layout
        env = layout.thread_env()
        costs = [cost_access(layout, access, env) for access in layout.smem_accesses()]
        groups = conflict_groups(costs)
        found = cache(partial(remedy, layout, path=context.plan.path))  # an operand's stores and loads share its search

        def hint(operand: ir.Operand, op: str) -> str | None:
            return conflict_hint(found(operand), layout.spec.smem(operand), op) if context.hints else None

        warnings = tuple(conflict_warning(layout, key, group, hint(*key[:2])) for key, group in groups.items())
        return PassResult({"smem_accesses": costs}, self._verdict(costs, groups), warnings)

    @staticmethod
    def _verdict(costs: list[AccessCost], groups: dict) -> str:
        per_op = {}
        for op in ("load", "ldmatrix", "store"):
            chosen = [c for c in costs if c.access.op == op]
            if not chosen:
                continue
            per_op[op] = (sum(c.wavefronts for c in chosen), sum(c.ideal_wavefronts for c in chosen))
        totals = ", ".join(f"{op} {w} wavefronts (ideal {i})" for op, (w, i) in per_op.items())
        if not groups:
            return f"no bank conflicts; per block and k-tile: {totals}"
        worst = "; ".join(f"{operand.name} {op} {bits}-bit {max(c.max_ways for c in group)}-way"
                          for (operand, op, bits), group in groups.items())
        return f"conflicts: {worst}; per block and k-tile: {totals}"
