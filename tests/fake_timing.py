"""Timing backends for the tuning workers' tests: `FakeBackend` needs no GPU, `PlantedGpuBackend` plants
real faults on one.

A task's spec text may carry a plant in a comment:
    // plant: fault   the worker process dies of SIGSEGV (the fake) / the kernel writes out of bounds (GPU)
    // plant: hang    the timing never returns (the fake sleeps / a kernel spins forever)
    // plant: lost    the backend raises ContextLost (the fake)
    // plant: error   the backend raises an ordinary error (the fake)
    // plant: slow    the timing takes a second longer (the fake)
    // plant: zero, nan, inf, negative   the fake reports a median time that is no time
Environment: FAKE_TIMING_LOG, a file every timing appends `spec_hash MxNxK pid` to; FAKE_TIMING_SLEEP,
seconds each fake timing takes; FAKE_GPU, the fake device's name.
"""
import dataclasses
import hashlib
import math
import os
import re
import signal
import time

from gemmdsl.tune_workers import ContextLost, Device, GpuBackend, Timed


NO_TIME = {"zero": 0.0, "nan": math.nan, "inf": math.inf, "negative": -1.0}


def plant(text: str) -> str | None:
    found = re.search(r"// plant: (\w+)", text)
    return found.group(1) if found else None


def fake_figures(task) -> Timed:
    """Deterministic in the spec and the size (the fastest spec differs from size to size): what the
    worker that ran it cannot change."""
    m, n, k = task.size
    digest = int(hashlib.sha256(f"{task.spec_hash} {m}x{n}x{k}".encode()).hexdigest()[:6], 16)
    ms = (1.0 + digest % 997 / 997) * m * n * k / 4096 ** 3
    return Timed(ms, 1.2 * m * n * k / 4096 ** 3, 60.0)


class FakeBackend:
    def device(self) -> Device:
        return Device(os.environ.get("FAKE_GPU", "Fake GPU"), "13.0", "fake 1.0", "0.0", "fakehost")

    def time(self, task) -> Timed:
        log = os.environ.get("FAKE_TIMING_LOG")
        if log:
            with open(log, "a") as out:
                out.write(f"{task.spec_hash} {'x'.join(map(str, task.size))} {os.getpid()}\n")
        time.sleep(float(os.environ.get("FAKE_TIMING_SLEEP", "0")))
        kind = plant(task.text)
        if kind == "fault":
            os.kill(os.getpid(), signal.SIGSEGV)
        if kind == "hang":
            time.sleep(3600)
        if kind == "slow":
            time.sleep(1)
        if kind == "lost":
            raise ContextLost("CUDA error: cudaErrorIllegalAddress: an illegal memory access was encountered")
        if kind == "error":
            raise ValueError("planted error")
        if kind in NO_TIME:
            return dataclasses.replace(fake_figures(task), median_ms=NO_TIME[kind])
        return fake_figures(task)


FAULT_SOURCE = r"""
extern "C" __global__ void planted_fault(float* out) { out[(1ull << 40) + threadIdx.x] = 1.0f; }
extern "C" __global__ void planted_hang(volatile int* flag) { while (*flag == 0) { } }
"""


class PlantedGpuBackend(GpuBackend):
    """The real backend, but a task planted `fault` launches a kernel that writes far out of bounds (an
    illegal address, which poisons the context) and one planted `hang` a kernel that never ends."""

    def time(self, task) -> Timed:
        kind = plant(task.text)
        if kind not in ("fault", "hang"):
            return super().time(task)
        import cupy

        kernel = cupy.RawKernel(FAULT_SOURCE, f"planted_{kind}")
        buffer = cupy.zeros(32, dtype=cupy.float32 if kind == "fault" else cupy.int32)
        try:
            kernel((1,), (32,), (buffer,))
            cupy.cuda.Device().synchronize()
        except (cupy.cuda.runtime.CUDARuntimeError, cupy.cuda.driver.CUDADriverError) as err:
            raise ContextLost(f"CUDA error: {err}") from None
        raise AssertionError(f"the planted {kind} kernel returned")
