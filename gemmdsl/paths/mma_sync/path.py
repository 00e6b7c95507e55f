"""The mma.sync path: warp-level tensor-core instructions over the FMA path's shared-memory plan
(mma_layout.MmaLayout, a TileLayout), fragments loaded with ldmatrix or lds (emit/ldmatrix.py), the
mma.sync math (emit/mma_sync.py) and the fragment epilogue (emit/fragment_epilogue.py)."""
from __future__ import annotations

from ... import ir
from ...cycles import MemberModel, mma_sync_member_model
from ...emit.fragment_epilogue import FragmentEpilogue
from ...emit.kernel import MathParts
from ...emit.ldmatrix import MmaFragments
from ...emit.mma_sync import MmaSync
from ...mma_layout import MmaLayout
from ..tiles import TilePath
from .facts import MmaSyncFacts


class MmaSyncPath(TilePath):
    name = "mma_sync"
    lowering = MmaLayout
    facts = MmaSyncFacts()

    def selects(self, spec: ir.KernelSpec) -> bool:
        return spec.mma is not None and not spec.mma.wgmma

    def math_parts(self, spec, layout, out, double: bool) -> MathParts:
        return MathParts(MmaFragments(layout, out, double), MmaSync(layout, out), FragmentEpilogue(spec, layout, out))

    def member_model(self, artifacts) -> MemberModel:
        return mma_sync_member_model(artifacts.spec, artifacts.analysis.facts, artifacts.plan.arch.reference_sms)


PATH = MmaSyncPath()
