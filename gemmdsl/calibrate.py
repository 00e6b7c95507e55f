"""`gemmdsl calibrate`: measure the current GPU's rates with microbenchmarks and write them as a profile
(gemmdsl/profiles/, read by the cycle model through gpu_profile.py).

    gemmdsl calibrate                       # print the figures
    gemmdsl calibrate -o my_gpu.json        # and write them as a profile

What it measures, each as a median over repeats, in units per SM clock at the clock the GPU held during the
measurement (clock64 against %globaltimer in the same kernel):
- the SM clock under a short tensor-core burst and after `--sustain` seconds of it (the power cap's clock);
- HBM's read bandwidth (a grid-stride float4 read of a buffer 8x the L2) and L2's (a buffer a quarter of the
  L2, read many times), in TB/s (the profile turns them into bytes per clock at its clock);
- mma.sync's multiply-adds per SM and clock (bf16, tf32: register-only loops of independent instructions) and
  wgmma's (bf16, tf32: shared-memory operands, two warpgroups a block);
- the GPU time one more kernel launch adds to a call (a CUDA graph of empty kernels), in nanoseconds.
The cycle model's fitted terms (the TMA ring's round trip, 3xTF32's split wait) are not microbenchmarks: they
come from timing real kernels (scripts/fit_cost_model.py) and are carried in the profile beside the measured
ones, with their source.
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy

from .calibrate_kernels import (EMPTY, MMA_SYNC, MMA_SYNC_MACS, MMA_SYNC_PER_STEP, READ, WGMMA, WGMMA_MACS,
                                WGMMA_PER_STEP, WGMMA_SMEM_BYTES)

REPEATS = 5
READ_THREADS = 512
MMA_WARPS_PER_SM = 8
LAUNCHES_IN_GRAPH = 200


@dataclass(frozen=True)
class Timed:
    """One microbenchmark run: the SM clock cycles and the nanoseconds block 0 measured."""

    cycles: int
    nanoseconds: int

    @property
    def clock_mhz(self) -> float:
        return 1e3 * self.cycles / self.nanoseconds


def _run(kernel: Any, grid: int, block: int, args: tuple, smem: int = 0) -> Timed:
    import cupy

    clocks = cupy.zeros(2, dtype=cupy.uint64)
    kernel((grid,), (block,), (*args, clocks), shared_mem=smem)
    cupy.cuda.runtime.deviceSynchronize()
    cycles, nanoseconds = (int(x) for x in clocks.get())
    return Timed(cycles, nanoseconds)


def _median_run(kernel: Any, grid: int, block: int, args: tuple, smem: int = 0) -> Timed:
    """The median of REPEATS runs, after one to warm up."""
    _run(kernel, grid, block, args, smem)
    runs = sorted((_run(kernel, grid, block, args, smem) for _ in range(REPEATS)), key=lambda run: run.nanoseconds)
    return runs[len(runs) // 2]


def read_rate(data: Any, passes: int, sms: int) -> tuple[float, Timed]:
    """Bytes per second, and the median run, of `passes` reads of `data` by every SM."""
    import cupy

    kernel = cupy.RawKernel(READ, "calibrate_read")
    words = data.size // 4
    sink = cupy.zeros(1, dtype=cupy.float32)
    args = (data, numpy.int64(words), numpy.int32(passes), sink)
    timed = _median_run(kernel, sms * 4, READ_THREADS, args)
    return words * 16 * passes / (timed.nanoseconds * 1e-9), timed


def mma_sync_rate(unit: str, sms: int, iterations: int) -> tuple[float, Timed]:
    """Multiply-adds per SM and clock of mma.sync for `unit`, and the median run."""
    import cupy

    kernel = cupy.RawKernel(MMA_SYNC, f"calibrate_mma_{unit}", options=("-std=c++17",))
    threads = MMA_WARPS_PER_SM * 32
    out = cupy.zeros(sms * threads, dtype=cupy.float32)
    args = (out, numpy.int32(iterations))
    timed = _median_run(kernel, sms, threads, args)
    macs = MMA_WARPS_PER_SM * iterations * MMA_SYNC_PER_STEP * MMA_SYNC_MACS[unit]
    return macs / timed.cycles, timed


def wgmma_rate(unit: str, sms: int, iterations: int) -> tuple[float, Timed]:
    """Multiply-adds per SM and clock of wgmma for `unit` (sm_90a), and the median run."""
    import cupy

    kernel = cupy.RawKernel(WGMMA, f"calibrate_wgmma_{unit}", options=("-std=c++17", "--gpu-architecture=sm_90a"))
    kernel.max_dynamic_shared_size_bytes = WGMMA_SMEM_BYTES
    out = cupy.zeros(sms * 256, dtype=cupy.float32)
    args = (out, numpy.int32(iterations))
    timed = _median_run(kernel, sms, 256, args, WGMMA_SMEM_BYTES)
    macs = 2 * iterations * WGMMA_PER_STEP * WGMMA_MACS[unit]  # two warpgroups a block, one block an SM
    return macs / timed.cycles, timed


def sustained_clock(sms: int, seconds: float) -> Timed:
    """The clock after `seconds` of back-to-back mma.sync loops on every SM (the board at its power cap)."""
    import time

    import cupy

    kernel = cupy.RawKernel(MMA_SYNC, "calibrate_mma_bf16", options=("-std=c++17",))
    threads = MMA_WARPS_PER_SM * 32
    out = cupy.zeros(sms * threads, dtype=cupy.float32)
    clocks = cupy.zeros(2, dtype=cupy.uint64)
    args = (out, numpy.int32(20000), clocks)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(10):
            kernel((sms,), (threads,), args)
        cupy.cuda.runtime.deviceSynchronize()
    return _median_run(kernel, sms, threads, args[:2])


def launch_ns(launches: int = LAUNCHES_IN_GRAPH) -> float:
    """GPU nanoseconds per empty kernel in a CUDA graph of `launches` of them: what a kernel boundary costs."""
    import cupy

    kernel = cupy.RawKernel(EMPTY, "calibrate_empty")
    sink = cupy.zeros(2, dtype=cupy.int32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        for _ in range(launches):
            kernel((1,), (32,), (sink,))
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        times = []
        for _ in range(REPEATS):
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            graph.launch(stream)
            end.record(stream)
            end.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, end) * 1e6 / launches)
    return statistics.median(times)


def measure(sustain: float = 3.0) -> dict:
    """Every figure of the profile, on the current device."""
    import cupy

    device = cupy.cuda.Device()
    properties = cupy.cuda.runtime.getDeviceProperties(device.id)
    sms = properties["multiProcessorCount"]
    l2 = properties["l2CacheSize"]
    name = properties["name"]
    name = name.decode() if isinstance(name, bytes) else name
    major, minor = device.compute_capability[:-1], device.compute_capability[-1]
    figures: dict = {"gpu": name, "sm": int(f"{major}{minor}"), "sms": sms, "l2_bytes": l2,
                     "measured": datetime.date.today().isoformat(), "source": "gemmdsl calibrate"}
    bf16_rate, burst = mma_sync_rate("bf16", sms, 2000)
    tf32_rate, _ = mma_sync_rate("tf32", sms, 2000)
    figures["mma_sync_macs_per_clock"] = {"bf16": round(bf16_rate), "f16": round(bf16_rate), "tf32": round(tf32_rate)}
    figures["burst_clock_mhz"] = round(burst.clock_mhz)
    if figures["sm"] == 90:
        wgmma_bf16, wgmma_timed = wgmma_rate("bf16", sms, 4000)
        wgmma_tf32, _ = wgmma_rate("tf32", sms, 4000)
        figures["wgmma_macs_per_clock"] = {"bf16": round(wgmma_bf16), "f16": round(wgmma_bf16),
                                           "tf32": round(wgmma_tf32), "fp8": 2 * round(wgmma_bf16)}
        figures["wgmma_clock_mhz"] = round(wgmma_timed.clock_mhz)
    hbm_data = cupy.ones(8 * l2 // 4, dtype=cupy.float32)
    figures["hbm_tbps"] = round(read_rate(hbm_data, 1, sms)[0] / 1e12, 3)
    del hbm_data
    l2_data = cupy.ones(l2 // 4 // 4, dtype=cupy.float32)
    figures["l2_tbps"] = round(read_rate(l2_data, 64, sms)[0] / 1e12, 3)
    figures["launch_ns"] = round(launch_ns())
    figures["sustained_clock_mhz"] = round(sustained_clock(sms, sustain).clock_mhz)
    # The clock the cycle model's figures turn into times at: the tensor cores' own under load where there are
    # wgmma figures (GEMMs run there), else mma.sync's.
    figures["clock_mhz"] = figures.get("wgmma_clock_mhz", figures["burst_clock_mhz"])
    return figures


def add_calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", metavar="PROFILE.json",
                        help="write the figures as a profile (merged into an existing one's fitted terms)")
    parser.add_argument("--sustain", type=float, default=3.0, metavar="SECONDS",
                        help="seconds of tensor-core load before the sustained clock is read (default 3)")


def calibrate_main(args: argparse.Namespace) -> int:
    from .runtime.environment import GpuUnavailable, require_gpu

    try:
        require_gpu()
    except GpuUnavailable as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    figures = measure(args.sustain)
    for key, value in figures.items():
        print(f"{key}: {value}")
    if args.output:
        path = Path(args.output)
        existing = json.loads(path.read_text()) if path.exists() else {}
        existing.update(figures)
        path.write_text(json.dumps(existing, indent=2, sort_keys=True) + "\n")
        print(f"wrote {path}")
    return 0
