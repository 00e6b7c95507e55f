"""The wgmma path (Hopper's own): a TMA producer warpgroup fills a ring of shared-memory stages on
mbarriers, consumer warpgroups issue wgmma.mma_async from it, persistent blocks walk the tiles (with
stream-K sharing the last wave's k-tiles through a workspace), and the launchers encode TMA tensor maps.
Its lowering is `WgmmaLayout`, not a TileLayout; its rules, passes and emitters are its own."""
from __future__ import annotations

import re

from ... import abi, ir
from ...abi import tile_count
from ...cycles import MemberModel
from .cycles import wgmma_member_model
from .facts import WgmmaFacts
from .grouped import grouped_contract
from .kernel import emit_wgmma_definitions
from .pad import pads_operands
from .parameters import kernel_parameters
from ...launch_plan import Entries, GridRule, LaunchPlan, Requirements, StreamKLaunch, Workspace
from .passes import WGMMA_PASSES
from ...plan import KernelPlan, Role, Variant
from ...targets import WGMMA_PEAK_TFLOPS
from .validate import check_wgmma
from .layout import WgmmaLayout
from .math import WgmmaMath
from .split import SplitWgmmaMath
from ..interface import InstructionPath

TENSOR_MAP_HEADER = "<cuda.h>  // CUtensorMap and its enums; the encoder is looked up at run time (no -lcuda)"


def fp8_operands(a: ir.DType | None, b: ir.DType | None) -> bool:
    """Whether A or B is FP8: such wgmma specs are the FP8 path's (paths/wgmma_fp8)."""
    return any(dtype is not None and dtype.fp8 for dtype in (a, b))


class WgmmaPath(InstructionPath):
    name = "wgmma"
    passes = WGMMA_PASSES
    batch_strides_note = "(TMA steps A and B by\ntheir strides: positive multiples of 16 bytes)."
    lowering = WgmmaLayout  # the layout class; a path built on this one (FP8) gives its own
    facts = WgmmaFacts()
    key_sets = frozenset({"warpgroups"})
    default_copy = ir.CopyMode.TMA
    default_swizzle_bytes = 128
    shape_syntax = re.compile(r"m64n(?P<n>\d+)k(?P<k>\d+)")
    shape_type = ir.WgmmaShape
    stream_k_sums_whole = True  # paths/wgmma/stream_k.py: the finishing block adds the partial sums, then the epilogue

    def takes(self, shape, a, b) -> bool:
        return shape is ir.WgmmaShape and not fp8_operands(a, b)

    def smem_in_global_order(self, dtype: ir.DType) -> bool:
        return True  # TMA lands a box as it lies in global memory

    def validate(self, checker) -> None:
        check_wgmma(checker.spec, checker.error, checker.warning, self.lowering)

    def math(self, layout: WgmmaLayout, out) -> WgmmaMath:
        """The consumers' multiply part (paths/wgmma/kernel.py wires it): wgmma from the ring, or 3xTF32's
        split products."""
        return SplitWgmmaMath(layout, out) if layout.split else WgmmaMath(layout, out)

    def lower(self, spec: ir.KernelSpec) -> KernelPlan:
        """One kernel, whatever the bounds. TMA zero-fills the loads outside A and B, so edge tiles need no
        other code, and the epilogue guards its stores; operands TMA cannot describe (pointers or leading
        dimensions not multiples of 16 bytes) are refused, not run on a scalar kernel."""
        layout = self.lowering(spec)
        variants = (Variant(abi.vector_entry(spec), Role.VECTOR, layout),)
        tiles = " * ".join(f"({abi.tile_count(spec, extent, str(size))})"
                           for extent, size in (("M", layout.bm), ("N", layout.bn)))
        grid_x = f"min({tiles}, SMs)" if layout.persistent else tiles
        if layout.stream_k:  # LaunchPlan.persistent_grid_rule
            grid_x = f"max(sk_blocks, min({tiles} - sk_tiles, SMs))"
        checked = spec.problem.checked
        requirements = Requirements(
            m_multiple=1 if checked else layout.bm, n_multiple=1 if checked else layout.bn,
            k_multiple=1 if checked else layout.bk,
            vector_elements={op.value: layout.global_vector(op) for op in ir.Operand},
            max_leading_dimension={op.value: abi.MAX_INT for op in ir.Operand})
        if layout.grouped:  # the groups' tiles are counted on the GPU: a bound on them (grouped_schedule.py)
            grid_x = f"min(((M + {layout.bm - 1}) / {layout.bm} + groups) * {tile_count(spec, 'N', str(layout.bn))}, SMs)"
        rule = (GridRule.PERSISTENT_STREAM_K if layout.stream_k else GridRule.PERSISTENT_GROUPED if layout.grouped
                else GridRule.PERSISTENT if layout.persistent else GridRule.BATCH_TILES)
        stream_k = StreamKLaunch.PERSISTENT if layout.stream_k else None
        workspace = Workspace(layout.partial_bytes, layout.consumers) if layout.stream_k else None
        pad = abi.pad_operands_entry(spec) if pads_operands(spec) else None  # paths/wgmma/pad.py
        launch = LaunchPlan(Entries(variants[0].entry, scale_c=abi.scale_c_entry(spec), pad_operands=pad), kernel_parameters(spec), abi.launcher_names(spec),
                            layout.threads, layout.smem_bytes, (layout.bm, layout.bn, layout.bk), (grid_x, 1, 1),
                            requirements, 1, rule, stream_k, workspace, tma_operands=True)
        return KernelPlan(spec, layout.arch, variants, launch, self)

    def emit_definitions(self, plan, out) -> None:
        emit_wgmma_definitions(plan, out)

    def host_includes(self, spec: ir.KernelSpec) -> list[str]:
        stream_k = ["<mutex>", "<vector>"] if spec.block.stream_k else []  # the workspaces, per device and stream
        return [TENSOR_MAP_HEADER, "<cstring>", *stream_k]

    def launch_contract(self, plan: KernelPlan) -> list[str]:
        vector = plan.launch.requirements.vector_elements
        lines = [f"- TMA reads A and B: their pointers 16-byte aligned, lda and ldb multiples of {vector['a']} "
                 "elements (16 bytes); there is no fallback kernel."]
        if plan.spec.problem.batched:
            lines.append(f"- a batch of more than one: stride_a and stride_b positive multiples of {vector['a']} "
                         "elements (TMA steps by them), stride_c positive.")
        if plan.spec.problem.grouped:
            lines += grouped_contract(plan.spec)
        return lines

    def launcher_notes(self, plan: KernelPlan) -> list[str]:
        lines = ["They encode TMA tensor maps for A and B (kept for the next call with the same pointers, shape and",
                 "leading dimensions, per host thread) and, for schedule: persistent, read the current device's",
                 "SM count; they return those calls' errors."]
        if plan.spec.block.stream_k:
            lines += ["Stream-K: the first call that shares tiles on a stream allocates that stream's workspace",
                      "(cudaMallocAsync: per SM a BM x BN slot of partial sums and a flag per consumer warpgroup;",
                      "kept for later calls, never freed) and returns its errors. Calls on one stream share it;",
                      "calls on two streams get two."]
        return lines

    def metadata(self, plan: KernelPlan) -> dict:
        """What the Python runtime needs beyond the launch plan to launch as the C launcher does: the tensor
        maps it encodes (2-D views of A and B, and of C for `store: tma`, dimension 0 contiguous, and their
        boxes)."""
        layout = plan.layout
        boxes = {**layout.boxes, **({ir.Operand.C: layout.c_box} if layout.c_box is not None else {})}
        maps = {op.value: {"dims": list(box.dims), "box": [box.inner, box.outer], "boxes": box.count,
                           "element_bytes": box.element_bytes, "swizzle_bytes": box.swizzle_bytes,
                           "dtype": box.data_type}
                for op, box in boxes.items()}
        return {"tensor_maps": maps, "alignment_bytes": layout.global_alignment_bytes}

    def member_model(self, analysis, sms: int) -> MemberModel:
        return wgmma_member_model(analysis.layout, sms, self.unit(analysis.spec))

    def lowered_member_model(self, layout: WgmmaLayout, sms: int) -> MemberModel:
        return wgmma_member_model(layout, sms, self.unit(layout.spec))

    def peak_tflops(self, sm: int) -> dict[str, float]:
        return WGMMA_PEAK_TFLOPS.get(sm, {})


PATH = WgmmaPath()
