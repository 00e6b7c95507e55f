"""What a spec's fuse chain (docs/fusion.md) adds to a launch: global bytes, registers, work per element.

Bytes, at three levels, each counted from what the epilogue emits (the layout's `chain_reads`):

- through DRAM at least: each vector once (M or N values), the residual once (M x N), block scales once
  (A's M x ceil(K / 128), B's ceil(N / 128) x ceil(K / 128), f32);
- fetched by the blocks: each block its rows' values of a vector along m (so every column of blocks
  reads the whole vector), its columns' along n, and its tile of R;
- requested by the threads' loads: every thread that keeps a row's (or column's) values loads them
  itself, and a path that reads column values per element loads them for every element of C. L1 serves
  the repeats; the figure says how much load traffic the chain adds to the epilogue. Block scales are read
  in the k-loop, not the epilogue: per k-tile each block its rows' A scales and its columns' B scales, each
  consumer thread those of its rows and of every 128 columns of the tile (paths/wgmma_fp8/math.py).

Per-tensor scales (operands of a uniform kind, gemmdsl/fuse_ops/kinds.py: one value for the launch) are left
out of the bytes and the kept registers: 4 bytes each, read through one address with each row's values (L1
serves them), which the compiler keeps in one register; their multiplies count in the work per element.

Loads past M or N are not made (`load_fuse_m` and `load_fuse_n` read 0 there, R is read inside C only),
so the figures count the rows and columns inside C. C's old value, read where beta is not 0, is counted
apart: the unfused `alpha_beta` epilogue reads it too.

Registers: the values a thread keeps, one per row (column) it holds and per value the row (column)
carries (a scale, a bias). Work: each element's chain in instructions, each step's from its op
(gemmdsl/fuse_ops/: the activation's counted in the PTX of its device function, nvcc 13.0, sm_90a).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .. import ir
from ..layout import ChainReads
from .framework import Context, PassResult


def vectors(spec: ir.KernelSpec) -> list[tuple[str, ir.Broadcast, ir.DType]]:
    """The chain's vectors: (operand name, the axis it runs along, its element type)."""
    return list(spec.fuse.vectors) if spec.fuse is not None else []


def _matrices(spec: ir.KernelSpec) -> list:
    """The chain's matrix operands (fuse_ops.Operand: the residual), read per element."""
    return [operand for operand in spec.fuse.operands if operand.kind.per_element] if spec.fuse is not None else []


def _extra_bytes(spec: ir.KernelSpec, reads: ChainReads | None, m: int, n: int, k: int) -> dict[str, tuple]:
    """The steps' k-loop operands' (through DRAM, fetched by blocks, requested by threads)."""
    return {name: figures for step in spec.fuse.steps
            for name, figures in step.extra_bytes(spec, reads, m, n, k).items()} if spec.fuse is not None else {}


def chain_dram_bytes(spec: ir.KernelSpec, m: int, n: int, k: int) -> dict[str, int]:
    """What the chain's operands add to a launch's DRAM traffic at least: each vector, R and the block scales
    read once."""
    found = {name: (m if axis is ir.Broadcast.M else n) * dtype.bytes for name, axis, dtype in vectors(spec)}
    found.update({operand.name: m * n * operand.dtype.bytes for operand in _matrices(spec)})
    found.update({name: figures[0] for name, figures in _extra_bytes(spec, None, m, n, k).items()})
    return found


def kept_registers(spec: ir.KernelSpec, reads: ChainReads) -> int:
    """The chain's row and column values a thread keeps: one register per row (column) it holds and per
    value that row (column) carries; none for columns read per element."""
    count = 0
    for _, axis, _ in vectors(spec):
        if axis is ir.Broadcast.M:
            count += reads.rows_per_thread
        elif not reads.cols_per_element:
            count += reads.cols_per_thread
    return count


@dataclass(frozen=True)
class ChainWork:
    """One element's chain: the instructions it issues beyond the unfused epilogue's."""

    alu: int  # FP32 and integer instructions (each step's, beta's, conversions)
    sfu: int  # the activation's special-function instructions
    loads: int  # global loads per element: a column's values read per element, R, C's old value (beta)
    smem_loads: int = 0  # shared loads per element: a column's staged values read per element


def chain_work(spec: ir.KernelSpec, reads: ChainReads) -> ChainWork:
    chain = spec.fuse
    assert chain is not None
    alpha_beta = spec.problem.epilogue is ir.Epilogue.ALPHA_BETA
    work = {step.key: step.work(spec, reads) for step in chain.steps}
    scaling = sum(work[step.key].alu for step in chain.steps if step.order < ir.FUSE_BETA_ORDER)
    alu = (scaling or alpha_beta) + alpha_beta  # the scaling steps' products (or alpha's), beta's multiply-add
    alu += sum(work[step.key].alu for step in chain.steps if step.order >= ir.FUSE_BETA_ORDER)
    loads = int(alpha_beta) + sum(w.loads for w in work.values())
    sfu = sum(w.sfu for w in work.values())
    smem_loads = 0
    if reads.cols_per_element:
        column = [dtype for _, axis, dtype in vectors(spec) if axis is ir.Broadcast.N]
        if reads.staged:  # staged as f32 by the producer
            smem_loads = len(column)
        else:
            loads += len(column)
            alu += sum(dtype.bytes == 2 for dtype in column)  # read as f32
    return ChainWork(alu, sfu, loads, smem_loads)


@dataclass(frozen=True)
class FuseCost:
    """A launch's figures for the chain, by operand (bias, row_scale, col_scale, residual)."""

    formula: str
    dram_bytes: dict[str, int]  # through DRAM at least
    block_bytes: dict[str, int]  # what the blocks fetch (through L2)
    thread_bytes: dict[str, int]  # what the threads' loads request (through L1)
    c_read_bytes: int  # C's old value for beta (epilogue: alpha_beta), which the unfused epilogue reads too
    registers: int  # the rows' and columns' values a thread keeps
    work: ChainWork  # per element
    staged_bytes: int = 0  # shared memory per block for a tile's vectors, loaded ahead of the epilogue (0: none)
    residual_ahead: float = 0.0  # the share of R's tile copied to shared memory before the epilogue
    matrices: tuple[str, ...] = ()  # the operands that are M x N matrices (the residual)
    k_loop: tuple[str, ...] = ()  # the operands the main loop reads, not the epilogue (block scales)

    def figures(self) -> dict:
        """The figures by name, for `check --json` (the operands' kinds left out: they say how to add them up)."""
        return {name: value for name, value in asdict(self).items() if name not in ("matrices", "k_loop")}

    @property
    def extra_dram_bytes(self) -> int:
        return sum(self.dram_bytes.values())

    @property
    def epilogue_block_bytes(self) -> int:
        """What the blocks fetch in their epilogues, where the consumers wait for it: the vectors unless a producer
        warp staged them during the main loop, and the share of R not copied ahead; the block scales are read in
        the k-loop instead."""
        total = 0
        for name, count in self.block_bytes.items():
            if name in self.matrices:
                total += round(count * (1 - self.residual_ahead))
            elif name not in self.k_loop and not self.staged_bytes:
                total += count
        return total


def fuse_cost(spec: ir.KernelSpec, reads: ChainReads, m: int, n: int, k: int) -> FuseCost | None:
    """The chain's figures for an M x N x K launch; None without a fuse section."""
    if spec.fuse is None:
        return None
    bm, bn = spec.block.m, spec.block.n
    tiles = {ir.Broadcast.M: -(-n // bn), ir.Broadcast.N: -(-m // bm)}  # blocks that read each row / column
    extent = {ir.Broadcast.M: m, ir.Broadcast.N: n}
    loaders = {ir.Broadcast.M: reads.threads * reads.rows_per_thread // bm,
               ir.Broadcast.N: reads.threads * reads.cols_per_thread // bn}
    dram = chain_dram_bytes(spec, m, n, k)
    blocks, threads = {}, {}
    for name, axis, dtype in vectors(spec):
        blocks[name] = tiles[axis] * extent[axis] * dtype.bytes
        if reads.staged:  # one warp loads the block's values once per tile
            threads[name] = blocks[name]
        elif axis is ir.Broadcast.N and reads.cols_per_element:
            threads[name] = m * n * dtype.bytes
        else:
            threads[name] = tiles[axis] * extent[axis] * loaders[axis] * dtype.bytes
    matrices = tuple(operand.name for operand in _matrices(spec))
    for name in matrices:
        blocks[name] = threads[name] = dram[name]
    extra = _extra_bytes(spec, reads, m, n, k)
    for name, (_, fetched, requested) in extra.items():
        blocks[name], threads[name] = fetched, requested
    alpha_beta = spec.problem.epilogue is ir.Epilogue.ALPHA_BETA
    c_read = m * n * spec.problem.c.dtype.bytes if alpha_beta else 0
    return FuseCost(spec.fuse.describe(alpha_beta), dram, blocks, threads, c_read, kept_registers(spec, reads),
                    chain_work(spec, reads), reads.staged_bytes, reads.residual_ahead, matrices, tuple(extra))


def _megabytes(count: int) -> str:
    return f"{count / 1e6:,.1f} MB" if count >= 100_000 else f"{count / 1e3:,.1f} KB"


class FusePass:
    name = "fuse"
    needs: frozenset[str] = frozenset()
    provides = frozenset({"fuse"})

    def run(self, context: Context) -> PassResult:
        m, n, k = context.problem
        cost = fuse_cost(context.spec, context.layout.chain_reads(), m, n, k)
        if cost is None:
            return PassResult({"fuse": None}, "")
        operands = ", ".join(f"{name} {_megabytes(count)}" for name, count in cost.dram_bytes.items())
        work = cost.work
        verdict = (f"{cost.formula}: +{_megabytes(cost.extra_dram_bytes)} through DRAM"
                   + (f" ({operands})" if operands else "") + "; blocks fetch "
                   f"{_megabytes(sum(cost.block_bytes.values()))}, threads request "
                   f"{_megabytes(sum(cost.thread_bytes.values()))}; "
                   + (f"{cost.registers} values kept per thread; " if cost.registers else "")
                   + f"per element {work.alu} ALU + {work.sfu} SFU instructions, {work.loads} global "
                     f"load{'s' * (work.loads != 1)}"
                   + (f" and {work.smem_loads} shared; the vectors staged per tile in {cost.staged_bytes:,} bytes "
                      "of shared memory by a producer warp during the main loop" if cost.staged_bytes else "")
                   + (f"; R by 16-byte copies into C's staging buffers, {100 * cost.residual_ahead:.0f}% of its tile "
                      "during the main loop (where R and C allow it)" if cost.residual_ahead else ""))
        return PassResult({"fuse": cost}, verdict)
