"""Load a compiled spec onto the GPU and launch it from Python through CuPy.

    kernel = gemmdsl.load("specs/sgemm_v1.gemm")
    c = kernel(a, b)      # a, b: GPU arrays (PyTorch, CuPy, JAX, Numba) or views, in the spec's layouts

CuPy is imported inside the functions that need a GPU, so the compiler, the CLI
and the CPU tests work on machines without it.

Operands. Any GPU array that speaks `__cuda_array_interface__` or DLPack is read
without a copy (`arrays.array_view`), and the kernel gets raw device pointers, so
nothing depends on CuPy knowing the dtype (bfloat16). The launch goes on the
caller's current stream: PyTorch's for PyTorch operands, CuPy's otherwise, or
`stream=`. A C the caller leaves out is made in A's library (JAX: made by CuPy and
handed over through DLPack, since JAX arrays are immutable).

The modules, each importing only those above it in this list:

    environment       whether this machine can run kernels (GpuUnavailable, require_gpu)
    operands          a call's operands checked against the kernel's requirements (check_call; pure)
    launch_arguments  a checked call's kernel parameters, stream-K's workspace
    allocations       the arrays a call makes: C left out, the padded launcher's copies
    driver            streams, the current device, loaded functions and their launches
    binaries          the architecture to build for, nvcc or NVRTC, the cubin cache
    kernel            Kernel (bind, bind_padded, __call__)
    quantized         QuantizedKernel (a dequantizing spec's), QuantizedLinear (decode or dequantize-then-dense by M),
                      load: a spec's Kernel or QuantizedKernel
    commands          the shared body of `gemmdsl verify` and `gemmdsl bench`

A test that replaces a function patches the module that calls it (`runtime.kernel.check_call`).
"""
from ..cache_root import cache_dir
from .allocations import c_shape, padded_copies
from .binaries import (COMPILERS, BinaryCache, KernelBuildError, build_target, cache_key, chosen_compiler,
                       compile_cubin, compile_with_nvrtc, compiler_version, cubin_cache_name, cubin_file_name,
                       parse_target)
from .commands import format_size, parse_sizes, run_on_kernels
from .driver import BoundLaunch, DeviceModule, KernelLaunch, queue, run_returning_c
from .environment import GpuUnavailable, gpu_unavailable_reason, require_fp32_cublas, require_gpu
from .kernel import PLANS_KEPT, Kernel, compile_spec
from .launch_arguments import tensor_map_kernel_arguments
from .operands import (CALL_OPERANDS, KernelRequirements, OperandView, Size, call_operands, check_call,
                       check_no_overlap, check_unclustered, choose_entry, operand_view)
from .quantized import QuantizedKernel, QuantizedLinear, load

__all__ = ["BinaryCache", "BoundLaunch", "CALL_OPERANDS", "COMPILERS", "DeviceModule", "GpuUnavailable", "Kernel",
           "KernelBuildError", "KernelLaunch", "KernelRequirements", "OperandView", "PLANS_KEPT", "QuantizedKernel",
           "QuantizedLinear", "Size", "build_target", "c_shape", "cache_dir", "cache_key", "call_operands", "check_call",
           "check_no_overlap", "check_unclustered", "choose_entry", "chosen_compiler", "compile_cubin", "compile_spec",
           "compile_with_nvrtc", "compiler_version", "cubin_cache_name", "cubin_file_name", "format_size",
           "gpu_unavailable_reason", "load", "operand_view", "padded_copies", "parse_sizes", "parse_target", "queue",
           "require_fp32_cublas", "require_gpu", "run_on_kernels", "run_returning_c", "tensor_map_kernel_arguments"]
