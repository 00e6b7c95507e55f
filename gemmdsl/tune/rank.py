"""Ranking and selection: the survivors scored by the cost model or their path's cycle model, in rank order,
then built (ptxas's registers and spills) and kept within the budget."""
from __future__ import annotations

import concurrent.futures
from dataclasses import replace
from typing import Callable, Sequence

from .. import ir
from ..cost_model import efficiency
from ..cycles import tensor_share
from ..paths import path_of
from ..prediction import Prediction
from ..source import SourceFile
from .templates import Candidate
from .screen import (DEFAULT_MIN_WARPS, ScreenReport, Size, Survivor, analysis_size, candidate_path, predict,
                     reference_sms)
from .timing import geomean


def predicted_efficiency(survivor: Survivor, sizes: Sequence[Size], sms: int | None = None) -> float:
    """The cost model's score (cost_model.py): predicted fraction of the FMA peak, 0 for a predicted spill;
    where the path's prediction carries a cycle model (mma.sync's and wgmma's, which the family rule picks
    members by), the share of the instruction's peak it predicts, geometric mean over the sizes, 0 for a
    predicted spill. `sms`: the SMs the grid's rounds are counted over, by default the target's reference
    GPU's."""
    p = survivor.prediction
    sms = sms or reference_sms(survivor.spec)
    if p.mma_model is not None:
        model = replace(p.mma_model, sms=sms)  # --sms sets the grid's rounds here as on the FMA path
        return 0.0 if p.spills else geomean([tensor_share(model, *size) for size in sizes])
    return efficiency(p.costs(), survivor.spec, threads=p.threads, smem_bytes=p.smem_bytes, cap=p.register_cap,
                      blocks_per_sm=p.blocks_per_sm, known_registers=p.ptxas is not None, spills=p.spills,
                      launch_flops_per_byte=p.launch_flops_per_byte, sizes=sizes, sms=sms)


def rank_key(survivor: Survivor) -> tuple:
    """Best predicted first; equal scores go to what the score does not see but the H100 rewards: fewer
    FFMAs that switch both operands (FMA order, docs/performance.md note 11), more registers left under the cap (room
    for ptxas to schedule: register-staged copies of big tiles, which hold the next tile in registers,
    measured 8% slower than their cp.async twins), fewer L1 wavefronts per FFMA (slack on the pipe
    shared memory and global loads share), then template order. On Hopper's path, whose other figures
    are zero, more stages come before template order: more bytes in flight from L2 (on the H100 every
    4-stage hgemm_h100 candidate ran 3-40% faster than its 3-stage twin; docs/tuning.md): the prediction's
    `tie_break`, which its path sets."""
    p = survivor.prediction
    return (-round(p.score, 6), round(p.fma_switches_per_ffma, 6), p.register_demand - p.register_cap,
            round(p.lsu_per_ffma, 6), p.tie_break,
            survivor.candidate.index)


def rank(survivors: Sequence[Survivor], sizes: Sequence[Size], sms: int | None = None) -> list[Survivor]:
    """Survivors with their score set, in rank_key order."""
    scored = [Survivor(s.candidate, s.spec, _with_score(s.prediction, predicted_efficiency(s, sizes, sms)))
              for s in survivors]
    return sorted(scored, key=rank_key)


def _with_score(prediction: Prediction, score: float) -> Prediction:
    return replace(prediction, score=score)


BuildFn = Callable[[Survivor], dict]  # -> PtxasResources.as_dict(); raises on failure


def ptxas_of(survivor: Survivor, template_path: str = "<template>.gemm", compiler: str = "nvcc") -> dict:
    """ptxas's figures for a candidate, through the real compiler and nvcc (or NVRTC)."""
    from ..build import kernel_resources
    from ..compiler import compile_source

    artifacts = compile_source(SourceFile(candidate_path(template_path, survivor.candidate), survivor.candidate.text))
    return kernel_resources(artifacts.cuda, artifacts.name, artifacts.spec.target.code, compiler).as_dict()


def ranks_on_ptxas(spec: ir.KernelSpec) -> bool:
    """Whether a survivor is scored on ptxas's figures when nvcc is there: as its path says (its
    `facts.scores_on_ptxas`; mma.sync's, whose score reads registers only for occupancy and spills)."""
    return path_of(spec).facts.scores_on_ptxas


def with_ptxas(report: ScreenReport, sizes: Sequence[Size], build_fn: BuildFn, jobs: int = 1,
               progress: Callable[[str], None] | None = None) -> tuple[ScreenReport, list[tuple[Candidate, str]]]:
    """The survivors `ranks_on_ptxas` picks built and predicted again with ptxas's registers and spills,
    which the estimate cannot see; those that do not build are taken out and returned with the reason.
    Other survivors, and the candidates the analysis pruned, keep their estimates."""
    chosen = [s for s in report.survivors if ranks_on_ptxas(s.spec)]
    if not chosen:
        return report, []
    if progress is not None:
        progress(f"building {len(chosen)} mma.sync candidate(s) to rank them on ptxas's figures")
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda s: _try_build(build_fn, s), chosen))
    built: dict[str, Survivor] = {}
    failed: list[tuple[Candidate, str]] = []
    for survivor, (ptxas, error) in zip(chosen, results):
        if error is not None:
            failed.append((survivor.candidate, error))
            continue
        prediction = predict(survivor.spec, analysis_size(survivor.spec, sizes[0]), ptxas)
        built[survivor.candidate.name] = Survivor(survivor.candidate, survivor.spec, prediction)
    failed_names = {candidate.name for candidate, _ in failed}
    survivors = [built.get(s.candidate.name, s) for s in report.survivors if s.candidate.name not in failed_names]
    timeable = [built.get(s.candidate.name, s) for s in report.timeable]
    return replace(report, survivors=survivors, timeable=timeable), failed


def select(ranked: Sequence[Survivor], budget: int, sizes: Sequence[Size], min_warps: int = DEFAULT_MIN_WARPS,
           build_fn: BuildFn | None = None, jobs: int = 1,
           progress: Callable[[str], None] | None = None) -> tuple[list[Survivor], dict[str, list[tuple[Candidate, str]]]]:
    """The top `budget` of `ranked`; with `build_fn`, candidates ptxas makes spill (or whose real register
    count breaks --min-warps) are dropped and the next in rank takes their place. Returns (kept, dropped)."""
    if build_fn is None:
        return list(ranked[:budget]), {}
    kept: list[Survivor] = []
    dropped: dict[str, list[tuple[Candidate, str]]] = {}
    queue = list(ranked)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        while queue and len(kept) < budget:
            batch, queue = queue[:max(budget - len(kept), jobs)], queue[max(budget - len(kept), jobs):]
            if progress is not None:
                progress(f"building {len(batch)} candidate(s): {', '.join(s.candidate.name for s in batch)}")
            results = list(pool.map(lambda s: _try_build(build_fn, s), batch))
            for survivor, (ptxas, error) in zip(batch, results):
                if len(kept) == budget:
                    break
                if error is not None:
                    dropped.setdefault("build", []).append((survivor.candidate, error))
                    continue
                spills = ptxas.get("spill_stores", 0) + ptxas.get("spill_loads", 0)
                if survivor.prediction.ptxas_spill_prunes(ptxas):
                    dropped.setdefault("ptxas spills", []).append(
                        (survivor.candidate, f"{ptxas['registers']} registers, {spills} bytes of spills"))
                    continue
                prediction = predict(survivor.spec, analysis_size(survivor.spec, sizes[0]), ptxas)
                if prediction.warps_per_sm < min_warps:
                    dropped.setdefault("ptxas occupancy", []).append(
                        (survivor.candidate, f"{ptxas['registers']} registers: {prediction.warps_per_sm} warps per SM"))
                    continue
                prediction = _with_score(prediction, survivor.prediction.score)
                kept.append(Survivor(survivor.candidate, survivor.spec, prediction))
    return kept, dropped


def _try_build(build_fn: BuildFn, survivor: Survivor) -> tuple[dict | None, str | None]:
    try:
        return build_fn(survivor), None
    except Exception as err:  # BuildError or CompileError: the candidate is dropped, with the reason
        return None, str(err).splitlines()[0] if str(err) else type(err).__name__
