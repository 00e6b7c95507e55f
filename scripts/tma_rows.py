"""What rows TMA cannot read, or reads slowly, cost: GPU time of launches back to back (CUDA events after a spin
kernel, median of 20), against torch.mm on the same operands (docs/performance.md, "Operands TMA cannot read, or
reads slowly").

    python3 scripts/tma_rows.py fallback FAMILY DTYPE MxNxK,...   # the fallback member alone against the family,
                                                                  # which copies the refused operands
    python3 scripts/tma_rows.py stride FAMILY DTYPE MxNxK,...     # the rule's member on packed operands (ld = K)
                                                                  # against rows 128 bytes apart

DTYPE: bfloat16, float16 or float32; B is column-major (an N x K weight), as nn.Linear stores it.
"""
import statistics
import sys

import torch

import gemmdsl
from gemmdsl.bench import SPIN_NS_PER_RUN, spin


def times(launches, runs=20):
    """Median microseconds of each launch, the launches taking turns."""
    for launch in launches:
        launch(None)
    torch.cuda.synchronize()
    spin(runs * len(launches) * SPIN_NS_PER_RUN)
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in launches]
              for _ in range(runs)]
    for round_events in events:
        for (start, end), launch in zip(round_events, launches):
            start.record()
            launch(None)
            end.record()
    torch.cuda.synchronize()
    return [statistics.median(r[i][0].elapsed_time(r[i][1]) for r in events) * 1000 for i in range(len(launches))]


def main(mode: str, path: str, dtype_name: str, sizes: str) -> None:
    family = gemmdsl.load(path)
    dtype = getattr(torch, dtype_name)
    row = 128 // torch.tensor([], dtype=dtype).element_size()
    for size in sizes.split(","):
        m, n, k = map(int, size.split("x"))
        wide = -(-k // row) * row
        a_rows = torch.randn(m, wide, device="cuda").to(dtype)
        w_rows = torch.randn(n, wide, device="cuda").to(dtype)
        a, w = a_rows[:, :k].contiguous(), w_rows[:, :k].contiguous()
        c = torch.empty(m, n, device="cuda", dtype=dtype)
        reference = lambda stream=None: torch.mm(a, w.T, out=c)  # noqa: E731
        if mode == "fallback":
            fallback = family.member_for(m, n, k, aligned=False).bind(a, w.T, c)
            copied = family.bind(a, w.T, c)
            t = times([fallback, copied, reference])
            print(f"{size:16s} fallback {fallback.entry} {t[0]:8.1f} us | family {copied.entry} "
                  f"({len(copied.launches)} launches) {t[1]:8.1f} us | torch.mm {t[2]:8.1f} us | "
                  f"family {t[2] / t[1]:.3f}x torch.mm")
        else:
            member = family.member_for(m, n, k)
            t = times([member.bind(a, w.T, c), member.bind(a_rows[:, :k], w_rows[:, :k].T, c), reference])
            print(f"{size:16s} {member.name:28s} row stride mod 128 = {k * 128 // row % 128:3d} bytes: ld = K "
                  f"{t[0]:8.1f} us, ld = {wide} {t[1]:8.1f} us, ratio {t[0] / t[1]:.3f}; torch.mm {t[2]:8.1f} us")


if __name__ == "__main__":
    main(*sys.argv[1:5])
