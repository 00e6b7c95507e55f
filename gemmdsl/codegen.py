"""Codegen stage: KernelSpec + KernelLayout -> one self-contained CUDA C file.

The kernel body is emitted by walking the spec once, section by section; every
index comes from `KernelLayout` as an `Expr` and is rendered here, so what the
analysis passes evaluate is exactly what the kernel computes.

A file holds one kernel, or two for `bounds: checked`: `NAME_kernel` with the
spec's vector global accesses, and `NAME_kernel_scalar`, the same tiling lowered
with one-element global accesses (`KernelLayout(spec, max_global_vector=1)`),
which the launcher runs when a pointer, leading dimension or batch stride would
misalign a vector access. Then come the host launchers.
"""
from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from . import __version__, ir
from .emitter import Emitter
from .expr import Expr, Var
from .layout import GlobalChunk, KernelLayout
from .targets import arch, blocks_for_registers
from .schedule import MAX_WORK, MIN_IDLE_PERCENT, MIN_K_TILES_PER_BLOCK

VECTOR_TYPES = {1: "float", 2: "float2", 4: "float4"}
COMPONENTS = ("x", "y", "z", "w")
OPERANDS = (ir.Operand.A, ir.Operand.B)
MAX_BATCH = 65535  # gridDim.z
MAX_INT = 2147483647


def component(var: str, width: int, element: int) -> str:
    """Element `element` of a register holding a `width`-wide vector."""
    return var if width == 1 else f"{var}.{COMPONENTS[element]}"


def vector_of(var: str, vector: int, first: int, width: int) -> str:
    """A `width`-wide value made of elements first.. of a `vector`-wide register."""
    if width == vector:
        return var
    if width == 1:
        return component(var, vector, first)
    parts = ", ".join(component(var, vector, first + e) for e in range(width))
    return f"make_{VECTOR_TYPES[width]}({parts})"


def paren(text: str) -> str:
    """`text` in parentheses unless it is a single name or number."""
    return text if text.replace("_", "").isalnum() else f"({text})"


def stage_base(operand: ir.Operand, stage: str) -> str:
    """Pointer to shared-memory stage `stage` of an operand."""
    region = f"smem_{operand.value}"
    return region if stage == "0" else f"{region} + {paren(stage)} * {operand.value.upper()}_STAGE"


def as_vector(address: str, width: int, const: bool = False) -> str:
    """`address` (a float lvalue) reinterpreted as a `width`-wide vector lvalue."""
    if width == 1:
        return address
    qualifier = "const " if const else ""
    return f"*reinterpret_cast<{qualifier}{VECTOR_TYPES[width]}*>(&{address})"


def make_vector(width: int, values: list[str]) -> str:
    return values[0] if width == 1 else f"make_{VECTOR_TYPES[width]}({', '.join(values)})"


# --- what the file declares: kernels, their parameters, launchers -----------------------------


@dataclass(frozen=True)
class Variant:
    """One `__global__` kernel of the file and the lowering it is emitted from."""

    entry: str
    layout: KernelLayout
    stream_k: bool = False  # shares the k-tiles of the last sk_tiles tiles (schedule: stream_k)


def kernel_variants(spec: ir.KernelSpec, layout: KernelLayout) -> list[Variant]:
    """The vector kernel, and for checked bounds the scalar one the launcher falls back to.

    The scalar kernel exists only where the vector kernel has a global access wider than one
    element, since otherwise the two would be the same code. `schedule: stream_k` adds the
    kernel that shares the last wave's tiles (the vector kernel computes all the others).
    """
    variants = [Variant(f"{spec.name}_kernel", layout)]
    if spec.problem.checked and any(layout.global_vector(op) > 1 for op in ir.Operand):
        variants.append(Variant(f"{spec.name}_kernel_scalar", KernelLayout(spec, max_global_vector=1)))
    if spec.block.stream_k:
        variants.append(Variant(stream_k_entry(spec), layout, stream_k=True))
    return variants


def stream_k_entry(spec: ir.KernelSpec) -> str:
    return f"{spec.name}_kernel_stream_k"


def scalar_entry(variants: list[Variant]) -> str | None:
    """The kernel the launcher runs for operands that are not vector-aligned, if there is one."""
    scalar = [v.entry for v in variants[1:] if not v.stream_k]
    return scalar[0] if scalar else None


def kernel_parameters(spec: ir.KernelSpec, stream_k: bool = False) -> list[tuple[str, str]]:
    """(C type, name) of every parameter of the spec's kernel, or of its stream-K kernel, in order."""
    parameters = [("const float*", "A"), ("const float*", "B"), ("float*", "C"),
                  ("int", "M"), ("int", "N"), ("int", "K"), ("int", "lda"), ("int", "ldb"), ("int", "ldc"),
                  ("float", "alpha"), ("float", "beta")]
    if spec.problem.batched:
        parameters += [("long long", "stride_a"), ("long long", "stride_b"), ("long long", "stride_c")]
    if stream_k:
        parameters.append(("int", "sk_tiles"))
    return parameters


PREPARE_PARAMETERS = [("float*", "C"), ("int", "M"), ("int", "N"), ("int", "ldc"), ("float", "beta"),
                      ("int", "sk_tiles")]


def prepare_entry(spec: ir.KernelSpec) -> str | None:
    """The kernel that sets the stream-K tiles of C to beta * C before the GEMM adds into them."""
    return f"{spec.name}_prepare_c" if spec.block.stream_k else None


def leading_name(operand: ir.Operand) -> str:
    return f"ld{operand.value}"


def contiguous_extent(spec: ir.KernelSpec, operand: ir.Operand) -> str:
    """The dimension that runs contiguously in an operand's global matrix: its smallest leading dimension."""
    rows, cols = {ir.Operand.A: ("M", "K"), ir.Operand.B: ("K", "N"), ir.Operand.C: ("M", "N")}[operand]
    return cols if spec.problem.matrix(operand).layout is ir.MatrixLayout.ROW else rows


def leading_dimension_limit(spec: ir.KernelSpec, operand: ir.Operand) -> int:
    """Largest leading dimension the kernel takes: offsets inside a tile of A or B (row * ld + col)
    are ints; C's rows are addressed in 64 bits."""
    if operand is ir.Operand.C:
        return MAX_INT
    return MAX_INT // spec.global_tile(operand)[0]


def launcher_names(spec: ir.KernelSpec) -> dict[str, str | None]:
    return {"launcher": f"{spec.name}_launch", "launcher_ld": f"{spec.name}_launch_ld",
            "launcher_batched": f"{spec.name}_launch_batched" if spec.problem.batched else None}


def tile_count(spec: ir.KernelSpec, extent: str, tile: str) -> str:
    """C expression for the number of tiles along a dimension: exact kernels divide, checked round up."""
    return f"({extent} + {tile} - 1) / {tile}" if spec.problem.checked else f"{extent} / {tile}"


# --- helpers emitted before the kernels ---------------------------------------------------------


class HelperEmitter:
    """The shared-memory layout functions and the PTX wrappers every kernel of the file uses."""

    def __init__(self, spec: ir.KernelSpec, layouts: list[KernelLayout], out: Emitter):
        self.spec = spec
        self.layouts = layouts
        self.out = out
        self.cp_async = spec.pipeline.copy is ir.CopyMode.CP_ASYNC

    def emit(self) -> None:
        o = self.out
        o.comment("Shared-memory layouts: element offset of (m or n, k) within one pipeline stage.")
        for operand in OPERANDS:
            geometry = self.layouts[0].smem[operand]  # the variants share their shared-memory layout
            func = geometry.offset_func
            layout = self.spec.smem(operand)
            note = f"order {layout.order.value}, leading dimension {geometry.ld}"
            if layout.swizzle is not None:
                note += f", swizzle {layout.swizzle}"
            o.comment(f"{operand.value.upper()}: {note}")
            with o.block(f"static __device__ __forceinline__ int {func.name}(int mn, int k)"):
                o.line(f"return {func.body.render()};")
        o.line()
        self._emit_shared_access_helpers()
        if self.cp_async:
            o.line()
            self._emit_cp_async_helpers()

    def _shared_widths(self, op: str) -> list[int]:
        """Vector widths (elements) of the shared-memory loads or stores the kernels issue."""
        return sorted({a.width for layout in self.layouts for a in layout.smem_accesses() if a.op == op})

    def _emit_shared_access_helpers(self) -> None:
        o = self.out
        o.comment("Every shared-memory load and store goes through these PTX wrappers. nvcc and\n"
                  "ptxas merge adjacent plain accesses into wider ones; `.volatile` accesses they\n"
                  "leave as written, so the instructions the bank-conflict analysis counts are the\n"
                  "ones that run. (`asm volatile` also keeps them in order around barriers.)")
        with o.block("static __device__ __forceinline__ unsigned smem_address(const float* p)"):
            o.line("return static_cast<unsigned>(__cvta_generic_to_shared(p));")
        for width in self._shared_widths("load"):
            vtype, bits = VECTOR_TYPES[width], 32 * width
            regs = ", ".join(f"%{i}" for i in range(width))
            outs = ", ".join(f'"=f"({component("v", width, e)})' for e in range(width))
            vec = f".v{width}" if width > 1 else ""
            regs = f"{{{regs}}}" if width > 1 else regs
            with o.block(f"static __device__ __forceinline__ {vtype} lds{bits}(const float* p)"):
                o.line(f"{vtype} v;")
                o.line(f'asm volatile("ld.volatile.shared{vec}.f32 {regs}, [%{width}];" : {outs} : "r"(smem_address(p)));')
                o.line("return v;")
        if not self.cp_async:
            for width in self._shared_widths("store"):
                vtype, bits = VECTOR_TYPES[width], 32 * width
                regs = ", ".join(f"%{i + 1}" for i in range(width))
                ins = ", ".join(f'"f"({component("v", width, e)})' for e in range(width))
                vec = f".v{width}" if width > 1 else ""
                regs = f"{{{regs}}}" if width > 1 else regs
                with o.block(f"static __device__ __forceinline__ void sts{bits}(float* p, {vtype} v)"):
                    o.line(f'asm volatile("st.volatile.shared{vec}.f32 [%0], {regs};" :: "r"(smem_address(p)), {ins});')

    def _emit_cp_async_helpers(self) -> None:
        o = self.out
        o.comment("cp.async (sm_80+): copy global -> shared without staging in registers.\n"
                  "16-byte copies bypass L1 (.cg); 4- and 8-byte copies must use .ca.")
        widths = sorted({layout.store_width(op) for layout in self.layouts for op in OPERANDS})
        for width in widths:
            self._emit_cp_async_copy(width, zero_fill=False)
        if self.spec.problem.checked:
            o.comment("Edge tiles (bounds: checked): a copy reads only its first `src_bytes` bytes and\n"
                      "zero-fills the rest. A copy that reads nothing still needs a valid address: `inside`,\n"
                      "the tile's first element, which always lies in the matrix (a block or k-tile exists\n"
                      "only where it starts inside).")
            for width in widths:
                self._emit_cp_async_copy(width, zero_fill=True)
            self._emit_bytes_inside()
        o.lines("""
static __device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\\n" ::);
}

template <int PENDING>
static __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\\n" :: "n"(PENDING));
}""")

    def _emit_cp_async_copy(self, width: int, zero_fill: bool) -> None:
        """`cp_async_<bytes>(dst, src)`, or with `zero_fill` `cp_async_<bytes>_zfill(dst, src, src_bytes, inside)`."""
        size = 4 * width
        cache = "cg" if size == 16 else "ca"
        name, parameters = f"cp_async_{size}", "float* smem_dst, const float* gmem_src"
        operands, source = f"{size}", "gmem_src"
        if zero_fill:
            name, parameters = f"{name}_zfill", f"{parameters}, int src_bytes, const float* inside"
            operands, source = f"{size}, %2", "src_bytes > 0 ? gmem_src : inside"
        inputs = f'"r"(smem_address(smem_dst)), "l"({source})' + (', "r"(src_bytes)' if zero_fill else "")
        with self.out.block(f"static __device__ __forceinline__ void {name}({parameters})"):
            self.out.line(f'asm volatile("cp.async.{cache}.shared.global [%0], [%1], {operands};\\n" :: {inputs});')

    def _emit_bytes_inside(self) -> None:
        o = self.out
        o.comment("Bytes of a `width`-element copy at (row, col) of a tile that lie inside the matrix,\n"
                  "given the rows and the contiguous elements the matrix has left from the tile's origin.")
        with o.block("static __device__ __forceinline__ int bytes_inside(int row, int rows, int col, int cols, "
                     "int width)"):
            o.line("return row < rows ? 4 * max(0, min(width, cols - col)) : 0;")


# --- the kernel ---------------------------------------------------------------------------------


class KernelEmitter:
    """Emits one `__global__` kernel of a spec from one lowering (the vector or the scalar variant)."""

    def __init__(self, spec: ir.KernelSpec, variant: Variant, out: Emitter):
        self.spec = spec
        self.layout = variant.layout
        self.entry = variant.entry
        self.out = out
        self.double_fragments = spec.pipeline.fragments is ir.FragmentBuffering.DOUBLE
        self.cp_async = spec.pipeline.copy is ir.CopyMode.CP_ASYNC
        self.checked = spec.problem.checked
        self.stream_k = variant.stream_k
        self.segmented = False  # emitting a stream-K segment: k-tiles kt_begin.. of a tile, added into C

    def emit_kernel(self) -> None:
        o = self.out
        spec, layout = self.spec, self.layout
        bounds = f"{layout.threads}"
        min_blocks = launch_min_blocks(spec)
        if min_blocks:
            bounds += f", {min_blocks}"
        parameters = [f"{ctype} __restrict__ {name}" if ctype.endswith("*") else f"{ctype} {name}"
                      for ctype, name in kernel_parameters(spec, self.stream_k)]
        o.line(f'extern "C" __global__ void __launch_bounds__({bounds}) {self.entry}(')
        o.line(f"    {', '.join(parameters[:3])},")
        o.line(f"    {', '.join(parameters[3:])})")
        with o.block(""):
            self._emit_constants()
            o.line()
            if spec.problem.batched:
                self._emit_batch_offsets()
                o.line()
            if not self.stream_k:
                self._emit_raster("blockIdx.x")
                o.line()
            self._emit_coordinates()
            o.line()
            if not self.stream_k:
                self._emit_tile_body()
                return
            o.comment("Stream-K: the last sk_tiles C tiles (what would be the launch's last, partial wave;\n"
                      "the plain kernel computes the others) are sk_tiles * K / BK k-tiles of work that this\n"
                      "kernel's blocks share in equal, contiguous ranges; a range may end in one tile and go on\n"
                      "in the next.")
            o.line(f"const int first_tile = {self._tiles()} - sk_tiles;")
            self._emit_stream_k_work()
            o.comment("Segments are taken from the end of the range: the first then starts at k = 0 of its\n"
                      "tile and the last ends at k = K, so all blocks stream through the same k-tiles of A\n"
                      "and B at about the same time, as plain blocks do, and L2 serves them.")
            with o.block("for (int work = work_end; work > work_begin;)"):
                self._emit_stream_k_segment()
                o.line()
                self.segmented = True
                self._emit_raster("tile")
                o.line()
                self._emit_tile_body()
                self.segmented = False

    def emit_prepare_kernel(self) -> None:
        """Stream-K tiles receive atomic adds, so they must hold beta * C (0 for epilogue: store) first."""
        o, spec = self.out, self.spec
        parameters = ", ".join(f"{ctype} {name}" for ctype, name in PREPARE_PARAMETERS)
        o.comment("Before a stream-K launch: C = beta * C on the last sk_tiles tiles (C = 0 when beta == 0),\n"
                  "one block per tile.")
        o.line(f'extern "C" __global__ void __launch_bounds__({self.layout.threads}) '
               f"{prepare_entry(spec)}({parameters})")
        with o.block(""):
            o.line(f"constexpr int BM = {self.layout.bm};")
            o.line(f"constexpr int BN = {self.layout.bn};")
            o.line(f"const int tile = {self._tiles()} - sk_tiles + blockIdx.x;")
            self._emit_raster("tile")
            # Consecutive threads walk C's contiguous dimension, so the accesses coalesce.
            inner, outer = ("n", "m") if spec.problem.c.layout is ir.MatrixLayout.ROW else ("m", "n")
            with o.block(f"for (int e = threadIdx.x; e < BM * BN; e += {self.layout.threads})"):
                o.line(f"const int {outer} = e / B{inner.upper()};")
                o.line(f"const int {inner} = e % B{inner.upper()};")
                o.line(f"float* const c = C + (size_t)(block_{outer} + {outer}) * ldc + block_{inner} + {inner};")
                o.line("*c = beta == 0.0f ? 0.0f : beta * *c;")

    def _tiles(self) -> str:
        """The number of C tiles of the launch, as C."""
        return f"{paren(tile_count(self.spec, 'M', 'BM'))} * {paren(tile_count(self.spec, 'N', 'BN'))}"

    def _emit_tile_body(self) -> None:
        """Accumulate one C tile (in a stream-K segment: one k-range of it) and store it."""
        o = self.out
        self._emit_accumulators()
        o.line()
        self._emit_main_loop()
        o.line()
        self._emit_epilogue()

    def _emit_stream_k_work(self) -> None:
        o = self.out
        o.line("const int k_tiles_total = K / BK;")
        o.line("const long long sk_work = (long long)sk_tiles * k_tiles_total;")
        o.line("const int work_begin = (int)(sk_work * blockIdx.x / gridDim.x);")
        o.line("const int work_end = (int)(sk_work * (blockIdx.x + 1) / gridDim.x);")

    def _emit_stream_k_segment(self) -> None:
        o = self.out
        o.comment("This segment: k-tiles [kt_begin, kt_end) of C tile `tile`.")
        o.line("const int tile = first_tile + (work - 1) / k_tiles_total;")
        o.line("const int kt_end = (work - 1) % k_tiles_total + 1;")
        o.line("const int kt_begin = max(0, kt_end - (work - work_begin));")
        o.line("work -= kt_end - kt_begin;")

    def _emit_constants(self) -> None:
        o, spec, layout = self.out, self.spec, self.layout
        t = spec.threads
        o.comment(f"Block tile {spec.block.m}x{spec.block.n}x{spec.block.k}; {layout.threads} threads "
                  f"({t.warps} warps of {t.lanes} {t.lane_order.value} lanes); "
                  f"each thread owns {t.fragment} of C.")
        if layout.max_global_vector == 1:
            o.comment("Scalar variant: every global load and store is one element wide, for operands\n"
                      "whose pointer, leading dimension or batch stride is not vector-aligned.")
        constants = [
            ("BM", layout.bm), ("BN", layout.bn), ("BK", layout.bk),
            ("MICRO_M", t.micro.m), ("MICRO_N", t.micro.n),
            ("REPEAT_M", t.repeat.m), ("REPEAT_N", t.repeat.n),
            ("REPEAT_STRIDE_M", layout.repeat_stride("m")), ("REPEAT_STRIDE_N", layout.repeat_stride("n")),
            ("FRAG_M", layout.frag_m), ("FRAG_N", layout.frag_n),
            ("STAGES", layout.stages),
            ("A_STAGE", layout.smem[ir.Operand.A].stage_elems),
        ]
        if layout.stages > 1:  # with one stage nothing indexes past B's first tile
            constants.append(("B_STAGE", layout.smem[ir.Operand.B].stage_elems))
        for name, value in constants:
            o.line(f"constexpr int {name} = {value};")
        o.line()
        o.comment("One dynamic shared array: STAGES tiles of A, then STAGES tiles of B.")
        o.line("extern __shared__ __align__(16) float smem[];")
        o.line("float* const smem_a = smem;")
        o.line("float* const smem_b = smem + STAGES * A_STAGE;")

    def _emit_batch_offsets(self) -> None:
        o = self.out
        o.comment("Strided batch: blockIdx.z picks the GEMM; its A, B and C start stride_a, stride_b\n"
                  "and stride_c elements after those of the GEMM before it.")
        for operand, stride in (("A", "stride_a"), ("B", "stride_b"), ("C", "stride_c")):
            o.line(f"{operand} += blockIdx.z * {stride};")

    def _emit_raster(self, tile: str) -> None:
        """block_m and block_n of C tile number `tile` (the block index, or a stream-K segment's tile)."""
        o, spec = self.out, self.spec
        raster = spec.block.raster
        what = "which C tile this block computes" if tile == "blockIdx.x" else f"where C tile `{tile}` lies"
        o.comment(f"Rasterization ({raster}): {what}.")
        if raster.kind is ir.RasterKind.ROW:
            o.line(f"const int tiles_n = {tile_count(spec, 'N', 'BN')};")
            o.line(f"const int tile_m = {tile} / tiles_n;")
            o.line(f"const int tile_n = {tile} % tiles_n;")
        elif raster.kind is ir.RasterKind.COL:
            o.line(f"const int tiles_m = {tile_count(spec, 'M', 'BM')};")
            o.line(f"const int tile_m = {tile} % tiles_m;")
            o.line(f"const int tile_n = {tile} / tiles_m;")
        else:
            o.comment(f"Groups of {raster.group} tile rows are walked column by column, so blocks that\n"
                      "run together share rows of A and columns of B in L2.")
            o.line(f"const int tiles_m = {tile_count(spec, 'M', 'BM')};")
            o.line(f"const int tiles_n = {tile_count(spec, 'N', 'BN')};")
            o.line(f"const int group_size = {raster.group};")
            o.line("const int blocks_per_group = group_size * tiles_n;")
            o.line(f"const int first_tile_m = ({tile} / blocks_per_group) * group_size;")
            o.line("const int group_rows = min(tiles_m - first_tile_m, group_size);")
            o.line(f"const int tile_m = first_tile_m + ({tile} % blocks_per_group) % group_rows;")
            o.line(f"const int tile_n = ({tile} % blocks_per_group) / group_rows;")
        o.line("const int block_m = tile_m * BM;")
        o.line("const int block_n = tile_n * BN;")
        if self.checked:
            o.comment("Bounds (checked): a block whose tile lies inside C runs the unguarded code for every\n"
                      "full k-tile; edge blocks and the last, partial k-tile load zero-filled tiles and\n"
                      "store only inside C. Both tests are the same for the whole block.")
            o.line("const bool block_inside = block_m + BM <= M && block_n + BN <= N;")
            o.line("const int full_k_tiles = K / BK;")

    def _emit_coordinates(self) -> None:
        o, t = self.out, self.spec.threads
        repeat = ""
        if t.repeat != ir.Pair(1, 1):
            repeat = f", repeated {t.repeat} at {t.repeat_level.value} level"
        o.comment(f"Thread coordinates: warps {t.warps}, lanes {t.lanes} ({t.lane_order.value}), "
                  f"micro tile {t.micro}{repeat}.")
        o.line("const int tid = threadIdx.x;")
        for name, value in self.layout.coordinates:
            o.line(f"const int {name} = {value.render()};")

    def _emit_accumulators(self) -> None:
        o = self.out
        o.line("float acc[FRAG_M][FRAG_N];")
        with o.unrolled("i", "FRAG_M"):
            with o.unrolled("j", "FRAG_N"):
                o.line("acc[i][j] = 0.0f;")
        buffers = "[2]" if self.double_fragments else ""
        o.line(f"float a_frag{buffers}[FRAG_M];")
        o.line(f"float b_frag{buffers}[FRAG_N];")

    # --- global -> shared ------------------------------------------------------------------

    def _tile_origin(self, operand: ir.Operand, tile: str) -> tuple[str, str, str, str]:
        """(row origin, column origin, row bound, column bound) of k-tile `tile` of A or B in global memory.

        Rows and columns are those of the tile as it lies in memory (see KernelLayout.global_chunks);
        a bound is the matrix dimension that limits the index.
        """
        mn_origin, mn_bound = ("block_m", "M") if operand is ir.Operand.A else ("block_n", "N")
        if self.segmented:  # k-tiles count from the segment's first
            tile = "kt_begin" if tile == "0" else f"kt_begin + {tile}"
        k_origin = "0" if tile == "0" else f"{paren(tile)} * BK"
        if self.spec.k_contiguous(operand):
            return mn_origin, k_origin, mn_bound, "K"
        return k_origin, mn_origin, "K", mn_bound

    def _emit_source_pointer(self, operand: ir.Operand, tile: str) -> str:
        """Declare `a_src` / `b_src`, the start of k-tile `tile` of A or B in global memory."""
        row, col, _, _ = self._tile_origin(operand, tile)
        src = f"{operand.value}_src"
        terms = [operand.value.upper()]
        if row != "0":
            terms.append(f"(size_t){paren(row)} * {leading_name(operand)}")
        if col != "0":
            terms.append(col)
        self.out.line(f"const float* {src} = {' + '.join(terms)};")
        return src

    def _emit_tile_limits(self, operand: ir.Operand, tile: str) -> None:
        """Declare `a_rows` / `a_cols`: how many of the tile's rows and columns lie inside the matrix."""
        row, col, row_bound, col_bound = self._tile_origin(operand, tile)
        for name, origin, bound in (("rows", row, row_bound), ("cols", col, col_bound)):
            left = bound if origin == "0" else f"{bound} - {origin}"
            self.out.line(f"const int {operand.value}_{name} = {left};")

    def _global_offset(self, operand: ir.Operand, row: Expr, col: Expr) -> str:
        return (row * Var(leading_name(operand)) + col).render()

    def _for_tile(self, tile: str, emit: Callable[[bool], None]) -> None:
        """`emit(guarded)` for k-tile `tile`: unguarded for exact bounds; for checked bounds behind a
        branch that is uniform across the block, so interior tiles run exactly the exact code."""
        if not self.checked:
            emit(False)
            return
        with self.out.block(f"if (block_inside && {tile} < full_k_tiles)"):
            emit(False)
        with self.out.block("else"):
            emit(True)

    def _stage_registers(self, operand: ir.Operand) -> str:
        return f"{operand.value}_stage"

    def _declare_stage_registers(self) -> None:
        for operand in OPERANDS:
            vector = self.layout.load_vector(operand)
            count = len(self.layout.global_chunks(operand))
            self.out.line(f"{VECTOR_TYPES[vector]} {self._stage_registers(operand)}[{count}];")

    def _emit_global_loads(self, tile: str) -> None:
        """Global -> registers for k-tile `tile`."""
        self._for_tile(tile, lambda guarded: self._emit_register_loads(tile, guarded))

    def _emit_register_loads(self, tile: str, guarded: bool) -> None:
        o = self.out
        for operand in OPERANDS:
            vector = self.layout.load_vector(operand)
            src = self._emit_source_pointer(operand, tile)
            if guarded:
                self._emit_tile_limits(operand, tile)
            for chunk in self.layout.global_chunks(operand):
                register = f"{self._stage_registers(operand)}[{chunk.index}]"
                if not guarded:
                    address = f"{src}[{self._global_offset(operand, chunk.row, chunk.col)}]"
                    o.line(f"{register} = {as_vector(address, vector, const=True)};")
                    continue
                with self._chunk_block(chunk):
                    for element in range(vector):
                        col = Var("col") + element
                        inside = f"row < {operand.value}_rows && {col.render()} < {operand.value}_cols"
                        address = f"{src}[{self._global_offset(operand, Var('row'), col)}]"
                        o.line(f"{component(register, vector, element)} = {inside} ? {address} : 0.0f;")

    @contextmanager
    def _chunk_block(self, chunk: GlobalChunk) -> Iterator[None]:
        """A scope declaring `row` and `col`, a chunk's first element in its global tile (guarded copies)."""
        with self.out.block(""):
            self.out.line(f"const int row = {chunk.row.render()};")
            self.out.line(f"const int col = {chunk.col.render()};")
            yield

    def _emit_shared_stores(self, stage: str) -> None:
        """Registers -> shared memory stage `stage`."""
        o = self.out
        for operand in OPERANDS:
            geometry = self.layout.smem[operand]
            vector = self.layout.load_vector(operand)
            width = self.layout.store_width(operand)
            o.line(f"float* const {operand.value}_dst = {stage_base(operand, stage)};")
            for chunk in self.layout.global_chunks(operand):
                register = f"{self._stage_registers(operand)}[{chunk.index}]"
                for element in range(0, vector, width):
                    mn, k = self.layout.chunk_tile_coords(operand, chunk, element)
                    target = f"{operand.value}_dst + {geometry.offset(mn, k).render()}"
                    o.line(f"sts{32 * width}({target}, {vector_of(register, vector, element, width)});")

    def _emit_cp_async(self, tile: str, stage: str) -> None:
        """Global -> shared with cp.async for k-tile `tile` into stage `stage`."""
        self._for_tile(tile, lambda guarded: self._emit_async_copies(tile, stage, guarded))

    def _emit_async_copies(self, tile: str, stage: str, guarded: bool) -> None:
        o = self.out
        for operand in OPERANDS:
            geometry = self.layout.smem[operand]
            vector = self.layout.load_vector(operand)
            width = self.layout.store_width(operand)
            size = 4 * width
            src = self._emit_source_pointer(operand, tile)
            dst = f"{operand.value}_dst"
            o.line(f"float* const {dst} = {stage_base(operand, stage)};")
            if guarded:
                self._emit_tile_limits(operand, tile)
            for chunk in self.layout.global_chunks(operand):
                with self._chunk_block(chunk) if guarded else nullcontext():
                    row, first = (Var("row"), Var("col")) if guarded else (chunk.row, chunk.col)
                    for element in range(0, vector, width):
                        mn, k = self.layout.chunk_tile_coords(operand, chunk, element)
                        target = f"{dst} + {geometry.offset(mn, k).render()}"
                        col = first + element
                        source = f"{src} + {self._global_offset(operand, row, col)}"
                        if not guarded:
                            o.line(f"cp_async_{size}({target}, {source});")
                            continue
                        p = operand.value
                        inside = f"bytes_inside(row, {p}_rows, {col.render()}, {p}_cols, {width})"
                        o.line(f"cp_async_{size}_zfill({target}, {source}, {inside}, {src});")

    # --- shared -> registers -> FMA ------------------------------------------------------------

    def _emit_fragment_loads(self, kk: str, buffer: str, source: str = "read") -> None:
        """Fragments of slice `kk` from the stage that `a_<source>`/`b_<source>` point at."""
        o = self.out
        for operand in OPERANDS:
            frag = f"{operand.value}_frag{buffer}"
            for index, width, offset in self.layout.fragment_reads(operand, Var(kk)):
                address = f"{operand.value}_{source} + {offset.render()}"
                o.line(f"{as_vector(f'{frag}[{index}]', width)} = lds{32 * width}({address});")

    def _emit_stage_pointers(self, stage: str, name: str) -> None:
        o = self.out
        o.line(f"const float* const a_{name} = {stage_base(ir.Operand.A, stage)};")
        o.line(f"const float* const b_{name} = {stage_base(ir.Operand.B, stage)};")

    def _emit_compute(self, stage: str) -> None:
        """The k-tile's outer products, reading shared-memory stage `stage`."""
        o = self.out
        self._emit_stage_pointers(stage, "read")
        if self.double_fragments:
            o.comment("Fragments are double-buffered: slice kk+1 loads while slice kk multiplies.")
            self._emit_fragment_loads("0", "[0]")
            with o.unrolled("kk", "BK"):
                with o.block("if (kk + 1 < BK)"):
                    self._emit_fragment_loads("kk + 1", "[(kk + 1) % 2]")
                self._emit_outer_product("[kk % 2]")
        else:
            with o.unrolled("kk", "BK"):
                self._emit_fragment_loads("kk", "")
                self._emit_outer_product("")

    def _emit_compute_with_handoff(self, stage: str, next_stage: str, handoff: Callable[[], None]) -> None:
        """The k-tile's outer products with fragments double-buffered across k-tiles (seed 004).

        In the last slice, `handoff` makes the next k-tile's stage ready (and ends with the
        k-tile's one barrier); the first fragments of that tile are then loaded before the
        last outer product of this one, so their latency hides behind its FMAs.
        """
        o = self.out
        self._emit_stage_pointers(stage, "read")
        with o.unrolled("kk", "BK"):
            with o.block("if (kk < BK - 1)"):
                self._emit_fragment_loads("kk + 1", "[(kk + 1) % 2]")
            with o.block("else"):
                handoff()
                with o.block("if (has_next)"):
                    self._emit_stage_pointers(next_stage, "next")
                    self._emit_fragment_loads("0", "[(kk + 1) % 2]", "next")
            self._emit_outer_product("[kk % 2]")

    def _emit_outer_product(self, buffer: str) -> None:
        o = self.out
        fma = f"acc[i][j] = fmaf(a_frag{buffer}[i], b_frag{buffer}[j], acc[i][j]);"
        order = self.spec.threads.fma_order
        if order is ir.FmaOrder.COL:
            with o.unrolled("j", "FRAG_N"), o.unrolled("i", "FRAG_M"):
                o.line(fma)
            return
        with o.unrolled("i", "FRAG_M"):
            if order is ir.FmaOrder.ROW:
                with o.unrolled("j", "FRAG_N"):
                    o.line(fma)
                return
            o.comment("fma_order: snake. Odd rows run backwards, so consecutive FMAs share a or b.")
            with o.unrolled("step", "FRAG_N"):
                o.line("const int j = i % 2 == 0 ? step : FRAG_N - 1 - step;")
                o.line(fma)

    # --- pipelines ------------------------------------------------------------------------------

    def _emit_main_loop(self) -> None:
        o = self.out
        pipeline = self.spec.pipeline
        k_tiles = "kt_end - kt_begin" if self.segmented else tile_count(self.spec, 'K', 'BK')
        o.line(f"const int k_tiles = {k_tiles};")
        if self.cp_async:
            if pipeline.stages == 1:
                self._emit_cp_async_single()
            else:
                self._emit_cp_async_pipeline()
        elif pipeline.stages == 1:
            self._emit_register_single()
        else:
            self._emit_register_double()

    def _k_tile_loop(self) -> AbstractContextManager[None]:
        unroll = self.spec.pipeline.unroll
        if unroll > 1:
            self.out.line(f"#pragma unroll {unroll}  // pipeline unroll: k-tiles per loop iteration")
        return self.out.block("for (int kt = 0; kt < k_tiles; ++kt)")

    def _emit_register_single(self) -> None:
        o = self.out
        o.comment("Single buffer: load a k-tile, wait for all threads, multiply, wait again before\n"
                  "the next tile overwrites shared memory (two barriers per k-tile).")
        self._declare_stage_registers()
        with self._k_tile_loop():
            self._emit_global_loads("kt")
            self._emit_shared_stores("0")
            o.line("__syncthreads();")
            self._emit_compute("0")
            o.line("__syncthreads();")

    def _emit_register_double(self) -> None:
        o = self.out
        o.comment("Register-staged double buffer: tile kt+1 travels global -> registers while tile kt\n"
                  "is multiplied, then registers -> the other shared stage; one barrier per k-tile.")
        self._declare_stage_registers()
        self._emit_global_loads("0")
        self._emit_shared_stores("0")
        o.line("__syncthreads();")
        with self._k_tile_loop():
            o.line("const int stage = kt % 2;")
            o.line("const bool has_next = kt + 1 < k_tiles;")
            with o.block("if (has_next)"):
                self._emit_global_loads("kt + 1")
            # Measured on the H100 (README, Performance notes): carrying the fragment double
            # buffer across k-tiles here, as the cp.async ring does, was 3% slower.
            self._emit_compute("stage")
            self._emit_register_handoff()

    def _emit_register_handoff(self) -> None:
        with self.out.block("if (has_next)"):
            self._emit_shared_stores("stage ^ 1")
        self.out.line("__syncthreads();")

    def _emit_cp_async_single(self) -> None:
        o = self.out
        o.comment("Single buffer filled by cp.async: copy, wait, multiply, wait (two barriers per k-tile).")
        with self._k_tile_loop():
            self._emit_cp_async("kt", "0")
            o.line("cp_async_commit();")
            o.line("cp_async_wait<0>();")
            o.line("__syncthreads();")
            self._emit_compute("0")
            o.line("__syncthreads();")

    def _emit_cp_async_pipeline(self) -> None:
        o = self.out
        o.comment("cp.async ring of STAGES buffers: STAGES-1 k-tiles are in flight while one is\n"
                  "multiplied. Every iteration commits one group (possibly empty) so that\n"
                  "wait<STAGES-2> always means 'the next tile has landed'. One barrier per k-tile:\n"
                  "it also tells every thread that the stage refilled next is no longer read.")
        with o.unrolled("s", "STAGES - 1"):
            with o.block("if (s < k_tiles)"):
                self._emit_cp_async("s", "s")
            o.line("cp_async_commit();")
        if self.double_fragments:
            o.line("cp_async_wait<STAGES - 2>();")
            o.line("__syncthreads();")
            self._emit_stage_pointers("0", "first")
            self._emit_fragment_loads("0", "[0]", "first")
        with self._k_tile_loop():
            if not self.double_fragments:
                self._emit_cp_async_handoff()
            o.line("const int next = kt + STAGES - 1;")
            with o.block("if (next < k_tiles)"):
                self._emit_cp_async("next", "next % STAGES")
            o.line("cp_async_commit();")
            if self.double_fragments:
                o.line("const bool has_next = kt + 1 < k_tiles;")
                self._emit_compute_with_handoff("kt % STAGES", "(kt + 1) % STAGES", self._emit_cp_async_handoff)
            else:
                self._emit_compute("kt % STAGES")

    def _emit_cp_async_handoff(self) -> None:
        self.out.line("cp_async_wait<STAGES - 2>();")
        self.out.line("__syncthreads();")

    # --- epilogue -------------------------------------------------------------------------------

    def _emit_epilogue(self) -> None:
        o = self.out
        width = self.layout.c_store_width()
        alpha_beta = self.spec.problem.epilogue is ir.Epilogue.ALPHA_BETA
        what = "C = alpha * acc + beta * C (C is not read when beta == 0)" if alpha_beta else "C = acc"
        major = self.spec.problem.c.layout.value
        o.comment(f"Epilogue: {what}; C is {major}-major, {width} float(s) per store along each "
                  f"{'row' if major == 'row' else 'column'} of C.")
        if self.segmented:
            o.comment("A share of a stream-K tile: add it to C, which the launcher set to beta * C\n"
                      "(0 for epilogue: store) before this kernel started.")
            self._emit_c_stores(guarded=False, atomic=True)
            return
        if not self.checked:
            self._emit_c_stores(guarded=False)
            return
        with o.block("if (block_inside)"):
            self._emit_c_stores(guarded=False)
        with o.block("else"):
            o.comment("Edge block: one element at a time, only inside C.")
            self._emit_c_stores(guarded=True)

    def _emit_c_stores(self, guarded: bool, atomic: bool = False) -> None:
        """Store the accumulators, walking each of a thread's lines of C (rows of row-major C,
        columns of column-major C) and storing along the line, where C is contiguous."""
        o = self.out
        width = 1 if guarded else self.layout.c_store_width()
        line_axis, along = ("m", "n") if self.spec.problem.c.layout is ir.MatrixLayout.ROW else ("n", "m")
        line_index, line_loops = _epilogue_axis(line_axis)
        _, along_loops = _epilogue_axis(along)
        repeat, micro = line_loops
        with o.unrolled(repeat, f"REPEAT_{line_axis.upper()}"):
            with o.unrolled(micro, f"MICRO_{line_axis.upper()}"):
                o.line(f"const int {line_index} = block_{line_axis} + thread_{line_axis} + {repeat} * "
                       f"REPEAT_STRIDE_{line_axis.upper()} + {micro};")
                o.line(f"const int f{line_axis} = {repeat} * MICRO_{line_axis.upper()} + {micro};")
                limit = f"if ({line_index} < {line_axis.upper()})" if guarded else None
                with o.block(limit) if limit else nullcontext():
                    o.line(f"float* const c_line = C + (size_t){line_index} * ldc + block_{along} + thread_{along};")
                    self._emit_line_stores(along, along_loops, width, guarded, atomic)

    def _emit_line_stores(self, axis: str, loops: tuple[str, str], width: int, guarded: bool,
                          atomic: bool) -> None:
        o = self.out
        repeat, micro = loops
        alpha_beta = self.spec.problem.epilogue is ir.Epilogue.ALPHA_BETA
        vtype = VECTOR_TYPES[width]
        with o.unrolled(repeat, f"REPEAT_{axis.upper()}"):
            with o.unrolled(micro, f"MICRO_{axis.upper()}", width):
                o.line(f"const int offset = {repeat} * REPEAT_STRIDE_{axis.upper()} + {micro};")
                o.line(f"const int f{axis} = {repeat} * MICRO_{axis.upper()} + {micro};")
                limit = f"if (block_{axis} + thread_{axis} + offset < {axis.upper()})" if guarded else None
                with o.block(limit) if limit else nullcontext():
                    values = [_accumulator(axis, e) for e in range(width)]
                    if alpha_beta:
                        values = [f"alpha * {v}" for v in values]
                    o.line(f"{vtype} out = {make_vector(width, values)};")
                    if atomic:
                        self._emit_atomic_add(width)
                    else:
                        self._emit_store(width, alpha_beta)

    def _emit_store(self, width: int, alpha_beta: bool) -> None:
        """c_line[offset] = out (+ beta * the old value)."""
        o, vtype = self.out, VECTOR_TYPES[width]
        if alpha_beta:
            with o.block("if (beta != 0.0f)"):
                o.line(f"const {vtype} old = {as_vector('c_line[offset]', width, const=True)};")
                for e in range(width):
                    o.line(f"{component('out', width, e)} += beta * {component('old', width, e)};")
        o.line(f"{as_vector('c_line[offset]', width)} = out;")

    def _emit_atomic_add(self, width: int) -> None:
        """c_line[offset] += out: one vector reduction where the target has it (sm_90 adds float2 and
        float4 in one instruction), one per element otherwise."""
        o = self.out
        if width > 1 and self.spec.target.sm >= 90:
            o.line(f"atomicAdd(reinterpret_cast<{VECTOR_TYPES[width]}*>(&c_line[offset]), out);")
            return
        for e in range(width):
            target = "c_line[offset]" if e == 0 else f"c_line[offset + {e}]"
            o.line(f"atomicAdd(&{target}, {component('out', width, e)});")


def _epilogue_axis(axis: str) -> tuple[str, tuple[str, str]]:
    """(name of the global index, (repeat loop variable, micro loop variable)) along m or n."""
    return ("row", ("rm", "i")) if axis == "m" else ("col", ("rn", "j"))


def _accumulator(along: str, element: int) -> str:
    """The accumulator of element `element` of a store that runs along `along` (m or n)."""
    step = f" + {element}" if element else ""
    return f"acc[fm{step}][fn]" if along == "m" else f"acc[fm][fn{step}]"


def launch_min_blocks(spec: ir.KernelSpec) -> int | None:
    """`__launch_bounds__`' second argument from the spec's budget, if any.

    A register budget R alone becomes the number of blocks that fit when each thread
    holds R registers, which makes ptxas cap registers at about R.
    """
    budget = spec.budget
    if budget.blocks_per_sm:
        return budget.blocks_per_sm
    if budget.registers:
        return max(1, blocks_for_registers(arch(spec.target.sm), budget.registers, spec.threads.threads))
    return None


# --- host launchers -----------------------------------------------------------------------------


class LauncherEmitter:
    """The host launchers: one that checks everything and launches, and thin wrappers around it.

    Batched specs: `NAME_launch_batched` checks and launches; `NAME_launch_ld` is one GEMM of it.
    Others: `NAME_launch_ld` checks and launches. `NAME_launch` passes the leading dimensions of
    contiguous operands.
    """

    def __init__(self, spec: ir.KernelSpec, variants: list[Variant], out: Emitter):
        self.spec = spec
        self.variants = variants
        self.layout = variants[0].layout
        self.out = out
        self.names = launcher_names(spec)

    def emit(self) -> None:
        o = self.out
        o.line("#ifndef __CUDACC_RTC__")
        self._emit_contract()
        self._emit_aligned_helper()
        o.line()
        if self.spec.block.stream_k:
            self._emit_stream_k_split()
            o.line()
        self._emit_checked_launch()
        o.line()
        if self.spec.problem.batched:
            self._emit_wrapper(self.names["launcher_ld"], self._ld_parameters(),
                               "A, lda, 0, B, ldb, 0, C, ldc, 0, M, N, K, 1, alpha, beta, stream")
            o.line()
        natural = ", ".join(f"{p}, {contiguous_extent(self.spec, op)}"
                            for p, op in (("A", ir.Operand.A), ("B", ir.Operand.B), ("C", ir.Operand.C)))
        self._emit_wrapper(self.names["launcher"], "const float* A, const float* B, float* C, int M, int N, int K, "
                           "float alpha, float beta, cudaStream_t stream",
                           f"{natural}, M, N, K, alpha, beta, stream", target=self.names["launcher_ld"])
        o.line("#endif")

    def _emit_contract(self) -> None:
        spec, layout = self.spec, self.layout
        lines = ["Host launchers. Each returns cudaErrorInvalidValue, and launches nothing, for a call",
                 "the kernel cannot handle:"]
        shape = "M, N, K >= 1"
        if not spec.problem.checked:
            shape = f"M, N, K positive multiples of {layout.bm}, {layout.bn}, {layout.bk} (bounds: exact)"
        if spec.problem.batched:
            shape += f"; 1 <= batch <= {MAX_BATCH}"
        lines.append(f"- {shape};")
        lines.append("- " + ", ".join(f"{leading_name(op)} >= {contiguous_extent(spec, op)}" for op in ir.Operand)
                     + " (the leading dimensions of "
                     + "/".join(spec.problem.matrix(op).layout.value for op in ir.Operand) + "-major A/B/C);")
        vectors = [op for op in ir.Operand if layout.global_vector(op) > 1]
        if vectors:
            parts = ", ".join(f"{op.value.upper()} {layout.global_vector(op)}" for op in vectors)
            fallback = ("otherwise the scalar kernel runs" if scalar_entry(self.variants)
                        else "otherwise the call is refused")
            what = "pointer, leading dimension" + (" and batch stride" if spec.problem.batched else "")
            lines.append(f"- vector accesses need {what} aligned to ({parts}) elements; {fallback}.")
        self.out.comment("\n".join(lines))

    def _emit_aligned_helper(self) -> None:
        with self.out.block(f"static bool {self.spec.name}_aligned(const void* p, long long ld, long long stride, "
                            "int elements)"):
            self.out.line("return reinterpret_cast<uintptr_t>(p) % (4u * elements) == 0 && ld % elements == 0 "
                          "&& stride % elements == 0;")

    def _emit_stream_k_split(self) -> None:
        o = self.out
        o.comment("gemmdsl/schedule.py's stream_k_split: the last wave's tiles % slots tiles go to stream-K\n"
                  f"blocks with at least {MIN_K_TILES_PER_BLOCK} k-tiles each, unless that would not shorten "
                  "the launch.")
        with o.block(f"static void {self.spec.name}_stream_k_split(long long tiles, long long k_tiles, "
                     "long long slots, int* sk_tiles, int* sk_blocks)"):
            o.line("const long long shared = tiles % slots;")
            o.line("const long long work = shared * k_tiles;")
            o.line(f"long long blocks = (work + {MIN_K_TILES_PER_BLOCK - 1}) / {MIN_K_TILES_PER_BLOCK};")
            o.line("if (blocks > slots) blocks = slots;")
            o.line(f"const bool idle_enough = (slots - shared) * 100 >= {MIN_IDLE_PERCENT} * slots;")
            o.line(f"const bool worth_it = blocks > shared && work <= {MAX_WORK}LL && idle_enough;")
            o.line("*sk_tiles = worth_it ? (int)shared : 0;")
            o.line("*sk_blocks = worth_it ? (int)blocks : 0;")

    def _emit_stream_k_launch(self, arguments: str) -> None:
        """Size the launch from the device (SMs x resident blocks). When stream-K pays: set C's shared
        tiles to beta * C, launch the stream-K kernel on them, then the plain kernel on the other
        tiles; otherwise the plain kernel on all."""
        o, spec, layout = self.out, self.spec, self.layout
        o.comment("Stream-K: how many blocks this GPU holds at once decides which tiles are shared.")
        o.line("int device = 0, sms = 0, per_sm = 0;")
        o.line("cudaError_t status = cudaGetDevice(&device);")
        o.line("if (status == cudaSuccess) "
               "status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);")
        o.line("if (status == cudaSuccess) status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, "
               f"{layout.threads}, smem_bytes);")
        o.line("if (status != cudaSuccess) return status;")
        o.line("if (per_sm < 1) return cudaErrorInvalidConfiguration;")
        o.line("int sk_tiles = 0, sk_blocks = 0;")
        o.line(f"{spec.name}_stream_k_split(blocks, K / {layout.bk}, (long long)sms * per_sm, &sk_tiles, &sk_blocks);")
        alpha_beta = spec.problem.epilogue is ir.Epilogue.ALPHA_BETA
        condition = "sk_tiles > 0 && beta != 1.0f" if alpha_beta else "sk_tiles > 0"
        beta = "beta" if alpha_beta else "0.0f"
        with o.block("if (sk_tiles == 0)"):
            o.line(f"kernel<<<dim3((unsigned)blocks), dim3({layout.threads}), smem_bytes, stream>>>({arguments});")
            o.line("return cudaGetLastError();")
        o.comment("The stream-K blocks go first: they all start together with equal work, so they also\n"
                  "finish together, and the ragged end of the launch is the plain kernel's, as without.")
        with o.block(f"if ({condition})"):
            o.line(f"{prepare_entry(spec)}<<<dim3((unsigned)sk_tiles), dim3({layout.threads}), 0, stream>>>"
                   f"(C, M, N, ldc, {beta}, sk_tiles);")
            o.line("if ((status = cudaGetLastError()) != cudaSuccess) return status;")
        o.line(f"const auto stream_k_kernel = {stream_k_entry(spec)};")
        with o.block("if (smem_bytes > 48 * 1024)"):
            o.line("status = cudaFuncSetAttribute(stream_k_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, "
                   "(int)smem_bytes);")
            o.line("if (status != cudaSuccess) return status;")
        o.line(f"stream_k_kernel<<<dim3((unsigned)sk_blocks), dim3({layout.threads}), smem_bytes, stream>>>("
               f"{arguments}, sk_tiles);")
        o.line("if ((status = cudaGetLastError()) != cudaSuccess) return status;")
        with o.block("if (blocks > sk_tiles)"):
            o.line(f"kernel<<<dim3((unsigned)(blocks - sk_tiles)), dim3({layout.threads}), smem_bytes, "
                   f"stream>>>({arguments});")

    def _ld_parameters(self) -> str:
        return ("const float* A, int lda, const float* B, int ldb, float* C, int ldc, int M, int N, int K, "
                "float alpha, float beta, cudaStream_t stream")

    def _emit_wrapper(self, name: str, parameters: str, arguments: str, target: str | None = None) -> None:
        target = target or self.names["launcher_batched"] or self.names["launcher_ld"]
        with self.out.block(f'extern "C" cudaError_t {name}({parameters})'):
            self.out.line(f"return {target}({arguments});")

    def _emit_checked_launch(self) -> None:
        o, spec, layout = self.out, self.spec, self.layout
        batched = spec.problem.batched
        if batched:
            name = self.names["launcher_batched"]
            parameters = ("const float* A, int lda, long long stride_a, const float* B, int ldb, long long stride_b, "
                          "float* C, int ldc, long long stride_c, int M, int N, int K, int batch, "
                          "float alpha, float beta, cudaStream_t stream")
        else:
            name = self.names["launcher_ld"]
            parameters = self._ld_parameters()
        with o.block(f'extern "C" cudaError_t {name}({parameters})'):
            invalid = "return cudaErrorInvalidValue;"
            o.line(f"if (M <= 0 || N <= 0 || K <= 0) {invalid}")
            o.comment("Tile coordinates (up to M + BM, N + BN, K + BK) are ints.")
            o.line(f"if (M > {MAX_INT - layout.bm} || N > {MAX_INT - layout.bn} || K > {MAX_INT - layout.bk}) "
                   f"{invalid}")
            if batched:
                o.line(f"if (batch <= 0 || batch > {MAX_BATCH}) {invalid}")
            if not spec.problem.checked:
                o.line(f"if (M % {layout.bm} != 0 || N % {layout.bn} != 0 || K % {layout.bk} != 0) {invalid}")
            bounds = " || ".join(f"{leading_name(op)} < {contiguous_extent(spec, op)}" for op in ir.Operand)
            o.line(f"if ({bounds}) {invalid}")
            o.comment("Offsets inside a tile (row * ld + col) are ints.")
            fits = " || ".join(f"{leading_name(op)} > {leading_dimension_limit(spec, op)}" for op in OPERANDS)
            o.line(f"if ({fits}) {invalid}")
            tiles = f"(long long)({tile_count(spec, 'M', str(layout.bm))}) * ({tile_count(spec, 'N', str(layout.bn))})"
            o.line(f"const long long blocks = {tiles};")
            o.line(f"if (blocks > {MAX_INT}LL) {invalid}")
            self._emit_kernel_choice()
            o.line(f"const size_t smem_bytes = {layout.smem_bytes};")
            with o.block("if (smem_bytes > 48 * 1024)"):
                o.line("const cudaError_t err = cudaFuncSetAttribute(kernel, "
                       "cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes);")
                o.line("if (err != cudaSuccess) return err;")
            arguments = ", ".join(name for _, name in kernel_parameters(spec))
            if spec.block.stream_k:
                self._emit_stream_k_launch(arguments)
            else:
                z = "(unsigned)batch" if batched else "1"
                o.line(f"kernel<<<dim3((unsigned)blocks, 1, {z}), dim3({layout.threads}), smem_bytes, stream>>>("
                       f"{arguments});")
            o.line("return cudaGetLastError();")

    def _emit_kernel_choice(self) -> None:
        """Pick the vector kernel when every vector access is aligned; else the scalar kernel or an error."""
        o, spec, layout = self.out, self.spec, self.layout
        stride = {op: f"stride_{op.value}" if spec.problem.batched else "0" for op in ir.Operand}
        tests = [f"{spec.name}_aligned({op.value.upper()}, {leading_name(op)}, {stride[op]}, "
                 f"{layout.global_vector(op)})" for op in ir.Operand if layout.global_vector(op) > 1]
        vector, scalar = self.variants[0].entry, scalar_entry(self.variants)
        if not tests:
            o.line(f"const auto kernel = {vector};")
            return
        o.line(f"const bool vector_aligned = {' && '.join(tests)};")
        if scalar is not None:
            o.line(f"const auto kernel = vector_aligned ? {vector} : {scalar};")
            return
        o.line("if (!vector_aligned) return cudaErrorInvalidValue;")
        o.line(f"const auto kernel = {vector};")


# --- the file -----------------------------------------------------------------------------------


def emit_cuda(spec: ir.KernelSpec, layout: KernelLayout, source_text: str, summary: list[str]) -> str:
    """The whole .cu file: header comment, helpers, kernels, launchers."""
    o = Emitter()
    o.comment(f"Generated by gemmdsl {__version__} from {Path(spec.span.file).name}. Do not edit: change the spec and")
    o.comment("recompile. The file is self-contained; the host launcher needs only the CUDA runtime.")
    o.comment("")
    o.comment("Spec:")
    for row in source_text.strip("\n").split("\n"):
        o.line(f"//   {row}".rstrip())
    if summary:
        o.comment("")
        o.comment("Analysis (gemmdsl check):")
        for row in summary:
            o.line(f"//   {row}")
    o.line()
    o.lines("""
#ifndef __CUDACC_RTC__
#include <cstdint>
#include <cuda_runtime.h>
#endif""")
    o.line()
    variants = kernel_variants(spec, layout)
    HelperEmitter(spec, [v.layout for v in variants], o).emit()
    for variant in variants:
        o.line()
        KernelEmitter(spec, variant, o).emit_kernel()
    if spec.block.stream_k:
        o.line()
        KernelEmitter(spec, variants[0], o).emit_prepare_kernel()
    o.line()
    LauncherEmitter(spec, variants, o).emit()
    return o.text()
