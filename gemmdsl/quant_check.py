"""What `gemmdsl check` states of a quantized spec (docs/quantized.md): the bytes per weight in the kernel's layout,
the HBM bound of the call (the time to stream A, the packed B with its scales and zero points, and C at the GPU
profile's bandwidth: a decode call cannot run faster), the dequantization's instruction cost per k-tile as
the path's facts state it (paths/facts.py), and what the prefill route (runtime.QuantizedLinear) adds to a dense
GEMM: the packed B read and W written in A's type once, at the same bandwidth."""
from __future__ import annotations

from dataclasses import dataclass

from . import ir
from .gpu_profile import profile_for
from .paths import DequantCost
from .quant_layout import QuantFormat, packed_bytes
from .targets import MEMORY_TBPS


@dataclass(frozen=True)
class QuantFacts:
    weight_bytes: int  # B in the kernel's layout: packed codes, scales, zero points
    code_bytes: float  # of which the codes alone
    a_bytes: int
    c_bytes: int
    hbm_tbps: float
    bandwidth_source: str  # the GPU profile, or the architecture's datasheet figure
    dequantization: DequantCost | None
    expanded_bytes: int  # W in A's type, which the prefill route's dequantize kernel writes

    def bytes_per_weight(self, n: int, k: int) -> float:
        return self.weight_bytes / (n * k)

    @property
    def total_bytes(self) -> int:
        return self.a_bytes + self.weight_bytes + self.c_bytes

    @property
    def hbm_seconds(self) -> float:
        return self.total_bytes / (self.hbm_tbps * 1e12)

    @property
    def dequantize_bytes(self) -> int:
        """The prefill route's dequantize kernel: the packed B read, W written."""
        return self.weight_bytes + self.expanded_bytes

    @property
    def dequantize_seconds(self) -> float:
        return self.dequantize_bytes / (self.hbm_tbps * 1e12)


def quant_facts(spec: ir.KernelSpec, problem: tuple[int, int, int], dequantization: DequantCost | None) -> QuantFacts:
    m, n, k = problem
    fmt = QuantFormat.of(spec)
    profile = profile_for(spec.target.sm)
    tbps, source = ((profile.hbm_tbps, f"profile {profile.name}") if profile is not None else
                    (MEMORY_TBPS[spec.target.sm], f"sm_{spec.target.sm}'s datasheet"))
    return QuantFacts(weight_bytes=packed_bytes(n, k, fmt), code_bytes=n * k * spec.problem.b.dtype.bits / 8,
                      a_bytes=m * k * spec.problem.a.dtype.bytes, c_bytes=m * n * spec.problem.c.dtype.bytes,
                      hbm_tbps=tbps, bandwidth_source=source, dequantization=dequantization,
                      expanded_bytes=n * k * spec.problem.a.dtype.bytes)


def quant_lines(spec: ir.KernelSpec, problem: tuple[int, int, int], facts: QuantFacts) -> list[str]:
    m, n, k = problem
    quant, b = spec.quant, spec.problem.b.dtype
    group = "per output channel" if quant.group is None else f"group {quant.group}"
    zeros = ", zero points" if quant.zeros else ""
    per_weight = facts.bytes_per_weight(n, k)
    cost = facts.dequantization
    return [
        f"Quantized B: {b.value}, {group}{zeros}: {per_weight:.4g} bytes per weight "
        f"({facts.code_bytes / (n * k):.4g} codes + {per_weight - facts.code_bytes / (n * k):.4g} scales, zero "
        "points and padding)",
        f"HBM bound at {m}x{n}x{k}: {facts.total_bytes:,} bytes (A {facts.a_bytes:,}, B {facts.weight_bytes:,}, "
        f"C {facts.c_bytes:,}) take {facts.hbm_seconds * 1e6:.3g} us at {facts.hbm_tbps:g} TB/s "
        f"({facts.bandwidth_source})",
        "Dequantization: no dequantizing path states its cost" if cost is None else
        f"Dequantization: {cost.instructions} instructions per consumer thread per k-tile ({cost.detail})",
        f"Prefill route (runtime.QuantizedLinear): W dequantized into memory first, {facts.dequantize_bytes:,} "
        f"bytes (B read, {facts.expanded_bytes:,} of {spec.problem.a.dtype.value} written), at least "
        f"{facts.dequantize_seconds * 1e6:.3g} us before the dense GEMM",
    ]


def quant_json(spec: ir.KernelSpec, problem: tuple[int, int, int], facts: QuantFacts) -> dict:
    m, n, k = problem
    cost = facts.dequantization
    return {"weight": spec.problem.b.dtype.value, "group": spec.quant.group, "zeros": spec.quant.zeros,
            "bytes_per_weight": round(facts.bytes_per_weight(n, k), 6), "weight_bytes": facts.weight_bytes,
            "hbm_bytes": facts.total_bytes, "hbm_tbps": facts.hbm_tbps,
            "hbm_bound_us": round(facts.hbm_seconds * 1e6, 4),
            "prefill_dequantize_bytes": facts.dequantize_bytes,
            "prefill_dequantize_us": round(facts.dequantize_seconds * 1e6, 4),
            "dequantization": None if cost is None else {"instructions_per_k_tile": cost.instructions,
                                                         "detail": cost.detail}}
