"""The kernel file's interface: entry and launcher names, kernel parameters, limits on arguments.

What the compiler's metadata, the C launcher, the C kernels and the Python runtime must agree on,
stated once. It depends only on the spec, so the plan (plan.py) reads it before anything is emitted.
"""
from __future__ import annotations

from . import ir

MAX_BATCH = 65535  # gridDim.z
MAX_INT = 2147483647

Parameter = tuple[str, str]  # (C type, name)


def size_errors(size: tuple[int, int, int], tile: tuple[int, int, int] | None = None) -> list[str]:
    """Why the C launchers refuse the problem M x N x K: each size is an int, and with a spec's block tile
    BM x BN x BK so is each tile coordinate, up to the size plus its block tile, and the count of C's tiles
    (the blocks of a launch). Empty where they take it."""
    if tile is None:
        return [f"{dim}={extent} is more than {MAX_INT}, the largest size the launchers take (M, N and K are "
                f"C ints)" for dim, extent in zip("MNK", size) if extent > MAX_INT]
    errors = [f"{dim}={extent} is more than {MAX_INT - step}: the kernels' tile coordinates, up to {dim} + "
              f"{tile_name} = {dim} + {step}, are 32-bit ints"
              for dim, extent, tile_name, step in zip("MNK", size, ("BM", "BN", "BK"), tile) if extent > MAX_INT - step]
    tiles = -(-size[0] // tile[0]) * -(-size[1] // tile[1])
    if not errors and tiles > MAX_INT:
        errors.append(f"{size[0]}x{size[1]} is {tiles:,} tiles of {tile[0]}x{tile[1]}: a launch of more blocks "
                      f"than the launchers count in an int ({MAX_INT:,})")
    return errors


def build_command(name: str, target: ir.Target) -> str:
    """How to compile NAME.cu for its target, as the file's comments and NAME.h state it."""
    return f"nvcc {arch_flag(str(target))} -c {name}.cu"


def arch_flag(target: str) -> str:
    """nvcc's flag for one target: -arch=sm_XX; for an arch-specific sm_XXa the explicit
    -gencode=arch=compute_XXa,code=sm_XXa, since nvcc 13's -arch=sm_90a also compiles a compute_90 pass
    (embedded as PTX), which has no wgmma or setmaxnreg and which the file's guard stops (emit.arch_guard)."""
    if target.endswith("a"):
        code = target.removeprefix("sm_")
        return f"-gencode=arch=compute_{code},code=sm_{code}"
    return f"-arch={target}"


def prepare_parameters(spec: ir.KernelSpec) -> tuple[Parameter, ...]:
    """(C type, name) of the parameters of the kernel that sets the stream-K tiles of C to beta * C."""
    parameters = [("float*", "C"), ("int", "M"), ("int", "N"), ("int", "ldc"), ("float", "beta")]
    if spec.problem.batched:
        parameters.append(("long long", "stride_c"))
    return tuple(parameters + [("int", "sk_tiles")])


def scale_c_parameters(spec: ir.KernelSpec) -> tuple[Parameter, ...]:
    """(C type, name) of the parameters of the kernel that computes a K = 0 call (C = beta * C, then the fuse
    chain): C, its shape, beta, the chain's operands and a batch's C stride."""
    parameters = [(pointer_type(spec, ir.Operand.C), "C"), ("int", "M"), ("int", "N"), ("int", "ldc"),
                  ("float", "beta"), *fuse_parameters(spec)]
    if spec.problem.batched:
        parameters.append(("long long", "stride_c"))
    return tuple(parameters) + grouped_parameters(spec)


def grouped_parameters(spec: ir.KernelSpec) -> tuple[Parameter, ...]:
    """A grouped spec's groups (paths/wgmma/grouped.py): `offs`, G int32 cumulative row ends on the GPU, and G;
    none for other specs."""
    return (("const int*", "offs"), ("int", "groups")) if spec.problem.grouped else ()


def scale_c_entry(spec: ir.KernelSpec) -> str:
    """The kernel that runs a K = 0 call: no products, so C is the epilogue of a zero accumulator."""
    return f"{spec.name}_scale_c"


def vector_entry(spec: ir.KernelSpec) -> str:
    return f"{spec.name}_kernel"


def scalar_entry(spec: ir.KernelSpec) -> str:
    return f"{spec.name}_kernel_scalar"


def narrow_entry(spec: ir.KernelSpec, width_bytes: int, stream_k: bool = False) -> str:
    """The kernel (or its stream-K twin) whose global accesses are at most `width_bytes` wide."""
    return f"{spec.name}_kernel{'_stream_k' if stream_k else ''}_{width_bytes}byte"


def pad_operands_entry(spec: ir.KernelSpec) -> str:
    """The kernel that copies A and B into rows TMA can read (paths/wgmma/pad.py)."""
    return f"{spec.name}_pad_operands"


def padded_launcher_name(spec: ir.KernelSpec) -> str:
    """The launcher that runs NAME_launch_ld on those copies (paths/wgmma/pad.py)."""
    return f"{spec.name}_launch_ld_padded"


def interior_entry(spec: ir.KernelSpec) -> str:
    return f"{spec.name}_kernel_interior"


def interior_partial_k_entry(spec: ir.KernelSpec) -> str:
    return f"{spec.name}_kernel_interior_partial_k"


def stream_k_entry(spec: ir.KernelSpec) -> str:
    return f"{spec.name}_kernel_stream_k"


def stream_k_scalar_entry(spec: ir.KernelSpec) -> str:
    return f"{spec.name}_kernel_stream_k_scalar"


def prepare_entry(spec: ir.KernelSpec) -> str | None:
    """The kernel that sets the stream-K tiles of C to beta * C before the GEMM adds into them."""
    return f"{spec.name}_prepare_c" if spec.block.stream_k else None


def pointer_type(spec: ir.KernelSpec, operand: ir.Operand) -> str:
    """`const float*`, `const __nv_bfloat16*`, ... for A and B; C's pointer is writable."""
    element = spec.problem.matrix(operand).dtype.c_type
    return f"{element}*" if operand is ir.Operand.C else f"const {element}*"


def fuse_parameters(spec: ir.KernelSpec) -> tuple[Parameter, ...]:
    """(C type, name) of what the spec's fuse chain reads (docs/fusion.md), each step's operands in the ops'
    operand order (gemmdsl/fuse_ops/base.py): the bias vector, the residual and its leading dimension, the row
    and column scales or A's and B's block scales; none without a fuse section."""
    if spec.fuse is None:
        return ()
    return tuple(parameter for operand in spec.fuse.operands for parameter in operand.parameters)


def fuse_arguments(spec: ir.KernelSpec) -> str:
    """The fuse parameters' names as a call passes them on, each followed by ', ' ('' without a chain)."""
    return "".join(f"{name}, " for _, name in fuse_parameters(spec))


def kernel_parameters(spec: ir.KernelSpec, stream_k: bool = False) -> tuple[Parameter, ...]:
    """(C type, name) of every parameter of the spec's kernel, or of its stream-K kernel, in order."""
    parameters = [(pointer_type(spec, op), op.value.upper()) for op in ir.Operand]
    parameters += [("int", "M"), ("int", "N"), ("int", "K"), ("int", "lda"), ("int", "ldb"), ("int", "ldc"),
                   ("float", "alpha"), ("float", "beta"), *fuse_parameters(spec)]
    if spec.problem.batched:
        parameters += [("long long", "stride_a"), ("long long", "stride_b"), ("long long", "stride_c")]
    if stream_k:
        parameters.append(("int", "sk_tiles"))
    return tuple(parameters)


def tensor_map_type(spec: ir.KernelSpec) -> str:
    """The kernel's by-value tensor-map parameter type: CUtensorMap's 128 bytes, 64-byte aligned, declared
    in the .cu itself so that the kernel part compiles without the driver API's header (NVRTC)."""
    return f"{spec.name}_tensor_map"


def launcher_parameters(spec: ir.KernelSpec) -> dict[str, str]:
    """The parameter list of each launcher the file defines, keyed like `launcher_names`: what the
    launchers are defined with and what a C header declares."""
    a, b, c = (pointer_type(spec, op) for op in ir.Operand)
    scalars = ", ".join([f"{ctype} {name}" for ctype, name in (*grouped_parameters(spec), *fuse_parameters(spec))]
                        + ["float alpha, float beta, cudaStream_t stream"])
    parameters = {"launcher": f"{a} A, {b} B, {c} C, int M, int N, int K, {scalars}",
                  "launcher_ld": f"{a} A, int lda, {b} B, int ldb, {c} C, int ldc, int M, int N, int K, {scalars}"}
    if spec.problem.batched:
        parameters["launcher_batched"] = (f"{a} A, int lda, long long stride_a, {b} B, int ldb, long long stride_b, "
                                          f"{c} C, int ldc, long long stride_c, int M, int N, int K, int batch, "
                                          f"{scalars}")
    return parameters


def launcher_names(spec: ir.KernelSpec) -> dict[str, str | None]:
    return {"launcher": f"{spec.name}_launch", "launcher_ld": f"{spec.name}_launch_ld",
            "launcher_batched": f"{spec.name}_launch_batched" if spec.problem.batched else None}


def leading_name(operand: ir.Operand) -> str:
    return f"ld{operand.value}"


def _extents(spec: ir.KernelSpec, operand: ir.Operand) -> tuple[str, str]:
    """(outer, contiguous) dimensions of an operand's global matrix: rows then columns when row-major."""
    rows, cols = {ir.Operand.A: ("M", "K"), ir.Operand.B: ("K", "N"), ir.Operand.C: ("M", "N")}[operand]
    return (rows, cols) if spec.problem.matrix(operand).layout is ir.MatrixLayout.ROW else (cols, rows)


def contiguous_extent(spec: ir.KernelSpec, operand: ir.Operand) -> str:
    """The dimension that runs contiguously in an operand's global matrix: its smallest leading dimension."""
    return _extents(spec, operand)[1]


def outer_extent(spec: ir.KernelSpec, operand: ir.Operand) -> str:
    """The other one: how many leading dimensions one matrix spans."""
    return _extents(spec, operand)[0]


def leading_dimension_limit(spec: ir.KernelSpec, operand: ir.Operand) -> int:
    """Largest leading dimension the kernel takes: offsets inside a tile of A or B (row * ld + col)
    are ints; C's rows are addressed in 64 bits."""
    if operand is ir.Operand.C:
        return MAX_INT
    return MAX_INT // spec.global_tile(operand)[0]


def tile_count(spec: ir.KernelSpec, extent: str, tile: str) -> str:
    """C expression for the number of tiles along a dimension: exact kernels divide, checked round up."""
    return f"({extent} + {tile} - 1) / {tile}" if spec.problem.checked else f"{extent} / {tile}"
