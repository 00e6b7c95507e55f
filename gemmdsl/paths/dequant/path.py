"""The dequantizing decode path: a spec with a weight type on B (`b: s4 col;`, u4, s8, or e4m3 against a bf16 or
f16 A), `quant b { ... }` and no `mma` section compiles to kernel.py's kernel and C launcher, B given as
quant_layout.pack's arrays (docs/quantized-kernel.md)."""
from __future__ import annotations

from pathlib import Path

from ... import ir
from ...emit.header_file import DEVICE_RULE, emit_prototype, header_file
from ...emitter import Emitter
from ...plan import KernelPlan
from ...quant_layout import describe_layout
from ...source import printable
from ..interface import InstructionPath
from . import expand
from .facts import DecodeFacts, DecodeLaunchPass, DecodePass, decode_model
from .kernel import INSTRUCTIONS, DecodeConfig, decode_definitions, launcher_parameters
from .lowering import decode_config, decode_plan
from .validate import check_decode

ACTIVATIONS = (ir.DType.BF16, ir.DType.F16)


class DequantPath(InstructionPath):
    name = "dequant"
    passes = (DecodeLaunchPass(), DecodePass())
    facts = DecodeFacts()
    key_sets = frozenset({"warp tiles"})
    default_copy = ir.CopyMode.REGISTERS
    default_stages = DecodeConfig.prefetch  # the dataclass field's default: chunks in flight per lane
    weight_types = frozenset({ir.DType.S4, ir.DType.U4, ir.DType.S8, ir.DType.E4M3})

    def takes(self, shape, a, b) -> bool:
        return shape is None and b in self.weight_types and a in (*ACTIVATIONS, None)

    def unit(self, spec: ir.KernelSpec) -> str:
        return spec.problem.a.dtype.value

    def warp_tile(self, spec: ir.KernelSpec) -> ir.Pair:
        return ir.Pair(spec.block.m, spec.block.n // spec.threads.warps.n)

    def validate(self, checker) -> None:
        check_decode(checker)

    def lower(self, spec: ir.KernelSpec) -> KernelPlan:
        return decode_plan(spec, self)

    def emit_definitions(self, plan: KernelPlan, out: Emitter) -> None:
        for instruction in INSTRUCTIONS:
            out.uses(instruction)
        out.lines(decode_definitions(plan.spec.name, plan.layout.config))
        out.line()
        out.lines(expand.dequantize_definitions(plan.spec.name, plan.layout.config))

    def member_model(self, analysis, sms: int):
        return decode_model(analysis, sms)

    def launch_contract(self, plan: KernelPlan) -> list[str]:
        config = plan.layout.config
        return [f"K a multiple of {config.k_multiple}; A and the packed weights 16-byte aligned, the scales and "
                "zero points 4-byte aligned; any M and N."]

    def metadata(self, plan: KernelPlan) -> dict:
        """The packed weights' arrays and the kernel's configuration, which the runtime binds a call by; the
        dequantize-into-memory kernel's entry and launch (its grid: launch_plan.dequantize_grid(chunk_k,
        items_per_block))."""
        config = plan.layout.config
        name = plan.spec.name
        fmt = config.fmt
        return {"quant": {"weight": fmt.weight, "activation": fmt.activation, "group": fmt.group, "zeros": fmt.zeros,
                          "k_multiple": config.k_multiple, "layout": describe_layout(fmt)},
                "decode": {"warps": config.warps, "tiles": config.tiles, "m_tiles": config.m_tiles,
                           "k_slice": config.k_slice, "prefetch": config.prefetch,
                           "blocks_per_sm": config.blocks_per_sm, "rows": config.m_tiles * 8,
                           "block_rows": config.block_rows},
                "dequantize": {"entry": expand.dequantize_entry(name), "launcher": f"{name}_dequantize",
                               "threads": config.dequantize_threads, "smem": config.dequantize_smem_bytes,
                               "chunk_k": fmt.chunk_k, "items_per_block": config.dequantize_items_per_block},
                "operands": ["A", *describe_layout(fmt), "C"]}

    def header(self, plan: KernelPlan) -> str:
        spec = plan.spec
        config = decode_config(spec)
        name, fmt = spec.name, config.fmt
        arrays = describe_layout(fmt)
        constants = [("What a call must satisfy (NAME.json's `requires` and `quant`): K a multiple of K_MULTIPLE; the "
                      "kernel's\nblock: ROWS rows of A, BLOCK_ROWS rows of W, a k-slice of K_SLICE (split-K beyond).",
                      [("K_MULTIPLE", config.k_multiple), ("ROWS", config.m_tiles * 8),
                       ("BLOCK_ROWS", config.block_rows), ("K_SLICE", config.k_slice)])]
        layout = "\n".join(f"  {array}: {text}" for array, text in arrays.items())

        def declare(o: Emitter) -> None:
            o.comment(f"C (M x N, row-major) = A (M x K, row-major) * W^T, W ({fmt.weight}, N x K) given as "
                      f"gemmdsl/quant_layout.py's\npack() arrays (docs/quantized-kernel.md):\n{layout}\n"
                      f"Pass NULL for an array the format lacks. With K > {config.k_slice} the call needs "
                      f"`workspace` of\n{name}_workspace_bytes(M, N, K) bytes, zero when first used (the kernel "
                      "leaves it zero again;\ncalls sharing it must not overlap). Returns cudaErrorInvalidValue, "
                      "launching nothing, for\narguments it cannot take.\n" + "\n".join(DEVICE_RULE))
            o.line(f"size_t {name}_workspace_bytes(int M, int N, int K);")
            emit_prototype(o, f"cudaError_t {name}_launch(", launcher_parameters(config))
            o.line()
            o.comment(f"W (N x K, row-major, {fmt.activation}) = the weight of the same arrays, each element "
                      f"dequantized and rounded once\nto {fmt.activation} (for a dense GEMM on W where M is large). "
                      f"K a multiple of {config.k_multiple}; the weights and W 16-byte\naligned. Returns "
                      "cudaErrorInvalidValue, launching nothing, for arguments it cannot take.")
            emit_prototype(o, f"cudaError_t {name}_dequantize(", expand.launcher_parameters(config))

        return header_file(name, spec, printable(Path(spec.span.file).name), "the spec", constants, declare)


PATH = DequantPath()
