"""A transformer MLP whose first projection and GELU run as one gemmdsl kernel (specs/linear_gelu.gemm),
registered as a PyTorch custom op so that it works under torch.compile.

    PYTHONPATH=. python examples/torch_fused_mlp.py

`nn.Linear(d, h)` then `GELU(approximate="tanh")` is C = gelu_tanh(X @ W^T + bias): linear_gelu computes
it in its epilogue, reading W as nn.Linear stores it (h x d, row-major, which is W^T column-major). The
op's fake implementation tells torch.compile the output's shape and type without running anything.
The script runs the MLP eagerly, fused, and fused under torch.compile, and compares each with float64.
"""
from __future__ import annotations

import functools
from pathlib import Path

import torch

import gemmdsl

SPEC = Path(__file__).resolve().parent.parent / "specs" / "linear_gelu.gemm"


@functools.cache
def linear_gelu_kernel():
    return gemmdsl.load(SPEC)


@torch.library.custom_op("gemmdsl::linear_gelu", mutates_args=())
def linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(x @ weight^T + bias) in one kernel; x: (tokens, d), weight: (h, d), bias: (h,), BF16."""
    return linear_gelu_kernel()(x, weight.T, bias=bias)


@linear_gelu.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return x.new_empty((x.shape[0], weight.shape[0]))


class MLP(torch.nn.Module):
    def __init__(self, d: int, h: int, fused: bool):
        super().__init__()
        self.up, self.down, self.fused = torch.nn.Linear(d, h), torch.nn.Linear(h, d), fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            hidden = linear_gelu(x, self.up.weight, self.up.bias)
        else:
            hidden = torch.nn.functional.gelu(self.up(x), approximate="tanh")
        return self.down(hidden)


def relative_error(actual: torch.Tensor, reference: torch.Tensor) -> float:
    return float((actual.double() - reference).norm() / reference.norm())


def main(tokens: int = 1000, d: int = 1024, h: int = 4096) -> dict[str, float]:
    """Errors against float64 of the unfused MLP, the fused one, and the fused one under torch.compile."""
    torch.manual_seed(0)
    unfused = MLP(d, h, fused=False).cuda().to(torch.bfloat16)
    fused = MLP(d, h, fused=True).cuda().to(torch.bfloat16)
    fused.load_state_dict(unfused.state_dict())
    x = torch.randn(tokens, d, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        up = unfused.up
        hidden = torch.nn.functional.gelu(x.double() @ up.weight.double().T + up.bias.double(), approximate="tanh")
        reference = hidden @ unfused.down.weight.double().T + unfused.down.bias.double()
        compiled = torch.compile(fused, fullgraph=True)
        errors = {"PyTorch": relative_error(unfused(x), reference), "gemmdsl": relative_error(fused(x), reference),
                  "gemmdsl, torch.compile": relative_error(compiled(x), reference)}
    for name, error in errors.items():
        print(f"{name:>22}: relative error {error:.2e} against float64")
    return errors


if __name__ == "__main__":
    main()
