"""The host launchers of the wgmma path: the same C signatures as every other spec's, plus what TMA
needs on the host.

`NAME_launch_ld` checks the call, encodes the two tensor maps (cuTensorMapEncodeTiled, looked up
through the runtime's cudaGetDriverEntryPointByVersion, so nothing needs -lcuda), keeps them for the
next call with the same pointers, shape and leading dimensions (one cache per host thread), opts in to
the ring's shared memory and launches min(tiles, SMs) blocks (schedule: persistent) or one per tile.
"""
from __future__ import annotations

from typing import Sequence

from ... import ir
from ...abi import (MAX_BATCH, MAX_INT, contiguous_extent, fuse_arguments, fuse_parameters, grouped_parameters,
                    launcher_parameters, leading_name, outer_extent, tensor_map_type, tile_count)
from ...emitter import Emitter
from ...launch_plan import GridRule
from ...targets import SECTOR_BYTES
from ...plan import KernelPlan
from .layout import WgmmaLayout
from .pad import emit_padded_launcher
from ...emit.launcher import (emit_empty_problem, emit_kernel_launch, emit_stream_k_split, empty_problem_rule,
                             launch_contract)

# By layout.TmaBox.data_type. A TF32 spec's f32 operands travel as TFLOAT32: TMA rounds each word to
# TF32 (to nearest) on its way into shared memory. As FLOAT32 they would arrive as they are and wgmma would
# use their top 19 bits (truncation): 2.6x the error of cuBLAS TF32, where rounding gives cuBLAS's results
# bit for bit (docs/performance.md, Hopper). 3xTF32 needs the words as they are (FLOAT32) to split them.
TMA_TYPES = {"bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "f16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
             "f32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", "tf32": "CU_TENSOR_MAP_DATA_TYPE_TFLOAT32",
             "u8": "CU_TENSOR_MAP_DATA_TYPE_UINT8"}  # FP8: bytes, which wgmma reads as e4m3 or e5m2
DRIVER_VERSION = 12000  # the cuTensorMapEncodeTiled ABI asked for (CUDA 12.0's)


class TensorMapLauncher:
    def __init__(self, plan: KernelPlan, out: Emitter):
        self.plan = plan
        self.spec = plan.spec
        self.layout: WgmmaLayout = plan.layout  # type: ignore[assignment]
        self.out = out
        self.name = plan.spec.name
        self.names = plan.launch.launchers
        self.parameters = launcher_parameters(plan.spec)

    def emit(self) -> None:
        o = self.out
        o.line("#ifndef __CUDACC_RTC__  // the headers are included at the top of the file (emit.includes)")
        o.comment("\n".join(["Host launchers. Each returns cudaErrorInvalidValue, and launches nothing, for a call",
                             "the kernel cannot handle:", *launch_contract(self.plan),
                             *empty_problem_rule(self.plan.launch.entries.scale_c)]))
        self._emit_encoder()
        o.line()
        self._emit_map()
        o.line()
        self._emit_cache()
        o.line()
        if self.layout.stream_k:
            emit_stream_k_split(self.name, o, min_saved_k_tiles=0, aligned=True)  # one persistent launch: no launches to pay for
            o.line()
            self._emit_workspace()
            o.line()
        self.emit_launch()
        o.line()
        self.emit_wrappers()
        if self.plan.launch.entries.pad_operands is not None:
            o.line()
            emit_padded_launcher(self.plan, o)
        o.line("#endif")

    def emit_wrappers(self) -> None:
        """The launchers that pass on to the one that checks and launches: NAME_launch (the operands' natural
        leading dimensions) and, for a batch, NAME_launch_ld (a batch of one)."""
        o = self.out
        if self.layout.batched:
            with o.block(f'extern "C" cudaError_t {self.names["launcher_ld"]}({self.parameters["launcher_ld"]})'):
                o.line(f"return {self.names['launcher_batched']}(A, lda, 0, B, ldb, 0, C, ldc, 0, M, N, K, 1, "
                       f"{fuse_arguments(self.spec)}alpha, beta, stream);")
            o.line()
        natural = ", ".join(f"{p}, {contiguous_extent(self.spec, op)}"
                            for p, op in (("A", ir.Operand.A), ("B", ir.Operand.B), ("C", ir.Operand.C)))
        groups = "".join(f"{name}, " for _, name in grouped_parameters(self.spec))
        with o.block(f'extern "C" cudaError_t {self.names["launcher"]}({self.parameters["launcher"]})'):
            o.line(f"return {self.names['launcher_ld']}({natural}, M, N, K, {groups}{fuse_arguments(self.spec)}alpha, "
                   "beta, stream);")

    def _emit_encoder(self) -> None:
        o, name = self.out, self.name
        o.comment("cuTensorMapEncodeTiled, from the driver through the runtime (CUDA 12.5+), found once.")
        o.line(f"typedef CUresult (*{name}_encode_tiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, "
               "const cuuint64_t*,")
        o.line("    const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,")
        o.line("    CUtensorMapL2promotion, CUtensorMapFloatOOBfill);")
        o.line()
        with o.block(f"static cudaError_t {name}_encoder({name}_encode_tiled* encode)"):
            o.line(f"static {name}_encode_tiled found = nullptr;  // every thread finds the same function")
            with o.block("if (found == nullptr)"):
                o.line("void* function = nullptr;")
                o.line("cudaDriverEntryPointQueryResult query;")
                o.line('const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, '
                       f"{DRIVER_VERSION},")
                o.line("                                                            cudaEnableDefault, &query);")
                o.line("if (err != cudaSuccess) return err;")
                o.line("if (query != cudaDriverEntryPointSuccess || function == nullptr) return cudaErrorNotSupported;")
                o.line(f"found = reinterpret_cast<{name}_encode_tiled>(function);")
            o.line("*encode = found;")
            o.line("return cudaSuccess;")

    def _emit_map(self) -> None:
        o, name, batched = self.out, self.name, self.layout.three_d_maps
        rank = 3 if batched else 2
        o.comment("A matrix as it lies in global memory (dimension 0 contiguous, rows `ld` elements apart) as a 2-D\n"
                  "tensor map with a box_inner x box_outer box in the 128-byte swizzle; loads outside the matrix read "
                  "zeros,\nstores outside it are dropped."
                  + ("\nA batch of them, `stride` elements apart, is a third dimension (boxes of one matrix)." if batched
                     else ""))
        batch_parameters = "long long stride, int batch, " if batched else ""
        with o.block(f"static cudaError_t {name}_tensor_map_of({tensor_map_type(self.spec)}* out, "
                     f"{name}_encode_tiled encode, CUtensorMapDataType type, unsigned element_bytes, const void* base, "
                     f"int inner, int outer, int ld, {batch_parameters}unsigned box_inner, unsigned box_outer)"):
            o.line(f"static_assert(sizeof(CUtensorMap) == sizeof({tensor_map_type(self.spec)}), "
                   '"CUtensorMap is 128 bytes");')
            o.line("CUtensorMap map;")
            if batched:
                o.line("const cuuint64_t dims[3] = {(cuuint64_t)inner, (cuuint64_t)outer, (cuuint64_t)batch};")
                o.line("const cuuint64_t strides[2] = {(cuuint64_t)ld * element_bytes, (cuuint64_t)stride * "
                       "element_bytes};  // bytes")
                o.line("const cuuint32_t box[3] = {box_inner, box_outer, 1};")
                o.line("const cuuint32_t steps[3] = {1, 1, 1};")
            else:
                o.line("const cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer};")
                o.line("const cuuint64_t strides[1] = {(cuuint64_t)ld * element_bytes};  // bytes; the inner stride is "
                       "the element")
                o.line("const cuuint32_t box[2] = {box_inner, box_outer};")
                o.line("const cuuint32_t steps[2] = {1, 1};")
            o.comment(f"L2 promotion (tensor_maps.l2_promotion): 256-byte fetches where rows start on a {SECTOR_BYTES}-byte "
                      "sector, 128-byte\nones where they start 16 bytes into one.")
            o.line(f"const bool off_sector = reinterpret_cast<uintptr_t>(base) % {SECTOR_BYTES} != 0 || "
                   f"(long long)ld * element_bytes % {SECTOR_BYTES} != 0;")
            o.line(f"const CUresult result = encode(&map, type, {rank}, const_cast<void*>(base), dims, strides, box, "
                   "steps,")
            o.line("    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,")
            o.line("    off_sector ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B : CU_TENSOR_MAP_L2_PROMOTION_L2_256B,")
            o.line("    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);")
            o.line("if (result != CUDA_SUCCESS) return cudaErrorInvalidValue;")
            o.line("std::memcpy(out, &map, sizeof map);")
            o.line("return cudaSuccess;")

    def _emit_cache(self) -> None:
        o, name, layout = self.out, self.name, self.layout
        map_type = tensor_map_type(self.spec)
        staged = layout.c_box is not None
        batched = layout.three_d_maps
        c_key = " && cache.c == C && cache.ldc == ldc" if staged else ""
        if batched:
            c_key += (" && cache.stride_a == stride_a && cache.stride_b == stride_b && cache.batch == batch"
                      + (" && cache.stride_c == stride_c" if staged else ""))
        o.comment("The last call's tensor maps, per host thread: encoding costs about a microsecond, and a benchmark\n"
                  "or a training loop calls with the same operands again and again.")
        with o.block(f"struct {name}_map_cache", close="};"):
            o.line("const void* a = nullptr;")
            o.line("const void* b = nullptr;")
            if staged:
                o.line("const void* c = nullptr;")
            o.line("int m = 0, n = 0, k = 0, lda = 0, ldb = 0;" if not staged
                   else "int m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;")
            if batched:
                o.line("long long stride_a = 0, stride_b = 0, stride_c = 0;")
                o.line("int batch = 0;")
            o.line(f"{map_type} map_a, map_b;" if not staged else f"{map_type} map_a, map_b, map_c;")
        o.line()
        stride = {op: ", long long stride_" + op if batched else "" for op in "abc"}
        c_parameters = f"const void* C, int ldc{stride['c']}, " if staged else ""
        batch = ", int batch" if batched else ""
        with o.block(f"static cudaError_t {name}_tensor_maps(const void* A, int lda{stride['a']}, const void* B, "
                     f"int ldb{stride['b']}, {c_parameters}int M, int N, int K{batch}, const {name}_map_cache** maps)"):
            o.line(f"static thread_local {name}_map_cache cache;")
            o.line("*maps = &cache;")
            o.line("if (cache.a == A && cache.b == B && cache.m == M && cache.n == N && cache.k == K && "
                   f"cache.lda == lda && cache.ldb == ldb{c_key})")
            o.line("    return cudaSuccess;")
            o.line(f"{name}_encode_tiled encode;")
            o.line(f"cudaError_t err = {name}_encoder(&encode);")
            for operand, pointer in ((ir.Operand.A, "A"), (ir.Operand.B, "B")):
                self._emit_encode(layout.boxes[operand], pointer, "err == cudaSuccess")
            if staged:
                align = layout.global_alignment_bytes
                o.comment("C's map only where TMA can store C; the kernel tests the same condition and stores directly "
                          "otherwise.")
                size = layout.c_box.element_bytes
                batch_rule = f" && stride_c * {size} % {align} == 0" if layout.batched else ""
                o.line(f"const bool staged = reinterpret_cast<uintptr_t>(C) % {align} == 0 && "
                       f"(long long)ldc * {size} % {align} == 0 && (long long)N * {size} % {align} == 0{batch_rule};")
                o.line("if (!staged) std::memset(&cache.map_c, 0, sizeof cache.map_c);")
                self._emit_encode(layout.c_box, "C", "err == cudaSuccess && staged")
            with o.block("if (err != cudaSuccess)"):
                o.line("cache.a = nullptr;  // nothing valid is cached")
                o.line("return err;")
            batch_fields = ["stride_a = stride_a", "stride_b = stride_b", *(["stride_c = stride_c"] if staged else []),
                            "batch = batch"] if batched else []
            for field in ("a = A", "b = B", *(["c = C"] if staged else []), "m = M", "n = N", "k = K", "lda = lda",
                          "ldb = ldb", *(["ldc = ldc"] if staged else []), *batch_fields):
                o.line(f"cache.{field};")
            o.line("return cudaSuccess;")

    def _emit_encode(self, box, pointer: str, condition: str) -> None:
        operand = box.operand.value
        batch = f"stride_{operand}, {self.map_batch(box.operand)}, " if self.layout.three_d_maps else ""
        self.out.line(f"if ({condition}) err = {self.name}_tensor_map_of(&cache.map_{operand}, encode, "
                      f"{TMA_TYPES[box.data_type]}, {box.element_bytes}, {pointer}, {', '.join(box.dims)}, "
                      f"ld{operand}, {batch}{box.inner}, {box.outer});")

    def map_batch(self, operand: ir.Operand) -> str:
        """The extent of `operand`'s map's third dimension, as C: the batch; for a grouped spec B's groups, and one
        matrix of A and of C (paths/wgmma/grouped.py)."""
        return "batch" if self.layout.batched or operand is ir.Operand.B else "1"

    def _emit_workspace(self) -> None:
        o, name, workspace = self.out, self.name, self.plan.launch.workspace
        o.comment(f"Stream-K's workspace: a slot of BM x BN partial sums ({workspace.partial_bytes} bytes) per SM, then a flag "
                  f"per SM and consumer\n(zero between launches: the kernel lowers every flag it raises). One per "
                  "device and stream, allocated\nstream-ordered by the first call that shares tiles and kept for the "
                  "later ones: launches on one stream\nrun in order and may share it, launches on two streams get two.")
        with o.block(f"static cudaError_t {name}_workspace(int device, cudaStream_t stream, int sms, float** partials, "
                     "unsigned** flags)"):
            with o.block("struct Workspace", close="};"):
                o.line("int device;")
                o.line("cudaStream_t stream;")
                o.line("void* memory;")
            o.line("static std::mutex lock;")
            o.line("static std::vector<Workspace> kept;")
            o.line(f"const size_t partial_bytes = (size_t)sms * {workspace.partial_bytes};")
            o.line(f"const size_t flag_bytes = (size_t)sms * {workspace.consumers} * sizeof(unsigned);")
            o.line("std::lock_guard<std::mutex> guard(lock);")
            o.line("void* memory = nullptr;")
            o.line("for (const Workspace& w : kept)")
            o.line("    if (w.device == device && w.stream == stream) memory = w.memory;")
            with o.block("if (memory == nullptr)"):
                o.line("cudaError_t err = cudaMallocAsync(&memory, partial_bytes + flag_bytes, stream);")
                o.line("if (err == cudaSuccess) err = cudaMemsetAsync(static_cast<char*>(memory) + partial_bytes, 0, "
                       "flag_bytes, stream);")
                o.line("if (err != cudaSuccess) return err;")
                o.line("kept.push_back({device, stream, memory});")
            o.line("*partials = static_cast<float*>(memory);")
            o.line("*flags = reinterpret_cast<unsigned*>(static_cast<char*>(memory) + partial_bytes);")
            o.line("return cudaSuccess;")

    def _emit_workspace_call(self) -> None:
        """The workspace, when tiles are shared (after the split: `sk_tiles`)."""
        o = self.out
        o.line("float* partials = nullptr;")
        o.line("unsigned* flags = nullptr;")
        with o.block("if (sk_tiles > 0)"):
            o.line(f"status = {self.name}_workspace(device, stream, wave_sms, &partials, &flags);")
            o.line("if (status != cudaSuccess) return status;")

    def _emit_batch_strides(self, invalid: str) -> None:
        """A batch's strides TMA can step by (A's and B's positive multiples of 16 bytes) and a positive one for C;
        a single GEMM's strides are not read, and it gets its own matrix's extent (TMA wants one that fits a whole
        matrix)."""
        o, spec = self.out, self.spec
        with o.block("if (batch == 1)"):
            for op in ir.Operand:
                o.line(f"stride_{op.value} = (long long){leading_name(op)} * {outer_extent(spec, op)};")
        align = self.layout.global_alignment_bytes
        tests = " || ".join(f"stride_{op} <= 0 || stride_{op} * {spec.problem.matrix(operand).dtype.bytes} % {align} != 0"
                            for op, operand in (("a", ir.Operand.A), ("b", ir.Operand.B)))
        o.comment("Each GEMM writes its own C (and the kernel's staged stores step C's map by stride_c).")
        o.line(f"if ({tests} || stride_c <= 0) {invalid}")

    def _emit_extent_checks(self, invalid: str, first: str = "", refusals: Sequence[str] = ()) -> None:
        """What every launcher refuses first: negative extents (or `first`'s further conditions, and the
        `refusals` lines), tile coordinates past an int, leading dimensions below the contiguous extents;
        then an empty problem's early return."""
        o, spec = self.out, self.spec
        bm, bn, bk = self.plan.launch.block_tile
        o.line(f"if (M < 0 || N < 0 || K < 0{first}) {invalid}")
        for line in refusals:
            o.line(line)
        o.comment("Tile coordinates (up to M + BM, N + BN, K + BK) are ints.")
        o.line(f"if (M > {MAX_INT - bm} || N > {MAX_INT - bn} || K > {MAX_INT - bk}) {invalid}")
        bounds = " || ".join(f"{leading_name(op)} < {contiguous_extent(spec, op)}" for op in ir.Operand)
        o.line(f"if ({bounds}) {invalid}")
        emit_empty_problem(self.plan, o)

    def _emit_kernel_smem(self) -> None:
        """`kernel`, the vector entry, allowed its dynamic shared memory (`smem_bytes`) past the 48 KiB default."""
        o, launch = self.out, self.plan.launch
        o.line(f"const auto kernel = {launch.entries.vector};")
        o.line(f"const size_t smem_bytes = {launch.smem_bytes};")
        o.line("err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes);")
        o.line("if (err != cudaSuccess) return err;")

    def _emit_tma_alignment_checks(self, invalid: str, note: str = "") -> None:
        """TMA's rule for A and B: 16-byte aligned addresses and row strides (`note` ends the comment)."""
        o, layout = self.out, self.layout
        o.comment(f"TMA reads A and B: their addresses and row strides must be multiples of "
                  f"{layout.global_alignment_bytes} bytes ({layout.ld_multiple} elements){note}.")
        o.line(f"if (reinterpret_cast<uintptr_t>(A) % {layout.global_alignment_bytes} != 0 || "
               f"reinterpret_cast<uintptr_t>(B) % {layout.global_alignment_bytes} != 0) {invalid}")
        o.line(f"if (lda % {layout.ld_multiple} != 0 || ldb % {layout.ld_multiple} != 0) {invalid}")

    def emit_launch(self) -> None:
        o, spec, layout, launch = self.out, self.spec, self.layout, self.plan.launch
        bm, bn, bk = launch.block_tile
        invalid = "return cudaErrorInvalidValue;"
        key = "launcher_batched" if layout.batched else "launcher_ld"
        with o.block(f'extern "C" cudaError_t {self.names[key]}({self.parameters[key]})'):
            self._emit_extent_checks(invalid, refusals=[f"if (batch <= 0 || batch > {MAX_BATCH}) {invalid}"]
                                     if layout.batched else [])
            if layout.batched:
                self._emit_batch_strides(invalid)
            if not spec.problem.checked:
                o.line(f"if (M % {bm} != 0 || N % {bn} != 0 || K % {bk} != 0) {invalid}")
            self._emit_tma_alignment_checks(invalid)
            tiles = " * ".join(f"(long long)({tile_count(spec, extent, str(size))})"
                               for extent, size in (("M", bm), ("N", bn)))
            o.line(f"const long long tiles = {tiles}{' * batch' if layout.batched else ''};")
            o.line(f"if (tiles > {MAX_INT}LL) {invalid}")
            if launch.grid_rule is not GridRule.BATCH_TILES:
                o.comment("Persistent: one wave, one block per SM of this device (the kernel's ring and registers\n"
                          "allow one per SM); each walks tiles blockIdx.x, + gridDim.x, ...")
                o.line("int device = 0, sms = 0;")
                o.line("cudaError_t status = cudaGetDevice(&device);")
                o.line("if (status == cudaSuccess) "
                       "status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);")
                o.line("if (status != cudaSuccess) return status;")
            if launch.grid_rule is GridRule.PERSISTENT_STREAM_K:
                o.comment("Stream-K: the last wave's tiles share their k-tiles among up to one block per SM, which "
                          "then walk the\nother tiles (LaunchPlan.persistent_grid_rule).")
            launch.persistent_grid_rule(f"{self.name}_stream_k_split").render_inline(o)
            if launch.grid_rule is GridRule.PERSISTENT_STREAM_K:
                self._emit_workspace_call()
            o.line(f"const {self.name}_map_cache* maps = nullptr;")
            batched = layout.batched
            stride = {op: ", stride_" + op if batched else "" for op in "abc"}
            c_arguments = f"C, ldc{stride['c']}, " if layout.c_box is not None else ""
            o.line(f"cudaError_t err = {self.name}_tensor_maps(A, lda{stride['a']}, B, ldb{stride['b']}, {c_arguments}"
                   f"M, N, K{', batch' if batched else ''}, &maps);")
            o.line("if (err != cudaSuccess) return err;")
            self._emit_kernel_smem()
            c_map = "maps->map_c, " if layout.c_box is not None else ""
            stream_k = ", sk_tiles, sk_blocks, partials, flags" if layout.stream_k else ""
            batch = ", batch, stride_c" if batched else ""
            fuse = "".join(f", {name}" for _, name in fuse_parameters(self.spec))
            emit_kernel_launch(o, launch, "kernel", "dim3((unsigned)blocks)", "smem_bytes",
                               f"maps->map_a, maps->map_b, {c_map}C, M, N, K, ldc, alpha, beta{fuse}{batch}{stream_k}")
            o.line("return cudaGetLastError();")
