"""The fuse chain (docs/fusion.md) as C: one rendering that the three paths' epilogues call.

Each epilogue reaches a point where it holds an element's f32 accumulator and knows the element's row
and column of C; there it calls `fuse_chain` on it. What belongs to a whole row (a row scale, a bias
along m) is loaded once into a `fuse_m`, and what belongs to a whole column into a `fuse_n`: a thread's
accumulators share rows and columns (an FMA micro tile, an mma fragment's pairs, a wgmma warp's rows),
so each path loads these before its stores, once per row or column it holds, and the per-element work is
the arithmetic, C's old value where beta needs it, and the residual's one load.

Activations: relu; gelu with erff (2 ulp). Where C is f32, gelu_tanh with tanhf (2 ulp) and silu as
x / (1 + __expf(-x)) (__expf: 2 + 1.16 |x| ulp). Where C is 16-bit, whose rounding (bf16 2^-8, f16 2^-11
relative) bounds what the chain can deliver, gelu_tanh and silu use the hardware's tanh (`tanh.approx.f32`,
one MUFU instruction, relative error below 2^-10.98), silu as x * (1 + tanh(x / 2)) / 2: tanhf costs about
twenty instructions an element, which on a 128x256 wgmma tile made the epilogue as long as a third of
the tile's main loop (linear_gelu at 4096^3 on the H100: 0.206 ms against 0.175 for the same kernel
without the chain).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..abi import fuse_parameters
from ..emitter import Emitter
from ..passes.fuse import fast_activations

ACTIVATIONS = {
    ir.Activation.RELU: "fmaxf(x, 0.0f)",
    ir.Activation.GELU: "0.5f * x * (1.0f + erff(x * 0.70710678118654752f))",
    ir.Activation.GELU_TANH: "0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)))",
    ir.Activation.SILU: "x / (1.0f + __expf(-x))",
}
# For 16-bit C: the same functions through the hardware's tanh (see the module docstring).
FAST_ACTIVATIONS = {
    **ACTIVATIONS,
    ir.Activation.GELU_TANH: "0.5f * x * (1.0f + tanh_approx(0.79788456080286536f * (x + 0.044715f * x * x * x)))",
    ir.Activation.SILU: "0.5f * x * (1.0f + tanh_approx(0.5f * x))",
}
TANH_APPROX = ("static __device__ __forceinline__ float tanh_approx(float x) {\n"
               "    float y;\n"
               "    asm(\"tanh.approx.f32 %0, %1;\" : \"=f\"(y) : \"f\"(x));\n"
               "    return y;\n"
               "}")


def to_float(dtype: ir.DType, value: str) -> str:
    """An element of `dtype` read as f32."""
    return {ir.DType.F32: value, ir.DType.BF16: f"__bfloat162float({value})",
            ir.DType.F16: f"__half2float({value})"}[dtype]


@dataclass(frozen=True)
class Member:
    """One value a row (or column) carries for the chain: its field name and how it is read at index `i`."""

    field: str
    pointer: str
    dtype: ir.DType

    def load(self, index: str) -> str:
        return to_float(self.dtype, f"{self.pointer}[{index}]")


class FuseChain:
    """The chain of one spec: the helpers it needs in the file and the call each epilogue makes."""

    def __init__(self, spec: ir.KernelSpec):
        assert spec.fuse is not None
        self.spec = spec
        self.chain = spec.fuse
        self.alpha_beta = spec.problem.epilogue is ir.Epilogue.ALPHA_BETA

    def members(self, axis: ir.Broadcast) -> list[Member]:
        """What one row (m) or column (n) of C carries: its scale, then its bias."""
        chain, members = self.chain, []
        if chain.scale is not None and (chain.scale.rows if axis is ir.Broadcast.M else chain.scale.cols):
            members.append(Member("scale", "row_scale" if axis is ir.Broadcast.M else "col_scale", ir.DType.F32))
        if chain.bias is not None and chain.bias.along is axis:
            members.append(Member("bias", "bias", chain.bias.dtype))
        return members

    @property
    def activations(self) -> dict[ir.Activation, str]:
        """The activations' bodies for this spec's C: exact for f32, through the hardware's tanh for 16-bit."""
        return FAST_ACTIVATIONS if fast_activations(self.spec) else ACTIVATIONS

    @property
    def reads_residual(self) -> bool:
        return self.chain.residual is not None

    def emit_helpers(self, o: Emitter) -> None:
        """The structs of a row's and a column's values, their loaders, and `fuse_chain` itself."""
        parameters = dict((name, ctype) for ctype, name in fuse_parameters(self.spec))
        o.comment(f"The fuse chain: C = {self.chain.describe(self.alpha_beta)}, in f32, then C's type.")
        for axis, index, extent in ((ir.Broadcast.M, "row", "M"), (ir.Broadcast.N, "col", "N")):
            members = self.members(axis)
            name = f"fuse_{axis.value}"
            fields = " ".join(f"float {m.field};" for m in members)
            o.line(f"struct {name} {{ {fields} }};" if fields else f"struct {name} {{}};")
            arguments = ", ".join([f"{parameters[m.pointer]} {m.pointer}" for m in members] + [f"int {index}",
                                                                                                f"int {extent}"])
            with o.block(f"static __device__ __forceinline__ {name} load_{name}({arguments})"):
                o.line(f"{name} v;")
                if not members:
                    o.line(f"(void){index}; (void){extent};")
                for member in members:
                    o.line(f"v.{member.field} = {index} < {extent} ? {member.load(index)} : 0.0f;")
                o.line("return v;")
        if self.chain.residual is not None:
            residual = self.chain.residual
            offset = ("(size_t)row * ldr + col" if residual.layout is ir.MatrixLayout.ROW
                      else "(size_t)col * ldr + row")
            with o.block(f"static __device__ __forceinline__ float load_residual({parameters['R']} R, int ldr, "
                         "int row, int col)"):
                o.line(f"return {to_float(residual.dtype, f'R[{offset}]')};")
        if self.chain.activation is not None:
            body = self.activations[self.chain.activation]
            if "tanh_approx" in body:
                for line in TANH_APPROX.splitlines():
                    o.line(line)
            with o.block(f"static __device__ __forceinline__ float {self.chain.activation.value}(float x)"):
                o.line(f"return {body};")
        o.comment("One element: acc its accumulator, m and n its row's and column's values, c its old value in C\n"
                  "(read only where beta is not 0), r its residual.")
        with o.block("static __device__ __forceinline__ float fuse_chain(float acc, const fuse_m& m, const fuse_n& n, "
                     "float c, float r, float alpha, float beta)"):
            self._emit_body(o)

    def _emit_body(self, o: Emitter) -> None:
        chain, used = self.chain, set()
        scales = [f"{side}.scale" for side, axis in (("m", ir.Broadcast.M), ("n", ir.Broadcast.N))
                  if any(member.field == "scale" for member in self.members(axis))]
        if scales:
            o.line(f"float x = acc * {' * '.join(scales)};")
        elif self.alpha_beta:
            o.line("float x = alpha * acc;")
            used.add("alpha")
        else:
            o.line("float x = acc;")
        if self.alpha_beta:
            o.line("x += beta * c;")
            used.update(("beta", "c"))
        if chain.bias is not None:
            o.line(f"x += {chain.bias.along.value}.bias;")
        if chain.activation is not None:
            o.line(f"x = {chain.activation.value}(x);")
        if chain.residual is not None:
            o.line("x += r;")
            used.add("r")
        unused = [name for name in ("m", "n", "c", "r", "alpha", "beta") if name not in used
                  and not (name in ("m", "n") and self.members(ir.Broadcast(name)))]
        if unused:
            o.line(" ".join(f"(void){name};" for name in unused))
        o.line("return x;")

    def emit_pair_helper(self, o: Emitter) -> None:
        """`fuse_pair`: the chain in place on two neighbours of one row of row-major C (the wgmma accumulator
        layout's pairs), for a path that applies it before its stores. Their row's and columns' values come
        read (the wgmma path reads them from the tile's vectors in shared memory: a thread's wgmma tile spans
        too many columns to hold them all in registers, and holding a pair's for the two rows that share it
        spills where the accumulators leave no room: fp8_h100's promoted sums); C's old values (beta not 0)
        and the residual (unless its pointer is null: staged) are read here, inside C only. The chain itself runs
        on every pair, inside C or not: the stores drop what lies outside, and an early return per pair would
        keep ptxas from interleaving one pair's chain with the next's (measured on the H100: the epilogue then
        runs one pair at a time, at the latency of its shared-memory read and tanh)."""
        c = self.spec.problem.c.dtype
        residual = "".join(f"{ctype} {name}, " for ctype, name in fuse_parameters(self.spec) if name in ("R", "ldr"))
        with o.block(f"static __device__ __forceinline__ void fuse_pair(const {c.c_type}* C, int ldc, {residual}int M, "
                     "int N, int row, int col, const fuse_m& m, const fuse_n& n0, const fuse_n& n1, float alpha, "
                     "float beta, float& x, float& y)"):
            o.line("float c0 = 0.0f, c1 = 0.0f, r0 = 0.0f, r1 = 0.0f;")
            reads = self.alpha_beta or self.chain.residual is not None
            if reads:
                o.line("const bool inside = row < M;  // rows past M are not stored: nothing to read for them")
            if self.alpha_beta:
                with o.block("if (beta != 0.0f)"):
                    o.line(f"if (inside && col < N) c0 = {to_float(c, 'C[(size_t)row * ldc + col]')};")
                    o.line(f"if (inside && col + 1 < N) c1 = {to_float(c, 'C[(size_t)row * ldc + col + 1]')};")
            else:
                o.line("(void)C; (void)ldc;")
            if self.chain.residual is not None:
                o.line("// A null R: the epilogue adds R from shared memory itself.")
                with o.block("if (R != nullptr)"):
                    o.line("if (inside && col < N) r0 = load_residual(R, ldr, row, col);")
                    o.line("if (inside && col + 1 < N) r1 = load_residual(R, ldr, row, col + 1);")
            else:
                o.line("(void)N; (void)col;")
            if not reads:
                o.line("(void)M; (void)row;")
            o.line("x = fuse_chain(x, m, n0, c0, r0, alpha, beta);")
            o.line("y = fuse_chain(y, m, n1, c1, r1, alpha, beta);")

    def pair(self, c: str, row: str, m: str, n0: str, n1: str, x: str, y: str, r: str = "R") -> str:
        """The statement that applies the chain to the pair (`x`, `y`) at (`row`, `col`) of C (`c`, row-major),
        `m` their row's values, `n0` and `n1` their columns', `r` the residual's pointer (null: not read)."""
        residual = f"{r}, ldr, " if self.chain.residual is not None else ""
        return f"fuse_pair({c}, ldc, {residual}M, N, {row}, col, {m}, {n0}, {n1}, alpha, beta, {x}, {y});"

    def staged(self, axis: ir.Broadcast, buffer: str, offsets: dict[str, int], index: str) -> str:
        """A `fuse_m` or `fuse_n` from a tile's vectors staged as f32 in `buffer` (each vector's first value at
        `offsets[name]`), at `index` within the tile."""
        fields = ", ".join(f"{buffer}[{offsets[member.pointer]} + {index}]" for member in self.members(axis))
        return f"fuse_{axis.value}{{{fields}}}"

    def load_for_tile(self, member: Member, index: str) -> str:
        """`member`'s value at row or column `index` of the tile's GEMM: a grouped spec's col_scale is G x N, the
        tile's group's N values starting at group * N (`group`, the grouped scheduler's)."""
        if self.spec.problem.grouped and member.pointer == "col_scale":
            index = f"(long long)group * N + {index}"
        return member.load(index)

    def load_row(self, row: str) -> str:
        """A `fuse_m` for row `row` of C (0s past M)."""
        return self._load(ir.Broadcast.M, row, "M")

    def load_col(self, col: str) -> str:
        """A `fuse_n` for column `col` of C (0s past N)."""
        return self._load(ir.Broadcast.N, col, "N")

    def _load(self, axis: ir.Broadcast, index: str, extent: str) -> str:
        pointers = [member.pointer for member in self.members(axis)]
        return f"load_fuse_{axis.value}({', '.join(pointers + [index, extent])})"

    def element(self, acc: str, m: str, n: str, c: str, row: str, col: str, alpha: str = "alpha") -> str:
        """The chain's value for one element: `m` and `n` its row's and column's loaded values, `c` C's old
        value (an expression, used only with alpha_beta), `row` and `col` its place in C."""
        r = f"load_residual(R, ldr, {row}, {col})" if self.chain.residual is not None else "0.0f"
        return f"fuse_chain({acc}, {m}, {n}, {c}, {r}, {alpha}, beta)"
