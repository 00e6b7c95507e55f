"""The FMA path: CUDA-core fused multiply-adds over register tiles (layout.KernelLayout), fragments read
from shared memory with lds (emit/fragments.py), the outer product (emit/math.py) and the element-wise
epilogue (emit/epilogue.py)."""
from __future__ import annotations

from ... import ir
from ...cost_model import c_store_align, c_store_sectors, cost_facts, k_tile_cycles, register_cap
from ...cycles import MemberModel, launched_fields
from ...emit.epilogue import Epilogue
from ...emit.fragments import SharedLoads
from ...emit.helpers import emit_shared_access_wrapper
from ...emit.kernel import MathParts
from ...emit.math import FmaOuterProduct
from ...layout import KernelLayout
from ...passes.registers import estimate_fma_registers
from ...targets import SECTOR_BYTES, c_store_bytes_per_clock
from ..tiles import TilePath
from .widen import widening_helpers


class FmaPath(TilePath):
    name = "fma"
    lowering = KernelLayout
    key_sets = frozenset({"fma threads", "warp tiles"})
    default_copy = ir.CopyMode.REGISTERS
    register_copies = True
    register_tile = "the micro tile or repeat"

    def takes(self, shape, a, b) -> bool:
        """Specs without an `mma` section whose B the FMA pipe multiplies: not integer or FP8 weights (the
        dequant path's)."""
        return shape is None and not (b is not None and (b.integer or b.fp8))

    def load_vectors(self, dtype) -> tuple[int, ...]:
        """Up to 4 elements: the copy's registers are float, float2 and float4 (bf16 and f16 widened on the way)."""
        return tuple(width for width in dtype.vector_widths if width <= 4)

    def smem_read(self, read, dtype) -> dict:
        return {"read_bits": read}  # a width in bits, or the widest allowed

    def validate(self, checker) -> None:
        checker.check_fma_operands()
        super().validate(checker)

    def check_threads(self, checker) -> bool:
        return checker.check_threads()

    def check_stages(self, checker, threads_ok: bool) -> int:
        return checker.check_fma_stages(threads_ok)

    def emit_fragment_helpers(self, helpers, out) -> None:
        for width in helpers.shared_widths("load"):
            emit_shared_access_wrapper(out, "load", width)
        widen = widening_helpers(helpers.spec.problem.a.dtype)
        if widen is not None:
            out.lines(widen)

    def register_estimate(self, layout: KernelLayout):
        return estimate_fma_registers(layout)

    def register_advice(self, spec: ir.KernelSpec) -> tuple:
        return spec.threads.at("micro"), "a smaller micro tile or repeat needs fewer registers", None

    def live_registers(self, spec: ir.KernelSpec) -> tuple[str, int]:
        f = spec.threads.fragment
        return f"{f.m}x{f.n}", f.m * f.n + f.m + f.n

    def unit(self, spec: ir.KernelSpec) -> str:
        return "fma"

    def warp_tile(self, spec: ir.KernelSpec) -> ir.Pair:
        threads = spec.threads
        return ir.Pair(threads.lanes.m * threads.fragment.m, threads.lanes.n * threads.fragment.n)

    def math_parts(self, spec, layout, out, double: bool) -> MathParts:
        return MathParts(SharedLoads(layout, out, double), FmaOuterProduct(spec, layout, out),
                         Epilogue(spec, layout, out))

    def member_model(self, analysis, sms: int) -> MemberModel:
        """The tuner's cost model (cost_model.py) per k-tile of r resident blocks, so that the family rule and
        the tuner rank FMA tilings alike; per tile, C's stores through L2 (every sector they touch, whole), with
        the widest vectors where C allows them and one element at a time where a packed C's leading dimension is
        off them: at short K the stores are the call."""
        spec, facts = analysis.spec, analysis.facts
        common = launched_fields(spec, sms)
        blocks = facts["occupancy"].blocks_per_sm
        cap = register_cap(spec, analysis.layout.threads)
        costs = cost_facts(spec, analysis, cap)
        flops_per_byte = facts["intensity"].launch_flops_per_byte
        layout, rate = analysis.layout, c_store_bytes_per_clock(spec.target.sm)
        store_cycles = {aligned: -(-c_store_sectors(layout, spec, aligned) * SECTOR_BYTES // rate)
                        for aligned in (True, False)}
        return MemberModel(**common, blocks_per_sm=blocks, tile_cycles=store_cycles[True],
                           narrow_tile_cycles=store_cycles[False], c_align=c_store_align(layout),
                           c_ld_is_n=spec.problem.c.layout is ir.MatrixLayout.ROW,
                           k_tile_cycles=tuple(k_tile_cycles(costs, spec, r, flops_per_byte)
                                               for r in range(1, blocks + 1)),
                           terms=(("issue_per_ffma", round(costs.issue_per_ffma, 4)),
                                  ("lsu_wavefronts_per_ffma", round(costs.lsu_per_ffma, 4)),
                                  ("exposed_latency_per_ffma", round(costs.exposed_latency_per_ffma, 4)),
                                  ("launch_flops_per_byte", round(flops_per_byte, 2))))


PATH = FmaPath()
