"""The launch rule, stated once: how a compiled file's kernels are launched for a call.

A `LaunchPlan` is built with the plan (plan.py, by the instruction path's lowering), printed as C by
the launcher emitters, written into NAME.json (`to_json`) and read back by the Python runtime
(`from_json`), which asks it what the C launcher decides: which kernel runs a call (`choose_entry`),
the grid (`grid_for`), the stream-K split (`split_for`) and the workspace (`workspace_for`).

Pure and CPU-only: it imports nothing of the compiler or the emitters, so the runtime reads it
without loading them. The split itself is schedule.py's rule.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields

from .abi import Parameter
from .expr import Const, Expr, Func, Var
from .rule import (Address, Apply, Function, Let, Literal, Refuse, Refused, Rule, Symbol, all_of, any_of, cast,
                   ceil_div, eq, gt, lt, maximum, minimum, ne, not_, select)
from .grouped_schedule import grid_blocks
from .schedule import (LAUNCHED_MIN_SAVED_K_TILES, StreamKSplit, SubLaunch, call_split, interior_launches,
                       interior_split_pays, stream_k_split_rule)


SCALE_C_THREADS = 256  # the K = 0 kernel's block
SCALE_C_MAX_BLOCKS = 1024  # its blocks per GEMM, at most: they stride over C's elements
PAD_THREADS = 256  # the padded copies' kernel (paths/wgmma/pad.py): a warp to a segment of a row
PAD_WARPS_PER_BLOCK = PAD_THREADS // 32
PAD_CHUNK = 16  # elements a lane loads before it stores any: 16 loads in flight per lane, whatever the alignment
PAD_SEGMENT = 32 * PAD_CHUNK  # a row's elements that a warp copies at a time: the rows' segments
PAD_MAX_BLOCKS = 4096  # its blocks, at most: they stride over the segments
PAD_ROW_BYTES = 128  # the copies' rows start 128 bytes apart: whole L2 lines, whole 32-byte sectors
PAD_MIN_REUSE = 768  # copy such an operand only where the kernel uses each of its elements this many times (pad.py)
PAD_MIN_WORK = 1 << 33  # ... and the call has this many multiply-adds: the copy's launch costs microseconds (pad.py)


def narrow_flag(kernel: NarrowKernel) -> str:
    """The launcher's name for the test that a narrow kernel's accesses are aligned: `aligned_8byte`."""
    return f"aligned_{kernel.width_bytes}byte"


def aligned_helper(name: str, element_bytes: Mapping[str, int]) -> Func:
    """Whether an operand's vector accesses of `elements` are aligned: its address, leading dimension and batch
    stride. With operands of one element size that size is a constant, else the call gives the operand's."""
    sizes = set(element_bytes.values())
    params = ("p", "ld", "stride", "elements") + (() if len(sizes) == 1 else ("element_bytes",))
    size = Const(sizes.pop()) if len(sizes) == 1 else Var("element_bytes")
    elements = Var("elements")
    return Func(name, params, all_of(eq(Address("p") % (elements * size), 0), eq(Var("ld") % elements, 0),
                                     eq(Var("stride") % elements, 0)))


# The K = 0 kernel's blocks per GEMM (Entries.scale_c): a grid-stride loop over C's M x N elements.
SCALE_C_GRID = Rule("scale_c_grid", ("M", "N"), (
    Let("elements", cast("long long", Var("M")) * Var("N")),
    Let("element_blocks", ceil_div(Var("elements"), SCALE_C_THREADS)),
    Let("scale_blocks", minimum(Var("element_blocks"), SCALE_C_MAX_BLOCKS))))


# The padded copies' blocks (Entries.pad_operands): each row of A and of B cut into segments of PAD_SEGMENT elements,
# a warp to a segment, so a few long rows spread over every SM as many short ones do.
PAD_GRID = Rule("pad_grid", ("a_rows", "a_cols", "b_rows", "b_cols"), (
    Let("segments", cast("long long", Var("a_rows")) * ceil_div(Var("a_cols"), PAD_SEGMENT)
        + cast("long long", Var("b_rows")) * ceil_div(Var("b_cols"), PAD_SEGMENT)),
    Let("pad_blocks", minimum(ceil_div(Var("segments"), PAD_WARPS_PER_BLOCK), PAD_MAX_BLOCKS))))


DECODE_TILE_N = 16  # rows of W per mma tile of the dequantizing decode kernel (paths/dequant)
DECODE_MAX_GRID_YZ = 65535  # CUDA's limit on a grid's y and z


def decode_grid(rows: int, block_rows: int, k_slice: int) -> Rule:
    """The dequantizing decode kernel's launch (paths/dequant/kernel.py): blocks of `rows` rows of A along x, of
    `block_rows` rows of W along y, k-slices of `k_slice` along z; and the split-K call's workspace, C's M x N
    f32 sums and a counter per (x, y) tile, none with one k-slice. K = 0 runs one k-slice, which finds no weights
    and writes C = 0. Refused for negative sizes and grids past CUDA's limits. The C launcher prints it;
    DecodeConfig and the runtime evaluate it."""
    m, n, k = Var("M"), Var("N"), Var("K")
    x, y, z = Var("grid_x"), Var("grid_y"), Var("grid_z")
    return Rule("decode_grid", ("M", "N", "K"), (
        Refuse(any_of(lt(m, 0), lt(n, 0), lt(k, 0))),
        Let("grid_x", ceil_div(m, rows)),
        Let("grid_y", ceil_div(ceil_div(n, DECODE_TILE_N), block_rows // DECODE_TILE_N)),
        Let("k_slices", ceil_div(k, k_slice)),
        Let("grid_z", maximum(Var("k_slices"), 1)),
        Refuse(any_of(gt(y, DECODE_MAX_GRID_YZ), gt(z, DECODE_MAX_GRID_YZ))),
        Let("workspace_bytes", select(all_of(gt(z, 1), gt(m, 0), gt(n, 0)),
                                      cast("long long", m) * n * 4 + x * y * 4, 0),
            comment="Split-K: C's f32 sums, then a counter per tile of C.")))


DEQUANTIZE_MAX_GRID_X = 2147483647  # CUDA's limit on a grid's x


def dequantize_grid(chunk_k: int, items_per_block: int) -> Rule:
    """The dequantizing path's dequantize-into-memory kernel's launch (paths/dequant/expand.py): the packed weight
    of an N x K W has ceil(N / 16) x ceil(K / chunk_k) items (a 16-row tile's chunk of k), `items_per_block` to a
    block, the blocks along x. Refused for negative sizes and grids past CUDA's limit. The C launcher prints it;
    DecodeConfig.dequantize_grid and the runtime evaluate it."""
    n, k = Var("N"), Var("K")
    return Rule("dequantize_grid", ("N", "K"), (
        Refuse(any_of(lt(n, 0), lt(k, 0))),
        Let("items", ceil_div(cast("long long", n), DECODE_TILE_N) * ceil_div(cast("long long", k), chunk_k),
            comment="The packed weight's items: a 16-row tile's chunk of k each."),
        Let("grid_x", ceil_div(Var("items"), items_per_block)),
        Refuse(gt(Var("grid_x"), DEQUANTIZE_MAX_GRID_X))))


class GridRule(enum.Enum):
    TILES = "tiles"  # one block per BM x BN tile of C along x; the batch along z
    BATCH_TILES = "batch_tiles"  # one block per tile of every GEMM of the batch, all along x
    PERSISTENT = "persistent"  # one wave: min(tiles of every GEMM of the batch, SMs) blocks walk the tiles
    PERSISTENT_STREAM_K = "persistent_stream_k"  # persistent, with room for the stream-K blocks too
    # persistent over the groups' tiles (batch: grouped), counted on the GPU: the launch takes their bound
    # (grouped_schedule.grid_blocks); the call's batch is the group count
    PERSISTENT_GROUPED = "persistent_grouped"


class StreamKLaunch(enum.Enum):
    """Where a `schedule: stream_k` split is carried out."""

    LAUNCHED = "launched"  # separate kernels (prepare C, stream-K, plain) on SMs x resident blocks slots
    PERSISTENT = "persistent"  # inside the one persistent kernel, one slot per SM, with a workspace


@dataclass(frozen=True)
class NarrowKernel:
    """A kernel whose global accesses are narrower than the vector kernel's (cp.async of 8 or 4 bytes), for
    operands aligned to less than the vector kernel needs but more than one element: what each operand's
    pointer, leading dimension and batch stride must be a multiple of (elements, as
    Requirements.vector_elements), and its stream-K twin with `schedule: stream_k`."""

    entry: str
    width_bytes: int  # its widest global access
    vector_elements: dict[str, int]
    stream_k: str | None = None

    def to_json(self) -> dict:
        return {"entry": self.entry, "width_bytes": self.width_bytes, "vector_elements": dict(self.vector_elements),
                "stream_k": self.stream_k}


@dataclass(frozen=True)
class Entries:
    vector: str
    scalar: str | None = None  # None: the vector kernel is scalar already, or bounds are exact
    stream_k: str | None = None
    stream_k_scalar: str | None = None  # stream-K for the calls that run the scalar kernel
    prepare: str | None = None  # sets the stream-K tiles of C to beta * C first
    interior: str | None = None  # checked bounds: the exact-bounds code for the tiles inside C
    interior_partial_k: str | None = None  # ... and with a partial last k-tile, for K % BK != 0
    scale_c: str | None = None  # K = 0: C = beta * C and the fuse chain, no products (every file has one)
    # checked cp.async kernels: the rungs between the vector and the scalar kernel, widest first
    narrow: tuple[NarrowKernel, ...] = ()
    pad_operands: str | None = None  # TMA specs: copies A and B into rows TMA reads (paths/wgmma/pad.py)
    # kernels a path's own runtime launches beside the call's (the dequant path's dequantize-into-memory kernel)
    others: tuple[str, ...] = ()

    def all(self) -> tuple[str, ...]:
        """Every kernel of the file, the vector one first."""
        named = [getattr(self, f.name) for f in fields(self) if f.name not in ("narrow", "others")]
        rungs = [entry for kernel in self.narrow for entry in (kernel.entry, kernel.stream_k)]
        return tuple(entry for entry in named + rungs + list(self.others) if entry is not None)

    def to_json(self) -> dict:
        """The entries by role; `narrow`, `pad_operands` and `others` only where the file has them."""
        data: dict = {f.name: getattr(self, f.name) for f in fields(self)
                      if f.name not in ("narrow", "pad_operands", "others")}
        if self.pad_operands is not None:
            data["pad_operands"] = self.pad_operands
        if self.narrow:
            data["narrow"] = [kernel.to_json() for kernel in self.narrow]
        if self.others:
            data["others"] = list(self.others)
        return data

    @classmethod
    def from_json(cls, data: dict) -> "Entries":
        narrow = tuple(NarrowKernel(**kernel) for kernel in data.get("narrow", ()))
        return cls(**{name: value for name, value in data.items() if name not in ("narrow", "others")},
                   narrow=narrow, others=tuple(data.get("others", ())))


@dataclass(frozen=True)
class Requirements:
    """What a call must satisfy: shape multiples, and per operand (a, b, c) the vector alignment of the
    vector kernel (elements) and the largest leading dimension."""

    m_multiple: int
    n_multiple: int
    k_multiple: int
    vector_elements: dict[str, int]
    max_leading_dimension: dict[str, int]

    @property
    def multiples(self) -> tuple[int, int, int]:
        return self.m_multiple, self.n_multiple, self.k_multiple


@dataclass(frozen=True)
class Workspace:
    """A persistent stream-K launch's scratch: per SM a slot of partial sums and a flag per consumer."""

    partial_bytes: int  # one slot: the tile's accumulators
    consumers: int  # flags per slot

    def sizes(self, sms: int) -> tuple[int, int]:
        """(bytes of partial sums, flags) for a GPU of `sms` SMs."""
        return sms * self.partial_bytes, sms * self.consumers


@dataclass(frozen=True)
class LaunchPlan:
    """How the file's kernels are launched: what the C launchers do and the metadata describes."""

    entries: Entries
    parameters: tuple[Parameter, ...]
    launchers: dict[str, str | None]
    threads: int
    smem_bytes: int
    block_tile: tuple[int, int, int]
    grid: tuple[str, int, str | int]  # the launch over all of C, as C text: x the block count, z the batch
    requirements: Requirements
    min_blocks_per_sm: int | None  # `__launch_bounds__`' second argument, from the spec's budget
    grid_rule: GridRule = GridRule.TILES
    stream_k: StreamKLaunch | None = None  # schedule: stream_k, and how its split is launched
    workspace: Workspace | None = None  # persistent stream-K's scratch
    tma_operands: bool = False  # A and B reach the kernel as TMA tensor maps (no fallback kernel)
    # Thread-block cluster dimensions of the GEMM kernels' launches (x, y, z): (1, 1, 1) launches plainly; others
    # through cudaLaunchKernelEx's cluster attribute (TMA multicast, 2-SM MMA). The grid must divide by them.
    cluster: tuple[int, int, int] = (1, 1, 1)
    # The rules built from this plan, kept: the runtime evaluates them on every call it checks.
    _rules: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def _rule(self, key: tuple, build: Callable[[], Rule]) -> Rule:
        if key not in self._rules:
            self._rules[key] = build()
        return self._rules[key]

    @property
    def clustered(self) -> bool:
        return tuple(self.cluster) != (1, 1, 1)

    # --- the rule --------------------------------------------------------------------------------

    def tiles(self, m: int, n: int) -> int:
        """Tiles of one GEMM (edge tiles count)."""
        bm, bn, _ = self.block_tile
        return -(-m // bm) * -(-n // bn)

    def split_for(self, m: int, n: int, k: int, batch: int, sms: int, blocks_per_sm: int = 1) -> StreamKSplit:
        """The stream-K split of a call (without stream-K: no tile shared). The launched kernels share a wave of
        SMs x resident blocks and split only where that saves LAUNCHED_MIN_SAVED_K_TILES; the persistent
        kernel shares one block per SM, every shared tile the same number of blocks where that idles few."""
        if self.stream_k is StreamKLaunch.LAUNCHED:
            return call_split(self.block_tile, m, n, k, sms * blocks_per_sm, batch, LAUNCHED_MIN_SAVED_K_TILES)
        if self.stream_k is StreamKLaunch.PERSISTENT:
            return call_split(self.block_tile, m, n, k, sms, aligned=True)
        return StreamKSplit(self.tiles(m, n), -(-k // self.block_tile[2]), sms, 0, 0)

    def persistent_grid_rule(self, split: str = "stream_k_split") -> Rule:
        """The blocks (`blocks`) of the TMA launcher's one launch over `tiles` (every GEMM of the batch's) on
        `sms` SMs: one per tile (BATCH_TILES); one wave at most (PERSISTENT); or with stream-K
        (PERSISTENT_STREAM_K) the split of the call on one block per SM (schedule.stream_k_split_rule, aligned,
        C's function `split`: `sk_tiles`, `sk_blocks`) and enough blocks for its ranges and for one wave of the
        other tiles, which the blocks then walk blockIdx.x, + gridDim.x, ... Inputs: `tiles`, `K`, `sms`."""
        return self._rule(("persistent_grid", split), lambda: self._persistent_grid_rule(split))

    def _persistent_grid_rule(self, split: str) -> Rule:
        tiles, sms = Var("tiles"), Var("sms")
        if self.grid_rule is GridRule.BATCH_TILES:
            steps: tuple = (Let("blocks", tiles),)
        elif self.grid_rule is GridRule.PERSISTENT_STREAM_K:
            wave = Var("wave_sms")
            steps = (Let("wave_sms", maximum(sms, 1)),
                     Apply(Function(split, stream_k_split_rule(0, aligned=True)),
                           (tiles, ceil_div(cast("long long", Var("K")), self.block_tile[2]), wave, 1),
                           ("sk_tiles", "sk_blocks")),
                     Let("plain_wave", minimum(tiles - Var("sk_tiles"), wave)),
                     Let("blocks", maximum(Var("sk_blocks"), Var("plain_wave"))))
        else:
            steps = (Let("blocks", select(all_of(gt(sms, 0), gt(tiles, sms)), sms, tiles)),)
        return Rule("persistent_grid", ("tiles", "K", "sms"), steps)

    def grid_for(self, m: int, n: int, k: int, batch: int, sms: int) -> tuple[int, int, int]:
        """The grid of one launch over all of C on a GPU of `sms` SMs, as the C launcher computes it."""
        tiles = self.tiles(m, n)
        if self.grid_rule is GridRule.TILES:
            return tiles, 1, batch
        if self.grid_rule is GridRule.PERSISTENT_GROUPED:
            return grid_blocks(m, n, batch, self.block_tile[0], self.block_tile[1], sms), 1, 1
        return self.persistent_grid_rule().evaluate({"tiles": tiles * batch, "K": k, "sms": sms})["blocks"], 1, 1

    def scale_c_grid(self, m: int, n: int, batch: int) -> tuple[int, int, int]:
        """The grid of the K = 0 kernel (Entries.scale_c): a grid-stride loop over each GEMM's M x N elements,
        the batch along z (a grouped call's groups share one C: one z), SCALE_C_GRID's blocks along x. A call with
        M or N = 0 launches nothing."""
        z = 1 if self.grid_rule is GridRule.PERSISTENT_GROUPED else batch
        return SCALE_C_GRID.evaluate({"M": m, "N": n})["scale_blocks"], 1, z

    def workspace_for(self, m: int, n: int, k: int, sms: int) -> tuple[StreamKSplit, tuple[int, int]] | None:
        """A persistent stream-K call's split and workspace sizes (bytes of partial sums, flags); None when the
        call shares no tile (or there is no workspace)."""
        if self.workspace is None:
            return None
        split = self.split_for(m, n, k, 1, sms)
        return (split, self.workspace.sizes(sms)) if split.sk_tiles else None

    def sub_launches(self, m: int, n: int, k: int, batch: int, sms: int, blocks_per_sm: int = 1) -> tuple[SubLaunch, ...]:
        """How a call on the vector kernel covers C without stream-K: for checked bounds, where the split pays on
        SMs x resident blocks slots, the tiles inside C on the interior kernel and the edge strips on the vector
        one (schedule.interior_launches); otherwise one launch over all of C."""
        if self.entries.interior is not None and interior_split_pays(self.block_tile, m, n, k, sms * blocks_per_sm,
                                                                     batch):
            return interior_launches(self.block_tile, m, n, k)
        return (SubLaunch(False, 0, 0, m, n),)

    @property
    def batched(self) -> bool:
        """Whether the kernels take a batch stride per operand."""
        return any(name == "stride_a" for _, name in self.parameters)

    def kernel_choice_rule(self, element_bytes: Mapping[str, int], helper: str = "aligned") -> Rule:
        """Which kernel runs a call (`kernel`): the vector one when every vector access is aligned
        (`vector_aligned`), else the widest narrow kernel whose accesses are (`aligned_8byte`, ...), else the
        scalar one; without a scalar kernel a misaligned call is refused. Inputs: the operands' addresses
        `A`, `B`, `C`, leading dimensions `lda`, ... and, batched, strides `stride_a`, ...; `element_bytes`
        per operand (a, b, c). The C launcher prints it (`helper`: its alignment test, `aligned_helper`)."""
        return self._rule(("kernel_choice", tuple(sorted(element_bytes.items())), helper),
                          lambda: self._kernel_choice_rule(element_bytes, helper))

    def _kernel_choice_rule(self, element_bytes: Mapping[str, int], helper: str) -> Rule:
        aligned = aligned_helper(helper, element_bytes)
        uniform = len(set(element_bytes.values())) == 1

        def test(elements: Mapping[str, int]) -> Expr:
            return all_of(*(aligned(Var(op.upper()), Var(f"ld{op}"), Var(f"stride_{op}") if self.batched else 0,
                                    elements[op], *(() if uniform else (element_bytes[op],)))
                            for op in "abc" if elements[op] > 1))

        entries = self.entries
        vector = test(self.requirements.vector_elements)
        steps: list = []
        if isinstance(vector, Const) or entries.scalar is None:
            if not isinstance(vector, Const):
                steps += [Let("vector_aligned", vector, "bool"), Refuse(not_(Var("vector_aligned")))]
            steps.append(Let("kernel", Symbol(entries.vector), "auto"))
            if entries.stream_k is not None:
                steps.append(Let("stream_k_kernel", Symbol(entries.stream_k), "auto"))
        else:
            widths = " or ".join(str(narrow.width_bytes) for narrow in entries.narrow)
            steps += [Let("vector_aligned", vector, "bool"),
                      *(Let(narrow_flag(narrow), test(narrow.vector_elements), "bool",
                            comment=None if i else "Operands aligned to less than the vector kernel needs run the "
                                                   "widest narrow kernel\nwhose accesses they allow (cp.async of "
                                                   f"{widths} bytes), the scalar kernel otherwise.")
                        for i, narrow in enumerate(entries.narrow)),
                      Let("kernel", self._chain(entries.vector, [n.entry for n in entries.narrow], entries.scalar),
                          "auto")]
            if entries.stream_k is not None:
                twins = [narrow.stream_k for narrow in entries.narrow]
                steps.append(Let("stream_k_kernel", self._chain(entries.stream_k, twins, entries.stream_k_scalar), "auto",
                                 comment="Calls on the scalar kernel share their tiles through its stream-K twin"
                                         + (", those on a narrow kernel through its own." if entries.narrow else ".")))
        inputs = tuple(name for op in "abc" for name in (op.upper(), f"ld{op}", f"stride_{op}")
                       if self.batched or not name.startswith("stride_"))
        return Rule("kernel_choice", inputs, tuple(steps))

    def _chain(self, vector: str, narrow: list[str | None], scalar: str | None) -> Expr:
        """`vector_aligned ? vector : aligned_8byte ? narrow[0] : ... : scalar`."""
        choice: Expr = Symbol(scalar)
        for rung, entry in reversed(list(zip(self.entries.narrow, narrow))):
            choice = select(Var(narrow_flag(rung)), Symbol(entry), choice)
        return select(Var("vector_aligned"), Symbol(vector), choice)

    def choose_entry(self, misalignments: Callable[[dict[str, int]], list[str]], kernel: str,
                     operands: Mapping[str, int], element_bytes: Mapping[str, int], which: str = "kernel") -> str:
        """The kernel the launcher runs for `operands` (kernel_choice_rule's inputs): the vector one, a narrow one
        or the scalar one (`which`: "kernel"; or "stream_k_kernel", its stream-K twin); a refused call raises
        ValueError with `misalignments` of the vector kernel's `vector_elements` as the reasons. TMA operands
        have their own launcher and test (paths/wgmma): the vector kernel where `misalignments` is empty."""
        reasons = misalignments(self.requirements.vector_elements)
        if self.tma_operands:
            if not reasons:
                return self.entries.vector
            raise ValueError("; ".join(reasons) + f"; {kernel} reads A and B with TMA, which needs 16-byte "
                                                        "aligned pointers and leading dimensions, and has no "
                                                        "fallback kernel")
        try:
            return self.kernel_choice_rule(element_bytes).evaluate(operands)[which]
        except Refused:
            raise ValueError("; ".join(reasons) + f"; {kernel} has bounds: exact and no scalar fallback") from None

    def stream_k_launch_rule(self, alpha_beta: bool, split: str = "stream_k_split") -> Rule:
        """How a launched stream-K call (StreamKLaunch.LAUNCHED) divides its tiles: the split
        (schedule.stream_k_split_rule with LAUNCHED_MIN_SAVED_K_TILES, C's function `split`) on this GPU's
        SMs x resident blocks, then the grids of its kernels: `prepare_blocks` tiles of C set to beta * C first
        (none where beta is 1), `sk_blocks` stream-K blocks, `plain_blocks` tiles for the plain kernel. Inputs:
        `blocks` (tiles of one GEMM), `K`, `sms`, `per_sm`, `batch` (batched kernels) and `beta` (a float)."""
        return self._rule(("stream_k_launch", alpha_beta, split), lambda: self._stream_k_launch_rule(alpha_beta, split))

    def _stream_k_launch_rule(self, alpha_beta: bool, split: str) -> Rule:
        tiles, sk_tiles = Var("blocks"), Var("sk_tiles")
        batch = Var("batch") if self.batched else Const(1)
        keeps_c = ne(Var("beta"), Literal("1.0f", 1.0)) if alpha_beta else Const(1)
        steps = (Let("slots", cast("long long", Var("sms")) * Var("per_sm")),
                 Apply(Function(split, stream_k_split_rule(LAUNCHED_MIN_SAVED_K_TILES)),
                       (tiles, ceil_div(Var("K"), self.block_tile[2]), Var("slots"), batch), ("sk_tiles", "sk_blocks")),
                 Let("prepare_blocks", select(all_of(gt(sk_tiles, 0), keeps_c), sk_tiles, 0),
                     comment="The shared tiles of C are set to beta * C first" +
                             (", unless beta is 1." if alpha_beta else " (to 0: the epilogue stores).")),
                 Let("plain_blocks", tiles - sk_tiles, comment="The plain kernel computes the other tiles."))
        return Rule("stream_k_launch", ("blocks", "K", "sms", "per_sm", *(("batch",) if self.batched else ()),
                                        "beta"), steps)

    def stream_k_launch(self, m: int, n: int, k: int, batch: int, sms: int, per_sm: int, beta: float,
                        alpha_beta: bool) -> dict[str, int]:
        """stream_k_launch_rule evaluated for a call: sk_tiles, sk_blocks, prepare_blocks and plain_blocks."""
        values = self.stream_k_launch_rule(alpha_beta).evaluate(
            {"blocks": self.tiles(m, n), "K": k, "sms": sms, "per_sm": per_sm, "batch": batch, "beta": beta})
        return {name: values[name] for name in ("sk_tiles", "sk_blocks", "prepare_blocks", "plain_blocks")}

    # --- NAME.json --------------------------------------------------------------------------------

    def to_json(self) -> dict:
        r = self.requirements
        return {
            "entries": self.entries.to_json(),
            "parameters": [list(p) for p in self.parameters],
            "launchers": dict(self.launchers),
            "threads": self.threads,
            "smem_bytes": self.smem_bytes,
            "block_tile": list(self.block_tile),
            "grid": list(self.grid),
            "requirements": {"m_multiple": r.m_multiple, "n_multiple": r.n_multiple, "k_multiple": r.k_multiple,
                             "vector_elements": dict(r.vector_elements),
                             "max_leading_dimension": dict(r.max_leading_dimension)},
            "min_blocks_per_sm": self.min_blocks_per_sm,
            "grid_rule": self.grid_rule.value,
            "stream_k": self.stream_k.value if self.stream_k is not None else None,
            "workspace": ({"partial_bytes": self.workspace.partial_bytes, "consumers": self.workspace.consumers}
                          if self.workspace is not None else None),
            "tma_operands": self.tma_operands,
            **({"cluster": list(self.cluster)} if self.clustered else {}),  # only where clusters are launched
        }

    @classmethod
    def from_json(cls, data: dict) -> "LaunchPlan":
        workspace = data["workspace"]
        return cls(entries=Entries.from_json(data["entries"]), parameters=tuple(tuple(p) for p in data["parameters"]),
                   launchers=dict(data["launchers"]), threads=data["threads"], smem_bytes=data["smem_bytes"],
                   block_tile=tuple(data["block_tile"]), grid=tuple(data["grid"]),
                   requirements=Requirements(**data["requirements"]),
                   min_blocks_per_sm=data["min_blocks_per_sm"], grid_rule=GridRule(data["grid_rule"]),
                   stream_k=StreamKLaunch(data["stream_k"]) if data["stream_k"] is not None else None,
                   workspace=Workspace(**workspace) if workspace is not None else None,
                   tma_operands=data["tma_operands"], cluster=tuple(data.get("cluster", (1, 1, 1))))
