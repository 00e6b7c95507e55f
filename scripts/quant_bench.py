"""Decode GEMMs with quantized weights on the GPU: gemmdsl's dequantizing kernel beside BF16 cuBLAS
(torch.matmul on a bf16 weight) and torch._weight_int4pack_mm (int4, group 128) in one process, timed as
`gemmdsl bench` times a dequantizing spec (gemmdsl/quant_bench.py: CUDA graphs replayed in turn, TRIALS rounds,
median; each graph cycles through weight copies holding 3x L2), over kernels of the shape each M wants
(config_for) and random codes over each type's whole range. Prints TFLOP/s, GB/s (the bytes each kernel must
read: packed weights + scales + activations + C) and the ratio to cuBLAS; writes JSON.

    python scripts/quant_bench.py [--formats s4_g128,s8_channel,e4m3_channel] [--m 1,8,16] [--prefill 128,4096]
                                  [--json out.json]

--prefill times the prefill route at those M (runtime.QuantizedLinear: the weight dequantized into a scratch, then
specs/hgemm_h100_bf16c_family.gemmf) beside cuBLAS, rows marked "route": "prefill".

    python scripts/quant_bench.py --predict out.json

prints, without a GPU, each decode row of a JSON this script wrote beside the time `check --problem` predicts for
its kernel (docs/quantized-kernel.md, "The time model"), and how many are within 10% and 20%.
"""
from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import gemmdsl  # noqa: E402
from gemmdsl import ir  # noqa: E402
from gemmdsl.paths.dequant.kernel import DecodeConfig  # noqa: E402
from gemmdsl.quant_bench import TorchGpu, moved_bytes, time_call, weights_for  # noqa: E402
from gemmdsl.quant_layout import QuantFormat  # noqa: E402
from gemmdsl.quantize import Canonical  # noqa: E402
from gemmdsl.runtime import QuantizedLinear  # noqa: E402
from gemmdsl.verify import TorchArrays  # noqa: E402
from quant_cases import canonical_weights, spec_text  # noqa: E402

FORMATS = {
    "s4_g128": QuantFormat("s4", "bf16", 128),
    "u4_g128_zeros": QuantFormat("u4", "bf16", 128, True),
    "s8_channel": QuantFormat("s8", "bf16", None),
    "e4m3_channel": QuantFormat("e4m3", "bf16", None),
    "bf16": QuantFormat("bf16", "bf16", None),
}
M_VALUES = "1,8,16,32,64,128"  # --m; prefill (4096) reads the weights once per 32 rows of A: slow to time
NK_VALUES = ((8192, 8192), (28672, 8192), (8192, 28672))
TRIALS, WARMUP = 15, 3


def config_for(fmt: QuantFormat, m: int) -> DecodeConfig:
    """M <= 8: one 8-row tile of A per block; <= 16: two; more: four over k-slices of 1024 (the fastest of 512 and
    1024 at 2 and 3 blocks per SM at M = 32 and 64 on the H200, docs/performance.md)."""
    m_tiles = 1 if m <= 8 else 2 if m <= 16 else 4
    return DecodeConfig(fmt, "bf16", m_tiles=m_tiles, **({} if m_tiles < 4 else {"k_slice": 1024}))


def weight_on_gpu(gpu: TorchGpu, arrays: TorchArrays, fmt: QuantFormat, n: int, k: int):
    """One weight of N x K on the GPU, made once for every M (quant_bench.weights_for), of random codes."""
    q, scales, zeros = canonical_weights(np.random.default_rng(0), n, k, fmt)
    return weights_for(gpu, arrays, fmt, Canonical(ir.DType(fmt.weight), q, scales, zeros, fmt.group))


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


def measure(gpu: TorchGpu, arrays: TorchArrays, name: str, fmt: QuantFormat, m: int, kernels: dict,
            weights) -> dict:
    kernel = kernels[(name, config_for(fmt, m).m_tiles)]
    n, k = weights.n, weights.k
    timing = time_call(kernel, gpu, arrays, weights, m, TRIALS, WARMUP)
    moved = moved_bytes(fmt, "bf16", m, n, k)
    row = {"format": name, "m": m, "n": n, "k": k, "weight_copies": len(weights.packed),
           "ours_us": timing.ours * 1e6, "cublas_bf16_us": timing.cublas * 1e6,
           "ours_tflops": 2.0 * m * n * k / timing.ours / 1e12, "ours_gbs": moved["ours"] / timing.ours / 1e9,
           "cublas_gbs": moved["cublas"] / timing.cublas / 1e9, "speedup_vs_cublas": timing.cublas / timing.ours}
    if timing.int4pack is not None:
        row.update(int4pack_us=timing.int4pack * 1e6, speedup_vs_int4pack=timing.int4pack / timing.ours)
    elif weights.int4pack_note:
        row["int4pack_note"] = weights.int4pack_note
    return row


def measure_prefill(gpu: TorchGpu, arrays: TorchArrays, name: str, fmt: QuantFormat, m: int, kernels: dict,
                    dense, weights) -> dict:
    """The prefill route at M (QuantizedLinear from its first row: W dequantized into a scratch, then the dense
    BF16 family) beside cuBLAS on the dequantized weight."""
    linear = QuantizedLinear(kernels[(name, config_for(fmt, m).m_tiles)], dense, prefill_from=1)
    n, k = weights.n, weights.k
    a = arrays.random(m * k, fmt.activation).reshape(m, k)
    c = arrays.poisoned(m * n, "bf16").reshape(m, n)
    ours = [lambda packed=packed: linear(a, {**packed, "shape": (n, k)}, c) for packed in weights.packed]
    seconds, cublas = gpu.time([ours, [gpu.matmul(a, w) for w in weights.dense]], TRIALS, WARMUP)
    return {"format": name, "m": m, "n": n, "k": k, "route": "prefill", "ours_us": seconds * 1e6,
            "cublas_bf16_us": cublas * 1e6, "ours_tflops": 2.0 * m * n * k / seconds / 1e12,
            "speedup_vs_cublas": cublas / seconds}


def predict(path: str) -> int:
    """The decode rows of a recorded run beside the cycle model's times for their kernels (config_for's shapes)."""
    from gemmdsl.check import spec_time
    from gemmdsl.compiler import compile_text

    compiled: dict[DecodeConfig, object] = {}
    ratios = []
    print(f"{'format':>14} {'M':>5} {'N':>6} {'K':>6} {'measured us':>11} {'predicted us':>12} {'ratio':>6}")
    for row in json.loads(Path(path).read_text())["rows"]:
        if row.get("route") == "prefill" or row["format"] not in FORMATS:
            continue
        m, n, k = row["m"], row["n"], row["k"]
        config = config_for(FORMATS[row["format"]], m)
        if config not in compiled:
            compiled[config] = compile_text(spec_text("predicted", config), "predicted.gemm")
        predicted = spec_time(compiled[config], (m, n, k))["microseconds"]
        ratios.append(predicted / row["ours_us"])
        print(f"{row['format']:>14} {m:5d} {n:6d} {k:6d} {row['ours_us']:11.1f} {predicted:12.1f} {ratios[-1]:6.2f}")
    if ratios:
        within = [sum(abs(ratio - 1) <= bound for ratio in ratios) for bound in (0.1, 0.2)]
        print(f"{len(ratios)} calls: {within[0]} within 10%, {within[1]} within 20%, predicted over measured "
              f"{min(ratios):.2f}-{max(ratios):.2f}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", default="s4_g128,s8_channel,e4m3_channel")
    parser.add_argument("--json", default="quant_bench.json")
    parser.add_argument("--m", default=M_VALUES, help="the M values, comma-separated")
    parser.add_argument("--prefill", default="", help="M values to time on the prefill route (QuantizedLinear: "
                                                      "dequantize, then hgemm_h100_bf16c_family), comma-separated")
    parser.add_argument("--predict", metavar="JSON", help="print a recorded run's decode rows beside the times "
                                                          "the cycle model predicts (no GPU)")
    args = parser.parse_args()
    if args.predict:
        return predict(args.predict)
    names, m_values = args.formats.split(","), [int(m) for m in args.m.split(",") if m]
    prefill_values = [int(m) for m in args.prefill.split(",") if m]
    kernels, rows = build_all(names, m_values + prefill_values), []
    dense = gemmdsl.load(str(ROOT / "specs" / "hgemm_h100_bf16c_family.gemmf")) if prefill_values else None
    gpu, arrays = TorchGpu(), TorchArrays(0, tf32=False)
    print(f"{'format':>14} {'M':>5} {'N':>6} {'K':>6} {'us':>8} {'TFLOP/s':>8} {'GB/s':>7} {'cuBLAS us':>9} "
          f"{'x cuBLAS':>8} {'x int4pack':>10}")
    for name in names:
        for n, k in NK_VALUES:
            weight = weight_on_gpu(gpu, arrays, FORMATS[name], n, k)
            for m in prefill_values:
                row = measure_prefill(gpu, arrays, name, FORMATS[name], m, kernels, dense, weight)
                rows.append(row)
                print(f"{name:>14} {m:5d} {n:6d} {k:6d} {row['ours_us']:8.1f} {row['ours_tflops']:8.1f} "
                      f"{'prefill':>7} {row['cublas_bf16_us']:9.1f} {row['speedup_vs_cublas']:8.2f}", flush=True)
            for m in m_values:
                row = measure(gpu, arrays, name, FORMATS[name], m, kernels, weight)
                rows.append(row)
                tiny = f"{row['speedup_vs_int4pack']:10.2f}" if "speedup_vs_int4pack" in row else f"{'-':>10}"
                print(f"{name:>14} {m:5d} {n:6d} {k:6d} {row['ours_us']:8.1f} {row['ours_tflops']:8.1f} "
                      f"{row['ours_gbs']:7.0f} {row['cublas_bf16_us']:9.1f} {row['speedup_vs_cublas']:8.2f} {tiny}",
                      flush=True)
                # after every row, so that a run cut short keeps what it measured
                Path(args.json).write_text(json.dumps({"gpu": gpu.name, "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
