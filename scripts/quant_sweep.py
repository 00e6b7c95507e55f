"""Shapes of the dequantizing decode kernel (DecodeConfig: tiles a warp, k-slice, chunks in flight, warps, blocks
per SM) against 8192 x 8192, 28672 x 8192 and 8192 x 28672 weights, each timed beside BF16 cuBLAS in one process
(scripts/quant_bench.py's graphs and weight copies); prints the time, bytes per second and ratio.

    python3 scripts/quant_sweep.py [s4|u4|s8|e4m3] [--channel] [--m 1,16] [--variants JSON]

--variants: a JSON list of DecodeConfig settings, each over FIRST (default: VARIANTS). Rows of A per block by M
as quant_bench.config_for takes them.
"""
from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "tests")]

import gemmdsl  # noqa: E402
import quant_bench  # noqa: E402
from gemmdsl.paths.dequant.kernel import DecodeConfig  # noqa: E402
from gemmdsl.quant_bench import TorchGpu  # noqa: E402
from gemmdsl.quant_layout import QuantFormat, packed_bytes  # noqa: E402
from gemmdsl.verify import TorchArrays  # noqa: E402
from quant_cases import spec_text  # noqa: E402

FIRST = dict(warps=8, tiles=1, k_slice=2048, prefetch=6, blocks_per_sm=2)  # the sweep's first shape
VARIANTS = [{}, dict(prefetch=12), dict(k_slice=1024, prefetch=8, blocks_per_sm=3),
            dict(k_slice=1024, prefetch=12), dict(k_slice=512, prefetch=8, blocks_per_sm=4)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("weight", nargs="?", default="s4", choices=("s4", "u4", "s8", "e4m3"))
    parser.add_argument("--channel", action="store_true", help="a scale per output channel (default: group 128)")
    parser.add_argument("--m", default="1,16", help="rows of A, comma-separated")
    parser.add_argument("--variants", type=json.loads, default=VARIANTS)
    args = parser.parse_args()
    weight, variants = args.weight, args.variants
    fmt = QuantFormat(weight, "bf16", None if args.channel else 128, weight == "u4")
    m_tiles_of = {m: quant_bench.config_for(fmt, m).m_tiles for m in map(int, args.m.split(","))}
    configs = {(i, m_tiles): DecodeConfig(fmt, "bf16", m_tiles=m_tiles, **{**FIRST, **variant})
               for i, variant in enumerate(variants) for m_tiles in set(m_tiles_of.values())}
    usable = {key: config for key, config in configs.items() if not config.problems()}
    for key in sorted(set(configs) - set(usable)):
        print(f"variant {key[0]} refused: {configs[key].problems()[0].message}")
    with ThreadPoolExecutor(len(usable)) as pool:
        built = pool.map(lambda item: gemmdsl.load(f"sweep{item[0][0]}_{item[0][1]}",
                                                   text=spec_text(f"sweep{item[0][0]}_{item[0][1]}", item[1])),
                         usable.items())
        kernels = dict(zip(usable, built))
    gpu, arrays = TorchGpu(), TorchArrays(0, tf32=False)
    for n, k in quant_bench.NK_VALUES:
        weights = quant_bench.weight_on_gpu(gpu, arrays, fmt, n, k)
        for m, m_tiles in m_tiles_of.items():
            a = arrays.random(m * k, fmt.activation).reshape(m, k)
            c = arrays.poisoned(m * n, "bf16").reshape(m, n)
            names, sets = ["cuBLAS"], [[gpu.matmul(a, w) for w in weights.dense]]
            for (i, tiles), kernel in kernels.items():
                if tiles == m_tiles:
                    names.append(f"variant {i}")
                    sets.append([kernel.bind(a, packed, c) for packed in weights.packed])
            times = gpu.time(sets, quant_bench.TRIALS, quant_bench.WARMUP)
            moved = packed_bytes(n, k, fmt) + 2 * m * k + 2 * m * n
            for name, seconds in zip(names, times):
                rate = (2 * n * k if name == "cuBLAS" else moved) / seconds / 1e9
                print(f"{m:3d} {n:6d} {k:6d} {name:10s} {seconds * 1e6:8.1f} us {rate:6.0f} GB/s "
                      f"x{times[0] / seconds:5.2f}", flush=True)
    print(json.dumps(variants))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
