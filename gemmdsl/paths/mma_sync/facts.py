"""What the tools read of the mma.sync path (paths/facts.py): the tile report and counters, and a prediction
scored by the cycle model the families pick members by (cycles.mma_sync_member_model), on ptxas's figures
when nvcc is there."""
from __future__ import annotations

from ...cycles import mma_sync_member_model
from ...passes.registers import MMA_ESTIMATE_BAND
from ...prediction import Prediction, tile_prediction
from ..tiles import TileFacts


class MmaSyncFacts(TileFacts):
    # The score (the cycle model) reads registers only for occupancy and spills. On the H100 timings
    # (docs/tuning.md, "How well it ranks") ptxas's figures raised all three mma.sync templates' rank
    # correlation, most where spills decide (sgemm_3xtf32_mma 0.32 -> 0.53); the FMA cost model, whose
    # occupancy term was fitted over the estimate's register band, fell on sgemm_h100 (0.72 -> 0.26).
    scores_on_ptxas = True

    def prediction(self, analysis, ptxas: dict | None) -> Prediction:
        model = mma_sync_member_model(analysis.spec, analysis.facts, analysis.layout.arch.reference_sms)
        return tile_prediction(analysis, ptxas, model, MMA_ESTIMATE_BAND)
