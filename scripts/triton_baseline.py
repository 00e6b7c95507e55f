"""Triton beside cuBLAS, launch for launch, at each precision (bf16, f16, tf32) on one GPU.

A baseline for the performance tables (docs/performance.md): a blocked Triton matmul (written here,
autotuned over a few configs known to suit Hopper) and cuBLAS through PyTorch, timed in
one process, interleaved round by round. Run it on the device (an H100) with

    python3 scripts/triton_baseline.py --json out/triton.json

It installs nothing: torch and triton must already be importable. Per precision and size it
first checks Triton's C (NaN-poisoned before the launch) and cuBLAS's C against a float64
product of the same inputs, on the first 512 rows, then times `runs` rounds, one launch of each
per round, with CUDA events, and reports the medians as TFLOP/s. A markdown table goes to
stdout, progress to stderr; the exit status is 1 if any Triton result is out of tolerance.
Unlike gemmdsl.bench, inputs are not rotated through copies to defeat L2, so at 1024^3 (A, B
and C fit in the H100's 50 MB L2) both sides read cached inputs alike.
"""
import argparse
import datetime
import inspect
import json
import statistics
import sys
from pathlib import Path

PRECISIONS = ("bf16", "f16", "tf32")
DEFAULT_SIZES = "1024x1024x1024,2048x2048x2048,4096x4096x4096,8192x8192x8192,4096x4096x1024"
UNIT_ROUNDOFF = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11, "f32": 0.0}  # of C's storage type
TF32_TOLERANCE = 2e-3
CHECK_ROWS = 512  # the float64 reference covers these rows of C only; 8192^3 in float64 is slow
SPIN_CYCLES_PER_LAUNCH = 200_000  # GPU time (~100 us) bought for the host to enqueue each timed launch
# (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps): tiles that do well on Hopper; float32 tiles take
# twice the shared memory per element, so tf32 gets BLOCK_K 32 variants.
CONFIGS_16BIT = [(128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 4), (128, 128, 64, 3, 8),
                 (128, 128, 32, 4, 4), (64, 256, 32, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4)]
CONFIGS_TF32 = [(128, 256, 32, 3, 8), (256, 128, 32, 3, 8), (128, 128, 32, 4, 4), (128, 128, 32, 3, 8),
                (64, 256, 32, 4, 4), (128, 64, 32, 4, 4), (128, 128, 64, 3, 8)]
GROUP_M = 8


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", action="append", help="bf16, f16 or tf32; repeatable or "
                        "comma-separated (default: all three)")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="MxNxK,... (default: %(default)s)")
    parser.add_argument("--c-dtype", choices=("f32", "same"), default="f32",
                        help="Triton's C: float32, or the inputs' type (default: f32)")
    parser.add_argument("--b-layout", choices=("row", "col"), default="row",
                        help="B stored K x N row-major, or N x K row-major and passed transposed")
    parser.add_argument("--runs", type=int, default=20, help="timed rounds (default: 20)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed rounds, autotuning included; "
                        "at least 1 (default: 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the rows and metadata here")
    args = parser.parse_args(argv)
    args.precision = [p for item in args.precision or [",".join(PRECISIONS)] for p in item.split(",") if p]
    if bad := sorted(set(args.precision) - set(PRECISIONS)):
        parser.error(f"unknown precision {', '.join(bad)}; choose from {', '.join(PRECISIONS)}")
    try:
        args.sizes = [tuple(int(d) for d in s.lower().split("x")) for s in args.sizes.split(",") if s]
    except ValueError:
        parser.error(f"--sizes wants MxNxK,...; got {args.sizes!r}")
    if any(len(s) != 3 or min(s) < 1 for s in args.sizes):
        parser.error("every size needs three positive dimensions, MxNxK")
    if args.runs < 1 or args.warmup < 1:
        parser.error("--runs and --warmup must be at least 1 (warm-up is where autotuning happens)")
    return args


def import_gpu_modules() -> None:
    """Import torch and triton into this module's globals, where the Triton kernel looks up `tl`."""
    global torch, triton, tl, NEW_DOT_API
    import torch
    import triton
    import triton.language as tl
    # Triton 3 spells TF32 `input_precision="tf32"`; older releases only know `allow_tf32=True`.
    NEW_DOT_API = "input_precision" in inspect.signature(tl.dot).parameters


def make_kernel(precision: str):
    """A freshly autotuned Triton matmul for one precision, so its tuning cache is its own."""
    def matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
               stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NEW_DOT_API: tl.constexpr):
        # Program ids run down bands GROUP_M tiles tall before moving right, so programs that
        # run together share B's columns (and A's rows) in L2.
        pid = tl.program_id(0)
        tiles_n = tl.cdiv(N, BLOCK_N)
        programs_per_band = GROUP_M * tiles_n
        band_start = (pid // programs_per_band) * GROUP_M
        band_height = tl.minimum(tl.cdiv(M, BLOCK_M) - band_start, GROUP_M)
        within = pid % programs_per_band
        rows = (band_start + within % band_height) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = (within // band_height) * BLOCK_N + tl.arange(0, BLOCK_N)
        ks = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
        b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k_in = ks + k0 < K
            a = tl.load(a_ptrs, mask=(rows[:, None] < M) & k_in[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_in[:, None] & (cols[None, :] < N), other=0.0)
            # The precision flag only matters for float32 inputs; 16-bit inputs ignore it.
            if NEW_DOT_API:
                acc += tl.dot(a, b, input_precision="tf32")
            else:
                acc += tl.dot(a, b, allow_tf32=True)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))

    configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": GROUP_M},
                             num_stages=stages, num_warps=warps)
               for bm, bn, bk, stages, warps in (CONFIGS_TF32 if precision == "tf32" else CONFIGS_16BIT)]
    return triton.autotune(configs=configs, key=["M", "N", "K"])(triton.jit(matmul))


def launch_triton(kernel, a, b, c) -> None:
    (M, K), N = a.shape, b.shape[1]
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                 c.stride(0), c.stride(1), NEW_DOT_API=NEW_DOT_API)


def describe(config) -> str:
    kw = config.kwargs
    return f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']} s{config.num_stages} w{config.num_warps}"


def relative_error(c, reference) -> float:
    """Relative Frobenius error of C's first rows; NaN (a row never written) fails every check."""
    diff = c[: reference.shape[0]].double() - reference
    return (torch.linalg.norm(diff) / torch.linalg.norm(reference)).item()


def time_interleaved(launches, runs: int) -> list:
    """Median milliseconds of each launch, one of each per round, the order alternating by round."""
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
               for _ in launches] for _ in range(runs)]
    torch.cuda.synchronize()
    # Keep the GPU busy while the host enqueues every timed launch, so no event waits on the host.
    torch.cuda._sleep(SPIN_CYCLES_PER_LAUNCH * runs * len(launches))
    for r in range(runs):
        order = range(len(launches)) if r % 2 == 0 else reversed(range(len(launches)))
        for i in order:
            events[r][i][0].record()
            launches[i]()
            events[r][i][1].record()
    torch.cuda.synchronize()
    return [statistics.median(events[r][i][0].elapsed_time(events[r][i][1]) for r in range(runs))
            for i in range(len(launches))]


def run_case(kernel, precision: str, size, args) -> dict:
    M, N, K = size
    in_dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "tf32": torch.float32}[precision]
    c_dtype = in_dtype if args.c_dtype == "same" else torch.float32
    torch.manual_seed(args.seed)
    a = (torch.rand(M, K, device="cuda") * 2 - 1).to(in_dtype)
    b_stored = (torch.rand(*((K, N) if args.b_layout == "row" else (N, K)), device="cuda") * 2 - 1).to(in_dtype)
    b = b_stored if args.b_layout == "row" else b_stored.t()
    c_triton = torch.empty(M, N, device="cuda", dtype=c_dtype)
    # PyTorch's 16-bit matmul writes C in the inputs' type, so cuBLAS's C is bf16/f16 there.
    c_cublas = torch.empty(M, N, device="cuda", dtype=in_dtype)
    triton_call = lambda: launch_triton(kernel, a, b, c_triton)
    cublas_call = lambda: torch.matmul(a, b, out=c_cublas)

    for _ in range(args.warmup):  # the first Triton launch autotunes
        triton_call()
        cublas_call()
    c_triton.fill_(float("nan"))
    triton_call()
    cublas_call()
    reference = torch.matmul(a[:CHECK_ROWS].double(), b.double())
    err_triton, err_cublas = relative_error(c_triton, reference), relative_error(c_cublas, reference)
    c_name = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}[c_dtype]
    tolerance = TF32_TOLERANCE if precision == "tf32" else 1e-5 + UNIT_ROUNDOFF[c_name]

    ms_triton, ms_cublas = time_interleaved([triton_call, cublas_call], args.runs)
    tflops = lambda ms: 2 * M * N * K / (ms * 1e-3) / 1e12
    return {"precision": precision, "size": f"{M}x{N}x{K}", "c_dtype_triton": c_name,
            "c_dtype_cublas": "f32" if precision == "tf32" else precision,
            "ms_cublas": ms_cublas, "ms_triton": ms_triton,
            "tflops_cublas": tflops(ms_cublas), "tflops_triton": tflops(ms_triton),
            "ratio": ms_cublas / ms_triton,  # of TFLOP/s: above 1, Triton is faster
            "err_triton": err_triton, "err_cublas": err_cublas,
            "tolerance": tolerance, "ok": err_triton <= tolerance,  # False for NaN too
            "triton_config": describe(kernel.best_config)}


def metadata(args) -> dict:
    return {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "date": datetime.date.today().isoformat(), "c_dtype": args.c_dtype, "b_layout": args.b_layout,
            "runs": args.runs, "warmup": args.warmup, "seed": args.seed, "check_rows": CHECK_ROWS}


def format_table(meta: dict, rows: list) -> str:
    triton_c = "the inputs' type" if meta["c_dtype"] == "same" else "f32"
    lines = [f"{meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}, {meta['date']}; "
             f"Triton's C: {triton_c}; cuBLAS's C: the "
             f"inputs' type (as PyTorch calls it); B {meta['b_layout']}-major; medians of {meta['runs']} "
             f"interleaved launches; Triton/cuBLAS: ratio of TFLOP/s; errors: relative Frobenius, "
             f"first {meta['check_rows']} rows of C against float64.", "",
             "| precision | size | cuBLAS TFLOP/s | Triton TFLOP/s | Triton/cuBLAS | err Triton "
             "| err cuBLAS | ok | Triton config |",
             "|---|---|---:|---:|---:|---:|---:|---|---|"]
    lines += [f"| {r['precision']} | {r['size']} | {r['tflops_cublas']:.1f} | {r['tflops_triton']:.1f} "
              f"| {r['ratio']:.2f} | {r['err_triton']:.2e} | {r['err_cublas']:.2e} "
              f"| {'yes' if r['ok'] else 'FAIL'} | {r['triton_config']} |" for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    import_gpu_modules()
    torch.backends.cuda.matmul.allow_tf32 = True  # cuBLAS's tf32 row; 16-bit and float64 ignore it
    meta = metadata(args)
    rows = []
    for precision in args.precision:
        kernel = make_kernel(precision)
        for size in args.sizes:
            row = run_case(kernel, precision, size, args)
            rows.append(row)
            print(f"{precision} {row['size']}: cuBLAS {row['tflops_cublas']:.1f}, Triton "
                  f"{row['tflops_triton']:.1f} TFLOP/s ({row['ratio']:.2f}x), err {row['err_triton']:.2e} "
                  f"/ {row['err_cublas']:.2e}, {row['triton_config']}{'' if row['ok'] else ', FAILED'}",
                  file=sys.stderr, flush=True)
    print(format_table(meta, rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
