"""Shapes of the dequantizing decode kernel (DecodeConfig: tiles a warp, k-slice, chunks in flight, warps, blocks
per SM) at M = 1 and 16 against 8192 x 8192, 28672 x 8192 and 8192 x 28672 weights, each timed beside BF16 cuBLAS
in one process (scripts/quant_bench.py's graphs and weight copies); prints the time, bytes per second and ratio.

    python3 scripts/quant_sweep.py [s4|u4|s8|e4m3] [channel]
"""
from __future__ import annotations

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

FIRST = dict(warps=8, tiles=1, k_slice=1024, prefetch=6, blocks_per_sm=3)  # the sweep's first shape
VARIANTS = [{}, dict(k_slice=2048), dict(k_slice=2048, blocks_per_sm=2), dict(k_slice=2048, prefetch=8),
            dict(k_slice=2048, prefetch=8, blocks_per_sm=2), dict(prefetch=8), dict(k_slice=2048, prefetch=4)]
M_TILES = {1: 1, 16: 2}  # the rows of A per block (8 * m_tiles) each timed M runs


def main() -> int:
    weight = sys.argv[1] if len(sys.argv) > 1 else "s4"
    fmt = QuantFormat(weight, "bf16", None if "channel" in sys.argv[2:] else 128, weight == "u4")
    configs = {(i, m_tiles): DecodeConfig(fmt, "bf16", m_tiles=m_tiles, **{**FIRST, **variant})
               for i, variant in enumerate(VARIANTS) for m_tiles in M_TILES.values()}
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
        for m, m_tiles in M_TILES.items():
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
    print(json.dumps(VARIANTS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
