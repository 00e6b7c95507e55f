"""Whether this machine can run kernels: CuPy, a CUDA device, true-FP32 cuBLAS (GpuUnavailable otherwise)."""
from __future__ import annotations

import os

from ..errors import GemmdslError


class GpuUnavailable(GemmdslError, RuntimeError):
    """No CuPy, no CUDA device, or no true-FP32 cuBLAS: the GPU commands cannot run (exit status 2)."""


# What a CUDA runtime error at the first device query means, by its name, for the errors that say so.
CUDA_ERROR_MEANINGS = {
    "cudaErrorInsufficientDriver": "the NVIDIA driver is older than the CUDA runtime CuPy was built for; update "
                                   "the driver, or install the CuPy wheel of the CUDA version the driver supports",
    "cudaErrorNoDevice": "no CUDA device is visible (check CUDA_VISIBLE_DEVICES and that the driver sees the GPU)",
    "cudaErrorInitializationError": "the CUDA driver failed to initialise (is the NVIDIA kernel module loaded?)",
}


def gpu_unavailable_reason() -> str | None:
    """Why CuPy cannot run kernels here, or None when it can: the words `gemmdsl.load` raises and the GPU
    commands print."""
    try:
        import cupy
    except ImportError as err:
        return (f"CuPy is not installed ({err}); the GPU side of gemmdsl needs it: pip install 'gemmdsl[gpu]' "
                f"(CuPy for CUDA 13), on a machine with an NVIDIA GPU and driver")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as err:
        meaning = next((text for name, text in CUDA_ERROR_MEANINGS.items() if name in str(err)), None)
        return f"no usable CUDA device: {err}" + (f": {meaning}" if meaning else "")
    return None if count > 0 else "no CUDA device found"


def require_gpu() -> None:
    reason = gpu_unavailable_reason()
    if reason is not None:
        raise GpuUnavailable(reason)
    bypass_memory_pool_if_asked()


def bypass_memory_pool_if_asked() -> None:
    """With GEMMDSL_NO_MEMORY_POOL=1, every CuPy array gets its own cudaMalloc.

    CuPy's memory pool carves arrays out of larger blocks, so an access just past an
    operand lands in memory compute-sanitizer's memcheck considers allocated;
    scripts/sanitize.sh sets this so that memcheck sees each operand's own bounds.
    """
    if os.environ.get("GEMMDSL_NO_MEMORY_POOL", "") not in ("", "0"):
        import cupy

        cupy.cuda.set_allocator(None)


def require_fp32_cublas() -> None:
    """Make sure cupy.matmul on float32 really is FP32, so it is a fair baseline and a tight reference.

    CuPy asks cuBLAS for TF32 only when CUPY_TF32 is a positive integer at its
    first float32 matmul (otherwise it asks for FP32 compute). NVIDIA_TF32_OVERRIDE=0 is
    not set here: it would also turn off the TF32 that the comparison of TF32 kernels
    asks PyTorch's cuBLAS for, in the same process.
    """
    os.environ.setdefault("CUPY_TF32", "0")
    if os.environ["CUPY_TF32"].strip() not in ("", "0"):
        raise GpuUnavailable(f"CUPY_TF32={os.environ['CUPY_TF32']} makes cuBLAS use TF32; unset it to compare "
                             f"against FP32")
