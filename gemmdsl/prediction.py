"""What the tuner reads of one candidate: its analysis' figures and the cost model's inputs (`Prediction`), and
the spill rules its screening applies. Each instruction path builds its candidates' predictions (the path's
`facts.prediction`, paths/facts.py); `tile_prediction` is the FMA and mma.sync paths' shared one. The tuner
(gemmdsl/tune) scores and ranks them without asking which path made them."""
from __future__ import annotations

from dataclasses import dataclass

from .cost_model import CostFacts, cost_facts, register_cap
from .cycles import MemberModel
from .passes.registers import ESTIMATE_BAND

def spill_prunes(ptxas: dict, tolerated_bytes: int = 0) -> bool:
    """Whether ptxas's spills drop a candidate: spill bytes per thread (stores or loads) beyond what its path
    tolerates (none on the FMA path, where spilling kernels ran about 10x slower)."""
    spilled = max(ptxas.get("spill_stores", 0), ptxas.get("spill_loads", 0))
    return spilled > tolerated_bytes


@dataclass(frozen=True)
class Prediction:
    """What the analysis passes say of one valid candidate, and the cost model's figures."""

    registers: int  # per thread: the estimate, or ptxas's count once built
    register_cap: int
    register_low: int  # the fewest registers per thread the estimate's measured band allows, or ptxas's count
    blocks_per_sm: int
    warps_per_sm: int
    load_conflicts: int  # excess wavefronts per launch
    store_conflicts: int
    conflict_pct: float  # excess wavefronts as a percentage of all shared-memory wavefronts
    smem_wavefronts_per_ffma: float  # per warp-level FFMA
    issue_per_ffma: float  # warp instructions issued per warp-level FFMA
    block_flops_per_byte: float
    warp_flops_per_byte: float
    launch_flops_per_byte: float
    # The cost model's other inputs (cost_model.CostFacts), per warp-level FFMA unless said otherwise
    global_wavefronts_per_ffma: float = 0.0  # L1 wavefronts of the global loads or cp.async copies
    exposed_latency_per_ffma: float = 0.0  # clocks per block FFMA no warp of the block hides
    register_demand: int = 0  # registers the main loop keeps live (the estimate's demand), or ptxas's count
    fma_switches_per_ffma: float = 0.0  # FFMAs whose A and B operands both differ from the previous one's
    threads: int = 0  # per block
    smem_bytes: int = 0  # per block
    ptxas: dict | None = None
    score: float = 0.0  # predicted efficiency, filled in by rank()
    # The tensor-core paths' cycle model (cycles.MemberModel), which the score reads (tensor_share) instead of
    # the FMA cost model.
    mma_model: MemberModel | None = None
    tolerated_spill_bytes: int = 0  # per thread, what ptxas may spill and the candidate still be kept (its path's)
    estimate_band: float = ESTIMATE_BAND  # the register estimate's band its predicted spill is stated with
    tie_break: int = 0  # ranks equal scores before template order (lower first): a path's own preference
    summary_text: str | None = None  # the path's own line for `summary`, where the figures below do not apply

    @property
    def lsu_per_ffma(self) -> float:
        """L1 wavefronts (shared memory and global loads) per warp-level FFMA."""
        return self.smem_wavefronts_per_ffma + self.global_wavefronts_per_ffma

    @property
    def spills(self) -> bool:
        """Predicted (or, once built, ptxas-reported) register spills that the register pruning rule drops;
        spills up to `tolerated_spill_bytes` are kept (`spill_prunes`)."""
        if self.ptxas is not None:
            return self.registers > self.register_cap or self.ptxas_spill_prunes(self.ptxas)
        return self.predicted_spill

    def ptxas_spill_prunes(self, ptxas: dict) -> bool:
        """Whether ptxas's spills drop the candidate (`spill_prunes`)."""
        return spill_prunes(ptxas, self.tolerated_spill_bytes)

    @property
    def predicted_spill(self) -> bool:
        """The estimate's fewest registers exceed the cap by more than the spill the path tolerates (4 bytes a
        register): ptxas then spills the excess, which some paths' kernels run fastest with (mma.sync's 3xTF32)."""
        over = self.register_low - self.register_cap
        return 4 * over > self.tolerated_spill_bytes

    def costs(self) -> CostFacts:
        return CostFacts(self.issue_per_ffma, self.smem_wavefronts_per_ffma, self.global_wavefronts_per_ffma,
                         self.exposed_latency_per_ffma, self.register_demand, self.fma_switches_per_ffma)

    def summary(self) -> str:
        if self.summary_text is not None:
            return self.summary_text
        source = "ptxas" if self.ptxas is not None else "est."
        if self.mma_model is not None:
            model = self.mma_model
            return (f"{self.registers:>3} regs ({source}), {self.warps_per_sm:>2} warps/SM, "
                    f"k-tile {model.k_tile_cycles[-1]:,} cycles for mma's {model.tensor_cycles:,} "
                    f"x {model.blocks_per_sm}, {self.block_flops_per_byte:.0f} flop/B")
        return (f"{self.registers:>3} regs ({source}), {self.warps_per_sm:>2} warps/SM, "
                f"{self.smem_wavefronts_per_ffma:.3f} smem wf/FFMA, {self.block_flops_per_byte:.0f} flop/B")


def tile_prediction(analysis, ptxas: dict | None, mma_model: MemberModel | None = None,
                    estimate_band: float = ESTIMATE_BAND, tolerated_spill_bytes: int = 0) -> Prediction:
    """The FMA and mma.sync paths' prediction from their tile passes' facts; `mma_model`, mma.sync's cycle
    model (its path's member_model), which its score reads, with its register estimate's band and the spill
    it tolerates."""
    spec, facts = analysis.spec, analysis.facts
    traffic = facts["smem_traffic"]
    registers, occupancy, intensity = facts["registers"], facts["occupancy"], facts["intensity"]
    cap = register_cap(spec, analysis.layout.threads)
    costs = cost_facts(spec, analysis, cap)
    return Prediction(
        registers=registers.per_thread,
        register_cap=cap,
        register_low=registers.ptxas if registers.ptxas is not None else registers.estimate.low,
        blocks_per_sm=occupancy.blocks_per_sm,
        warps_per_sm=occupancy.warps_per_sm,
        load_conflicts=traffic.load_conflicts,
        store_conflicts=traffic.store_conflicts,
        conflict_pct=100 * (traffic.load_conflicts + traffic.store_conflicts)
        / max(1, traffic.load_wavefronts + traffic.store_wavefronts),
        smem_wavefronts_per_ffma=costs.smem_wavefronts_per_ffma,
        issue_per_ffma=costs.issue_per_ffma,
        block_flops_per_byte=intensity.block_flops_per_byte,
        warp_flops_per_byte=intensity.warp_flops_per_byte,
        launch_flops_per_byte=intensity.launch_flops_per_byte,
        global_wavefronts_per_ffma=costs.global_wavefronts_per_ffma,
        exposed_latency_per_ffma=costs.exposed_latency_per_ffma,
        register_demand=costs.register_demand,
        fma_switches_per_ffma=costs.fma_switches_per_ffma,
        threads=analysis.layout.threads,
        smem_bytes=occupancy.smem_bytes,
        ptxas=ptxas,
        mma_model=mma_model,
        estimate_band=estimate_band,
        tolerated_spill_bytes=tolerated_spill_bytes,
    )
