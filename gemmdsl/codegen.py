"""Codegen stage: KernelSpec + KernelLayout -> one self-contained CUDA C file.

The kernel body is emitted by walking the spec once, section by section; every
index comes from `KernelLayout` as an `Expr` and is rendered here, so what the
analysis passes evaluate is exactly what the kernel computes. The host launcher
never changes shape, so it is a template with named placeholders.
"""
from __future__ import annotations

from pathlib import Path
from string import Template
from typing import Callable

from . import __version__, ir
from .emitter import Emitter
from .expr import Expr, Var
from .layout import KernelLayout, widest_dividing

VECTOR_TYPES = {1: "float", 2: "float2", 4: "float4"}
COMPONENTS = ("x", "y", "z", "w")
OPERANDS = (ir.Operand.A, ir.Operand.B)


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


class KernelEmitter:
    """Emits the `__global__` kernel of one spec."""

    def __init__(self, spec: ir.KernelSpec, layout: KernelLayout):
        self.spec = spec
        self.layout = layout
        self.out = Emitter()
        self.double_fragments = spec.pipeline.fragments is ir.FragmentBuffering.DOUBLE
        self.cp_async = spec.pipeline.copy is ir.CopyMode.CP_ASYNC

    @property
    def entry(self) -> str:
        return f"{self.spec.name}_kernel"

    # --- helpers emitted before the kernel ------------------------------------------------

    def emit_helpers(self) -> None:
        o = self.out
        o.comment("Shared-memory layouts: element offset of (m or n, k) within one pipeline stage.")
        for operand in OPERANDS:
            geometry = self.layout.smem[operand]
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
        """Vector widths (elements) of the shared-memory loads or stores this kernel issues."""
        return sorted({a.width for a in self.layout.smem_accesses() if a.op == op})

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
        widths = sorted({self.layout.store_width(op) for op in OPERANDS})
        for width in widths:
            size = 4 * width
            cache = "cg" if size == 16 else "ca"
            with o.block(f"static __device__ __forceinline__ void cp_async_{size}(float* smem_dst, "
                         f"const float* gmem_src)"):
                o.line(f'asm volatile("cp.async.{cache}.shared.global [%0], [%1], {size};\\n" '
                       f':: "r"(smem_address(smem_dst)), "l"(gmem_src));')
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

    # --- the kernel -------------------------------------------------------------------------

    def emit_kernel(self) -> None:
        o = self.out
        spec, layout = self.spec, self.layout
        bounds = f"{layout.threads}"
        min_blocks = launch_min_blocks(spec)
        if min_blocks:
            bounds += f", {min_blocks}"
        o.line(f'extern "C" __global__ void __launch_bounds__({bounds}) {self.entry}(')
        o.line("    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,")
        o.line("    int M, int N, int K, float alpha, float beta)")
        with o.block(""):
            self._emit_constants()
            o.line()
            self._emit_raster()
            o.line()
            self._emit_coordinates()
            o.line()
            self._emit_accumulators()
            o.line()
            self._emit_main_loop()
            o.line()
            self._emit_epilogue()

    def _emit_constants(self) -> None:
        o, spec, layout = self.out, self.spec, self.layout
        t = spec.threads
        o.comment(f"Block tile {spec.block.m}x{spec.block.n}x{spec.block.k}; {layout.threads} threads "
                  f"({t.warps} warps of {t.lanes} {t.lane_order.value} lanes); "
                  f"each thread owns {t.fragment} of C.")
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

    def _emit_raster(self) -> None:
        o = self.out
        raster = self.spec.block.raster
        o.comment(f"Rasterization ({raster}): which C tile this block computes.")
        if raster.kind is ir.RasterKind.ROW:
            o.line("const int tiles_n = N / BN;")
            o.line("const int tile_m = blockIdx.x / tiles_n;")
            o.line("const int tile_n = blockIdx.x % tiles_n;")
        elif raster.kind is ir.RasterKind.COL:
            o.line("const int tiles_m = M / BM;")
            o.line("const int tile_m = blockIdx.x % tiles_m;")
            o.line("const int tile_n = blockIdx.x / tiles_m;")
        else:
            o.comment(f"Groups of {raster.group} tile rows are walked column by column, so blocks that\n"
                      "run together share rows of A and columns of B in L2.")
            o.line("const int tiles_m = M / BM;")
            o.line("const int tiles_n = N / BN;")
            o.line(f"const int group_size = {raster.group};")
            o.line("const int blocks_per_group = group_size * tiles_n;")
            o.line("const int first_tile_m = (blockIdx.x / blocks_per_group) * group_size;")
            o.line("const int group_rows = min(tiles_m - first_tile_m, group_size);")
            o.line("const int tile_m = first_tile_m + (blockIdx.x % blocks_per_group) % group_rows;")
            o.line("const int tile_n = (blockIdx.x % blocks_per_group) / group_rows;")
        o.line("const int block_m = tile_m * BM;")
        o.line("const int block_n = tile_n * BN;")

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

    def _source_pointer(self, operand: ir.Operand, tile: str) -> str:
        """Start of k-tile `tile`'s slice of A or B in global memory (row-major)."""
        if operand is ir.Operand.A:
            return f"A + (size_t)block_m * K + (size_t){paren(tile)} * BK"
        return f"B + (size_t){paren(tile)} * BK * N + block_n"

    def _global_offset(self, operand: ir.Operand, row: Expr, col: Expr) -> str:
        leading = Var("K") if operand is ir.Operand.A else Var("N")
        return (row * leading + col).render()

    def _stage_registers(self, operand: ir.Operand) -> str:
        return f"{operand.value}_stage"

    def _declare_stage_registers(self) -> None:
        for operand in OPERANDS:
            vector = self.spec.load(operand).vector
            count = len(self.layout.global_chunks(operand))
            self.out.line(f"{VECTOR_TYPES[vector]} {self._stage_registers(operand)}[{count}];")

    def _emit_global_loads(self, tile: str) -> None:
        """Global -> registers for k-tile `tile`."""
        o = self.out
        for operand in OPERANDS:
            vector = self.spec.load(operand).vector
            chunks = self.layout.global_chunks(operand)
            src = f"{operand.value}_src"
            o.line(f"const float* {src} = {self._source_pointer(operand, tile)};")
            for chunk in chunks:
                address = f"{src}[{self._global_offset(operand, chunk.row, chunk.col)}]"
                o.line(f"{self._stage_registers(operand)}[{chunk.index}] = {as_vector(address, vector, const=True)};")

    def _emit_shared_stores(self, stage: str) -> None:
        """Registers -> shared memory stage `stage`."""
        o = self.out
        for operand in OPERANDS:
            geometry = self.layout.smem[operand]
            vector = self.spec.load(operand).vector
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
        o = self.out
        for operand in OPERANDS:
            geometry = self.layout.smem[operand]
            vector = self.spec.load(operand).vector
            width = self.layout.store_width(operand)
            src = f"{operand.value}_src"
            dst = f"{operand.value}_dst"
            o.line(f"const float* {src} = {self._source_pointer(operand, tile)};")
            o.line(f"float* const {dst} = {stage_base(operand, stage)};")
            for chunk in self.layout.global_chunks(operand):
                for element in range(0, vector, width):
                    mn, k = self.layout.chunk_tile_coords(operand, chunk, element)
                    col = chunk.col + element
                    source = f"{src} + {self._global_offset(operand, chunk.row, col)}"
                    o.line(f"cp_async_{4 * width}({dst} + {geometry.offset(mn, k).render()}, {source});")

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
        with o.unrolled("i", "FRAG_M"):
            with o.unrolled("j", "FRAG_N"):
                o.line(f"acc[i][j] = fmaf(a_frag{buffer}[i], b_frag{buffer}[j], acc[i][j]);")

    # --- pipelines ------------------------------------------------------------------------------

    def _emit_main_loop(self) -> None:
        o = self.out
        pipeline = self.spec.pipeline
        o.line("const int k_tiles = K / BK;")
        if self.cp_async:
            if pipeline.stages == 1:
                self._emit_cp_async_single()
            else:
                self._emit_cp_async_pipeline()
        elif pipeline.stages == 1:
            self._emit_register_single()
        else:
            self._emit_register_double()

    def _emit_register_single(self) -> None:
        o = self.out
        o.comment("Single buffer: load a k-tile, wait for all threads, multiply, wait again before\n"
                  "the next tile overwrites shared memory (two barriers per k-tile).")
        self._declare_stage_registers()
        with o.block("for (int kt = 0; kt < k_tiles; ++kt)"):
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
        with o.block("for (int kt = 0; kt < k_tiles; ++kt)"):
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
        with o.block("for (int kt = 0; kt < k_tiles; ++kt)"):
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
        with o.block("for (int kt = 0; kt < k_tiles; ++kt)"):
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
        width = widest_dividing(self.spec.threads.micro.n)
        alpha_beta = self.spec.problem.epilogue is ir.Epilogue.ALPHA_BETA
        what = "C = alpha * acc + beta * C (C is not read when beta == 0)" if alpha_beta else "C = acc"
        o.comment(f"Epilogue: {what}, {width} floats per store.")
        vtype = VECTOR_TYPES[width]
        with o.unrolled("rm", "REPEAT_M"):
            with o.unrolled("i", "MICRO_M"):
                o.line("const int row = block_m + thread_m + rm * REPEAT_STRIDE_M + i;")
                o.line("float* const c_row = C + (size_t)row * N + block_n + thread_n;")
                o.line("const float* const acc_row = acc[rm * MICRO_M + i];")
                with o.unrolled("rn", "REPEAT_N"):
                    with o.unrolled("j", "MICRO_N", width):
                        o.line("const int col = rn * REPEAT_STRIDE_N + j;")
                        o.line("const int f = rn * MICRO_N + j;")
                        values = [f"acc_row[f + {e}]" if e else "acc_row[f]" for e in range(width)]
                        if alpha_beta:
                            values = [f"alpha * {v}" for v in values]
                        o.line(f"{vtype} out = {self._make_vector(width, values)};")
                        if alpha_beta:
                            with o.block("if (beta != 0.0f)"):
                                o.line(f"const {vtype} old = {as_vector('c_row[col]', width, const=True)};")
                                for e in range(width):
                                    o.line(f"{component('out', width, e)} += beta * {component('old', width, e)};")
                        o.line(f"{as_vector('c_row[col]', width)} = out;")

    @staticmethod
    def _make_vector(width: int, values: list[str]) -> str:
        return values[0] if width == 1 else f"make_{VECTOR_TYPES[width]}({', '.join(values)})"


def launch_min_blocks(spec: ir.KernelSpec) -> int | None:
    """`__launch_bounds__`' second argument from the spec's budget, if any.

    A register budget R alone becomes the number of blocks that fit when each thread
    holds R registers, which makes ptxas cap registers at about R.
    """
    budget = spec.budget
    if budget.blocks_per_sm:
        return budget.blocks_per_sm
    if budget.registers:
        per_block = -(-budget.registers // 8) * 8 * spec.threads.threads
        return max(1, 65536 // per_block)
    return None


LAUNCHER = Template('''\
#ifndef __CUDACC_RTC__
// Host launcher: checks the shape and alignment this kernel needs, then launches it.
// Returns cudaErrorInvalidValue (and launches nothing) for shapes it cannot handle:
// M, N, K must be positive multiples of ${bm}, ${bn}, ${bk}; A, B, C must be 16-byte aligned.
extern "C" cudaError_t ${name}_launch(const float* A, const float* B, float* C, int M, int N, int K,
                                      float alpha, float beta, cudaStream_t stream)
{
    if (M <= 0 || N <= 0 || K <= 0) return cudaErrorInvalidValue;
    if (M % ${bm} != 0 || N % ${bn} != 0 || K % ${bk} != 0) return cudaErrorInvalidValue;
    if ((reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(B) | reinterpret_cast<uintptr_t>(C)) % 16 != 0)
        return cudaErrorInvalidValue;
    const long long blocks = (long long)(M / ${bm}) * (N / ${bn});
    if (blocks > 2147483647LL) return cudaErrorInvalidValue;
    const size_t smem_bytes = ${smem_bytes};
    if (smem_bytes > 48 * 1024) {
        const cudaError_t err = cudaFuncSetAttribute(${name}_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     (int)smem_bytes);
        if (err != cudaSuccess) return err;
    }
    ${name}_kernel<<<dim3((unsigned)blocks), dim3(${threads}), smem_bytes, stream>>>(A, B, C, M, N, K, alpha, beta);
    return cudaGetLastError();
}
#endif
''')


def emit_cuda(spec: ir.KernelSpec, layout: KernelLayout, source_text: str, summary: list[str]) -> str:
    """The whole .cu file: header comment, helpers, kernel, launcher."""
    kernel = KernelEmitter(spec, layout)
    o = kernel.out
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
    kernel.emit_helpers()
    o.line()
    kernel.emit_kernel()
    o.line()
    launcher = LAUNCHER.substitute(name=spec.name, bm=layout.bm, bn=layout.bn, bk=layout.bk,
                                   smem_bytes=layout.smem_bytes, threads=layout.threads)
    return o.text() + launcher
