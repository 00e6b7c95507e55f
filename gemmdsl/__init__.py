"""gemmdsl: a compiler from a small tiling language to CUDA C GEMM kernels.

    import gemmdsl
    kernel = gemmdsl.load("specs/sgemm_v3.gemm")   # needs CuPy and a GPU
    c = kernel(a, b)
    family = gemmdsl.load("specs/sgemm_family.gemmf")   # a kernel family: each call runs the member it fits

Everything but `load` works without CuPy; `load` imports it on first use. Without a GPU, for build systems
and notebooks (gemmdsl/api.py, docs/python-api.md):

    gemmdsl.compile_spec("specs/sgemm_v3.gemm", output="build")   # NAME.cu, NAME.h, NAME.json
    gemmdsl.check_spec("specs/sgemm_v3.gemm", (4096, 4096, 4096))  # what `gemmdsl check --json` prints
    gemmdsl.choose_member("specs/sgemm_family.gemmf", (16, 4096, 4096))  # which member runs it, and why

Every error gemmdsl raises for what a caller can fix is a `gemmdsl.GemmdslError`.
"""
import os

from .errors import GemmdslError

__version__ = "0.1.0"
__all__ = ["GemmdslError", "check_spec", "choose_member", "compile_spec", "load"]
_API_NAMES = ("CompiledSpec", "UsageError", "check_spec", "choose_member", "compile_spec")  # gemmdsl/api.py's


def __getattr__(name: str):
    """The GPU-free API, imported on first use (the compiler's modules load with it)."""
    if name in _API_NAMES:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'gemmdsl' has no attribute {name!r}")


def load(spec_or_path, *, text: str | None = None):
    """Compile and load a spec (`runtime.load`: a `.gemm` path, `text=...` or compiled Artifacts) or
    a `.gemmf` kernel family (`family_kernel.load_family`); either then runs on any GPU."""
    from .family import is_family_path
    from .family_kernel import load_family
    from .runtime import load as load_spec

    if text is None and isinstance(spec_or_path, (str, os.PathLike)) and is_family_path(os.fspath(spec_or_path)):
        return load_family(spec_or_path)
    return load_spec(spec_or_path, text=text)
