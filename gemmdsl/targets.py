"""Per-architecture limits, stated once; every pass and the emitter read them from here.

Figures are from the CUDA C Programming Guide's table of compute capabilities.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Arch:
    sm: int
    smem_per_sm: int  # bytes of shared memory an SM can give to blocks
    smem_per_block: int  # largest dynamic shared memory a block may opt into
    smem_reserved_per_block: int  # the runtime's per-block reserve
    max_threads_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int = 65536
    max_registers_per_thread: int = 255
    register_alloc_unit: int = 256  # registers are handed to warps in units of this many
    smem_alloc_unit: int = 128
    max_threads_per_block: int = 1024
    has_cp_async: bool = True
    has_mma_sync: bool = True  # mma.sync with f16, bf16 and tf32 operands (sm_80+)
    default_smem_per_block: int = 48 * 1024  # above this the launcher must opt in
    # The GPU whose SM count the wave analysis assumes (launchers read the real count at run time).
    reference_gpu: str = ""
    reference_sms: int = 0


ARCHS: dict[int, Arch] = {
    80: Arch(80, smem_per_sm=164 * 1024, smem_per_block=163 * 1024, smem_reserved_per_block=1024,
             max_threads_per_sm=2048, max_blocks_per_sm=32, reference_gpu="A100", reference_sms=108),
    86: Arch(86, smem_per_sm=100 * 1024, smem_per_block=99 * 1024, smem_reserved_per_block=1024,
             max_threads_per_sm=1536, max_blocks_per_sm=16, reference_gpu="RTX 3090", reference_sms=82),
    89: Arch(89, smem_per_sm=100 * 1024, smem_per_block=99 * 1024, smem_reserved_per_block=1024,
             max_threads_per_sm=1536, max_blocks_per_sm=24, reference_gpu="RTX 4090", reference_sms=128),
    90: Arch(90, smem_per_sm=228 * 1024, smem_per_block=227 * 1024, smem_reserved_per_block=1024,
             max_threads_per_sm=2048, max_blocks_per_sm=32, reference_gpu="H100 SXM", reference_sms=132),
}


def arch(sm: int) -> Arch:
    return ARCHS[sm]
