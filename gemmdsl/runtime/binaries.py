"""Cubins: the architecture to build for, the compiler (nvcc or NVRTC) and the cache on disk.

`nvcc -cubin` turns the kernel part of the `.cu` into a cubin when nvcc is
on PATH (it is what `gemmdsl compile` reports registers for); NVRTC, through CuPy,
otherwise; GEMMDSL_COMPILER=nvcc|nvrtc forces one (see `compile_cubin`). The cubin is
built for the GPU's own architecture when that is newer than the spec's target (the
source, and so the spec's limits, stay the target's), and is kept on disk under `$GEMMDSL_CACHE` (default `~/.cache/gemmdsl`) and loaded
with `cupy.RawModule(path=...)`, which only needs public CuPy API. We keep our
own cache rather than relying on CuPy's kernel cache because CuPy offers no
public way to get the compiled binary back, and because a cache we own can be
tested: `compile_cubin` is called only on a miss.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Callable

from ..build import (COMPILER_OPTIONS, NVCC_TIMEOUT_S, BuildError, arch_flag, nvcc_release, nvrtc_compile,
                     nvrtc_version, old_nvrtc_note)
from ..cache_root import write_atomically
from ..errors import GemmdslError
from .environment import GpuUnavailable

COMPILERS = ("nvcc", "nvrtc")


class KernelBuildError(GemmdslError, RuntimeError):
    """Neither NVRTC nor nvcc could turn the generated CUDA into a cubin."""


def parse_target(target: str) -> tuple[int, bool]:
    """'sm_90' -> (90, False); 'sm_90a' -> (90, True): arch-specific code, which runs only on that arch."""
    match = re.fullmatch(r"sm_(\d+)(a?)", target)
    if match is None:
        raise ValueError(f"unsupported target {target!r}; expected sm_<major><minor>[a], e.g. sm_90")
    return int(match[1]), bool(match[2])


def build_target(target: str, compute_capability: str) -> str:
    """The architecture to build a spec for `target` for, on a GPU of this compute capability ('90').

    A cubin runs only on its own major version, so a spec for an older GPU is built for this one:
    the source (and with it every limit the spec was checked against) stays the target's, only
    the -arch changes. A GPU older than the target cannot take the spec's limits, and `a` targets
    use features of exactly their architecture; both are refused.
    """
    sm, arch_specific = parse_target(target)
    device = int(compute_capability)
    if arch_specific and device != sm:
        raise GpuUnavailable(f"the kernel targets {target}, whose arch-specific code runs only on sm_{sm} GPUs, but "
                             f"this GPU is sm_{device}; compile the spec for sm_{device}")
    if device < sm:
        raise GpuUnavailable(f"the kernel targets {target}, but this GPU is sm_{device}, which is older; compile "
                             f"the spec for sm_{device} (if it fits that GPU's limits)")
    return target if device == sm else f"sm_{device}"


def cache_key(metadata: dict, source: str, cupy_version: str, built_for: str, compiler: str) -> str:
    """Everything that decides the cubin's bytes.

    spec_hash names the spec, target and gemmdsl version; the source hash also
    catches code generator changes that did not bump the version; `built_for` is the
    architecture the cubin is for (the GPU's, for a spec of an older target), `compiler`
    nvcc or nvrtc with its version (`compiler_version`).
    """
    parts = {"spec_hash": metadata["spec_hash"], "gemmdsl": metadata["gemmdsl_version"],
             "target": metadata["target"], "built_for": built_for, "compiler": compiler, "cupy": cupy_version,
             "options": COMPILER_OPTIONS, "source": hashlib.sha256(source.encode()).hexdigest()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def cubin_file_name(metadata: dict, built_for: str, key: str) -> str:
    return f"{metadata['kernel']}-{built_for}-{key[:32]}.cubin"


def cubin_cache_name(metadata: dict, source: str, built_for: str, compiler: str | None = None) -> str:
    """The cache file of this source built for `built_for` by `compiler` (default: the one chosen
    now) at its present version, with this CuPy: so upgrading NVRTC (13.0 -> 13.1, docs/python-api.md) or nvcc
    builds anew instead of serving the old compiler's cubins."""
    import cupy

    compiler = compiler or chosen_compiler()
    key = cache_key(metadata, source, cupy.__version__, built_for, f"{compiler} {compiler_version(compiler)}")
    return cubin_file_name(metadata, built_for, key)


@cache
def compiler_version(compiler: str) -> str:
    """nvcc's release ("13.0.88", build.nvcc_release) or NVRTC's ("13.1", as CuPy loaded it)."""
    return nvrtc_version() if compiler == "nvrtc" else nvcc_release()


class BinaryCache:
    """Compiled binaries on disk, one file per key; writes are atomic, so readers never see half a file."""

    def __init__(self, directory: Path):
        self.directory = directory

    def get_or_build(self, file_name: str, build: Callable[[], bytes]) -> Path:
        """Path of the cached binary, calling `build` only when it is not there yet."""
        path = self.directory / file_name
        if not path.is_file():
            write_atomically(path, build())
        return path


def chosen_compiler() -> str:
    """GEMMDSL_COMPILER=nvcc|nvrtc, or by default nvcc when it is on PATH and NVRTC otherwise.

    nvcc first: it is the compiler `gemmdsl compile` reports registers for. With the same
    options, NVRTC 13.1 and later build every shipped spec with the registers nvcc 13.0
    does; NVRTC 13.0 does not (sm_90: 149 vs 127 for sgemm_v3, 223 vs 128 for cp_async3),
    and not because of options or ptxas: its PTX already differs (shared-memory addresses
    computed in 64 bits, then truncated, where nvcc's are 32-bit), and finishing that PTX
    with the toolkit's ptxas gives the same counts. scripts/nvrtc_vs_nvcc.py compares both
    paths on the GPU.
    """
    choice = os.environ.get("GEMMDSL_COMPILER", "").strip().lower()
    if choice in COMPILERS:
        return choice
    if choice not in ("", "auto"):
        raise KernelBuildError(f"GEMMDSL_COMPILER={choice!r}: expected nvcc, nvrtc or auto")
    return "nvcc" if shutil.which("nvcc") is not None else "nvrtc"


def compile_cubin(source: str, target: str, compiler: str | None = None) -> bytes:
    """A cubin for `target` (sm_XX) from `compiler`, by default the one `chosen_compiler` names."""
    if (compiler or chosen_compiler()) == "nvcc":
        return compile_with_nvcc(source, target)
    return compile_with_nvrtc(source, target)


def compile_with_nvrtc(source: str, target: str) -> bytes:
    """A cubin for `target` from NVRTC (`build.nvrtc_compile`: nvcc's options, NVRTC's own ptxas)."""
    note = old_nvrtc_note()
    if note is not None:
        print(note, file=sys.stderr)
    try:
        return nvrtc_compile(source, target)[0]
    except BuildError as err:
        raise KernelBuildError(str(err)) from None


def compile_with_nvcc(source: str, target: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="gemmdsl-") as directory:
        cu_path, cubin_path = Path(directory, "kernel.cu"), Path(directory, "kernel.cubin")
        cu_path.write_text(source)
        command = ["nvcc", "-cubin", arch_flag(target), *COMPILER_OPTIONS, "-o", str(cubin_path), str(cu_path)]
        try:
            subprocess.run(command, capture_output=True, text=True, check=True, timeout=NVCC_TIMEOUT_S)
        except subprocess.CalledProcessError as err:
            raise KernelBuildError(f"nvcc failed:\n{err.stderr}") from None
        except (OSError, subprocess.TimeoutExpired) as err:
            raise KernelBuildError(f"cannot run nvcc: {err}") from None
        return cubin_path.read_bytes()
