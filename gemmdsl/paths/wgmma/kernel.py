"""The `__global__` kernel of the wgmma path, wired from its parts (chosen in choose_wgmma_parts):
a warp-specialized block in which warpgroup 0 produces (TMA into the ring) and warpgroups
1..CONSUMERS consume (wgmma from the ring, then the epilogue), over the tiles the scheduler gives it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...abi import tensor_map_type
from ...ir import Operand
from ...emit.scale_c import emit_scale_c_kernel
from .pad import emit_pad_kernel
from ...emitter import Emitter
from ...plan import KernelPlan
from .layout import WgmmaLayout
from .mbarrier import MbarrierRing
from .grouped import GroupedScheduler
from .persistent import PersistentScheduler
from .pingpong import PingPongScheduler
from .tma import TmaProducer
from .math import WgmmaMath
from .epilogue import AccumulatorEpilogue
from .splitter import StageSplitter
from .stmatrix import StmatrixEpilogue
from .store import StagedEpilogue
from .stream_k import StreamKPersistentScheduler


@dataclass(frozen=True)
class WgmmaParts:
    """The parts of a wgmma kernel (Hopper's own path: paths/wgmma/kernel.py wires them)."""

    layout: WgmmaLayout
    scheduler: PersistentScheduler
    ring: MbarrierRing
    copy: TmaProducer
    math: WgmmaMath
    epilogue: AccumulatorEpilogue
    splitter: StageSplitter | None  # 3xTF32: the producer warps that split B's stages


def choose_wgmma_parts(plan: KernelPlan, out: Emitter) -> WgmmaParts:
    """One part per role: the math (the path's: wgmma, 3xTF32's split products with the producer's splitter
    warps, or FP8's promoted sums), the epilogue (direct or staged through shared memory and TMA stores), the scheduler
    (persistent tiles, taken in turn by the consumers under pingpong, or with stream-K); another copy engine (TMA multicast) would be chosen here too."""
    layout = plan.layout
    assert isinstance(layout, WgmmaLayout)
    math = plan.path.math(layout, out)
    if not layout.tma_store:
        epilogue = AccumulatorEpilogue(layout, out)
    else:
        epilogue = (StmatrixEpilogue if layout.stmatrix_store else StagedEpilogue)(layout, out)
    scheduler = (StreamKPersistentScheduler if layout.stream_k else GroupedScheduler if layout.grouped
                 else PingPongScheduler if layout.pingpong else PersistentScheduler)(layout, out)
    splitter = StageSplitter(layout, out) if layout.split else None
    return WgmmaParts(layout, scheduler, MbarrierRing(layout, out), TmaProducer(layout, out), math, epilogue, splitter)


def emit_wgmma_definitions(plan: KernelPlan, o: Emitter) -> None:
    """The file's body after its includes: the tensor-map type, the kernel, the launchers; and the device helpers
    they may call, which go to the file's prelude (emit/prelude.py)."""
    from .grouped import GroupedTensorMapLauncher
    from .launcher import TensorMapLauncher

    parts = choose_wgmma_parts(plan, o)
    name = tensor_map_type(plan.spec)
    o.comment("A TMA descriptor (CUtensorMap: 128 opaque bytes, 64-byte aligned), passed to the kernel by value as a\n"
              "__grid_constant__ parameter. Declared here so that the kernel compiles without the driver API's\n"
              "header (NVRTC); the launcher copies the CUtensorMap it encodes into it.")
    o.line(f"struct alignas(64) {name} {{")
    o.line("    unsigned long long opaque[16];")
    o.line("};")
    o.line()
    o.uses("wgmma, setmaxnreg and TMA")
    o.helper_guard = (arch_guard(plan), f"The helpers of {plan.spec.target} kernels exist in {plan.spec.target} passes "
                      "only (a device pass for another target stops at\nthe file's #error; the host pass compiles none "
                      "of them; CUTLASS guards its sm_90a code the same way).")
    with o.helpers():
        for part in (parts.ring, parts.copy, parts.math, parts.epilogue, parts.scheduler):
            part.emit_helpers()
    emit_wgmma_kernel(plan, o)
    o.line()
    emit_scale_c_kernel(plan, o, guard=arch_guard(plan))
    o.line()
    if plan.launch.entries.pad_operands is not None:
        emit_pad_kernel(plan, o)
        o.line()
    (GroupedTensorMapLauncher if parts.layout.grouped else TensorMapLauncher)(plan, o).emit()


def arch_guard(plan: KernelPlan) -> str:
    """The test that holds in the passes of the spec's arch-specific target (sm_90a) and no other."""
    return f"#if defined(__CUDA_ARCH_FEAT_SM{plan.spec.target.sm}_ALL)"


def emit_wgmma_kernel(plan: KernelPlan, o: Emitter) -> None:
    parts = choose_wgmma_parts(plan, o)
    layout, launch = parts.layout, plan.launch
    parameters = [f"{ctype} __restrict__ {name}" if ctype.endswith("*") else f"{ctype} {name}"
                  for ctype, name in launch.parameters]
    splitters = ", warps 1-3 split B's stages" if parts.splitter else ""
    o.comment(f"Warp specialization: warpgroup 0 is the producer (setmaxnreg.dec to {layout.producer_registers} "
              f"registers; one thread issues TMA{splitters}),\nwarpgroups 1..{layout.consumers} the consumers (setmaxnreg.inc to "
              f"{layout.consumer_registers}: the registers the producer gave up). One block per SM\n"
              f"(__launch_bounds__({layout.threads}, 1)): the register split and the "
              f"{layout.smem_bytes // 1024} KiB ring assume it.")
    o.line(f'extern "C" __global__ void __launch_bounds__({layout.threads}, 1) {plan.launch.entries.vector}(')
    o.line(f"    {', '.join(parameters[:2])},")
    o.line(f"    {', '.join(parameters[2:])})")
    target = plan.spec.target
    with o.block(""):
        o.line(arch_guard(plan))
        o.comment(parts.math.tiling_note())
        constants = [("BM", layout.bm), ("BN", layout.bn), ("BK", layout.bk), *parts.math.constants(),
                     *parts.epilogue.constants(), *(parts.splitter.constants() if parts.splitter else ()),
                     ("STAGES", layout.stages), ("CONSUMERS", layout.consumers),
                     ("A_STAGE_BYTES", layout.stage_bytes_of(Operand.A)),
                     ("STAGE_BYTES", layout.stage_bytes)]
        for name, value in constants:
            o.line(f"constexpr int {name} = {value};")
        o.line()
        parts.ring.declare()
        o.line("const int warpgroup = threadIdx.x / 128;")
        o.line("const int tid = threadIdx.x % 128;")
        o.line()
        parts.ring.emit_init()
        o.line()
        parts.scheduler.emit_counts()
        o.line()
        with o.block("if (warpgroup == 0)"):
            o.comment("Producer.")
            o.line(f'asm volatile("setmaxnreg.dec.sync.aligned.u32 {layout.producer_registers};");')
            with o.block("if (tid == 0)"):
                o.line("int it = 0;  // k-tiles issued so far, across tiles: names the stage and phase")
                parts.scheduler.emit_loop(lambda: _producer_tile(parts, o, parts.copy.emit_k_tile))
            if parts.splitter:
                with o.block(f"else if ({parts.splitter.guard})"):
                    o.line("int it = 0;")
                    parts.scheduler.emit_loop(lambda: _producer_tile(parts, o, parts.splitter.emit_k_tile), coordinates=False)
            if parts.epilogue.stages_vectors:
                with o.block("else if (tid / 32 == 1)"):
                    o.comment("Warp 1 stages each tile's fuse chain vectors in shared memory while the consumers "
                              "multiply, so their\nepilogue reads no vector from global memory.")
                    parts.epilogue.emit_vector_loader_state()
                    parts.scheduler.emit_loop(lambda: parts.scheduler.emit_if_finishing(parts.epilogue.emit_vector_tile))
        with o.block("else"):
            o.comment("Consumers.")
            o.line(f'asm volatile("setmaxnreg.inc.sync.aligned.u32 {layout.consumer_registers};");')
            o.line("const int consumer = warpgroup - 1;")
            parts.epilogue.emit_state()
            o.line("int it = 0;")
            parts.scheduler.emit_consumer_loop(lambda: _consumer_tile(parts, o))
            parts.epilogue.emit_finish()
        o.line("#else")
        o.comment(f"The compute_{target.sm} pass: no wgmma, so no kernel; a GPU that runs this kernel loads its "
                  f"{target} code.")
        o.line("__trap();")
        o.line("#endif")


def _producer_tile(parts, o: Emitter, emit_k_tile) -> None:
    """A producer-side walk over the tile's k-tiles: TMA's copies, or 3xTF32's splitting."""
    first, end = parts.scheduler.k_first, parts.scheduler.k_end
    with o.block(f"for (int kt = {first}; kt < {end}; ++kt, ++it)"):
        parts.ring.emit_stage()
        emit_k_tile()


def _consumer_tile(parts, o: Emitter) -> None:
    parts.scheduler.emit_consumer_names()
    parts.math.declare()
    if parts.epilogue.starts_tiles:
        parts.scheduler.emit_if_finishing(parts.epilogue.emit_tile_start)
    # Counted from 0 whatever k-tiles the scheduler gives: from a variable first k-tile ptxas serializes the
    # wgmma (C7515, "non wgmma instructions defining accumulator registers"; seen with stream-K's pieces).
    parts.scheduler.emit_main_loop_start()
    with o.block(f"for (int kt = 0; kt < {parts.scheduler.k_count}; ++kt, ++it)"):
        parts.ring.emit_stage()
        parts.ring.emit_consumer_wait()
        parts.math.emit_k_tile()
        parts.math.emit_release()
    parts.scheduler.emit_main_loop_end()
    parts.math.emit_drain()
    o.line()
    parts.scheduler.emit_tile_end(parts.epilogue.emit_tile)
