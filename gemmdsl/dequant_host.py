"""Running a decode kernel from Python without its C launcher: the kernel built to a cubin (runtime's compiler:
nvcc where on PATH, else NVRTC), launched through CuPy on the caller's stream with DecodeConfig's grid, and
operands taken from any array with a CUDA pointer (PyTorch tensors in the tests and benchmarks)."""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .paths.dequant.kernel import DecodeConfig, emit_decode


@dataclass
class DecodeKernel:
    """A built decode kernel: `__call__(a, packed, c, workspace)` launches C = A W^T."""

    name: str
    config: DecodeConfig
    function: Any  # cupy.RawKernel

    @classmethod
    def build(cls, name: str, config: DecodeConfig, target: str = "sm_90a") -> "DecodeKernel":
        import cupy

        from .runtime import compile_cubin

        cubin = compile_cubin(emit_decode(name, config), target)
        directory = Path(tempfile.mkdtemp(prefix="gemmdsl_dequant_"))
        (directory / f"{name}.cubin").write_bytes(cubin)
        function = cupy.RawModule(path=str(directory / f"{name}.cubin")).get_function(f"{name}_kernel")
        function.max_dynamic_shared_size_bytes = config.smem_bytes
        return cls(name, config, function)

    def __call__(self, a: Any, packed: dict[str, Any], c: Any, workspace: Any | None, stream: int) -> None:
        """Launch on `stream` (a CUstream handle) for A (M x K), C (M x N); `packed` holds device arrays of
        quant_layout.pack's arrays; `workspace` (zero, config.workspace_bytes) where the call splits K."""
        import cupy
        import numpy as np

        m, k = a.shape
        n = c.shape[1]
        grid = self.config.grid(m, n, k)
        if grid[2] > 1 and workspace is None:
            raise ValueError(f"K = {k} splits into {grid[2]} slices: the call needs a workspace")
        workspace_pointer = 0 if workspace is None else workspace.data_ptr()
        counters = 0 if grid[2] <= 1 else workspace_pointer + m * n * 4
        pointer = lambda name: np.uint64(packed[name].data_ptr()) if name in packed else np.uint64(0)  # noqa: E731
        args = (np.uint64(a.data_ptr()), pointer("weights"), pointer("scales"), pointer("zeros"),
                np.uint64(c.data_ptr()), np.uint64(workspace_pointer), np.uint64(counters),
                np.int32(m), np.int32(n), np.int32(k))
        with cupy.cuda.ExternalStream(stream):
            self.function(grid, (self.config.warps * 32, 1, 1), args, shared_mem=self.config.smem_bytes)
