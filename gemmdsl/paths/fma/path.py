"""The FMA path: CUDA-core fused multiply-adds over register tiles (layout.KernelLayout), fragments read
from shared memory with lds (emit/fragments.py), the outer product (emit/math.py) and the element-wise
epilogue (emit/epilogue.py)."""
from __future__ import annotations

from ... import ir
from ...cost_model import cost_facts, k_tile_cycles, register_cap
from ...cycles import MemberModel, launched_fields
from ...emit.epilogue import Epilogue
from ...emit.fragments import SharedLoads
from ...emit.kernel import MathParts
from ...emit.math import FmaOuterProduct
from ...layout import KernelLayout
from ..tiles import TilePath


class FmaPath(TilePath):
    name = "fma"
    lowering = KernelLayout

    def selects(self, spec: ir.KernelSpec) -> bool:
        return spec.mma is None

    def math_parts(self, spec, layout, out, double: bool) -> MathParts:
        return MathParts(SharedLoads(layout, out, double), FmaOuterProduct(spec, layout, out),
                         Epilogue(spec, layout, out))

    def member_model(self, analysis, sms: int) -> MemberModel:
        """The tuner's cost model (cost_model.py) per k-tile of r resident blocks, so that the family rule and
        the tuner rank FMA tilings alike."""
        spec, facts = analysis.spec, analysis.facts
        common = launched_fields(spec, sms)
        blocks = facts["occupancy"].blocks_per_sm
        cap = register_cap(spec, analysis.layout.threads)
        costs = cost_facts(spec, analysis, cap)
        flops_per_byte = facts["intensity"].launch_flops_per_byte
        return MemberModel(**common, blocks_per_sm=blocks,
                           k_tile_cycles=tuple(k_tile_cycles(costs, spec, r, flops_per_byte)
                                               for r in range(1, blocks + 1)),
                           terms=(("issue_per_ffma", round(costs.issue_per_ffma, 4)),
                                  ("lsu_wavefronts_per_ffma", round(costs.lsu_per_ffma, 4)),
                                  ("exposed_latency_per_ffma", round(costs.exposed_latency_per_ffma, 4)),
                                  ("launch_flops_per_byte", round(flops_per_byte, 2))))


PATH = FmaPath()
