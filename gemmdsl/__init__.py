"""gemmdsl: a compiler from a small tiling language to CUDA C GEMM kernels.

    import gemmdsl
    kernel = gemmdsl.load("specs/sgemm_v3.gemm")   # needs CuPy and a GPU
    c = kernel(a, b)
    family = gemmdsl.load("specs/sgemm_family.gemmf")   # a kernel family: each call runs the member it fits

Everything but `load` works without CuPy; `load` imports it on first use.
"""
import os

__version__ = "0.1.0"


def load(spec_or_path, *, text: str | None = None):
    """Compile and load a spec (`runtime.load`: a `.gemm` path, `text=...` or compiled Artifacts) or
    a `.gemmf` kernel family (`family_kernel.load_family`); either then runs on any GPU."""
    from .family import is_family_path
    from .family_kernel import load_family
    from .runtime import load as load_spec

    if text is None and isinstance(spec_or_path, (str, os.PathLike)) and is_family_path(os.fspath(spec_or_path)):
        return load_family(spec_or_path)
    return load_spec(spec_or_path, text=text)
