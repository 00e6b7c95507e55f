"""Quick device smoke test: emit every spec, build cubins with nvcc, check against float64, time vs cuBLAS."""
import glob
import os
import subprocess
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, os.getcwd())
from gemmdsl.emit import emit_cuda  # noqa: E402
from gemmdsl.parser import parse  # noqa: E402
from gemmdsl.paths import plan_kernel  # noqa: E402
from gemmdsl.source import SourceFile  # noqa: E402


def bench(fn, reps=20):
    for _ in range(3):
        fn()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(reps):
        start.record(); fn(); stop.record(); stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


paths = sys.argv[1:] or sorted(glob.glob("specs/*.gemm"))
SIZES = [tuple(map(int, s.split("x"))) for s in os.environ.get("SIZES", "1024x1024x1024,2048x1024x512,4096x4096x4096").split(",")]
for path in paths:
    src = SourceFile.read(path); spec = parse(src); plan = plan_kernel(spec); lay = plan.layout
    if "col" in (spec.problem.a.layout.value, spec.problem.b.layout.value, spec.problem.c.layout.value):
        print(spec.name, "skipped: column-major operands (use gemmdsl verify)"); continue
    d = f"/tmp/build/{spec.name}"; os.makedirs(d, exist_ok=True)
    open(f"{d}/k.cu", "w").write(emit_cuda(plan, src.text, []))
    r = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", f"{d}/k.cubin", f"{d}/k.cu"], capture_output=True, text=True)
    if r.returncode:
        print(spec.name, "BUILD FAIL", r.stderr[:2000]); continue
    fn = cp.RawModule(path=f"{d}/k.cubin").get_function(f"{spec.name}_kernel")
    if lay.smem_bytes > lay.arch.default_smem_per_block:
        fn.max_dynamic_shared_size_bytes = lay.smem_bytes
    res = [f"{spec.name:16s}"]
    for (M, N, K) in SIZES:
        a = cp.random.uniform(-1, 1, (M, K), dtype=cp.float32); b = cp.random.uniform(-1, 1, (K, N), dtype=cp.float32)
        c = cp.full((M, N), cp.nan, dtype=cp.float32)
        grid = ((-(-M // lay.bm)) * (-(-N // lay.bn)),)
        args = (a, b, c, np.int32(M), np.int32(N), np.int32(K), np.int32(K), np.int32(N), np.int32(N),
                np.float32(1.0), np.float32(0.0)) + ((np.int64(0),) * 3 if spec.problem.batched else ())
        call = lambda: fn(grid, (lay.threads,), args, shared_mem=lay.smem_bytes)
        call(); cp.cuda.Device().synchronize()
        ref = a.astype(cp.float64) @ b.astype(cp.float64)
        res.append(f"{M}x{N}x{K} err={float(cp.linalg.norm(c - ref) / cp.linalg.norm(ref)):.1e}")
        if M >= 4096:
            t = bench(call); tb = bench(lambda: a @ b); flop = 2 * M * N * K
            res.append(f"{flop / t / 1e9:.1f} TF/s vs cuBLAS {flop / tb / 1e9:.1f} ({tb / t:.2f}x)")
    print(" | ".join(res), flush=True)
