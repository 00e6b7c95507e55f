"""gemmdsl: a compiler from a small tiling language to CUDA C GEMM kernels.

    import gemmdsl
    kernel = gemmdsl.load("specs/sgemm_v3.gemm")   # needs CuPy and a GPU
    c = kernel(a, b)
    family = gemmdsl.load("specs/sgemm_family.gemmf")   # a kernel family: each call runs the member it fits

Everything but `load` works without CuPy; `load` imports it on first use. Importing the package imports
nothing else: its modules (`gemmdsl.runtime`, `gemmdsl.compiler`, ...) and `Kernel` and `FamilyKernel` load
when first named, and a `load` from the cache of compiled specs never imports the compiler.
"""
import importlib
import os

__version__ = "0.1.0"

# Names this module gives without importing their modules until asked: name -> (module, attribute).
LAZY = {"Kernel": ("runtime", "Kernel"), "FamilyKernel": ("family_kernel", "FamilyKernel")}


def load(spec_or_path, *, text: str | None = None):
    """Compile and load a spec (`runtime.load`: a `.gemm` path, `text=...` or compiled Artifacts) or
    a `.gemmf` kernel family (`family_kernel.load_family`); either then runs on any GPU. What was compiled
    before, in any process, is read back from the cache (load_cache.py) instead."""
    from .source import is_family_path

    if text is None and isinstance(spec_or_path, (str, os.PathLike)) and is_family_path(os.fspath(spec_or_path)):
        from .family_kernel import load_family

        return load_family(spec_or_path)
    from .runtime import load as load_spec

    return load_spec(spec_or_path, text=text)


def __getattr__(name: str):
    """`gemmdsl.Kernel`, `gemmdsl.FamilyKernel`, and any submodule (`gemmdsl.runtime`), imported when first named."""
    if name in LAZY:
        module, attribute = LAZY[name]
        return getattr(importlib.import_module(f".{module}", __name__), attribute)
    if not name.startswith("__"):
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
