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

Importing the package imports nothing but its errors and its version: the API above, `Kernel`, `FamilyKernel`
and the modules (`gemmdsl.runtime`, `gemmdsl.compiler`, ...) load when first named, and a `load` from the cache
of compiled specs never imports the compiler.
"""
import importlib
import os

from .errors import GemmdslError
from .version import __version__

__all__ = ["GemmdslError", "check_spec", "choose_member", "compile_spec", "load"]
# Names this module gives without importing their modules until asked: name -> its module.
LAZY = {**dict.fromkeys(("CompiledSpec", "UsageError", "check_spec", "choose_member", "compile_spec"), "api"),
        "Kernel": "runtime.kernel", "FamilyKernel": "family_kernel"}


def load(spec_or_path, *, text: str | None = None):
    """Compile and load a spec (`runtime.load`: a `.gemm` path, `text=...` or compiled Artifacts) or
    a `.gemmf` kernel family (`family_kernel.load_family`); either then runs on any GPU. What was compiled
    before, in any process, is read back from the cache (load_cache.py) instead."""
    from .file_kinds import is_family_path

    if text is None and isinstance(spec_or_path, (str, os.PathLike)) and is_family_path(os.fspath(spec_or_path)):
        from .family_kernel import load_family

        return load_family(spec_or_path)
    from .runtime import load as load_spec

    return load_spec(spec_or_path, text=text)


def __getattr__(name: str):
    """The GPU-free API (gemmdsl/api.py), `Kernel`, `FamilyKernel` and any submodule (`gemmdsl.runtime`),
    imported when first named."""
    if name in LAZY:
        return getattr(importlib.import_module(f".{LAZY[name]}", __name__), name)
    if not name.startswith("__"):
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
