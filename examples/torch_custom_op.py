"""A gemmdsl kernel as a PyTorch custom op, so that it works under torch.compile.

    PYTHONPATH=. python examples/torch_custom_op.py [SPEC]     # default: specs/checked_v3.gemm

torch.compile cannot trace into a raw kernel launch. An op registered with
`torch.library.custom_op` is opaque to it instead: Dynamo records a call to
`gemmdsl::matmul`, and the op's fake implementation (`register_fake`) tells it the
output's shape, dtype and strides without running anything. When the graph runs, the op
calls the kernel, which reads the tensors' own memory and launches on PyTorch's current
stream, so it is ordered with the compiled code around it.

The fake must describe exactly what the real op returns: a new tensor laid out as the
spec's C (`torch.empty(n, m).t()` for a column-major one), never a view of an input.
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch

import gemmdsl

SPEC = Path(__file__).resolve().parent.parent / "specs" / "checked_v3.gemm"  # bounds: checked, any shape


@functools.cache
def kernel_for(spec: str):
    return gemmdsl.load(spec)


@torch.library.custom_op("gemmdsl::matmul", mutates_args=())
def matmul(a: torch.Tensor, b: torch.Tensor, spec: str) -> torch.Tensor:
    """A @ B with the kernel of `spec` (a .gemm path); C is a new tensor on A's device."""
    return kernel_for(spec)(a, b)


@matmul.register_fake
def _(a: torch.Tensor, b: torch.Tensor, spec: str) -> torch.Tensor:
    m, n = a.shape[-2], b.shape[-1]
    requirements = kernel_for(spec).requirements
    dtype = getattr(torch, requirements.dtypes["C"])  # C's own type (a BF16 spec may write an f32 C)
    if requirements.layouts["C"] == "row":
        return a.new_empty((m, n), dtype=dtype)
    return a.new_empty((n, m), dtype=dtype).t()


def relative_error(actual: torch.Tensor, reference: torch.Tensor) -> float:
    return float((actual.double() - reference).norm() / reference.norm())


def main(spec: str | Path = SPEC) -> dict[str, float]:
    """Run the op eagerly and inside a torch.compile'd function; their errors against float64 torch.matmul."""
    spec = str(spec)
    a = torch.randn(512, 256, device="cuda")
    b = torch.randn(256, 384, device="cuda")
    reference = torch.matmul(a.double(), b.double())
    compiled = torch.compile(lambda x, y: matmul(x, y, spec) * 2 + 1, fullgraph=True)  # no graph break allowed
    errors = {"eager": relative_error(matmul(a, b, spec), reference),
              "torch.compile": relative_error((compiled(a, b) - 1) / 2, reference)}
    for name, error in errors.items():
        print(f"{name:>13}: relative error {error:.2e} against float64 torch.matmul")
    return errors


if __name__ == "__main__":
    main(*sys.argv[1:2])
