"""gemmdsl: a compiler from a small tiling language to CUDA C SGEMM kernels."""
__version__ = "0.1.0"
