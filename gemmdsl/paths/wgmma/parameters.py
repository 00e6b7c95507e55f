"""The wgmma kernel's parameters (abi.kernel_parameters is the tile paths'): the launch plan carries them to the
C launcher and, through NAME.json, to the Python runtime (runtime.tensor_map_kernel_arguments)."""
from __future__ import annotations

from ... import ir
from ...abi import Parameter, fuse_parameters, grouped_parameters, pointer_type, tensor_map_type


def kernel_parameters(spec: ir.KernelSpec) -> tuple[Parameter, ...]:
    """(C type, name) of a wgmma kernel's parameters: A and B reach it as TMA tensor maps (which hold
    their pointers and leading dimensions), C as a pointer."""
    tensor_map = f"const __grid_constant__ {tensor_map_type(spec)}"
    maps = ((tensor_map, "map_a"), (tensor_map, "map_b"))
    if spec.pipeline.store is ir.StoreMode.TMA:  # C's too, for the staged epilogue's bulk stores
        maps += ((tensor_map, "map_c"),)
    # A batch's C is C_batch; each tile's GEMM names its own `C` (paths/wgmma/persistent.py); the maps have a third
    # dimension, the GEMM.
    c = "C_batch" if spec.problem.batched else "C"
    # A grouped launch's M is every group's rows; inside a tile, `M` names the tile's group's end.
    rows = "rows" if spec.problem.grouped else "M"
    parameters = (*maps, (pointer_type(spec, ir.Operand.C), c),
                  ("int", rows), ("int", "N"), ("int", "K"), ("int", "ldc"), ("float", "alpha"), ("float", "beta"),
                  *fuse_parameters(spec))
    if spec.problem.batched:
        parameters += (("int", "batch"), ("long long", "stride_c"))
    parameters += grouped_parameters(spec)
    if spec.block.stream_k:  # the call's split and the workspace (paths/wgmma/stream_k.py)
        parameters += (("int", "sk_tiles"), ("int", "sk_blocks"), ("float*", "partials"), ("unsigned*", "flags"))
    return parameters
