"""Host time of every kind of Python API call against its PyTorch equivalent, and of loading, on a GPU.

    PYTHONPATH=. python scripts/host_cost.py [--sizes 256,1024] [--rounds 7] [--calls 300] [--profile] [--no-loads]

Calls (docs/performance.md, "The Python API's host cost"): each kind of call in KINDS (a spec, a family, fused
bias + GELU, FP8 with row and column scales, grouped with offs, a family's padded launcher for misaligned
operands, and C left out) on PyTorch tensors, `--calls` times per round with time.perf_counter around the loop,
beside its PyTorch equivalent on the same tensors, taking turns round by round: medians over the rounds, and
their ratio. `same` repeats one set of operands; `alternating` takes turns between two sets, so that every call
comes at new addresses (its plan rebound: call_plan.py). The GPU work of these sizes queues behind the host, so
the time is the host's. `--profile` adds cProfile's view of each gemmdsl call.

Loads: fresh processes, each importing torch and making its CUDA context first (not timed): `import gemmdsl`,
then `gemmdsl.load` of a spec and of a family, first with the cache of compiled specs empty (the cubins built
already) and then warm (a second process: the best of three), each with its parts (importing CuPy; importing
gemmdsl's runtime; the load itself: reading the cache, loading the modules).
"""
from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
GROUPS = 4


@dataclass(frozen=True)
class Kind:
    label: str
    spec: str  # file under specs/
    make: Callable[..., tuple]  # (torch, size, generator) -> (A, B, C or None, chain keywords)
    theirs: Callable[..., Callable[[], Any]]  # (torch, A, B, C, chain) -> PyTorch's equivalent call
    equivalent: str  # its name, for the table


def bf16(torch, generator, *shape):
    return torch.rand(*shape, device="cuda", generator=generator).mul_(2).sub_(1).to(torch.bfloat16)


def plain(torch, size, generator, c_given=True):
    a, b = bf16(torch, generator, size, size), bf16(torch, generator, size, size).t()
    return a, b, bf16(torch, generator, size, size) if c_given else None, {}


def padded(torch, size, generator):
    """A whose rows are size + 1 elements apart: TMA refuses it; the family copies it first."""
    a = bf16(torch, generator, size, size + 1)[:, :size]
    return a, bf16(torch, generator, size, size).t(), bf16(torch, generator, size, size), {}


def fused(torch, size, generator, c_given=True):
    a, b, c, _ = plain(torch, size, generator, c_given)
    return a, b, c, {"bias": bf16(torch, generator, size)}


def rowwise(torch, size, generator, c_given=True):
    a = bf16(torch, generator, size, size).to(torch.float8_e4m3fn)
    b = bf16(torch, generator, size, size).to(torch.float8_e4m3fn).t()
    scales = {"row_scale": torch.rand(size, device="cuda", generator=generator) + 0.5,
              "col_scale": torch.rand(size, device="cuda", generator=generator) + 0.5}
    return a, b, bf16(torch, generator, size, size) if c_given else None, scales


def grouped(torch, size, generator, c_given=True):
    a, _, c, _ = plain(torch, size, generator, c_given)
    w = bf16(torch, generator, GROUPS, size, size)  # nn.Linear weights, one per group
    offs = torch.arange(1, GROUPS + 1, device="cuda", dtype=torch.int32) * (size // GROUPS)
    return a, w.mT, c, {"offs": offs}


def mm(torch, a, b, c, chain):
    return (lambda: torch.mm(a, b, out=c)) if c is not None else (lambda: torch.mm(a, b))


def linear_gelu(torch, a, b, c, chain):
    import torch.nn.functional as F

    w, bias = b.t(), chain["bias"]
    return lambda: F.gelu(F.linear(a, w, bias), approximate="tanh")


def scaled_mm(torch, a, b, c, chain):
    scale_a, scale_b = chain["row_scale"][:, None], chain["col_scale"][None, :]
    if c is not None:  # its out= overload, where this PyTorch has one
        try:
            torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, out=c)
            return lambda: torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, out=c)
        except (TypeError, RuntimeError):
            pass
    return lambda: torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)


def grouped_mm(torch, a, b, c, chain):
    return lambda: torch._grouped_mm(a, b, offs=chain["offs"], out_dtype=torch.bfloat16)


KINDS = [
    Kind("spec", "hgemm_h100_bf16c.gemm", plain, mm, "torch.mm(out=)"),
    Kind("family", "hgemm_h100_bf16c_family.gemmf", plain, mm, "torch.mm(out=)"),
    Kind("fused bias, GELU", "linear_gelu.gemm", fused, linear_gelu, "F.gelu(F.linear)"),
    Kind("FP8 row/col scales", "fp8_rowwise.gemm", rowwise, scaled_mm, "torch._scaled_mm(out=)"),
    Kind("grouped offs", "moe_grouped.gemm", grouped, grouped_mm, "torch._grouped_mm"),
    Kind("family, padded", "hgemm_h100_bf16c_family.gemmf", padded, mm, "torch.mm(out=)"),
    Kind("spec, C left out", "hgemm_h100_bf16c.gemm", lambda *a: plain(*a, c_given=False), mm, "torch.mm"),
    Kind("family, C left out", "hgemm_h100_bf16c_family.gemmf", lambda *a: plain(*a, c_given=False), mm,
         "torch.mm"),
    Kind("fused, C left out", "linear_gelu.gemm", lambda *a: fused(*a, c_given=False), linear_gelu,
         "F.gelu(F.linear)"),
    Kind("FP8, C left out", "fp8_rowwise.gemm", lambda *a: rowwise(*a, c_given=False), scaled_mm,
         "torch._scaled_mm"),
    Kind("grouped, C left out", "moe_grouped.gemm", lambda *a: grouped(*a, c_given=False), grouped_mm,
         "torch._grouped_mm"),
]


def microseconds_per_call(torch, call, calls: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def timed(torch, ways: dict[str, Callable[[], Any]], rounds: int, calls: int) -> dict[str, float]:
    """Median microseconds per call of each way, the ways taking turns round by round after a warm-up."""
    for call in ways.values():
        microseconds_per_call(torch, call, 20)
    times: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(rounds):
        for way, call in ways.items():
            times[way].append(microseconds_per_call(torch, call, calls))
    return {way: statistics.median(values) for way, values in times.items()}


def alternating(sets: list[tuple]) -> Callable[[], tuple]:
    return itertools.cycle(sets).__next__


def call_rows(torch, args) -> list[tuple]:
    import gemmdsl

    kernels = {kind.spec: gemmdsl.load(SPECS / kind.spec) for kind in KINDS}
    rows = []
    for size in map(int, args.sizes.split(",")):
        for kind in KINDS:
            try:
                rows += kind_rows(torch, args, kind, kernels[kind.spec], size)
            except Exception as err:  # noqa: BLE001 - one kind's failure is a row of the table, not the end of it
                print(f"{kind.label}, {size}^3: {type(err).__name__}: {err}", file=sys.stderr)
        a, b, c, _ = plain(torch, size, torch.Generator(device="cuda").manual_seed(1))
        bound = kernels["hgemm_h100_bf16c.gemm"].bind(a, b, c)
        medians = timed(torch, {"bound": bound}, args.rounds, args.calls)
        rows.append(("spec, bound (bind once)", size, "same", medians["bound"], "torch.mm(out=)", None))
    return rows


def kind_rows(torch, args, kind: Kind, kernel, size: int) -> list[tuple]:
    """One kind of call at one size: same operands, then alternating ones, beside PyTorch's equivalent."""
    rows = []
    generator = torch.Generator(device="cuda").manual_seed(size)
    sets = [kind.make(torch, size, generator) for _ in range(2)]
    for operands, chosen in (("same", sets[:1]), ("alternating", sets)):
        ours_next, theirs_calls = alternating(chosen), [kind.theirs(torch, *s) for s in chosen]
        theirs_next = alternating(theirs_calls)

        def ours(step=ours_next):
            a, b, c, chain = step()
            return kernel(a, b, c, **chain)

        medians = timed(torch, {"gemmdsl": ours, "torch": lambda step=theirs_next: step()()}, args.rounds,
                        args.calls)
        rows.append((kind.label, size, operands, medians["gemmdsl"], kind.equivalent, medians["torch"]))
        if args.profile and operands == "same":
            profiler = cProfile.Profile()
            profiler.runcall(lambda: [ours() for _ in range(args.calls)])
            torch.cuda.synchronize()
            print(f"--- {kind.label}, {size}^3")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(8)
    return rows


LOAD_CHILD = """
import json, sys, time
start = time.perf_counter()
import torch
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
times = {"dependencies": time.perf_counter() - start}
mark = time.perf_counter()
import gemmdsl
times["import gemmdsl"] = time.perf_counter() - mark
if sys.argv[2] == "parts":
    mark = time.perf_counter()
    import cupy
    times["import cupy"] = time.perf_counter() - mark
    mark = time.perf_counter()
    import gemmdsl.runtime, gemmdsl.family_kernel
    times["import runtime"] = time.perf_counter() - mark
mark = time.perf_counter()
gemmdsl.load(sys.argv[1])
times["load"] = time.perf_counter() - mark
print(json.dumps(times))
"""


def child_times(path: Path, mode: str) -> dict[str, float]:
    path_entries = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    done = subprocess.run([sys.executable, "-c", LOAD_CHILD, str(path), mode], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(path_entries)})
    if done.returncode != 0:
        raise RuntimeError(f"the load of {path} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def load_rows() -> list[tuple]:
    """Per spec and family: the load with the compiled cache empty, then warm (the best of three processes),
    in total and in parts."""
    from gemmdsl.load_cache import cache_dir

    rows = []
    for label, name in (("spec", "hgemm_h100_bf16c.gemm"), ("family", "hgemm_h100_bf16c_family.gemmf")):
        shutil.rmtree(cache_dir() / "compiled", ignore_errors=True)
        first = child_times(SPECS / name, "total")
        warm = min((child_times(SPECS / name, "total") for _ in range(3)), key=lambda t: t["load"])
        parts = min((child_times(SPECS / name, "parts") for _ in range(3)), key=lambda t: t["load"])
        rows.append((label, name, first, warm, parts))
    return rows


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256,1024", help="M = N = K, comma-separated (default 256,1024)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300, help="calls per round (default 300)")
    parser.add_argument("--profile", action="store_true", help="print cProfile's view of each gemmdsl call")
    parser.add_argument("--no-loads", action="store_true", help="time the calls only")
    args = parser.parse_args()
    rows = call_rows(torch, args)
    print(f"\n{'call':26s} {'size':>5s} {'operands':>11s} {'gemmdsl us':>10s}  {'PyTorch equivalent':24s} "
          f"{'us':>6s} {'ratio':>6s}")
    for label, size, operands, ours, equivalent, theirs in rows:
        ratio = f"{ours / theirs:6.2f}" if theirs else ""
        print(f"{label:26s} {size:5d} {operands:>11s} {ours:10.1f}  {equivalent:24s} "
              f"{theirs if theirs else float('nan'):6.1f} {ratio}")
    print(f"({args.rounds} rounds of {args.calls} calls, medians, taking turns with PyTorch; "
          f"{torch.cuda.get_device_name()})")
    if args.no_loads:
        return
    print(f"\n{'load (fresh process)':22s} {'first s':>8s} {'warm s':>7s}  warm's parts (s): import cupy, "
          f"import gemmdsl's runtime, load")
    for label, name, first, warm, parts in load_rows():
        print(f"{label + ' ' + name:44s} {first['load']:8.3f} {warm['load']:7.3f}  {parts['import cupy']:.3f}, "
              f"{parts['import runtime']:.3f}, {parts['load']:.3f}")
        if label == "spec":
            print(f"import gemmdsl (after torch): {warm['import gemmdsl'] * 1e3:.2f} ms; torch and its CUDA context: "
                  f"{warm['dependencies']:.2f} s")


if __name__ == "__main__":
    main()
