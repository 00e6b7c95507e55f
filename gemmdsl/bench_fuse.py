"""What `bench` times a fused kernel against: the best PyTorch offers for the same chain (docs/fusion.md).

- `torch unfused`: what a PyTorch user writes, `torch.mm` and then one elementwise op per step of the
  chain (scales, bias, activation, residual), each a pass over C.
- `cuBLASLt`: cuBLASLt's own fused epilogue, where one computes the chain: a bias along n followed by
  ReLU or GELU (tanh), C of the inputs' type, through `torch._addmm_activation`.

Every baseline reads the very arrays the kernel reads (CuPy arrays through DLPack, without copies).
"""
from __future__ import annotations

from typing import Any, Callable

ACTIVATIONS = {"relu": lambda F, x: F.relu(x), "gelu": lambda F, x: F.gelu(x),
               "gelu_tanh": lambda F, x: F.gelu(x, approximate="tanh"), "silu": lambda F, x: F.silu(x)}
# cuBLASLt's epilogues that `torch._addmm_activation` reaches: use_gelu=True is GELU with tanh.
CUBLASLT_ACTIVATIONS = {"relu": False, "gelu_tanh": True}


def as_torch(x: Any) -> Any:
    import torch

    return x if isinstance(x, torch.Tensor) else torch.from_dlpack(x)


def baselines(fuse: dict, a: Any, b: Any, c: Any, chain: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    """Name -> a call computing the chain from A, B and the chain's operands (`bench` calls it with
    alpha 1 and beta 0, so C is only the output's type)."""
    import torch
    import torch.nn.functional as F

    a, b, c = as_torch(a), as_torch(b), as_torch(c)
    operands = {name: as_torch(value) for name, value in chain.items()}
    out_dtype = c.dtype

    def unfused() -> Any:
        x = torch.mm(a, b) if out_dtype == a.dtype else torch.mm(a, b, out_dtype=out_dtype)
        if "row_scale" in operands:
            x = x * operands["row_scale"][:, None]
        if "col_scale" in operands:
            x = x * operands["col_scale"]
        if "bias" in operands:
            x = x + (operands["bias"][:, None] if fuse["bias"]["along"] == "m" else operands["bias"])
        if fuse["activation"] is not None:
            x = ACTIVATIONS[fuse["activation"]](F, x)
        if "residual" in operands:
            x = x + operands["residual"]
        return x

    found = {f"torch unfused: {fuse['formula']}": unfused}
    lt_gelu = CUBLASLT_ACTIVATIONS.get(fuse["activation"])
    bias = operands.get("bias")
    if (lt_gelu is not None and set(operands) == {"bias"} and fuse["bias"]["along"] == "n"
            and bias.dtype == a.dtype == out_dtype):
        found[f"cuBLASLt: {fuse['formula']}"] = lambda: torch._addmm_activation(bias, a, b, use_gelu=lt_gelu)
    return found
