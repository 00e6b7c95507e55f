"""The host launchers: the plan's LaunchPlan as C.

They check every argument the kernels cannot handle, choose the vector or the scalar kernel,
opt in to more dynamic shared memory where needed and launch (for stream-K: two kernels after
preparing C). The Python runtime (runtime/) makes the same decisions from the same plan metadata.
"""
from __future__ import annotations

import textwrap

from .. import ir
from ..abi import (MAX_BATCH, MAX_INT, contiguous_extent, fuse_arguments, launcher_parameters,
                   leading_name, scale_c_parameters, tile_count)
from ..emitter import Emitter
from ..fuse_ops.kinds import matrix_offset
from ..launch_plan import SCALE_C_GRID, SCALE_C_THREADS, LaunchPlan, aligned_helper
from ..rule import render_func
from ..plan import KernelPlan
from ..schedule import INTERIOR_MIN_WAVES_PER_STRIP, LAUNCHED_MIN_SAVED_K_TILES, interior_rules, stream_k_split_rule
from .ctext import OPERANDS, paren


def launch_contract(plan: KernelPlan) -> list[str]:
    """The calls the launchers refuse with cudaErrorInvalidValue, one `- ...` line per rule: for the
    .cu's comment above the launchers and for the header's."""
    spec, launch = plan.spec, plan.launch
    vector = launch.requirements.vector_elements
    lines = [shape_rule(spec, None if spec.problem.checked else launch.block_tile), leading_dimension_rule(spec)]
    vectors = [op for op in ir.Operand if vector[op.value] > 1]
    own = plan.path.launch_contract(plan)
    if own is not None:
        lines += own
    elif vectors:
        parts = ", ".join(f"{op.value.upper()} {vector[op.value]}" for op in vectors)
        fallback = "otherwise the scalar kernel runs" if launch.entries.scalar else "otherwise the call is refused"
        if launch.entries.narrow:
            rungs = "; ".join(f"{narrow.width_bytes} bytes: "
                              + ", ".join(f"{op.value.upper()} {narrow.vector_elements[op.value]}" for op in ir.Operand)
                              for narrow in launch.entries.narrow)
            fallback = f"otherwise the widest narrow kernel the operands are aligned for ({rungs}), {fallback}"
        what = "pointer, leading dimension" + (" and batch stride" if spec.problem.batched else "")
        lines.append(f"- vector accesses need {what} aligned to ({parts}) elements; {fallback}.")
    return lines


def refuses_misaligned(plan: KernelPlan) -> bool:
    """Whether the launchers refuse operands misaligned for the vector accesses: no kernel with
    one-element accesses to run instead (bounds: exact, wgmma)."""
    vector = plan.launch.requirements.vector_elements
    return plan.launch.entries.scalar is None and any(elements > 1 for elements in vector.values())


def shape_rule(spec: ir.KernelSpec, exact_tile: tuple[int, int, int] | None) -> str:
    """The contract's line on M, N, K (and the batch): multiples of `exact_tile`, or with None (checked
    bounds, a kernel family) any shape; 0 is an empty problem (empty_problem_rule)."""
    shape = "M, N, K >= 0"
    if exact_tile is not None:
        bm, bn, bk = exact_tile
        shape = f"M, N, K >= 0, multiples of {bm}, {bn}, {bk} unless one is 0 (bounds: exact)"
    if spec.problem.batched:
        shape += f"; 1 <= batch <= {MAX_BATCH}"
    return f"- {shape};"


def empty_problem_rule(scale_c: str) -> list[str]:
    """What the launchers do with an empty problem, as lines of a comment; `scale_c` the K = 0 kernel."""
    return textwrap.wrap("An empty problem succeeds, as in BLAS and PyTorch: M or N = 0 launches nothing (C has no "
                         "elements); K = 0 sets C to the epilogue of a zero accumulator, C = beta * C (0 where beta "
                         f"is 0), then the fuse chain if any, with {scale_c} alone; neither needs the tile's "
                         "multiples or the operands' alignment.", 100)


def emit_empty_problem(plan: KernelPlan, o: Emitter) -> None:
    """A launcher's empty problem (empty_problem_rule), after the checks on the arguments and before those that
    only the GEMM kernels need (the tile's multiples, the operands' alignment)."""
    spec, launch = plan.spec, plan.launch
    batched = spec.problem.batched
    o.comment("An empty problem: M or N = 0 leaves C alone; K = 0 is the epilogue of zero accumulators.")
    o.line("if (M == 0 || N == 0) return cudaSuccess;")
    with o.block("if (K == 0)"):
        SCALE_C_GRID.render_inline(o)
        beta = "beta" if spec.problem.epilogue is ir.Epilogue.ALPHA_BETA else "0.0f"
        arguments = ", ".join(beta if name == "beta" else name for _, name in scale_c_parameters(spec))
        z = "(unsigned)batch" if batched else "1"
        o.line(f"{launch.entries.scale_c}<<<dim3((unsigned)scale_blocks, 1, {z}), dim3({SCALE_C_THREADS}), 0, "
               f"stream>>>({arguments});")
        o.line("return cudaGetLastError();")


def leading_dimension_rule(spec: ir.KernelSpec) -> str:
    """The contract's line on the smallest leading dimensions."""
    return ("- " + ", ".join(f"{leading_name(op)} >= {contiguous_extent(spec, op)}" for op in ir.Operand)
            + " (the leading dimensions of "
            + "/".join(spec.problem.matrix(op).layout.value for op in ir.Operand) + "-major A/B/C);")


class LauncherEmitter:
    """The host launchers: one that checks everything and launches, and thin wrappers around it.

    Batched specs: `NAME_launch_batched` checks and launches; `NAME_launch_ld` is one GEMM of it.
    Others: `NAME_launch_ld` checks and launches. `NAME_launch` passes the leading dimensions of
    contiguous operands.
    """

    def __init__(self, plan: KernelPlan, out: Emitter):
        self.plan = plan
        self.spec = plan.spec
        self.launch = plan.launch
        self.out = out
        self.names = plan.launch.launchers
        self.parameters = launcher_parameters(plan.spec)
        # Launchers opt in to more dynamic shared memory above the default; printed as N * 1024.
        self.default_smem = f"{plan.arch.default_smem_per_block // 1024} * 1024"

    def emit(self) -> None:
        o = self.out
        o.line("#ifndef __CUDACC_RTC__")
        self._emit_contract()
        self._emit_aligned_helper()
        o.line()
        if self.spec.block.stream_k:
            emit_stream_k_split(self.spec.name, o, LAUNCHED_MIN_SAVED_K_TILES)
            o.line()
        self._emit_checked_launch()
        o.line()
        fuse = fuse_arguments(self.spec)
        if self.spec.problem.batched:
            self._emit_wrapper(self.names["launcher_ld"], self.parameters["launcher_ld"],
                               f"A, lda, 0, B, ldb, 0, C, ldc, 0, M, N, K, 1, {fuse}alpha, beta, stream")
            o.line()
        natural = ", ".join(f"{p}, {contiguous_extent(self.spec, op)}"
                            for p, op in (("A", ir.Operand.A), ("B", ir.Operand.B), ("C", ir.Operand.C)))
        self._emit_wrapper(self.names["launcher"], self.parameters["launcher"],
                           f"{natural}, M, N, K, {fuse}alpha, beta, stream", target=self.names["launcher_ld"])
        o.line("#endif")

    def _emit_contract(self) -> None:
        self.out.comment("\n".join(["Host launchers. Each returns cudaErrorInvalidValue, and launches nothing, for a call",
                                     "the kernel cannot handle:", *launch_contract(self.plan),
                                     *empty_problem_rule(self.launch.entries.scale_c)]))

    def _emit_aligned_helper(self) -> None:
        """Whether an operand's vector accesses are aligned (launch_plan.aligned_helper); with operands of several
        element sizes the call gives the operand's element size."""
        helper = aligned_helper(f"{self.spec.name}_aligned", self._element_bytes)
        types = {"p": "const void*", "ld": "long long", "stride": "long long", "elements": "int",
                 "element_bytes": "unsigned"}
        render_func(self.out, helper, [f"{types[name]} {name}" for name in helper.params], "bool")

    def _emit_stream_k_launch(self, arguments: str) -> None:
        """Size the launch from the device (SMs x resident blocks). When stream-K pays: set C's shared
        tiles to beta * C, launch the stream-K kernel on them, then the plain kernel on the other
        tiles; otherwise the plain kernel on all."""
        o, spec, launch = self.out, self.spec, self.launch
        threads, entries = launch.threads, launch.entries
        o.comment("Stream-K: how many blocks this GPU holds at once decides which tiles are shared.")
        self._emit_slots()
        alpha_beta = spec.problem.epilogue is ir.Epilogue.ALPHA_BETA
        launch.stream_k_launch_rule(alpha_beta, f"{spec.name}_stream_k_split").render_inline(o)
        z = "(unsigned)batch" if spec.problem.batched else "1"
        stride_c = ", stride_c" if spec.problem.batched else ""
        beta = "beta" if alpha_beta else "0.0f"
        with o.block("if (sk_tiles == 0)"):
            self._emit_tiles_launch(slots_known=True)
            o.line("return cudaGetLastError();")
        o.comment("The stream-K blocks go first: they all start together with equal work, so they also\n"
                  "finish together, and the ragged end of the launch is the plain kernel's, as without.")
        with o.block("if (prepare_blocks > 0)"):
            o.line(f"{entries.prepare}<<<dim3((unsigned)prepare_blocks, 1, {z}), dim3({threads}), 0, stream>>>"
                   f"(C, M, N, ldc, {beta}{stride_c}, sk_tiles);")
            o.line("if ((status = cudaGetLastError()) != cudaSuccess) return status;")
        with o.block(f"if (smem_bytes > {self.default_smem})"):
            o.line("status = cudaFuncSetAttribute(stream_k_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, "
                   "(int)smem_bytes);")
            o.line("if (status != cudaSuccess) return status;")
        emit_kernel_launch(o, launch, "stream_k_kernel", f"dim3((unsigned)sk_blocks, 1, {z})", "smem_bytes",
                           f"{arguments}, sk_tiles")
        o.line("if ((status = cudaGetLastError()) != cudaSuccess) return status;")
        with o.block("if (plain_blocks > 0)"):
            self._emit_launch("kernel", "plain_blocks", {})

    def _emit_slots(self) -> None:
        """`sms` and `per_sm`: this GPU's SMs and the blocks of `kernel` each holds at once."""
        o = self.out
        o.line("int device = 0, sms = 0, per_sm = 0;")
        o.line("cudaError_t status = cudaGetDevice(&device);")
        o.line("if (status == cudaSuccess) "
               "status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);")
        o.line("if (status == cudaSuccess) status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, "
               f"{self.launch.threads}, smem_bytes);")
        o.line("if (status != cudaSuccess) return status;")
        o.line("if (per_sm < 1) return cudaErrorInvalidConfiguration;")

    def _emit_tiles_launch(self, slots_known: bool = False) -> None:
        """One block per tile: for checked bounds, when C has a whole tile and K a whole k-tile and the
        split pays (schedule.py's interior_split_pays; `slots_known`: `sms` and `per_sm` are in scope),
        the tiles inside C on the interior kernel (the partial-k one when K % BK != 0) and the edge
        strips on `kernel` (schedule.py's interior_launches); else `kernel` on every tile."""
        o, launch = self.out, self.launch
        bm, bn, bk = launch.block_tile
        entries = launch.entries
        if entries.interior is not None:
            o.comment("Bounds (checked): the tiles inside C run the interior kernel (the exact-bounds code; when\n"
                      "K % BK != 0 the partial-k one, which adds the partial last k-tile) and `kernel` the right\n"
                      "strip (every row) and the bottom strip (the interior's columns), each a GEMM of its own\n"
                      "on operands offset to the strip; only where the interior holds at least "
                      f"{INTERIOR_MIN_WAVES_PER_STRIP} waves\nper strip, since each strip runs after it.")
            has_interior, pays = interior_rules(launch.block_tile, self.spec.problem.batched)
            has_interior.render_inline(o)
            aligned = "vector_aligned && " if self._has_vector_test() else ""
            with o.block(f"if ({aligned}has_interior)"):
                if not slots_known:
                    self._emit_slots()
                pays.render_inline(o)
                with o.block("if (interior_pays)"):
                    self._emit_interior_split()
        self._emit_launch("kernel", "blocks", {})

    def _emit_interior_split(self) -> None:
        """The interior kernel on the tiles inside C, then `kernel` on the right and bottom strips."""
        o, launch = self.out, self.launch
        bm, bn, bk = launch.block_tile
        entries = launch.entries
        o.line(f"const auto interior = K % {bk} == 0 ? {entries.interior} : {entries.interior_partial_k};")
        with o.block(f"if (smem_bytes > {self.default_smem})"):
            o.line("const cudaError_t err = cudaFuncSetAttribute(interior, "
                   "cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes);")
            o.line("if (err != cudaSuccess) return err;")
        self._emit_launch("interior", f"(inner_m / {bm}) * (inner_n / {bn})", {"M": "inner_m", "N": "inner_n"})
        with o.block("if (N > inner_n)"):
            self._emit_launch("kernel", f"(long long){self._tiles('M', 'N - inner_n')}",
                              self._strip("0", "inner_n") | {"N": "N - inner_n"})
        with o.block("if (M > inner_m)"):
            self._emit_launch("kernel", f"(long long){self._tiles('M - inner_m', 'inner_n')}",
                              self._strip("inner_m", "0") | {"M": "M - inner_m", "N": "inner_n"})
        o.line("return cudaGetLastError();")

    def _has_vector_test(self) -> bool:
        return any(v > 1 for v in self.launch.requirements.vector_elements.values())

    def _tiles(self, m: str, n: str) -> str:
        bm, bn, _ = self.launch.block_tile
        return f"({tile_count(self.spec, paren(m), str(bm))}) * ({tile_count(self.spec, paren(n), str(bn))})"

    def _strip(self, row: str, col: str) -> dict[str, str]:
        """A, B and C offset to the block of C whose first element is at (row, col), and with a fuse chain
        its vectors and residual too."""
        problem = self.spec.problem
        starts = [("A", matrix_offset(problem.a.layout, "lda", row, "0")),
                  ("B", matrix_offset(problem.b.layout, "ldb", "0", col)),
                  ("C", matrix_offset(problem.c.layout, "ldc", row, col))]
        operands = self.spec.fuse.operands if self.spec.fuse is not None else ()
        starts += [(operand.parameter, operand.kind.start(operand, row, col)) for operand in operands]
        return {name: f"{name} + {start}" for name, start in starts if start != "0"}

    def _emit_launch(self, kernel: str, blocks: str, overrides: dict[str, str]) -> None:
        """kernel<<<blocks x batch>>> with the kernel's parameters, some replaced by `overrides`."""
        z = "(unsigned)batch" if self.spec.problem.batched else "1"
        arguments = ", ".join(overrides.get(name, name) for _, name in self.launch.parameters)
        emit_kernel_launch(self.out, self.launch, kernel, f"dim3((unsigned){paren(blocks)}, 1, {z})", "smem_bytes",
                           arguments)

    def _emit_wrapper(self, name: str, parameters: str, arguments: str, target: str | None = None) -> None:
        target = target or self.names["launcher_batched"] or self.names["launcher_ld"]
        with self.out.block(f'extern "C" cudaError_t {name}({parameters})'):
            self.out.line(f"return {target}({arguments});")

    def _emit_checked_launch(self) -> None:
        o, spec, launch = self.out, self.spec, self.launch
        bm, bn, bk = launch.block_tile
        batched = spec.problem.batched
        name = self.names["launcher_batched"] if batched else self.names["launcher_ld"]
        key = "launcher_batched" if batched else "launcher_ld"
        with o.block(f'extern "C" cudaError_t {name}({self.parameters[key]})'):
            invalid = "return cudaErrorInvalidValue;"
            o.line(f"if (M < 0 || N < 0 || K < 0) {invalid}")
            o.comment("Tile coordinates (up to M + BM, N + BN, K + BK) are ints.")
            o.line(f"if (M > {MAX_INT - bm} || N > {MAX_INT - bn} || K > {MAX_INT - bk}) "
                   f"{invalid}")
            if batched:
                o.line(f"if (batch <= 0 || batch > {MAX_BATCH}) {invalid}")
            bounds = " || ".join(f"{leading_name(op)} < {contiguous_extent(spec, op)}" for op in ir.Operand)
            o.line(f"if ({bounds}) {invalid}")
            emit_empty_problem(self.plan, o)
            if not spec.problem.checked:
                o.line(f"if (M % {bm} != 0 || N % {bn} != 0 || K % {bk} != 0) {invalid}")
            o.comment("Offsets inside a tile (row * ld + col) are ints.")
            limits = launch.requirements.max_leading_dimension
            fits = " || ".join(f"{leading_name(op)} > {limits[op.value]}" for op in OPERANDS)
            o.line(f"if ({fits}) {invalid}")
            o.line(f"const long long blocks = (long long){launch.grid[0]};")
            o.line(f"if (blocks > {MAX_INT}LL) {invalid}")
            self._emit_kernel_choice()
            o.line(f"const size_t smem_bytes = {launch.smem_bytes};")
            with o.block(f"if (smem_bytes > {self.default_smem})"):
                o.line("const cudaError_t err = cudaFuncSetAttribute(kernel, "
                       "cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes);")
                o.line("if (err != cudaSuccess) return err;")
            arguments = ", ".join(name for _, name in launch.parameters)
            if spec.block.stream_k:
                self._emit_stream_k_launch(arguments)
            else:
                self._emit_tiles_launch()
            o.line("return cudaGetLastError();")

    @property
    def _element_bytes(self) -> dict[str, int]:
        return {op.value: self.spec.problem.matrix(op).dtype.bytes for op in ir.Operand}

    def _emit_kernel_choice(self) -> None:
        """`kernel`: LaunchPlan.kernel_choice_rule, which the runtime evaluates."""
        self.launch.kernel_choice_rule(self._element_bytes, f"{self.spec.name}_aligned").render_inline(self.out)


def emit_kernel_launch(o: Emitter, launch: LaunchPlan, kernel: str, grid: str, smem: str, arguments: str,
                       failed: str | None = None) -> None:
    """`kernel<<<grid, threads, smem, stream>>>(arguments);`, or with cluster dimensions (LaunchPlan.cluster)
    cudaLaunchKernelEx with the cluster attribute, which returns its error at once (`failed`: what to do
    with it; by default return it)."""
    if not launch.clustered:
        o.line(f"{kernel}<<<{grid}, dim3({launch.threads}), {smem}, stream>>>({arguments});")
        return
    x, y, z = launch.cluster
    with o.block(""):
        o.comment(f"Thread-block clusters of {x}x{y}x{z}.")
        o.line("cudaLaunchAttribute cluster[1];")
        o.line("cluster[0].id = cudaLaunchAttributeClusterDimension;")
        o.line(f"cluster[0].val.clusterDim.x = {x};")
        o.line(f"cluster[0].val.clusterDim.y = {y};")
        o.line(f"cluster[0].val.clusterDim.z = {z};")
        o.line("cudaLaunchConfig_t config = {};")
        o.line(f"config.gridDim = {grid};")
        o.line(f"config.blockDim = dim3({launch.threads});")
        o.line(f"config.dynamicSmemBytes = {smem};")
        o.line("config.stream = stream;")
        o.line("config.attrs = cluster;")
        o.line("config.numAttrs = 1;")
        o.line(f"const cudaError_t launched = cudaLaunchKernelEx(&config, {kernel}, {arguments});")
        o.line(f"if (launched != cudaSuccess) {failed or 'return launched;'}")


def emit_stream_k_split(name: str, o: Emitter, min_saved_k_tiles: int, aligned: bool = False) -> None:
    """`NAME_stream_k_split`: schedule.py's stream_k_split_rule with `min_saved_k_tiles` and `aligned`, as C."""
    stream_k_split_rule(min_saved_k_tiles, aligned).render_function(
        o, f"{name}_stream_k_split", ("long long tiles", "long long k_tiles", "long long slots", "long long batch"),
        "int")
