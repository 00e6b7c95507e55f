"""What the tools read of the mma.sync path (paths/facts.py): the tile report and counters, and a prediction
scored by the cycle model the families pick members by (paths/mma_sync/cycles.py), on ptxas's figures
when nvcc is there."""
from __future__ import annotations

from ...passes.registers import MMA_ESTIMATE_BAND
from ...prediction import Prediction, tile_prediction
from ..tiles import TileFacts

# Spill bytes per thread (stores or loads) an mma.sync kernel may have and still be kept. On the H100
# (tests/fixtures/tune_h100 and docs/performance.md, T13) mma.sync kernels whose double-buffered fragments
# made ptxas spill ran faster than their single-fragment twins that did not: 256x128x32 bf16 in 16 warps
# spilling 56 bytes 334.8 against 315.7 TFLOP/s, tf32_ldmatrix's interior kernel spilling 72 bytes 12.5%
# faster, tf32_ldmatrix_nt's 148 bytes 9.9% faster; the slowest read-32 TF32 kernels spill 248. On the
# FMA path spilling kernels ran about 10x slower, and any spill drops them.
MMA_SYNC_TOLERATED_SPILL_BYTES = 160


class MmaSyncFacts(TileFacts):
    # The score (the cycle model) reads registers only for occupancy and spills. On the H100 timings
    # (docs/tuning.md, "How well it ranks") ptxas's figures raised all three mma.sync templates' rank
    # correlation, most where spills decide (sgemm_3xtf32_mma 0.32 -> 0.53); the FMA cost model, whose
    # occupancy term was fitted over the estimate's register band, fell on sgemm_h100 (0.72 -> 0.26).
    scores_on_ptxas = True

    def prediction(self, analysis, ptxas: dict | None) -> Prediction:
        model = analysis.path.member_model(analysis, analysis.layout.arch.reference_sms)
        return tile_prediction(analysis, ptxas, model, MMA_ESTIMATE_BAND, MMA_SYNC_TOLERATED_SPILL_BYTES)
