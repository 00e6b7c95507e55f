"""Build the cubins of the given specs into gemmdsl's cache in parallel (nvcc), so the GPU steps that
follow (pytest -m gpu, verify, bench) load them instead of compiling one at a time.

    python3 scripts/prebuild_cubins.py specs/*.gemm
"""
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import cupy

from gemmdsl.compiler import compile_path
from gemmdsl.runtime import BinaryCache, build_target, cache_dir, compile_cubin, cubin_cache_name


def prebuild(path: str) -> str:
    artifacts = compile_path(path)
    built_for = build_target(artifacts.metadata["target"], cupy.cuda.Device().compute_capability)
    BinaryCache(cache_dir()).get_or_build(cubin_cache_name(artifacts.metadata, artifacts.cuda, built_for),
                                          lambda: compile_cubin(artifacts.cuda, built_for))
    return path


if __name__ == "__main__":
    with ThreadPoolExecutor(os.cpu_count() or 4) as pool:
        for path in pool.map(prebuild, sys.argv[1:]):
            print("built", path, flush=True)
