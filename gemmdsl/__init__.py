"""gemmdsl: a compiler from a small tiling language to CUDA C SGEMM kernels.

    import gemmdsl
    kernel = gemmdsl.load("specs/sgemm_v3.gemm")   # needs CuPy and a GPU
    c = kernel(a, b)

Everything but `load` works without CuPy; `load` imports it on first use.
"""
__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "load":
        from .runtime import load

        return load
    raise AttributeError(f"module 'gemmdsl' has no attribute {name!r}")
