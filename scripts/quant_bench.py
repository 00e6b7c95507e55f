"""Decode GEMMs with quantized weights on the GPU: gemmdsl's dequantizing kernel beside BF16 cuBLAS
(torch.matmul on a bf16 weight) and torch._weight_int4pack_mm (int4, group 128), launch for launch in one
process: each timed with CUDA events over a CUDA graph of REPEATS launches, after a warm-up, median of TRIALS.
Prints TFLOP/s, GB/s (the bytes each kernel must read: packed weights + scales + activations + C) and the
ratio to cuBLAS; writes JSON.

    python scripts/quant_bench.py [--formats s4_g128,s8_channel,e4m3_channel] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from gemmdsl.dequant_host import DecodeKernel  # noqa: E402
from gemmdsl.paths.dequant.kernel import DecodeConfig  # noqa: E402
from gemmdsl.quant_layout import QuantFormat, pack, packed_bytes  # noqa: E402
from quant_cases import canonical_weights, dequantized, device_packed, workspace  # noqa: E402

FORMATS = {
    "s4_g128": QuantFormat("s4", "bf16", 128),
    "u4_g128_zeros": QuantFormat("u4", "bf16", 128, True),
    "s8_channel": QuantFormat("s8", "bf16", None),
    "e4m3_channel": QuantFormat("e4m3", "bf16", None),
    "bf16": QuantFormat("bf16", "bf16", None),
}
M_VALUES = (1, 8, 16, 32, 64, 128, 4096)
NK_VALUES = ((8192, 8192), (28672, 8192), (8192, 28672))
REPEATS, TRIALS = 20, 15


def config_for(fmt: QuantFormat, m: int) -> DecodeConfig:
    """M <= 8: one 8-row tile of A per block; <= 16: two; more: four over shorter k-slices."""
    m_tiles = 1 if m <= 8 else 2 if m <= 16 else 4
    return DecodeConfig(fmt, "bf16", m_tiles=m_tiles, k_slice=1024 if m_tiles < 4 else 512)


def time_graph(torch, launch) -> float:
    """Median seconds per launch: REPEATS launches captured in one CUDA graph, timed with events."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            launch()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(REPEATS):
                launch()
    times = []
    for _ in range(TRIALS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        graph.replay()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / REPEATS)
    return statistics.median(times)


def int4pack_launch(torch, a, q: np.ndarray, scales: np.ndarray):
    """torch._weight_int4pack_mm's call for s4 codes, group 128: its own packing (uint8 pairs, even k in the
    high nibble, codes + 8) and scale-and-zero table (K / 128 x N x 2, w = (code - 8) * scale + zero)."""
    codes = torch.from_numpy(q.astype(np.int32) + 8).cuda()
    pairs = (codes[:, ::2] << 4 | codes[:, 1::2]).to(torch.uint8)
    try:
        packed = torch._convert_weight_to_int4pack(pairs, 8)
    except RuntimeError:  # older releases take the int32 codes
        packed = torch._convert_weight_to_int4pack(codes, 8)
    table = torch.zeros(scales.shape[1], scales.shape[0], 2, dtype=torch.bfloat16, device="cuda")
    table[:, :, 0] = torch.from_numpy(scales.T.copy()).cuda().to(torch.bfloat16)
    return lambda: torch._weight_int4pack_mm(a, packed, 128, table)


def measure(torch, name: str, fmt: QuantFormat, m: int, n: int, k: int, kernels: dict) -> dict:
    config = config_for(fmt, m)
    key = (name, config.m_tiles)
    if key not in kernels:
        kernels[key] = DecodeKernel.build(f"bench_{name}_m{config.m_tiles}", config)
    kernel = kernels[key]
    q, scales, zeros = canonical_weights(np.random.default_rng(0), n, k, fmt)
    packed = device_packed(torch, pack(q, scales, zeros, fmt))
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    space = workspace(torch, config, m, n, k)
    w = torch.from_numpy(dequantized(q, scales, zeros, fmt)).cuda().to(torch.bfloat16)
    stream = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731
    ours = time_graph(torch, lambda: kernel(a, packed, c, space, stream()))
    cublas = time_graph(torch, lambda: torch.matmul(a, w.T))
    flop = 2.0 * m * n * k
    moved = packed_bytes(n, k, fmt) + 2 * m * k + 2 * m * n
    row = {"format": name, "m": m, "n": n, "k": k, "ours_us": ours * 1e6, "cublas_bf16_us": cublas * 1e6,
           "ours_tflops": flop / ours / 1e12, "ours_gbs": moved / ours / 1e9,
           "cublas_gbs": (2 * n * k + 2 * m * k + 2 * m * n) / cublas / 1e9, "speedup_vs_cublas": cublas / ours}
    if fmt.weight == "s4" and fmt.group == 128 and not fmt.zeros:
        try:
            tiny = time_graph(torch, int4pack_launch(torch, a, q, scales))
            row.update(int4pack_us=tiny * 1e6, speedup_vs_int4pack=tiny / ours)
        except (RuntimeError, AttributeError) as error:
            row["int4pack_error"] = str(error).splitlines()[0]
    return row


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", default="s4_g128,s8_channel,e4m3_channel")
    parser.add_argument("--json", default="quant_bench.json")
    args = parser.parse_args()
    kernels, rows = {}, []
    print(f"{'format':>14} {'M':>5} {'N':>6} {'K':>6} {'us':>8} {'TFLOP/s':>8} {'GB/s':>7} {'cuBLAS us':>9} "
          f"{'x cuBLAS':>8} {'x int4pack':>10}")
    for name in args.formats.split(","):
        for n, k in NK_VALUES:
            for m in M_VALUES:
                row = measure(torch, name, FORMATS[name], m, n, k, kernels)
                rows.append(row)
                tiny = f"{row['speedup_vs_int4pack']:10.2f}" if "speedup_vs_int4pack" in row else f"{'-':>10}"
                print(f"{name:>14} {m:5d} {n:6d} {k:6d} {row['ours_us']:8.1f} {row['ours_tflops']:8.1f} "
                      f"{row['ours_gbs']:7.0f} {row['cublas_bf16_us']:9.1f} {row['speedup_vs_cublas']:8.2f} {tiny}",
                      flush=True)
    Path(args.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
