"""Semantic checks: the cross-field rules of a parsed spec, reported all at once.

The parser has already checked every value on its own (types, ranges, names);
this module checks how they fit together and against the target's limits:
tile products, thread counts, vector widths, shared memory, the pipeline and
the register budget. `validate` never raises on a parsed spec; it returns every
error and warning, in source order, each pointing at the value it objects to.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from math import prod
from typing import TYPE_CHECKING, Any, Sequence

from . import ir
from .layout import KernelLayout, SmemGeometry, widest_dividing
from .source import Diagnostic, Severity, Span
from .targets import ARCHS, MAX_REGISTERS_PER_THREAD, SUBPARTITIONS_PER_SM, WARP, Arch, launch_register_cap
from .validate_fuse import check_fuse
from .validate_quant import check_weights

if TYPE_CHECKING:
    from .paths.interface import InstructionPath  # handed over by the front end, never looked up here

MAX_NAME = 64
MAX_SWIZZLE_BITS = 16  # B + M + S; larger swizzles span more than any stage

# C and C++ keywords (C11 and C++20) and CUDA built-ins a kernel may not be named after.
RESERVED_NAMES = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
    char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
    co_return co_yield decltype default delete do double dynamic_cast else enum explicit export
    extern false float for friend goto if inline int long mutable namespace new noexcept not
    not_eq nullptr operator or or_eq private protected public register reinterpret_cast requires
    restrict return short signed sizeof static static_assert static_cast struct switch template
    this thread_local throw true try typedef typeid typename union unsigned using virtual void
    volatile wchar_t while xor xor_eq _Alignas _Alignof _Atomic _Bool _Complex _Generic
    _Imaginary _Noreturn _Static_assert _Thread_local
    main threadIdx blockIdx blockDim gridDim warpSize
""".split())

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")  # the grammar's NAME

# What the FMA path multiplies (in f32): A and B of one of these types
FMA_OPERAND_TYPES = (ir.DType.F32, ir.DType.BF16, ir.DType.F16)


def kernel_name_problem(name: str, what: str = "kernel name") -> tuple[str, str] | None:
    """(message, hint) when `name` cannot name a kernel (or, with `what`, a family), else None; for names that
    do not come through the parser too (the tuner's --name, a family's name)."""
    if not IDENTIFIER.match(name):
        return (f"{what} {name!r} is not an identifier",
                f"a {what} is a letter or '_' followed by letters, digits and '_'")
    if name in RESERVED_NAMES:
        return (f"{what} '{name}' is a C/C++ keyword or CUDA built-in",
                f"the name becomes a C++ function name; try '{name}_gemm'")
    if len(name) > MAX_NAME:
        return (f"{what} is {len(name)} characters long; at most {MAX_NAME} are allowed",
                "the name is used for the kernel and its files; pick a shorter one")
    return None


_ORDERS = {
    ir.Operand.A: (ir.SmemOrder.MK, ir.SmemOrder.KM),
    ir.Operand.B: (ir.SmemOrder.KN, ir.SmemOrder.NK),
}
_THREAD_KEYS = ("warps", "lanes", "micro", "repeat")
SMEM_READ_BYTES = {ir.SmemRead.LDMATRIX: 16, ir.SmemRead.LDS32: 4}  # bytes one lane reads at once


def validate(spec: ir.KernelSpec, path: InstructionPath, paths: Sequence[InstructionPath] = ()) -> list[Diagnostic]:
    """Every semantic error and warning of a parsed spec, sorted by position; `path`, the spec's instruction
    path (paths.path_of), adds its own rules; `paths`, the registered ones, are named where another would take
    what `path` refuses."""
    checker = _Checker(spec, path, paths)
    checker.run()
    return sorted(checker.diagnostics, key=lambda d: (d.span.line, d.span.column))


def errors(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in diagnostics if d.severity is Severity.ERROR]


@dataclass
class _Checker:
    spec: ir.KernelSpec
    path: InstructionPath
    paths: Sequence[InstructionPath] = ()
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def error(self, span: Span, message: str, hint: str | None = None) -> None:
        self.diagnostics.append(Diagnostic(Severity.ERROR, span, message, hint))

    def warning(self, span: Span, message: str, hint: str | None = None) -> None:
        self.diagnostics.append(Diagnostic(Severity.WARNING, span, message, hint))

    @property
    def arch(self) -> Arch | None:
        return ARCHS.get(self.spec.target.sm)

    def run(self) -> None:
        self.check_name()
        self.check_problem()
        check_fuse(self.spec, self.error, self.path.stream_k_sums_whole)
        if check_weights(self.spec, self.path, self.paths, self.error):
            self.path.validate(self)

    def check_tiles(self, path: Any) -> None:
        """The rules of the paths whose kernels are lowered to a TileLayout (paths/tiles.py's TilePath: FMA,
        mma.sync); `path` supplies its own rules of the threads and of the lowered stages."""
        self.check_hopper_only()
        self.check_target()
        block_ok = self.check_block()
        threads_ok = path.check_threads(self) and block_ok
        smem_ok = all([self.check_smem(ir.Operand.A), self.check_smem(ir.Operand.B)])
        if threads_ok:
            self.check_load(ir.Operand.A)
            self.check_load(ir.Operand.B)
        pipeline_ok = self.check_pipeline(path)
        smem_bytes = None
        if block_ok and smem_ok and pipeline_ok and self.arch is not None:
            smem_bytes = path.check_stages(self, threads_ok)
        self.check_budget(smem_bytes, path)

    def check_fma_stages(self, threads_ok: bool) -> int:
        """The FMA path's stages (KernelLayout): their shared memory and access widths; their bytes."""
        layout = KernelLayout(self.spec)
        self.check_smem_size(layout.smem_bytes)
        if threads_ok:
            self.check_widths(layout, ir.Operand.A)
            self.check_widths(layout, ir.Operand.B)
        return layout.smem_bytes

    # --- name, problem, target -----------------------------------------------------------

    def check_name(self) -> None:
        problem = kernel_name_problem(self.spec.name)
        if problem is not None:
            self.error(self.spec.at("name"), problem[0], hint=problem[1])

    def check_problem(self) -> None:
        problem = self.spec.problem
        a, b = problem.a.dtype, problem.b.dtype
        # FP8 wgmma takes e4m3 and e5m2 in any pairing; quantized weights and a weight type on A: validate_quant.py
        if a is not b and not (a.fp8 and b.fp8) and not problem.weights and not a.integer:
            fp8 = " (FP8 pairs with FP8 only: e4m3 or e5m2)" if a.fp8 or b.fp8 else ""
            self.error(problem.at("b"), f"B is {b.value} but A is {a.value}; A and B must have the same element "
                                        f"type{fp8}", hint=f"write `b: {a.value} {problem.b.layout.value};`")
        if problem.c.dtype.fp8 or problem.c.dtype.integer:
            self.error(problem.at("c"), f"C is {problem.c.dtype.value}; FP8 and the integer weight types are operand "
                                        "types only: the kernels write C from f32 accumulators as f32, bf16 or f16",
                       hint=f"write `c: bf16 {problem.c.layout.value};` (torch._scaled_mm's usual output)")

    def check_fma_operands(self) -> None:
        """The FMA path multiplies in f32: f32 operands, or bf16 or f16 ones widened to f32 on their way to shared
        memory (which holds f32), writing f32 C or C of the operands' type."""
        problem, spec = self.spec.problem, self.spec
        a, c = problem.a.dtype, problem.c.dtype
        hint = ("add tensor cores, e.g. `mma { shape: m16n8k16; repeat: 4x8; }` with `threads { warps: 2x2; }` for a "
                "128x128 block tile")
        if a not in FMA_OPERAND_TYPES:
            self.error(problem.at("a"), f"A is {a.value}, but without an `mma` section the kernel multiplies with f32 "
                                        "FMAs, of f32, bf16 or f16 operands", hint=hint)
            return
        if c is not ir.DType.F32 and c is not a:
            self.error(problem.at("c"), f"C is {c.value}, but without an `mma` section the kernel accumulates in f32 "
                                        f"and writes f32 C or C of the operands' type ({a.value})",
                       hint=f"write `c: f32 {problem.c.layout.value};`" + (
                           f" or `c: {a.value} {problem.c.layout.value};`" if a is not ir.DType.F32 else ""))
        if a is ir.DType.F32:
            return
        if spec.pipeline.copy is not ir.CopyMode.REGISTERS:
            self.error(spec.pipeline.at("copy"), f"copy: {spec.pipeline.copy.value} moves bytes as they are, but the "
                                                 f"FMA path widens {a.value} operands to the f32 its shared memory "
                                                 "holds on their way through registers",
                       hint="write `copy: registers;`")
        if c is not ir.DType.F32 and spec.block.stream_k:
            self.error(spec.block.at("schedule"), f"stream-K on the FMA path adds its shares into C with f32 atomics, "
                                                  f"but C is {c.value}", hint="write `c: f32 ...;`, or drop "
                                                                               "`schedule: stream_k`")
        if spec.fuse is not None:
            self.error(spec.fuse.span, f"the FMA path's fused epilogue reads f32 operands; A and B are {a.value}",
                       hint="fuse with f32 operands, or add tensor cores (an `mma` section)")

    def check_hopper_only(self) -> None:
        """What only the wgmma path (an `mma` section with a wgmma shape) generates."""
        hint = ("Hopper's own path: `target sm_90a;`, `mma { shape: m64n256k16; }`, "
                "`threads { warpgroups: 2; producer: 1; }` (see docs/language.md)")
        for operand in (ir.Operand.A, ir.Operand.B):
            smem = self.spec.smem(operand)
            if smem.swizzle_bytes is not None:
                self.error(smem.at("swizzle"), f"swizzle: {smem.swizzle_bytes}B is the TMA/wgmma swizzle mode; "
                                               "it needs a wgmma spec", hint="use xor(B, M, S) here, or " + hint)
        p = self.spec.pipeline
        if p.copy is ir.CopyMode.TMA:
            self.error(p.at("copy"), "copy: tma feeds wgmma only; it needs a wgmma spec", hint=hint)
        problem = self.spec.problem
        if problem.grouped:
            self.error(problem.at("batch"), "batch: grouped is generated for wgmma specs only: its groups' tiles "
                                            "are walked by one persistent launch that reads B through a TMA map",
                       hint="use `batch: strided;` for GEMMs of one shape, or " + hint)
        block = self.spec.block
        if block.schedule in (ir.Schedule.PERSISTENT, ir.Schedule.PINGPONG):
            self.error(block.at("schedule"), f"schedule: {block.schedule.value} is generated for wgmma specs only (so far)",
                       hint="use `schedule: tiles;` or `schedule: stream_k;`, or " + hint)

    def check_target(self) -> None:
        if self.arch is None:
            names = ", ".join(f"sm_{sm}" for sm in ARCHS)
            self.error(self.spec.target.at("target"), f"unknown target sm_{self.spec.target.sm}",
                       hint=f"supported targets: {names}")

    # --- block tile and thread layout ----------------------------------------------------

    def check_block(self) -> bool:
        block = self.spec.block
        ok = True
        if min(block.m, block.n, block.k) < 1:  # pragma: no cover - the parser requires >= 1
            self.error(block.at("tile"), f"every size of the block tile must be at least 1, found "
                                         f"{block.m}x{block.n}x{block.k}")
            ok = False
        if block.raster.kind is ir.RasterKind.GROUP and block.raster.group < 1:
            self.error(block.at("raster"), f"group({block.raster.group}) needs at least one row of blocks per group",
                       hint="write group(G) with G >= 1, e.g. group(8)")
        return ok

    def check_threads(self) -> bool:
        t = self.spec.threads
        ok = True
        for key in _THREAD_KEYS:
            pair: ir.Pair = getattr(t, key)
            if min(pair.m, pair.n) < 1:  # pragma: no cover - the parser requires >= 1
                self.error(t.at(key), f"{key} must be at least 1x1, found {pair}")
                ok = False
        if not ok:
            return False
        ok = self.check_thread_count("micro, repeat")
        if t.lanes.m * t.lanes.n != WARP:
            self.error(t.at("lanes"), f"lanes {t.lanes} hold {t.lanes.m}*{t.lanes.n} = {t.lanes.m * t.lanes.n} "
                                      f"threads, but a warp has {WARP}",
                       hint="lanes.m * lanes.n must be 32, e.g. 4x8 or 8x4")
            ok = False
        elif t.lane_order is ir.LaneOrder.ZIGZAG and (t.lanes.n < 2 or t.lanes.n % 2):
            self.error(t.at("lanes"), f"lane order zigzag needs an even lanes.n (at least 2), found {t.lanes}",
                       hint="zigzag puts bit 0 of the lane on n; use e.g. `lanes: 4x8 zigzag;`")
            ok = False
        factors = {key: getattr(t, key) for key in _THREAD_KEYS}
        # Blame the one factor whose change alone fixes the product: repeat (when written), then
        # micro, then warps; the lanes are pinned by the 32 lanes of a warp.
        blame = (("repeat", t), ("micro", t), ("warps", t))
        ok = self.check_products(factors, blame, fallback=("micro", t)) and ok
        accumulators = t.fragment.m * t.fragment.n
        if accumulators > (self.arch.max_registers_per_thread if self.arch else MAX_REGISTERS_PER_THREAD):
            self.warning(t.at("micro"), f"each thread accumulates {t.fragment.m}x{t.fragment.n} = {accumulators} "
                                        f"values, more than the registers a thread can have; nvcc will spill",
                         hint="use more threads or a smaller micro tile or repeat")
        return ok

    def check_thread_count(self, more_work: str) -> bool:
        t = self.spec.threads
        limit = self.arch.max_threads_per_block if self.arch else 1024
        if t.threads <= limit:
            return True
        self.error(t.at("warps"), f"warps {t.warps} make {t.warps.m}*{t.warps.n}*32 = {t.threads} threads "
                                  f"per block, more than the {limit} a block may have",
                   hint=f"use at most {limit // WARP} warps and give each thread more work ({more_work})")
        return False

    def check_products(self, factors: dict[str, ir.Pair], blame: tuple[tuple[str, ir.Node], ...],
                       fallback: tuple[str, ir.Node]) -> bool:
        """The tile hierarchy's product of `factors` (key -> pair) must be BM along m and BN along n.

        Each axis's error points at the first written key of `blame` (key, node that holds it) whose
        change alone fixes that axis, else at `fallback`. Both axes wrong make one error: its hints
        (the key's new pair, the block tile that fits) are those of both axes at once."""
        block = self.spec.block
        products = {axis: prod(getattr(pair, axis) for pair in factors.values()) for axis in ("m", "n")}
        extents = {"m": block.m, "n": block.n}
        wrong = [axis for axis in ("m", "n") if products[axis] != extents[axis]]
        if not wrong:
            return True
        tile = f"{products['m']}x{products['n']}x{block.k}"
        fixes = {axis: self._single_fix(axis, factors, blame, products[axis], extents[axis]) for axis in wrong}
        parts = [f"along {axis} is {'*'.join(str(getattr(pair, axis)) for pair in factors.values())} = "
                 f"{products[axis]}, but the block tile's {'BM' if axis == 'm' else 'BN'} is {extents[axis]}"
                 for axis in wrong]
        message = f"{' x '.join(factors)} {'; '.join(parts)}"
        places = {fix[:2] for fix in fixes.values() if fix is not None}
        if len(places) == 1 and all(fixes.values()):  # one key fixes every wrong axis
            ((key, node),) = places
            pair: ir.Pair = getattr(node, key)
            new = ir.Pair(*(fixes[axis][2] if axis in fixes else getattr(pair, axis) for axis in ("m", "n")))
            covered = " and ".join(f"{'BM' if axis == 'm' else 'BN'} = {extents[axis]}" for axis in wrong)
            hint = f"use `{key}: {new}` to cover {covered}, or make the block tile {tile}"
        else:
            key, node = fallback
            extents_wanted = " and ".join(f"{extents[axis]} along {axis}" for axis in wrong)
            hint = f"make the block tile {tile}, or change the thread layout so its product is {extents_wanted}"
        self.error(node.at(key), message, hint)
        return False

    @staticmethod
    def _single_fix(axis: str, factors: dict[str, ir.Pair], blame: tuple[tuple[str, ir.Node], ...], product: int,
                    extent: int) -> tuple[str, ir.Node, int] | None:
        """(key, node, new size along `axis`) of the first written key of `blame` whose change alone
        makes the product `extent`, or None."""
        for key, node in blame:
            if key not in {name for name, _ in node.key_spans}:
                continue
            rest = product // getattr(factors[key], axis)
            if extent % rest == 0:
                return key, node, extent // rest
        return None

    # --- shared memory layouts -----------------------------------------------------------

    def check_smem(self, operand: ir.Operand) -> bool:
        smem = self.spec.smem(operand)
        ok = True
        allowed = _ORDERS[operand]
        if smem.order not in allowed:
            name = operand.value.upper()
            self.error(smem.at("order"), f"order {smem.order.value} is not a layout of {name}; "
                                         f"smem {operand.value} is stored as {' or '.join(o.value for o in allowed)}",
                       hint=" and ".join(f"{o.value} keeps {o.value[1]} contiguous" for o in allowed))
            ok = False
        if smem.swizzle is not None:
            s = smem.swizzle
            problem = None
            if s.bits < 1:
                problem = "B (the number of bits xor-ed) must be at least 1"
            elif s.shift < s.bits:
                problem = f"S must be at least B ({s.shift} < {s.bits}), or the xor-ed bit ranges overlap"
            elif s.bits + s.base + s.shift > MAX_SWIZZLE_BITS:
                problem = f"B + M + S is {s.bits + s.base + s.shift}, more than {MAX_SWIZZLE_BITS}"
            if problem is not None:
                self.error(smem.at("swizzle"), f"invalid swizzle {s}: {problem}",
                           hint="xor(B, M, S) xors bits [M+S, M+S+B) of an element offset into bits [M, M+B); "
                                "e.g. xor(3, 2, 3)")
                ok = False
        return ok

    # --- global loads --------------------------------------------------------------------

    def check_load(self, operand: ir.Operand) -> None:
        load, threads = self.spec.load(operand), self.spec.threads.threads
        name = operand.value.upper()
        rows, cols = self.spec.global_tile(operand)
        extent_name = "BK" if self.spec.k_contiguous(operand) else ("BM" if operand is ir.Operand.A else "BN")
        major = self.spec.problem.matrix(operand).layout.value
        written = any(key == "vector" for key, _ in load.key_spans)
        span = load.at("vector") if written else self.spec.block.at("tile")
        vector = load.vector
        # Vector widths that would work: they divide the rows and share out evenly over the threads.
        fits = [w for w in (4, 2, 1) if cols % w == 0 and (rows * cols // w) % threads == 0]
        if fits:
            fix = f"use `vector: {fits[0]};` in `load {operand.value}`"
        else:
            fix = (f"no vector width fits: the {rows}x{cols} tile of {name} has {rows * cols} elements for "
                   f"{threads} threads; use fewer threads (warps) or a larger block tile")
        if cols % vector:
            self.error(span, f"vector {vector} does not divide the contiguous extent of {name}'s tile "
                             f"({extent_name} = {cols})",
                       hint=f"{name} is {major}-major, so its tile is {rows} runs of {cols} contiguous "
                            f"elements in global memory; {fix}")
            return
        chunks = rows * cols // vector
        if chunks % threads == 0:
            return
        why = "fewer than" if chunks < threads else "not a multiple of"
        where = "" if written else f" (load {operand.value} defaults to vector {vector})"
        self.error(span, f"{name}'s {rows}x{cols} tile is {chunks} loads of vector {vector}{where}, {why} "
                         f"the {threads} threads; every thread must load the same number of vectors",
                   hint=fix + (", or fewer threads" if fits else ""))

    # --- shared memory size and access widths --------------------------------------------

    def check_smem_size(self, used: int) -> None:
        arch = self.arch
        assert arch is not None
        limit = arch.smem_per_block
        if used <= limit:
            return
        block, stages = self.spec.block, self.spec.pipeline.stages
        self.error(block.at("tile"),
                   f"the tiles of A ({block.m}x{block.k}) and B ({block.k}x{block.n}) in {stages} stage(s) need "
                   f"{used} bytes of shared memory ({used / 1024:.1f} KiB), more than the {limit} bytes "
                   f"({limit // 1024} KiB) sm_{arch.sm} allows per block",
                   hint="use fewer pipeline stages, a smaller BK or a smaller block tile")

    def check_widths(self, layout: KernelLayout, operand: ir.Operand) -> None:
        smem = self.spec.smem(operand)
        geometry = layout.smem[operand]
        micro = self.spec.threads.micro.m if operand is ir.Operand.A else self.spec.threads.micro.n
        allowed = layout.max_read_width(operand)
        forced = smem.read_bits
        if forced is not None and forced > allowed * 32:
            need = forced // 32
            cause, hint = self._narrowing(operand, geometry, micro, need, "reads")
            self.error(smem.at("read"), f"read: {forced} is wider than the layout allows ({allowed * 32} bits): "
                                        f"{cause}", hint=hint)
        elif forced is None and geometry.order.k_major:
            best = widest_dividing(micro)
            if allowed < best:
                cause, hint = self._narrowing(operand, geometry, micro, best, "reads")
                key = "swizzle" if geometry.swizzle is not None and (1 << geometry.swizzle.base) < best else "pad"
                self.warning(smem.at(key), f"fragment reads of {operand.value.upper()} are {allowed * 32}-bit "
                                           f"instead of {best * 32}-bit: {cause}", hint=hint)
        # Vector stores of global chunks: only where the global rows stay contiguous in shared memory.
        vector = self.spec.load(operand).vector
        width = layout.store_width(operand)
        _, extent = self.spec.global_tile(operand)
        if layout.stays_contiguous(operand) and width < vector and extent % vector == 0:  # else check_load reported it
            cause, hint = self._narrowing(operand, geometry, micro, vector, "stores")
            key = "swizzle" if geometry.swizzle is not None and (1 << geometry.swizzle.base) < vector else "pad"
            self.warning(smem.at(key), f"shared-memory stores of {operand.value.upper()} are {width * 32}-bit "
                                       f"instead of {vector * 32}-bit: {cause}", hint=hint)

    def _narrowing(self, operand: ir.Operand, geometry: SmemGeometry, micro: int, need: int,
                   what: str) -> tuple[str, str]:
        """Why the layout cannot do `need`-element accesses, and what to change."""
        bits = need * 32
        order = geometry.order.value
        axis = "m" if operand is ir.Operand.A else "n"
        if what == "reads" and not geometry.order.k_major:
            wide = "km" if operand is ir.Operand.A else "kn"
            return (f"order {order} keeps k contiguous, so the {micro} elements of a thread's {axis} fragment "
                    f"lie {geometry.ld} elements apart and are read one at a time",
                    f"use `order: {wide};` ({axis} contiguous) for vector fragment reads, or drop `read:`")
        if what == "reads" and widest_dividing(micro) < need:
            return (f"the micro tile has {micro} elements along {axis}, which allows at most "
                    f"{widest_dividing(micro) * 32}-bit reads",
                    f"use a micro tile whose {axis} size is a multiple of {need}, or a narrower `read:`")
        s = geometry.swizzle
        if s is not None and (1 << s.base) < need:
            return (f"the swizzle {s} moves elements in groups of 2^{s.base} = {1 << s.base}, "
                    f"which breaks {bits}-bit {what}",
                    f"use M >= {need.bit_length() - 1} (e.g. xor({s.bits}, {need.bit_length() - 1}, "
                    f"{max(s.shift, s.bits)})) so {need} consecutive elements move together")
        pad = geometry.ld - geometry.inner
        aligned = widest_dividing(geometry.ld) * 32
        if pad == 0:
            return (f"rows of {geometry.ld} elements keep only {aligned}-bit alignment",
                    f"add a pad so that the row length is a multiple of {need}")
        return (f"pad {pad} makes each row {geometry.ld} elements long, which keeps rows aligned only to "
                f"{aligned} bits",
                f"use a pad that is a multiple of {need} ({bits // 8} bytes)")

    # --- pipeline and budget -------------------------------------------------------------

    def check_pipeline(self, path: Any) -> bool:
        p = self.spec.pipeline
        ok = True
        if p.copy is ir.CopyMode.CP_ASYNC and self.arch is not None and not self.arch.has_cp_async:
            self.error(p.at("copy"), f"copy: cp_async needs sm_80 or newer; sm_{self.arch.sm} has no cp.async",
                       hint="use `copy: registers;`")
        if p.copy is ir.CopyMode.REGISTERS and not path.register_copies:
            self.error(p.at("copy"), "copy: registers is not supported for mma specs yet; their code generation "
                                     "copies tiles with cp.async only",
                       hint="use `copy: cp_async;` (the default for mma specs)")
        elif p.copy is ir.CopyMode.REGISTERS and p.stages > 2:
            self.error(p.at("stages"), "register-staged copies double-buffer: stages must be 1 or 2; "
                                       "use copy: cp_async for deeper pipelines",
                       hint="write `pipeline { stages: 2; copy: registers; }` or "
                            f"`pipeline {{ stages: {p.stages}; copy: cp_async; }}`")
        return ok

    def check_budget(self, smem_bytes: int | None, path: Any) -> None:
        budget, arch = self.spec.budget, self.arch
        if arch is None or (budget.registers is None and budget.blocks_per_sm is None):
            return
        threads = self.spec.threads.threads
        warps = -(-threads // WARP)
        blocks = budget.blocks_per_sm or 1
        blocks_ok = True
        if budget.blocks_per_sm is not None:
            if blocks > arch.max_blocks_per_sm:
                self.error(budget.at("blocks_per_sm"), f"blocks_per_sm: {blocks} is more than the "
                                                       f"{arch.max_blocks_per_sm} blocks an sm_{arch.sm} SM can hold")
                blocks_ok = False
            elif blocks * threads > arch.max_threads_per_sm:
                self.error(budget.at("blocks_per_sm"),
                           f"{blocks} blocks of {threads} threads are {blocks * threads} threads, more than the "
                           f"{arch.max_threads_per_sm} an sm_{arch.sm} SM can hold",
                           hint=f"use blocks_per_sm: {max(1, arch.max_threads_per_sm // threads)} or fewer warps")
                blocks_ok = False
            elif smem_bytes is not None:
                smem = smem_bytes + arch.smem_reserved_per_block
                if blocks * smem > arch.smem_per_sm:
                    self.warning(budget.at("blocks_per_sm"),
                                 f"{blocks} blocks need {blocks * smem} bytes of shared memory, more than the "
                                 f"{arch.smem_per_sm} an sm_{arch.sm} SM has; fewer blocks will be resident",
                                 hint=f"at most {arch.smem_per_sm // smem} blocks fit")
        regs = budget.registers
        if regs is None:
            return
        cap = launch_register_cap(arch, threads, blocks)
        if blocks_ok and regs > cap:
            unit = arch.register_alloc_unit
            per_warp = -(-regs * WARP // unit) * unit
            total = per_warp * warps * blocks
            if total > arch.registers_per_sm:
                why = (f"need {total} registers (allocated {per_warp} per warp), more than the "
                       f"{arch.registers_per_sm} of an sm_{arch.sm} SM")
            else:  # the fullest of the SM's schedulers holds more warps than its quarter of the file allows
                quarter = arch.registers_per_sm // SUBPARTITIONS_PER_SM
                why = (f"do not fit an sm_{arch.sm} SM: each of its {SUBPARTITIONS_PER_SM} schedulers holds "
                       f"{quarter} registers, {quarter // per_warp} warps of {per_warp}, and {warps * blocks} warps "
                       f"put {-(-warps * blocks // SUBPARTITIONS_PER_SM)} on one of them")
            self.error(budget.at("registers"), f"{regs} registers x {threads} threads x {blocks} block(s) per SM {why}",
                       hint=f"use at most {cap} registers, fewer blocks_per_sm or fewer warps")
            return
        accumulators, live = path.live_registers(self.spec)
        if regs < live:
            self.warning(budget.at("registers"),
                         f"registers: {regs} cannot hold a thread's {accumulators} accumulators "
                         f"and fragments ({live} values); nvcc will spill to local memory",
                         hint=f"raise the register budget or shrink {path.register_tile}")
