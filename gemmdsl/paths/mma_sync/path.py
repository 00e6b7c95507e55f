"""The mma.sync path: warp-level tensor-core instructions over the FMA path's shared-memory plan
(mma_layout.MmaLayout, a TileLayout), fragments loaded with ldmatrix or lds (emit/ldmatrix.py), the
mma.sync math (emit/mma_sync.py) and the fragment epilogue (emit/fragment_epilogue.py)."""
from __future__ import annotations

from ... import ir
from ...cycles import MemberModel
from ...emit.fragment_epilogue import FragmentEpilogue
from ...emit.kernel import MathParts
from ...emit.ldmatrix import MmaFragments, emit_fragment_load_helpers
from ...emit.mma_sync import MmaSync, emit_mma_helpers
from ...mma_layout import MmaLayout
from ...passes.registers import estimate_mma_registers
from ...targets import WARP
from ..tiles import TilePath
from .cycles import mma_sync_member_model
from .validate import check_mma, check_mma_stages, check_stream_k_c
from .facts import MmaSyncFacts


class MmaSyncPath(TilePath):
    name = "mma_sync"
    lowering = MmaLayout
    facts = MmaSyncFacts()
    key_sets = frozenset({"warp tiles"})
    default_copy = ir.CopyMode.CP_ASYNC
    register_tile = "the mma repeat"

    def check_threads(self, checker) -> bool:
        check_stream_k_c(checker)
        return check_mma(checker, checker.spec.mma)

    def check_stages(self, checker, threads_ok: bool) -> int:
        return check_mma_stages(checker)

    def emit_fragment_helpers(self, helpers, out) -> None:
        emit_fragment_load_helpers(helpers.layout, out)

    def emit_math_helpers(self, layout: MmaLayout, out) -> None:
        out.line()
        emit_mma_helpers(layout, out)

    def register_estimate(self, layout: MmaLayout):
        return estimate_mma_registers(layout)

    def register_advice(self, spec: ir.KernelSpec) -> tuple:
        # Measured on the H100: double-buffered TF32 fragments spilling 32-176 bytes ran 12.5% faster than the
        # single-buffered twin that does not spill (docs/performance.md, T13); so the hint says so.
        spills_can_pay = ("on mma.sync a small spill can cost less than what the registers buy (tf32_ldmatrix "
                          "spills up to 176 bytes and ran 12.5% faster for it on the H100): time both")
        smaller = f"a smaller mma repeat (more warps for the same tile) needs fewer registers; but {spills_can_pay}"
        return spec.mma.at("repeat"), smaller, spills_can_pay

    def live_registers(self, spec: ir.KernelSpec) -> tuple[str, int]:
        mma = spec.mma
        accumulators = mma.warp_tile.m * mma.warp_tile.n // WARP
        dtype = spec.problem.a.dtype
        # One instruction's A and B fragments, spread over the warp's 32 lanes in 32-bit registers;
        # 3xTF32 keeps a big and a small part of each.
        parts = 2 if mma.precision is ir.Precision.TF32X3 else 1
        shape = mma.shape
        a = mma.repeat.m * shape.m * shape.k * dtype.bytes // (4 * WARP)
        b = mma.repeat.n * shape.n * shape.k * dtype.bytes // (4 * WARP)
        return f"{accumulators}", accumulators + parts * (a + b)

    def takes(self, shape, a, b) -> bool:
        return shape is ir.MmaShape

    def smem_in_global_order(self, dtype: ir.DType) -> bool:
        return dtype.bits < 32  # cp.async cannot transpose elements narrower than its 4-byte copies

    def smem_read(self, read, dtype: ir.DType) -> dict:
        # TF32 fragments default to 32-bit loads (ldmatrix serves them only where k is contiguous).
        default = ir.SmemRead.LDS32 if dtype is ir.DType.F32 else ir.SmemRead.LDMATRIX
        return {"read": default if read is None else read}

    def math_parts(self, spec, layout, out, double: bool) -> MathParts:
        return MathParts(MmaFragments(layout, out, double), MmaSync(layout, out), FragmentEpilogue(spec, layout, out))

    def member_model(self, analysis, sms: int) -> MemberModel:
        return mma_sync_member_model(analysis.spec, analysis.facts, sms, self.unit(analysis.spec))


PATH = MmaSyncPath()
