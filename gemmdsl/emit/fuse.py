"""The fuse chain (docs/fusion.md) as C: one rendering that the three paths' epilogues call.

Each epilogue reaches a point where it holds an element's f32 accumulator and knows the element's row
and column of C; there it calls `fuse_chain` on it. What belongs to a whole row (a row scale, a bias
along m) is loaded once into a `fuse_m`, and what belongs to a whole column into a `fuse_n`: a thread's
accumulators share rows and columns (an FMA micro tile, an mma fragment's pairs, a wgmma warp's rows),
so each path loads these before its stores, once per row or column it holds, and the per-element work is
the arithmetic, C's old value where beta needs it, and the residual's one load.

What each step adds (its members, helpers and statement) is its op's (gemmdsl/fuse_ops/); this module
puts the chain's steps together.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..abi import fuse_parameters
from ..emitter import Emitter
from ..fuse_ops import Operand


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
    scalar: bool = False  # one value for the launch (a per-tensor scale), the same at every index

    def load(self, index: str) -> str:
        return to_float(self.dtype, f"{self.pointer}[{'0' if self.scalar else index}]")


class FuseChain:
    """The chain of one spec: the helpers it needs in the file and the call each epilogue makes."""

    def __init__(self, spec: ir.KernelSpec):
        assert spec.fuse is not None
        self.spec = spec
        self.chain = spec.fuse
        self.alpha_beta = spec.problem.epilogue is ir.Epilogue.ALPHA_BETA

    def members(self, axis: ir.Broadcast) -> list[Member]:
        """What one row (m) or column (n) of C carries: each step's vectors along it, in chain order, and with a
        row's its scalars (read with each row's values: a few loads of one address per thread, from L1)."""
        return [Member(operand.field, operand.parameter, operand.dtype, scalar=operand.kind.uniform)
                for step in self.chain.steps for operand in step.operands()
                if operand.kind.carried_along(operand) is axis]

    def staged_members(self, axis: ir.Broadcast) -> list[Member]:
        """The members a producer stages per tile in shared memory: the vectors (a scalar is read directly)."""
        return [member for member in self.members(axis) if not member.scalar]

    @property
    def matrix(self) -> Operand | None:
        """The chain's matrix operand (fuse_ops.Operand), read per element as `r`; None without one."""
        return next((operand for operand in self.chain.operands if operand.kind.per_element), None)

    def emit_helpers(self, o: Emitter) -> None:
        """The structs of a row's and a column's values, their loaders, the steps' helpers and `fuse_chain`."""
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
        matrix = self.matrix
        if matrix is not None:
            pointer, ld = matrix.parameter, matrix.ld
            offset = (f"(size_t)row * {ld} + col" if matrix.layout is ir.MatrixLayout.ROW
                      else f"(size_t)col * {ld} + row")
            with o.block(f"static __device__ __forceinline__ float load_{matrix.name}({parameters[pointer]} "
                         f"{pointer}, int {ld}, int row, int col)"):
                o.line(f"return {to_float(matrix.dtype, f'{pointer}[{offset}]')};")
        for step in self.chain.steps:
            for line in step.c_helpers(self.spec):
                o.line(line)
        o.comment("One element: acc its accumulator, m and n its row's and column's values, c its old value in C\n"
                  "(read only where beta is not 0), r its residual.")
        with o.block("static __device__ __forceinline__ float fuse_chain(float acc, const fuse_m& m, const fuse_n& n, "
                     "float c, float r, float alpha, float beta)"):
            self._emit_body(o)

    def _emit_body(self, o: Emitter) -> None:
        used = set()
        scaling = [step for step in self.chain.steps if step.order < ir.FUSE_BETA_ORDER]
        factors = [factor for step in scaling for factor in step.c_factors()]
        if factors:
            o.line(f"float x = acc * {' * '.join(factors)};")
        elif self.alpha_beta and not scaling:
            o.line("float x = alpha * acc;")
            used.add("alpha")
        else:
            o.line("float x = acc;")
        if self.alpha_beta:
            o.line("x += beta * c;")
            used.update(("beta", "c"))
        for step in self.chain.steps:
            statement = step.c_statement(self.spec) if step.order >= ir.FUSE_BETA_ORDER else None
            if statement is not None:
                o.line(statement)
            if step.uses_r:
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
        matrix = self.matrix
        residual = "".join(f"{ctype} {name}, " for operand in (matrix,) * (matrix is not None)
                           for ctype, name in operand.parameters)
        with o.block(f"static __device__ __forceinline__ void fuse_pair(const {c.c_type}* C, int ldc, {residual}int M, "
                     "int N, int row, int col, const fuse_m& m, const fuse_n& n0, const fuse_n& n1, float alpha, "
                     "float beta, float& x, float& y)"):
            o.line("float c0 = 0.0f, c1 = 0.0f, r0 = 0.0f, r1 = 0.0f;")
            reads = self.alpha_beta or matrix is not None
            if reads:
                o.line("const bool inside = row < M;  // rows past M are not stored: nothing to read for them")
            if self.alpha_beta:
                with o.block("if (beta != 0.0f)"):
                    o.line(f"if (inside && col < N) c0 = {to_float(c, 'C[(size_t)row * ldc + col]')};")
                    o.line(f"if (inside && col + 1 < N) c1 = {to_float(c, 'C[(size_t)row * ldc + col + 1]')};")
            else:
                o.line("(void)C; (void)ldc;")
            if matrix is not None:
                pointer, ld = matrix.parameter, matrix.ld
                o.line(f"// A null {pointer}: the epilogue adds {pointer} from shared memory itself.")
                with o.block(f"if ({pointer} != nullptr)"):
                    o.line(f"if (inside && col < N) r0 = load_{matrix.name}({pointer}, {ld}, row, col);")
                    o.line(f"if (inside && col + 1 < N) r1 = load_{matrix.name}({pointer}, {ld}, row, col + 1);")
            else:
                o.line("(void)N; (void)col;")
            if not reads:
                o.line("(void)M; (void)row;")
            o.line("x = fuse_chain(x, m, n0, c0, r0, alpha, beta);")
            o.line("y = fuse_chain(y, m, n1, c1, r1, alpha, beta);")

    def pair(self, c: str, row: str, m: str, n0: str, n1: str, x: str, y: str, r: str = "R") -> str:
        """The statement that applies the chain to the pair (`x`, `y`) at (`row`, `col`) of C (`c`, row-major),
        `m` their row's values, `n0` and `n1` their columns', `r` the residual's pointer (null: not read)."""
        residual = f"{r}, {self.matrix.ld}, " if self.matrix is not None else ""
        return f"fuse_pair({c}, ldc, {residual}M, N, {row}, col, {m}, {n0}, {n1}, alpha, beta, {x}, {y});"

    def staged(self, axis: ir.Broadcast, buffer: str, offsets: dict[str, int], index: str) -> str:
        """A `fuse_m` or `fuse_n` from a tile's vectors staged as f32 in `buffer` (each vector's first value at
        `offsets[name]`), at `index` within the tile."""
        fields = ", ".join(member.load(index) if member.scalar else f"{buffer}[{offsets[member.pointer]} + {index}]"
                           for member in self.members(axis))
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
        matrix = self.matrix
        r = (f"load_{matrix.name}({matrix.parameter}, {matrix.ld}, {row}, {col})" if matrix is not None
             else "0.0f")
        return f"fuse_chain({acc}, {m}, {n}, {c}, {r}, {alpha}, beta)"
