"""The GEMV path: a spec with `mma { shape: gemv; }` compiles to kernel.py's kernels, launched by the tile paths'
launchers (emit/launcher.py) over a block per tile of C: the shape of decode calls (a few rows of A against a
weight B) and their transpose (a few columns of B against a long A), which read every byte of one operand once and
do a few multiply-adds per byte (config.py says what the keys mean; docs/language.md)."""
from __future__ import annotations

import re

from ... import abi, ir
from ...emit.launcher import LauncherEmitter
from ...emit.scale_c import emit_scale_c_kernel
from ...launch_plan import Entries, GridRule, LaunchPlan, Requirements
from ...plan import KernelPlan, Role, Variant
from ..interface import InstructionPath
from .config import DEFAULT_STAGES, GemvLayout, GemvShape, gemv_config
from .kernel import emit_gemv_definitions
from .model import GemvFacts, GemvLaunchPass, GemvPass, gemv_model
from .validate import check_gemv

MAX_LEADING_DIMENSION = abi.MAX_INT  # rows are addressed in 64 bits


class GemvPath(InstructionPath):
    name = "gemv"
    passes = (GemvLaunchPass(), GemvPass())
    facts = GemvFacts()
    key_sets = frozenset({"warp tiles"})
    default_copy = ir.CopyMode.REGISTERS
    default_stages = DEFAULT_STAGES
    shape_syntax = re.compile(r"gemv(?:_m16n8k(?P<mma_k>16))?")
    shape_type = GemvShape
    shape_words = ("gemv", "gemv_m16n8k16")

    def takes(self, shape, a, b) -> bool:
        return shape is GemvShape

    def unit(self, spec: ir.KernelSpec) -> str:
        return super().unit(spec) if spec.mma.shape.tensor else "fma"

    def warp_tile(self, spec: ir.KernelSpec) -> ir.Pair:
        config = gemv_config(spec)
        if config.streamed is ir.Operand.B:
            return ir.Pair(config.small_rows, config.warp_rows)
        return ir.Pair(config.warp_rows, config.small_rows)

    def validate(self, checker) -> None:
        check_gemv(checker)

    def lower(self, spec: ir.KernelSpec) -> KernelPlan:
        layout = GemvLayout(spec, gemv_config(spec))
        vector, scalar = abi.vector_entry(spec), abi.scalar_entry(spec)
        tiles = " * ".join(f"({abi.tile_count(spec, extent, str(size))})"
                           for extent, size in (("M", layout.bm), ("N", layout.bn)))
        checked = spec.problem.checked
        requirements = Requirements(
            m_multiple=1 if checked else layout.bm, n_multiple=1 if checked else layout.bn,
            k_multiple=1 if checked else layout.bk,
            vector_elements={op.value: layout.global_vector(op) for op in ir.Operand},
            max_leading_dimension=dict.fromkeys("abc", MAX_LEADING_DIMENSION))
        launch = LaunchPlan(Entries(vector, scalar, scale_c=abi.scale_c_entry(spec)), abi.kernel_parameters(spec),
                            abi.launcher_names(spec), layout.threads, 0, (layout.bm, layout.bn, layout.bk),
                            (tiles, 1, "batch" if spec.problem.batched else 1), requirements,
                            layout.config.blocks_per_sm, GridRule.TILES)
        variants = (Variant(vector, Role.VECTOR, layout), Variant(scalar, Role.SCALAR, layout))
        return KernelPlan(spec, layout.arch, variants, launch, self)

    def emit_definitions(self, plan: KernelPlan, out) -> None:
        emit_gemv_definitions(plan.spec, plan.layout.config, out)
        out.line()
        emit_scale_c_kernel(plan, out)
        out.line()
        LauncherEmitter(plan, out).emit()

    def member_model(self, analysis, sms: int):
        return gemv_model(analysis, sms)

    def launch_contract(self, plan: KernelPlan) -> list[str]:
        vector, scalar = plan.layout.config.vector, plan.launch.entries.scalar
        return [f"- any alignment: where a pointer, leading dimension or batch stride of A or B is off {vector} "
                f"elements (16 bytes), {scalar} runs, reading each row through 16-byte windows."]

    def metadata(self, plan: KernelPlan) -> dict:
        config = plan.layout.config
        return {"gemv": {"instruction": "mma.sync m16n8k16" if config.tensor else "fma",
                         "streamed": config.streamed.value, "small_rows": config.small_rows, "rows": config.rows,
                         "k_warps": config.k_warps, "row_warps": config.row_warps, "warp_rows": config.warp_rows,
                         "stages": config.stages}}


PATH = GemvPath()
