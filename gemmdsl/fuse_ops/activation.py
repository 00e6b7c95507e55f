"""`activation: relu | gelu | gelu_tanh | silu`: an elementwise function of the f32 value (docs/fusion.md).

Device functions: relu; gelu with erff (2 ulp). Where C is f32, gelu_tanh with tanhf (2 ulp) and silu as
x / (1 + __expf(-x)) (__expf: 2 + 1.16 |x| ulp). Where C is 16-bit, whose rounding (bf16 2^-8, f16 2^-11
relative) bounds what the chain can deliver, gelu_tanh and silu use the hardware's tanh (`tanh.approx.f32`,
one MUFU instruction, relative error below 2^-10.98), silu as x * (1 + tanh(x / 2)) / 2: tanhf costs about
twenty instructions an element, which on a 128x256 wgmma tile made the epilogue as long as a third of
the tile's main loop (linear_gelu at 4096^3 on the H100: 0.206 ms against 0.175 for the same kernel
without the chain).

Costs per element, (FP32 and integer instructions, SFU instructions: ex2, rcp), counted in the PTX nvcc 13.0
emits for sm_90a (tests/test_fuse_cost.py recounts them where nvcc is installed): gelu's erff is a polynomial
with one ex2; gelu_tanh's tanhf one ex2 and one rcp; silu's division (div.rn.f32) is ptxas's rcp and a Newton
step, counted as 1 SFU and 7 FP32 beside __expf's ex2.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import ir
from ..value_readers import Choice
from .base import Work, FuseStep, register

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
ACTIVATION_OPS: dict[ir.Activation, tuple[int, int]] = {
    ir.Activation.RELU: (1, 0),
    ir.Activation.GELU: (27, 1),
    ir.Activation.GELU_TANH: (22, 2),
    ir.Activation.SILU: (9, 2),
}
# Through the hardware's tanh (FAST_ACTIVATIONS): gelu_tanh and silu become a few products around one
# tanh.approx.f32, counted the same way.
FAST_ACTIVATION_OPS: dict[ir.Activation, tuple[int, int]] = {
    **ACTIVATION_OPS,
    ir.Activation.GELU_TANH: (7, 1),
    ir.Activation.SILU: (3, 1),
}

GELU_TANH_C = math.sqrt(2.0 / math.pi)
_erf = np.vectorize(math.erf, otypes=[np.float64])
REFERENCES = {
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(GELU_TANH_C * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}


def fast_activations(spec: ir.KernelSpec) -> bool:
    """The activations run through the hardware's tanh: C is 16-bit, and its rounding bounds the chain's error."""
    return spec.problem.c.dtype is not ir.DType.F32


@register
@dataclass(frozen=True, kw_only=True)
class ActivationStep(FuseStep):
    key = "activation"
    syntax = Choice(ir.Activation, "an activation", tuple(a.value for a in ir.Activation))
    order = 40

    function: ir.Activation

    @classmethod
    def from_value(cls, value: ir.Activation, span) -> "ActivationStep":
        return cls(span=span, function=value)

    @property
    def value(self) -> ir.Activation:
        return self.function

    def metadata(self) -> str:
        return self.function.value

    def describe(self, x: str) -> str:
        return f"{self.function.value}({x})"

    def c_helpers(self, spec: ir.KernelSpec) -> tuple[str, ...]:
        body = (FAST_ACTIVATIONS if fast_activations(spec) else ACTIVATIONS)[self.function]
        lines = TANH_APPROX.splitlines() if "tanh_approx" in body else []
        return (*lines, f"static __device__ __forceinline__ float {self.function.value}(float x) {{",
                f"    return {body};", "}")

    def c_statement(self, spec: ir.KernelSpec) -> str:
        return f"x = {self.function.value}(x);"

    @staticmethod
    def reference(entry: str, x: Any, operands: dict[str, Any]) -> Any:
        return REFERENCES[entry](x)

    def work(self, spec: ir.KernelSpec, reads: Any) -> Work:
        alu, sfu = (FAST_ACTIVATION_OPS if fast_activations(spec) else ACTIVATION_OPS)[self.function]
        return Work(alu=alu, sfu=sfu)
