#!/usr/bin/env python3
"""How far the register estimate (gemmdsl/passes/registers.py) is from ptxas on random valid specs.

Draws N specs reproducibly from a spec generator (by default the fuzzer's, tests/spec_strategies.py,
under a fixed Hypothesis seed), compiles each one kernel with `nvcc -cubin -Xptxas -v` (device code
only, no host build), and prints the distribution of (estimate - ptxas) / ptxas: the share within
5/10/15/20%, the worst cases with their features, and figures for the training and held-out halves
(each spec goes to one half by a hash of its text, so the split does not depend on N). It writes
every record to a JSON file.

ptxas results are cached on disk keyed by the spec text and the nvcc version, so a rerun after
changing the model compiles nothing:

    PYTHONPATH=$PWD python scripts/register_study.py                 # 300 FP32 specs, seed 0
    PYTHONPATH=$PWD python scripts/register_study.py -n 600 --seed 1 --jobs 2 --json study.json

A second generator (tensor-core specs, say) is one more entry in GENERATORS: a name, and a function
of (n, seed) that returns spec texts. `--generator fp32 --generator tc` studies both, reporting each.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from gemmdsl import ir  # noqa: E402
from gemmdsl.build import BuildError, find_nvcc, parse_ptxas  # noqa: E402
from gemmdsl.compiler import compile_text  # noqa: E402
from gemmdsl.passes.registers import ESTIMATE_BAND  # noqa: E402

DEFAULT_CACHE = ROOT / "build" / "register_study_cache.json"
BANDS = (0.05, 0.10, 0.15, 0.20)


# --- generators -----------------------------------------------------------------------------------


def hypothesis_texts(strategy, n: int, seed: int) -> list[str]:
    """The first `n` distinct texts a Hypothesis strategy generates under `seed` (generate phase only,
    no example database, so the same Hypothesis version gives the same specs)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    texts: list[str] = []
    seen: set[str] = set()

    @hypothesis_seed(seed)
    @settings(max_examples=20 * n, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(text: str) -> None:
        if len(texts) < n and text not in seen:
            seen.add(text)
            texts.append(text)

    collect()
    if len(texts) < n:
        raise SystemExit(f"the generator gave only {len(texts)} distinct specs of {n}")
    return texts


def fp32_specs(n: int, seed: int) -> list[str]:
    """The fuzzer's FP32 specs (tests/spec_strategies.py)."""
    from spec_strategies import spec_texts

    return hypothesis_texts(spec_texts(name="study"), n, seed)


def mma_specs(n: int, seed: int) -> list[str]:
    """Tensor-core specs (tests/spec_strategies.py), kept only where the front end accepts them."""
    from spec_strategies import mma_spec_texts

    return hypothesis_texts(mma_spec_texts(name="study").filter(valid), n, seed)


def valid(text: str) -> bool:
    from gemmdsl.frontend import load
    from gemmdsl.source import CompileError, SourceFile

    try:
        load(SourceFile("study.gemm", text))
    except CompileError:
        return False
    return True


GENERATORS: dict[str, Callable[[int, int], list[str]]] = {
    "fp32": fp32_specs,
    "mma": mma_specs,
}


def drawn(generator: str, n: int, seed: int, cache_dir: Path) -> list[str]:
    """GENERATORS[generator](n, seed), kept on disk beside the ptxas cache (drawing takes minutes)."""
    import hypothesis

    path = cache_dir / f"register_study_specs_{generator}_{n}_{seed}_{hypothesis.__version__}.json"
    if path.exists():
        return json.loads(path.read_text())
    texts = GENERATORS[generator](n, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(texts))
    return texts


# --- ptxas, cached --------------------------------------------------------------------------------


def nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    match = re.search(r"release ([\d.]+), V([\d.]+)", out)
    return match.group(2) if match else out.strip().splitlines()[-1]


def ptxas_resources(cuda: str, name: str, sm: int, nvcc: str) -> dict:
    """ptxas -v's figures for NAME_kernel, compiling device code only (`nvcc -cubin`)."""
    with tempfile.TemporaryDirectory(prefix="regstudy-") as tmp:
        work = Path(tmp)
        (work / f"{name}.cu").write_text(cuda)
        cmd = [nvcc, f"-arch=sm_{sm}", "-std=c++17", "-cubin", "-Xptxas", "-v", "-o", f"{name}.cubin", f"{name}.cu"]
        done = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
        log = done.stdout + done.stderr
        if done.returncode != 0:
            raise BuildError(f"nvcc failed (exit {done.returncode}):\n{log}")
        return parse_ptxas(log, f"{name}_kernel").as_dict()


class Cache:
    """ptxas figures keyed by sha256(nvcc version + spec text), in one JSON file."""

    def __init__(self, path: Path, version: str):
        self.path, self.version = path, version
        self.data: dict[str, dict] = json.loads(path.read_text()) if path.exists() else {}

    def key(self, text: str) -> str:
        return hashlib.sha256(f"{self.version}\n{text}".encode()).hexdigest()

    def get(self, text: str) -> dict | None:
        return self.data.get(self.key(text))

    def put(self, text: str, resources: dict) -> None:
        self.data[self.key(text)] = resources

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, sort_keys=True))
        os.replace(tmp, self.path)


# --- records --------------------------------------------------------------------------------------


def features(spec: ir.KernelSpec) -> dict:
    t, b, p = spec.threads, spec.block, spec.pipeline
    return {
        "threads": t.threads, "warps": f"{t.warps.m}x{t.warps.n}", "lanes": f"{t.lanes.m}x{t.lanes.n}",
        "lane_order": t.lane_order.name.lower(), "micro": f"{t.micro.m}x{t.micro.n}",
        "repeat": f"{t.repeat.m}x{t.repeat.n} {t.repeat_level.name.lower()}",
        "fragment": f"{t.fragment.m}x{t.fragment.n}", "tile": f"{b.m}x{b.n}x{b.k}",
        "smem": f"{spec.smem_a.order.name.lower()}/{spec.smem_b.order.name.lower()}"
                + (" swizzle(a)" if spec.smem_a.swizzle else "") + (" swizzle(b)" if spec.smem_b.swizzle else ""),
        "vector": f"{spec.load_a.vector}/{spec.load_b.vector}",
        "pipeline": f"{p.stages} {p.copy.name.lower()} {p.fragments.name.lower()} unroll {p.unroll}",
        "bounds": spec.problem.bounds.name.lower(), "batch": spec.problem.batch.name.lower(),
        "schedule": b.schedule.name.lower(), "epilogue": spec.problem.epilogue.name.lower(),
    }


@dataclass
class Record:
    generator: str
    text: str
    estimate: int  # the estimate of ptxas's figure
    demand: int  # the registers the model says the main loop keeps live (may exceed the cap)
    cap: int  # what __launch_bounds__ leaves ptxas
    ptxas: int
    spill_stores: int
    spill_loads: int
    held_out: bool
    features: dict
    terms: dict

    @property
    def spills(self) -> bool:
        return bool(self.spill_stores or self.spill_loads)

    @property
    def error(self) -> float:
        return (self.estimate - self.ptxas) / self.ptxas

    @property
    def pruned(self) -> bool:
        """Whether the tuner's register rule (gemmdsl/tune/screen.py) would drop this spec."""
        return self.terms["accumulators"] + self.terms["fragments"] > self.cap or \
            self.demand * (1 - ESTIMATE_BAND) > self.cap


def held_out(text: str) -> bool:
    """Half the specs, by a hash of the text: held out from any fitting of the model's constants."""
    return hashlib.sha256(text.encode()).digest()[0] % 2 == 1


def study(generator: str, texts: list[str], cache: Cache, nvcc: str, jobs: int) -> list[Record]:
    compiled = [compile_text(text, "study.gemm") for text in texts]

    def resources(i: int) -> dict:
        found = cache.get(texts[i])
        if found is None:
            artifacts = compiled[i]
            found = ptxas_resources(artifacts.cuda, artifacts.name, artifacts.spec.target.sm, nvcc)
        return found

    records = []
    with ThreadPoolExecutor(jobs) as pool:
        for i, found in enumerate(pool.map(resources, range(len(texts)))):
            cache.put(texts[i], found)
            if i % 25 == 24:
                cache.save()
            artifacts = compiled[i]
            estimate = artifacts.plan.path.register_estimate(artifacts.layout)
            records.append(Record(generator, texts[i], estimate.total, estimate.demand, estimate.cap,
                                  found["registers"], found["spill_stores"], found["spill_loads"], held_out(texts[i]),
                                  features(artifacts.spec), dict(vars(estimate))))
    cache.save()
    return records


# --- report ---------------------------------------------------------------------------------------


def distribution(records: list[Record]) -> dict:
    """Of the specs ptxas compiles without spilling: how far the estimate is from ptxas's figure."""
    records = [r for r in records if not r.spills]
    errors = [abs(r.error) for r in records]
    n = len(errors)
    summary = {"n": n}
    for band in BANDS:
        summary[f"within_{round(band * 100)}pct"] = sum(e <= band + 1e-9 for e in errors) / n if n else 0.0
    summary["max_abs_error"] = max(errors, default=0.0)
    summary["mean_error"] = sum(r.error for r in records) / n if n else 0.0
    summary["outside_band"] = sum(e > ESTIMATE_BAND + 1e-9 for e in errors)
    return summary


def table(rows: list[tuple[str, list[Record]]]) -> str:
    head = "| set | N (no spills) | within 5% | within 10% | within 15% | within 20% | worst | mean (signed) |"
    lines = [head, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for label, records in rows:
        d = distribution(records)
        cells = [f"{100 * d[f'within_{round(b * 100)}pct']:.1f}%" for b in BANDS]
        lines.append(f"| {label} | {d['n']} | {' | '.join(cells)} | {100 * d['max_abs_error']:.1f}% "
                     f"| {100 * d['mean_error']:+.1f}% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=300, help="specs per generator (default 300)")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default 0)")
    parser.add_argument("--generator", action="append", choices=sorted(GENERATORS),
                        help="spec generator; repeat for several (default fp32)")
    parser.add_argument("--jobs", type=int, default=2, help="parallel nvcc runs (default 2)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"ptxas cache (default {DEFAULT_CACHE})")
    parser.add_argument("--json", type=Path, default=ROOT / "build" / "register_study.json",
                        help="where to write every record")
    parser.add_argument("--worst", type=int, default=10, help="worst cases to print")
    args = parser.parse_args(argv)

    nvcc = find_nvcc()
    if nvcc is None:
        raise SystemExit("nvcc not on PATH")
    version = nvcc_version(nvcc)
    cache = Cache(args.cache, version)
    records: list[Record] = []
    for generator in args.generator or ["fp32"]:
        texts = drawn(generator, args.n, args.seed, args.cache.parent)
        records += study(generator, texts, cache, nvcc, args.jobs)

    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    print(f"register estimate vs ptxas -v: nvcc {version}, sm_90, N={len(records)}, seed {args.seed}, {when}; "
          f"band {100 * ESTIMATE_BAND:.0f}%")
    rows = []
    for generator in args.generator or ["fp32"]:
        mine = [r for r in records if r.generator == generator]
        rows += [(f"{generator} all", mine), (f"{generator} training", [r for r in mine if not r.held_out]),
                 (f"{generator} held-out", [r for r in mine if r.held_out])]
    print(table(rows))
    spilled = [r for r in records if r.spills]
    flagged = [r for r in spilled if r.demand > r.cap]
    print(f"{len(spilled)} of {len(records)} spill; the demand exceeds the cap for {len(flagged)} of them, "
          f"the tuner would prune {sum(r.pruned for r in spilled)} of them and "
          f"{sum(r.pruned for r in records if not r.spills)} of the {len(records) - len(spilled)} that do not spill")
    fits = [r for r in records if not r.spills]
    over = max((abs(r.error) for r in fits), default=0.0)
    under = max(((r.demand - r.cap) / r.demand for r in fits if r.demand > r.cap), default=0.0)
    print(f"widest error without spills {100 * over:.1f}%, widest demand over the cap without spills "
          f"{100 * under:.1f}%: a band of {100 * max(over, under):.1f}% covers both (ESTIMATE_BAND is "
          f"{100 * ESTIMATE_BAND:.0f}%)")
    print(f"\nworst {args.worst} (estimate / ptxas, error, features):")
    for r in sorted((r for r in records if not r.spills), key=lambda r: -abs(r.error))[:args.worst]:
        held = "held-out" if r.held_out else "training"
        print(f"  {r.estimate:>3} / {r.ptxas:>3} {100 * r.error:+6.1f}% demand {r.demand:>3} {held:<8} "
              + " ".join(f"{k}={v}" for k, v in r.features.items()))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "nvcc": version, "seed": args.seed, "n": args.n, "date": when, "band": ESTIMATE_BAND,
        "distribution": {label: distribution(rs) for label, rs in rows},
        "records": [dict(vars(r), error=r.error, spills=r.spills) for r in records],
    }, indent=1))
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
