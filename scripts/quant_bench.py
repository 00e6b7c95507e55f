"""Decode GEMMs with quantized weights on the GPU: gemmdsl's dequantizing kernel beside BF16 cuBLAS
(torch.matmul on a bf16 weight) and torch._weight_int4pack_mm (int4, group 128) in one process: each timed with
CUDA events over a CUDA graph of REPEATS launches, after a warm-up; the graphs replayed in turn, TRIALS rounds,
median. Each graph cycles through copies of its weights that together hold at least ROTATE_L2 times L2, so no
launch finds its weights in L2 from the one before (a 32 MB int4 weight of 8192 x 8192 fits the H200's 50 MB).
Prints TFLOP/s, GB/s (the bytes each kernel must read: packed weights + scales + activations + C) and the
ratio to cuBLAS; writes JSON.

    python scripts/quant_bench.py [--formats s4_g128,s8_channel,e4m3_channel] [--m 1,8,16] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import gemmdsl  # noqa: E402
from gemmdsl.paths.dequant.kernel import DecodeConfig  # noqa: E402
from gemmdsl.quant_layout import QuantFormat, pack, packed_bytes  # noqa: E402
from quant_cases import canonical_weights, dequantized, device_packed, spec_text  # noqa: E402

FORMATS = {
    "s4_g128": QuantFormat("s4", "bf16", 128),
    "u4_g128_zeros": QuantFormat("u4", "bf16", 128, True),
    "s8_channel": QuantFormat("s8", "bf16", None),
    "e4m3_channel": QuantFormat("e4m3", "bf16", None),
    "bf16": QuantFormat("bf16", "bf16", None),
}
M_VALUES = "1,8,16,32,64,128"  # --m; prefill (4096) reads the weights once per 32 rows of A: slow to time
NK_VALUES = ((8192, 8192), (28672, 8192), (8192, 28672))
REPEATS, TRIALS = 20, 15
ROTATE_L2 = 3  # the weights' copies in one graph hold at least this many L2s


def config_for(fmt: QuantFormat, m: int) -> DecodeConfig:
    """M <= 8: one 8-row tile of A per block; <= 16: two; more: four over shorter k-slices."""
    m_tiles = 1 if m <= 8 else 2 if m <= 16 else 4
    return DecodeConfig(fmt, "bf16", m_tiles=m_tiles, k_slice=1024 if m_tiles < 4 else 512)


def copies_for(torch, weight_bytes: int) -> int:
    """Copies of a weight of `weight_bytes` that hold ROTATE_L2 L2s (at least one)."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    return max(1, -(-ROTATE_L2 * l2 // weight_bytes))


def time_graphs(torch, launch_sets: list[list]) -> list[float]:
    """Median seconds per launch of each set: REPEATS launches (cycling through the set's launches, one per
    weight copy) captured in one CUDA graph per set; the graphs replayed in turn, TRIALS rounds."""
    stream = torch.cuda.Stream()
    graphs = []
    with torch.cuda.stream(stream):
        for launches in launch_sets:
            for launch in launches[:3]:
                launch()
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                for i in range(REPEATS):
                    launches[i % len(launches)]()
            graphs.append(graph)
    times: list[list[float]] = [[] for _ in graphs]
    with torch.cuda.stream(stream):  # replayed on the stream the events are recorded on
        for _ in range(TRIALS):
            for graph, kept in zip(graphs, times):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record(stream)
                graph.replay()
                end.record(stream)
                end.synchronize()
                kept.append(start.elapsed_time(end) / 1e3 / REPEATS)
    return [statistics.median(kept) for kept in times]


def int4pack_weights(torch, q: np.ndarray, scales: np.ndarray) -> list:
    """torch._weight_int4pack_mm's operands for s4 codes, group 128, one per weight copy: its own packing (uint8
    pairs, even k in the high nibble, codes + 8) and scale-and-zero table (K / 128 x N x 2, w = (code - 8) *
    scale + zero)."""
    codes = torch.from_numpy(q.astype(np.int32) + 8).cuda()
    pairs = (codes[:, ::2] << 4 | codes[:, 1::2]).to(torch.uint8)
    try:
        packed = torch._convert_weight_to_int4pack(pairs, 8)
    except RuntimeError:  # older releases take the int32 codes
        packed = torch._convert_weight_to_int4pack(codes, 8)
    table = torch.zeros(scales.shape[1], scales.shape[0], 2, dtype=torch.bfloat16, device="cuda")
    table[:, :, 0] = torch.from_numpy(scales.T.copy()).cuda().to(torch.bfloat16)
    copies = copies_for(torch, packed.numel() * packed.element_size() + table.numel() * 2)
    return [(packed.clone(), table.clone()) for _ in range(copies)]


def weights_for(torch, fmt: QuantFormat, n: int, k: int) -> dict:
    """One weight of N x K, made once for every M: its packed copies, the BF16 weight's copies (dequantized, for
    cuBLAS) and torch._weight_int4pack_mm's copies where the format is its (s4, group 128, no zero points)."""
    q, scales, zeros = canonical_weights(np.random.default_rng(0), n, k, fmt)
    host_packed = pack(q, scales, zeros, fmt)
    w = torch.from_numpy(dequantized(q, scales, zeros, fmt)).cuda().to(torch.bfloat16)
    weights = {"packed": [device_packed(torch, host_packed) for _ in range(copies_for(torch, packed_bytes(n, k, fmt)))],
               "bf16": [w] + [w.clone() for _ in range(copies_for(torch, 2 * n * k) - 1)]}
    if fmt.weight == "s4" and fmt.group == 128 and not fmt.zeros:
        try:
            weights["int4pack"] = int4pack_weights(torch, q, scales)
        except (RuntimeError, AttributeError) as error:
            weights["int4pack_error"] = str(error).splitlines()[0]
    return weights


def build_all(names: list[str], m_values: list[int]) -> dict:
    """Every kernel the run times, compiled from a spec of its shape (tests/quant_cases.spec_text) and loaded as
    gemmdsl.load loads a shipped one, side by side (each build is an nvcc process), by (format, m_tiles)."""
    configs = {(name, config_for(FORMATS[name], m).m_tiles): config_for(FORMATS[name], m)
               for name in names for m in m_values}
    with ThreadPoolExecutor(len(configs)) as pool:
        built = pool.map(lambda item: gemmdsl.load(f"bench_{item[0][0]}_m{item[0][1]}",
                                                   text=spec_text(f"bench_{item[0][0]}_m{item[0][1]}", item[1])),
                         configs.items())
        return dict(zip(configs, built))


def measure(torch, name: str, fmt: QuantFormat, m: int, n: int, k: int, kernels: dict, weights: dict) -> dict:
    config = config_for(fmt, m)
    kernel = kernels[(name, config.m_tiles)]
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    # bound once per weight copy (operands checked, the split-K workspace kept): a launch follows torch's stream
    sets = [[kernel.bind(a, p, c) for p in weights["packed"]],
            [lambda w=w: torch.matmul(a, w.T) for w in weights["bf16"]]]
    row = {"format": name, "m": m, "n": n, "k": k, "weight_copies": len(weights["packed"])}
    if "int4pack" in weights:
        sets.append([lambda p=p, t=t: torch._weight_int4pack_mm(a, p, 128, t) for p, t in weights["int4pack"]])
    elif "int4pack_error" in weights:
        row["int4pack_error"] = weights["int4pack_error"]
    ours, cublas, *tiny = time_graphs(torch, sets)
    flop = 2.0 * m * n * k
    moved = packed_bytes(n, k, fmt) + 2 * m * k + 2 * m * n
    row.update({"ours_us": ours * 1e6, "cublas_bf16_us": cublas * 1e6, "ours_tflops": flop / ours / 1e12,
                "ours_gbs": moved / ours / 1e9, "cublas_gbs": (2 * n * k + 2 * m * k + 2 * m * n) / cublas / 1e9,
                "speedup_vs_cublas": cublas / ours})
    if tiny:
        row.update(int4pack_us=tiny[0] * 1e6, speedup_vs_int4pack=tiny[0] / ours)
    return row


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", default="s4_g128,s8_channel,e4m3_channel")
    parser.add_argument("--json", default="quant_bench.json")
    parser.add_argument("--m", default=M_VALUES, help="the M values, comma-separated")
    args = parser.parse_args()
    names, m_values = args.formats.split(","), list(map(int, args.m.split(",")))
    kernels, rows = build_all(names, m_values), []
    print(f"{'format':>14} {'M':>5} {'N':>6} {'K':>6} {'us':>8} {'TFLOP/s':>8} {'GB/s':>7} {'cuBLAS us':>9} "
          f"{'x cuBLAS':>8} {'x int4pack':>10}")
    for name in names:
        for n, k in NK_VALUES:
            weights = weights_for(torch, FORMATS[name], n, k)
            for m in m_values:
                row = measure(torch, name, FORMATS[name], m, n, k, kernels, weights)
                rows.append(row)
                tiny = f"{row['speedup_vs_int4pack']:10.2f}" if "speedup_vs_int4pack" in row else f"{'-':>10}"
                print(f"{name:>14} {m:5d} {n:6d} {k:6d} {row['ours_us']:8.1f} {row['ours_tflops']:8.1f} "
                      f"{row['ours_gbs']:7.0f} {row['cublas_bf16_us']:9.1f} {row['speedup_vs_cublas']:8.2f} {tiny}",
                      flush=True)
                # after every row, so that a run cut short keeps what it measured
                Path(args.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
