"""A dequantizing decode spec's lowering: its keys read as the kernel's DecodeConfig, and the plan's launch.

    block    { tile: 16x128x2048; }   rows of A per block (8, 16 or 32) x rows of W per block x the k-slice
    threads  { warps: 1x8; }          warps side by side along W's rows; each takes BN / (16 * warps) 16-row tiles
    pipeline { stages: 6; }           chunks of 128-bit weight loads each lane keeps in flight (DecodeConfig's default)
    budget   { blocks_per_sm: 2; }    __launch_bounds__' minimum blocks per SM (DecodeConfig's default)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ... import ir
from ...launch_plan import Entries, LaunchPlan, Requirements
from ...plan import KernelPlan, Role, Variant
from ...quant_layout import TILE_N, QuantFormat
from ...rule import Let
from ...targets import ARCHS, Arch
from .expand import dequantize_entry
from .kernel import DecodeConfig

if TYPE_CHECKING:
    from ..interface import InstructionPath

DEFAULT_BLOCKS_PER_SM = DecodeConfig.blocks_per_sm  # the dataclass field's default
MAX_LEADING_DIMENSION = 2**31 - 1


def decode_config(spec: ir.KernelSpec) -> DecodeConfig:
    """The kernel's configuration from a spec's keys (the module docstring); validation has checked them."""
    block, warps = spec.block, spec.threads.warps.n
    return DecodeConfig(fmt=QuantFormat.of(spec), c=spec.problem.c.dtype.value, warps=warps,
                        tiles=max(1, block.n // (TILE_N * warps)), m_tiles=max(1, block.m // 8), k_slice=block.k,
                        prefetch=spec.pipeline.stages,
                        blocks_per_sm=spec.budget.blocks_per_sm or DEFAULT_BLOCKS_PER_SM)


@dataclass(frozen=True)
class DecodeLayout:
    """The plan's lowering (plan.Variant.layout): what the shared passes and tools read of a kernel (its
    threads, block tile, shared memory, architecture), and the kernel's configuration."""

    spec: ir.KernelSpec
    config: DecodeConfig

    @property
    def arch(self) -> Arch:
        return ARCHS[self.spec.target.sm]

    @property
    def threads(self) -> int:
        return self.config.warps * 32

    @property
    def bm(self) -> int:
        return self.config.m_tiles * 8

    @property
    def bn(self) -> int:
        return self.config.block_rows

    @property
    def bk(self) -> int:
        return self.config.k_slice

    @property
    def smem_bytes(self) -> int:
        return self.config.smem_bytes


def kernel_entry(spec: ir.KernelSpec) -> str:
    return f"{spec.name}_kernel"


def launcher_names(spec: ir.KernelSpec) -> dict[str, str]:
    return {"launcher": f"{spec.name}_launch", "workspace_bytes": f"{spec.name}_workspace_bytes"}


def kernel_parameters(spec: ir.KernelSpec) -> tuple[tuple[str, str], ...]:
    """The kernel's parameters (ctype, name), in order: what the runtime passes."""
    a, c = (spec.problem.matrix(op).dtype.c_type for op in (ir.Operand.A, ir.Operand.C))
    return ((f"const {a}*", "A"), ("const uint4*", "weights"), ("const uint32_t*", "scales"),
            ("const uint32_t*", "zeros"), (f"{c}*", "C"), ("float*", "workspace"), ("unsigned*", "counters"),
            ("int", "M"), ("int", "N"), ("int", "K"))


def decode_plan(spec: ir.KernelSpec, path: InstructionPath) -> KernelPlan:
    layout = DecodeLayout(spec, decode_config(spec))
    config = layout.config
    entry = kernel_entry(spec)
    lets = {step.name: step.value for step in config.grid_rule.steps if isinstance(step, Let)}
    grid = tuple(lets[name].render() for name in ("grid_x", "grid_y", "grid_z"))  # as NAME.json states it
    requirements = Requirements(m_multiple=1, n_multiple=1, k_multiple=config.k_multiple,
                                vector_elements={"a": 8, "b": 1, "c": 1},
                                max_leading_dimension=dict.fromkeys("abc", MAX_LEADING_DIMENSION))
    launch = LaunchPlan(entries=Entries(vector=entry, others=(dequantize_entry(spec.name),)), parameters=kernel_parameters(spec),
                        launchers=launcher_names(spec), threads=layout.threads, smem_bytes=config.smem_bytes,
                        block_tile=(layout.bm, layout.bn, layout.bk), grid=grid, requirements=requirements,
                        min_blocks_per_sm=config.blocks_per_sm)
    return KernelPlan(spec, layout.arch, (Variant(entry, Role.VECTOR, layout),), launch, path)
