"""Host time of one Python API call against torch.mm's, on a GPU.

    PYTHONPATH=. python scripts/host_cost.py [SPEC...] [--sizes 256,1024] [--rounds 7] [--calls 300] [--profile]

For each spec (default: checked_v3, FP32, and hgemm_h100_bf16c, BF16 in and out) and size, calls
`kernel(a, b, c)` with PyTorch tensors (C given, so nothing is allocated) `--calls` times per round
with `time.perf_counter` around the loop, and `torch.mm(a, b, out=c)` on the same tensors, taking
turns round by round. The GPU work of a problem this small queues behind the host, so the time is
the host's. Medians and ranges over the rounds, and their ratio. `--profile` adds cProfile's view of
the gemmdsl calls (the functions with the most own time).
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from pathlib import Path

from gemmdsl import runtime

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SPECS = [str(ROOT / "specs" / "checked_v3.gemm"), str(ROOT / "specs" / "hgemm_h100_bf16c.gemm")]


def operands(torch, kernel: runtime.Kernel, size: int):
    """A, B and C of `size`^3 in the kernel's layouts and element types, uniform in [-1, 1)."""
    req = kernel.requirements
    made = []
    for name in ("A", "B", "C"):
        dtype = getattr(torch, req.dtypes[name])
        x = torch.rand(size, size, device="cuda").mul_(2).sub_(1).to(dtype)
        made.append(x if req.layouts[name] == "row" else x.t().contiguous().t())
    return tuple(made)


def microseconds_per_call(torch, call, calls: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*", default=DEFAULT_SPECS)
    parser.add_argument("--sizes", default="256,1024", help="M = N = K, comma-separated (default 256,1024)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300, help="calls per round (default 300)")
    parser.add_argument("--profile", action="store_true", help="print cProfile's view of the gemmdsl calls")
    args = parser.parse_args()
    rows = []
    for path in args.specs:
        kernel = runtime.load(path)
        for size in map(int, args.sizes.split(",")):
            a, b, c = operands(torch, kernel, size)
            bound = kernel.bind(a, b, c)
            driver, handle = runtime.cuda_driver(), torch.cuda.current_stream().cuda_stream

            def launches_alone():
                for launch in bound.launches:
                    launch(driver, handle)

            # The whole call; the bound call (stream lookup, device check, launches); the launches alone.
            ways = {"gemmdsl": lambda: kernel(a, b, c), "torch.mm": lambda: torch.mm(a, b, out=c),
                    "bound": bound, "launches": launches_alone}
            for call in ways.values():
                microseconds_per_call(torch, call, 20)  # warm-up: the first call checks and builds the launch
            times: dict[str, list[float]] = {way: [] for way in ways}
            for _ in range(args.rounds):
                for way, call in ways.items():
                    times[way].append(microseconds_per_call(torch, call, args.calls))
            ours, theirs, bound_us, launches_us = (statistics.median(times[way]) for way in ways)
            rows.append((kernel.name, size, ours, min(times["gemmdsl"]), max(times["gemmdsl"]), theirs, ours / theirs,
                         bound_us, launches_us))
            if args.profile:
                profiler = cProfile.Profile()
                profiler.runcall(lambda: [kernel(a, b, c) for _ in range(args.calls)])
                torch.cuda.synchronize()
                pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
    print(f"\n{'kernel':24s} {'size':>6s} {'gemmdsl us':>11s} {'(range)':>13s} {'torch.mm us':>12s} {'ratio':>6s} "
          f"{'bound us':>9s} {'launches us':>12s}")
    for name, size, ours, low, high, theirs, ratio, bound_us, launches_us in rows:
        print(f"{name:24s} {size:6d} {ours:11.1f} {f'{low:.1f}-{high:.1f}':>13s} {theirs:12.1f} {ratio:6.2f} "
              f"{bound_us:9.1f} {launches_us:12.1f}")
    print(f"({args.rounds} rounds of {args.calls} calls each, taking turns; PyTorch tensors, C given)")


if __name__ == "__main__":
    main()
