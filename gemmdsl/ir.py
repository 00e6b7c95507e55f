"""The kernel spec as small frozen dataclasses.

The parser builds these from a `.gemm` file; every later stage only reads them.
Each node keeps the span of the section it came from and, in `key_spans`, the
span of every key's value, so a pass can point at the exact text it objects to.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from .source import Span

MAX_VECTOR_BYTES = 16  # the widest global load and store


class Operand(enum.Enum):
    A = "a"
    B = "b"
    C = "c"


class DType(enum.Enum):
    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    E4M3 = "e4m3"  # FP8: 4 exponent bits, 3 mantissa bits, no infinities (PyTorch's float8_e4m3fn)
    E5M2 = "e5m2"  # FP8: 5 exponent bits, 2 mantissa bits (float8_e5m2)
    # Weight types (B only, with `quant b { ... }`: docs/quantized.md): integer codes times group scales.
    S4 = "s4"  # signed int4, -8..7
    U4 = "u4"  # unsigned int4, 0..15
    S8 = "s8"  # signed int8, -128..127

    @property
    def bits(self) -> int:
        return {DType.F32: 32, DType.E4M3: 8, DType.E5M2: 8, DType.S4: 4, DType.U4: 4, DType.S8: 8}.get(self, 16)

    @property
    def bytes(self) -> int:
        """Bytes of one element; a 4-bit type has none to give (two share a byte): count it with `bits`."""
        if self.bits % 8:
            raise TypeError(f"{self.value} is {self.bits} bits, not a whole number of bytes: count it with `bits`")
        return self.bits // 8

    @property
    def fp8(self) -> bool:
        """An 8-bit float: an operand of wgmma's FP8 forms (A and B), or an e4m3 weight; never C, a bias or a
        residual."""
        return self in (DType.E4M3, DType.E5M2)

    @property
    def integer(self) -> bool:
        """An integer weight type (B only, dequantized by its scales)."""
        return self in (DType.S4, DType.U4, DType.S8)

    @property
    def c_header(self) -> str | None:
        """The CUDA header that defines the element's type and its conversions; None for float."""
        return {DType.F16: "cuda_fp16.h", DType.BF16: "cuda_bf16.h", DType.E4M3: "cuda_fp8.h",
                DType.E5M2: "cuda_fp8.h"}.get(self)  # the integer types are int8_t / packed in uint32_t

    @property
    def vector_widths(self) -> tuple[int, ...]:
        """Global vector widths in elements, narrowest first: powers of two up to 16 bytes."""
        return tuple(w for w in (1, 2, 4, 8, 16, 32) if w * self.bits <= 8 * MAX_VECTOR_BYTES)

    @property
    def c_type(self) -> str:
        """The element's type in CUDA C (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h); a 4-bit type has none (the
        dequantizing path reads its codes packed in 32-bit words)."""
        if self.bits == 4:
            raise TypeError(f"{self.value} has no C type of its own: its codes are read packed in 32-bit words")
        return {DType.F32: "float", DType.F16: "__half", DType.BF16: "__nv_bfloat16", DType.E4M3: "__nv_fp8_e4m3",
                DType.E5M2: "__nv_fp8_e5m2", DType.S8: "int8_t"}[self]


class MatrixLayout(enum.Enum):
    ROW = "row"
    COL = "col"


class Epilogue(enum.Enum):
    STORE = "store"  # C = A*B
    ALPHA_BETA = "alpha_beta"  # C = alpha*A*B + beta*C


class LaneOrder(enum.Enum):
    ROW = "row"  # lane = lane_m * lanes_n + lane_n
    COL = "col"  # lane = lane_n * lanes_m + lane_m
    ZIGZAG = "zigzag"  # maxas: lane bit 0 -> n, next bits -> m, the rest -> n


class RepeatLevel(enum.Enum):
    BLOCK = "block"  # the whole warp layout repeats across the block
    WARP = "warp"  # each warp repeats its lane layout inside its own tile


class RasterKind(enum.Enum):
    ROW = "row"
    COL = "col"
    GROUP = "group"


class Schedule(enum.Enum):
    TILES = "tiles"  # one block per C tile
    STREAM_K = "stream_k"  # the last, partial wave's k-tiles are shared evenly by one wave of blocks
    PERSISTENT = "persistent"  # one wave of blocks (min(tiles, SMs)) walks the tiles (wgmma specs)
    PINGPONG = "pingpong"  # persistent, each consumer warpgroup a tile of its own, their main loops in turn (wgmma)


class FmaOrder(enum.Enum):
    """The order of a thread's FMAs in one k-step's outer product (ptxas keeps much of it, and it
    decides which operands the register reuse caches can serve)."""

    ROW = "row"  # for i: for j
    COL = "col"  # for j: for i
    SNAKE = "snake"  # for i: for j, every other row walked backwards, so neighbours share an operand


class SmemOrder(enum.Enum):
    MK = "mk"  # A as [m][k]
    KM = "km"  # A as [k][m] (transposed)
    KN = "kn"  # B as [k][n]
    NK = "nk"  # B as [n][k] (transposed)

    @property
    def k_major(self) -> bool:
        """True when k is the outer (slow) index, so m or n is contiguous."""
        return self in (SmemOrder.KM, SmemOrder.KN)


class MmaShape(enum.Enum):
    """The m x n x k of one mma.sync instruction (one warp multiplies m x k by k x n)."""

    M16N8K16 = "m16n8k16"
    M16N8K8 = "m16n8k8"

    @property
    def m(self) -> int:
        return 16

    @property
    def n(self) -> int:
        return 8

    @property
    def k(self) -> int:
        return 16 if self is MmaShape.M16N8K16 else 8


@dataclass(frozen=True)
class WgmmaShape:
    """The m x n x k of one wgmma.mma_async instruction: a warpgroup (4 warps) multiplies m64 x k by
    k x n, reading both operands from shared memory through matrix descriptors (sm_90a)."""

    n: int
    k: int = 16
    m: int = 64

    @property
    def value(self) -> str:
        return f"m{self.m}n{self.n}k{self.k}"

    def __str__(self) -> str:
        return self.value


class Precision(enum.Enum):
    """What the tensor cores multiply; the accumulators are FP32 in every case."""

    NATIVE = "native"  # f16 or bf16 operands as they are (not written in a spec: the default)
    TF32 = "tf32"  # f32 operands rounded to TF32 (10-bit mantissa), one mma per product
    TF32X3 = "3xtf32"  # f32 split into a TF32 big and small part, three mma: about FP32 accuracy


class Accumulate(enum.Enum):
    """How an FP8 wgmma kernel sums along K (docs/fp8.md). Hopper's FP8 wgmma keeps its accumulator with
    fewer mantissa bits than an f32, so long sums lose accuracy unless promoted."""

    FAST = "fast"  # wgmma's accumulators hold the whole K (torch._scaled_mm's use_fast_accum=True)
    PROMOTED = "promoted"  # each k-tile's wgmma sum is added into separate f32 registers (use_fast_accum=False)


class SmemRead(enum.Enum):
    """How an mma spec loads its fragments from shared memory."""

    LDMATRIX = "ldmatrix"  # ldmatrix: 8 rows of 16 bytes (8 16-bit or 4 f32 elements), one row address per lane
    LDS32 = "32"  # one 32-bit shared load per fragment register


class CopyMode(enum.Enum):
    REGISTERS = "registers"  # global -> registers -> shared
    CP_ASYNC = "cp_async"  # global -> shared with cp.async (sm_80+)
    TMA = "tma"  # global -> shared with bulk tensor copies completing on mbarriers (sm_90; wgmma specs)


class StoreMode(enum.Enum):
    """How the epilogue writes C."""

    DIRECT = "direct"  # straight from the accumulators with st.global
    TMA = "tma"  # through shared memory with bulk tensor stores that run on while the next tile starts (wgmma)


class FragmentBuffering(enum.Enum):
    SINGLE = "single"
    DOUBLE = "double"


class Bounds(enum.Enum):
    CHECKED = "checked"  # any M, N, K >= 1: edge tiles load predicated and store guarded
    EXACT = "exact"  # the launcher rejects shapes the block tile does not divide


class Batch(enum.Enum):
    NONE = "none"  # one GEMM per launch
    STRIDED = "strided"  # gridDim.z GEMMs whose operands lie a fixed stride apart
    GROUPED = "grouped"  # G GEMMs of one N and K and their own M: A's and C's rows split by `offs`, G B matrices


@dataclass(frozen=True, kw_only=True)
class Node:
    span: Span
    key_spans: tuple[tuple[str, Span], ...] = field(default=(), compare=False, repr=False)

    def at(self, key: str) -> Span:
        """Span of one key's value, falling back to the whole section."""
        for name, span in self.key_spans:
            if name == key:
                return span
        return self.span


@dataclass(frozen=True)
class Pair:
    """An M x N pair (warps, lanes, micro tile, repeat)."""

    m: int
    n: int

    def __str__(self) -> str:
        return f"{self.m}x{self.n}"


@dataclass(frozen=True)
class MatrixType:
    dtype: DType
    layout: MatrixLayout


def k_contiguous(operand: Operand, layout: MatrixLayout) -> bool:
    """Whether k is the contiguous index of A (M x K) or B (K x N) in global memory.

    Row-major A and column-major B keep k contiguous; column-major A keeps m, row-major B n.
    """
    return (operand is Operand.A) == (layout is MatrixLayout.ROW)


@dataclass(frozen=True, kw_only=True)
class Problem(Node):
    a: MatrixType = MatrixType(DType.F32, MatrixLayout.ROW)
    b: MatrixType = MatrixType(DType.F32, MatrixLayout.ROW)
    c: MatrixType = MatrixType(DType.F32, MatrixLayout.ROW)
    epilogue: Epilogue = Epilogue.STORE
    bounds: Bounds = Bounds.CHECKED
    batch: Batch = Batch.NONE

    def matrix(self, operand: Operand) -> MatrixType:
        return {Operand.A: self.a, Operand.B: self.b, Operand.C: self.c}[operand]

    @property
    def checked(self) -> bool:
        return self.bounds is Bounds.CHECKED

    @property
    def batched(self) -> bool:
        return self.batch is Batch.STRIDED

    @property
    def grouped(self) -> bool:
        return self.batch is Batch.GROUPED

    @property
    def weights(self) -> bool:
        """Whether B holds quantized weights against A's activations: an integer type, or e4m3 against a bf16 or
        f16 A (docs/quantized.md); such a spec needs `quant b { ... }`."""
        b = self.b.dtype
        return b.integer or (b is DType.E4M3 and self.a.dtype in (DType.BF16, DType.F16))


@dataclass(frozen=True, kw_only=True)
class WeightQuant(Node):
    """The `quant b` section: B's codes times a scale per `group` weights along K (and, with `zeros`, minus an
    integer zero point per group): w[n, k] = (q[n, k] - zeros[n, k // group]) * scales[n, k // group]."""

    group: int | None  # weights along K per scale; None: one scale per output column (`group: channel`)
    zeros: bool = False

    def scales_per_column(self, k: int) -> int:
        """Scales (and zero points) of one column of B, over a K of `k`."""
        return 1 if self.group is None else -(-k // self.group)


@dataclass(frozen=True)
class Raster:
    kind: RasterKind
    group: int = 1  # rows of blocks per group, for RasterKind.GROUP

    def __str__(self) -> str:
        return f"group({self.group})" if self.kind is RasterKind.GROUP else self.kind.value


@dataclass(frozen=True, kw_only=True)
class BlockTile(Node):
    m: int = 128
    n: int = 128
    k: int = 8
    raster: Raster = Raster(RasterKind.ROW)
    schedule: Schedule = Schedule.TILES

    @property
    def stream_k(self) -> bool:
        return self.schedule is Schedule.STREAM_K

    def global_tile(self, operand: Operand, layout: MatrixLayout) -> tuple[int, int]:
        """(strided extent, contiguous extent) of A's BM x BK or B's BK x N tile in global memory."""
        mn = self.m if operand is Operand.A else self.n
        return (mn, self.k) if k_contiguous(operand, layout) else (self.k, mn)


@dataclass(frozen=True, kw_only=True)
class ThreadLayout(Node):
    warps: Pair = Pair(1, 1)
    lanes: Pair = Pair(4, 8)
    lane_order: LaneOrder = LaneOrder.ROW
    micro: Pair = Pair(4, 4)
    repeat: Pair = Pair(1, 1)
    repeat_level: RepeatLevel = RepeatLevel.BLOCK
    fma_order: FmaOrder = FmaOrder.ROW
    # wgmma specs: consumer warpgroups (issuing wgmma) and producer warpgroups (issuing TMA); 0 otherwise.
    warpgroups: int = 0
    producers: int = 0

    @property
    def threads(self) -> int:
        if self.warpgroups:
            return (self.warpgroups + self.producers) * 128
        return self.warps.m * self.warps.n * 32

    @property
    def fragment(self) -> Pair:
        """Rows and columns of C that one thread accumulates."""
        return Pair(self.repeat.m * self.micro.m, self.repeat.n * self.micro.n)


@dataclass(frozen=True)
class Swizzle:
    """CuTe's Swizzle<B, M, S> on element offsets: bits [M+S, M+S+B) are xor-ed into [M, M+B)."""

    bits: int
    base: int
    shift: int

    def __str__(self) -> str:
        return f"xor({self.bits}, {self.base}, {self.shift})"


@dataclass(frozen=True, kw_only=True)
class SmemLayout(Node):
    operand: Operand = Operand.A
    order: SmemOrder = SmemOrder.MK
    pad: int = 0
    swizzle: Swizzle | None = None
    read_bits: int | None = None  # FMA specs: forced shared->register width; None = widest allowed
    read: SmemRead | None = None  # mma specs: how fragments are read (always set); None for FMA specs
    # wgmma specs: the swizzle mode TMA writes and the wgmma descriptor reads (bytes of one swizzle span:
    # 32, 64 or 128); `swizzle: 128B` in the spec. None elsewhere.
    swizzle_bytes: int | None = None


@dataclass(frozen=True, kw_only=True)
class GlobalLoad(Node):
    operand: Operand = Operand.A
    vector: int = 1


@dataclass(frozen=True, kw_only=True)
class MmaTile(Node):
    """A warp's tile on tensor cores: `repeat` copies of one mma.sync `shape`; or, with a WgmmaShape,
    the instruction each consumer warpgroup issues (its tile is BM / warpgroups rows by BN)."""

    shape: MmaShape | WgmmaShape = MmaShape.M16N8K16
    repeat: Pair = Pair(1, 1)
    precision: Precision = Precision.NATIVE
    accumulate: Accumulate | None = None  # FP8 operands only (default promoted); None for the other types

    @property
    def warp_tile(self) -> Pair:
        """Rows and columns of C that one warp accumulates."""
        return Pair(self.repeat.m * self.shape.m, self.repeat.n * self.shape.n)


@dataclass(frozen=True, kw_only=True)
class Pipeline(Node):
    stages: int = 1
    copy: CopyMode = CopyMode.REGISTERS
    fragments: FragmentBuffering = FragmentBuffering.SINGLE
    unroll: int = 1  # k-tiles per iteration of the main loop (`#pragma unroll`)
    store: StoreMode = StoreMode.DIRECT


@dataclass(frozen=True, kw_only=True)
class Budget(Node):
    registers: int | None = None  # per thread
    blocks_per_sm: int | None = None


@dataclass(frozen=True, kw_only=True)
class Target(Node):
    sm: int = 90
    arch_specific: bool = False  # sm_90a: features of exactly this architecture (wgmma, setmaxnreg)

    @property
    def code(self) -> str:
        """What follows `sm_` in nvcc's -arch: '90', or '90a' for an arch-specific target."""
        return f"{self.sm}{'a' if self.arch_specific else ''}"

    def __str__(self) -> str:
        return f"sm_{self.code}"


class Activation(enum.Enum):
    """The fuse chain's elementwise activation (docs/fusion.md gives each one's device function)."""

    RELU = "relu"
    GELU = "gelu"  # x * Phi(x), with erf
    GELU_TANH = "gelu_tanh"  # the tanh approximation of GELU
    SILU = "silu"  # x * sigmoid(x)


class Broadcast(enum.Enum):
    """Which index of C a vector runs along: one value per row (m) or per column (n)."""

    M = "m"
    N = "n"


class ScaleVectors(enum.Enum):
    """f32 scales applied to the accumulators instead of alpha, named A's then B's: per row of A (M values)
    and/or per column of B (N values) in the epilogue, one per tensor (an f32 in device memory, which the
    kernel reads: no host copy), or DeepSeek's block scales (A per 1 x 128, B per 128 x 128) at FP8's
    promotion step."""

    ROW = "row"
    COL = "col"
    ROWCOL = "rowcol"
    BLOCK = "block"
    TENSOR = "tensor"  # A and B per tensor: torch._scaled_mm's tensorwise mode
    TENSOR_COL = "tensor col"  # A per tensor, B per column
    ROW_TENSOR = "row tensor"  # A per row, B per tensor

    @property
    def rows(self) -> bool:
        return self in (ScaleVectors.ROW, ScaleVectors.ROWCOL, ScaleVectors.ROW_TENSOR)

    @property
    def cols(self) -> bool:
        return self in (ScaleVectors.COL, ScaleVectors.ROWCOL, ScaleVectors.TENSOR_COL)

    @property
    def a_tensor(self) -> bool:
        """A's scale is one f32 for the whole tensor."""
        return self in (ScaleVectors.TENSOR, ScaleVectors.TENSOR_COL)

    @property
    def b_tensor(self) -> bool:
        """B's scale is one f32 for the whole tensor."""
        return self in (ScaleVectors.TENSOR, ScaleVectors.ROW_TENSOR)

    @property
    def blocks(self) -> bool:
        """Applied in the k-loop, per 128 elements of K, rather than in the epilogue."""
        return self is ScaleVectors.BLOCK


@dataclass(frozen=True)
class Bias:
    along: Broadcast
    dtype: DType


FUSE_BETA_ORDER = 20  # a fuse step's `order` below which it scales the product, before `+ beta * C`
FUSE_KEYS: set[str] = set()  # the registered fuse ops' keys (gemmdsl/fuse_ops/base.py's `register`)


@dataclass(frozen=True, kw_only=True)
class FuseChain(Node):
    """The `fuse` section: steps applied to each f32 accumulator before C's conversion, each one a registered
    op's node (gemmdsl/fuse_ops/), in the ops' chain order; `+ beta * C` (`epilogue: alpha_beta`) comes after
    the steps that scale the product (order below FUSE_BETA_ORDER), which take alpha's place.

    `chain.KEY` (`chain.bias`, `chain.activation`, ...) is the value the op's key was given, None without it."""

    steps: tuple[Node, ...] = ()

    def step(self, key: str) -> Node | None:
        return next((step for step in self.steps if step.key == key), None)

    def __getattr__(self, key: str):
        if key not in FUSE_KEYS:
            raise AttributeError(key)
        step = self.step(key)
        return None if step is None else step.value

    @property
    def operands(self) -> tuple:
        """Every step's operands (fuse_ops.Operand), in the kernels' parameter order."""
        steps = sorted(self.steps, key=lambda step: step.operand_order)
        return tuple(operand for step in steps for operand in step.operands())

    @property
    def dtypes(self) -> tuple[DType, ...]:
        """The element types of the chain's operands."""
        return tuple(operand.dtype for operand in self.operands)

    @property
    def empty(self) -> bool:
        return not self.steps

    @property
    def vectors(self) -> tuple[tuple[str, Broadcast, DType], ...]:
        """The chain's vectors, as the kernels' parameters name them: (name, the axis it runs along, its type): the
        operands a row's or a column's values carry, one value each (not one for the whole launch)."""
        return tuple((operand.parameter, along, operand.dtype) for operand in self.operands
                     if (along := operand.kind.carried_along(operand)) is not None and not operand.kind.uniform)

    def describe(self, alpha_beta: bool) -> str:
        """The chain as a formula of acc, e.g. `gelu_tanh(acc + bias[n])`."""
        x = "acc"
        scaling = [step for step in self.steps if step.order < FUSE_BETA_ORDER]
        for step in scaling:
            x = step.describe(x)
        if alpha_beta and not scaling:
            x = "alpha * acc"
        if alpha_beta:
            x += " + beta * C"
        for step in self.steps:
            if step.order >= FUSE_BETA_ORDER:
                x = step.describe(x)
        return x


@dataclass(frozen=True, kw_only=True)
class KernelSpec(Node):
    """One `gemm NAME { ... }` block: everything the compiler needs to know."""

    name: str
    problem: Problem
    target: Target
    block: BlockTile
    threads: ThreadLayout
    smem_a: SmemLayout
    smem_b: SmemLayout
    load_a: GlobalLoad
    load_b: GlobalLoad
    pipeline: Pipeline
    budget: Budget
    # None: the FMA path (threads' lanes, micro, repeat). With mma, only threads.warps is the spec's;
    # the other ThreadLayout fields keep their defaults and mean nothing.
    mma: MmaTile | None = None
    fuse: FuseChain | None = None  # None: no `fuse` section (C = acc, or alpha * acc + beta * C)
    quant: WeightQuant | None = None  # B's quantization (`quant b { ... }`); None for ordinary specs

    def smem(self, operand: Operand) -> SmemLayout:
        return self.smem_a if operand is Operand.A else self.smem_b

    def load(self, operand: Operand) -> GlobalLoad:
        return self.load_a if operand is Operand.A else self.load_b

    def k_contiguous(self, operand: Operand) -> bool:
        return k_contiguous(operand, self.problem.matrix(operand).layout)

    def global_tile(self, operand: Operand) -> tuple[int, int]:
        """(strided extent, contiguous extent) of A's or B's block tile in global memory."""
        return self.block.global_tile(operand, self.problem.matrix(operand).layout)

    def with_target(self, sm: int, arch_specific: bool = False) -> "KernelSpec":
        return replace(self, target=replace(self.target, sm=sm, arch_specific=arch_specific))
