"""Host time of one Python API call, per operand library (on a GPU).

    PYTHONPATH=. python scripts/host_cost.py [FP32_SPEC] [--size 256] [--rounds 7] [--calls 300]

Calls `kernel(a, b, c)` (C given, so nothing is allocated) `--calls` times per round with
`time.perf_counter` around the loop; the GPU work of a small problem queues behind the host, so
the time is the host's. Each round is run twice, operands read from their attributes (PyTorch
tensors, CuPy arrays: `arrays.ATTRIBUTE_READERS`) and through the protocols alone (the array
interface or DLPack, plus a driver query where the interface names no device), taking turns;
medians and ranges over the rounds.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from gemmdsl import arrays, runtime

ROOT = Path(__file__).resolve().parent.parent


def operands(kernel: runtime.Kernel, library: str, size: int):
    """A, B and C of `size`^3 in the kernel's layouts (float32), as `library` holds them."""
    import cupy

    arrays = []
    for name in ("A", "B", "C"):
        x = cupy.random.uniform(-1, 1, (size, size), dtype=cupy.float32)
        arrays.append(x if kernel.requirements.layouts[name] == "row" else cupy.asfortranarray(x))
    if library == "torch":
        import torch

        return tuple(torch.from_dlpack(x) for x in arrays)
    return tuple(arrays)


def microseconds_per_call(kernel: runtime.Kernel, a, b, c, calls: int) -> float:
    import cupy

    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        kernel(a, b, c)
    elapsed = time.perf_counter() - start
    cupy.cuda.Device().synchronize()
    return elapsed / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default=str(ROOT / "specs" / "checked_v3.gemm"))
    parser.add_argument("--size", type=int, default=256, help="M = N = K (default 256)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300, help="calls per round (default 300)")
    args = parser.parse_args()
    kernel = runtime.load(args.spec)
    if set(kernel.requirements.dtypes.values()) != {"float32"}:
        parser.error(f"{kernel.name} is not an FP32 spec; this script makes float32 operands (the host's work "
                     f"per call does not depend on the element type)")
    readers = dict(arrays.ATTRIBUTE_READERS)
    libraries = ["cupy"]
    try:
        import torch

        if torch.cuda.is_available():
            libraries.append("torch")
    except ImportError:
        pass
    for library in libraries:
        a, b, c = operands(kernel, library, args.size)
        microseconds_per_call(kernel, a, b, c, 20)  # warm-up: the first call checks and builds the launch
        times: dict[str, list[float]] = {"attributes": [], "protocols": []}
        for _ in range(args.rounds):
            for way in times:
                arrays.ATTRIBUTE_READERS.clear()
                if way == "attributes":
                    arrays.ATTRIBUTE_READERS.update(readers)
                times[way].append(microseconds_per_call(kernel, a, b, c, args.calls))
        arrays.ATTRIBUTE_READERS.update(readers)
        for way, values in times.items():
            print(f"{kernel.name} {args.size}^3, {library} operands, C given, read by {way:10s}: "
                  f"{statistics.median(values):6.1f} us per call (range {min(values):.1f}-{max(values):.1f}; "
                  f"{args.rounds} rounds of {args.calls})")


if __name__ == "__main__":
    main()
