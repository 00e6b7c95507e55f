"""Codegen: a KernelPlan -> one self-contained CUDA C file.

Every index the kernels print comes from the plan's `KernelLayout`s as an `Expr`, so what the
analysis passes evaluate is exactly what the kernels compute. One module per role:

    prelude.py    the file's device helpers, defined once and only where called
    helpers.py    shared-memory layout functions, PTX wrappers (lds/sts, cp.async)
    scheduler.py  which C tile and k-range a block works on (raster, stream-K) -> WorkTile
    copy.py       global -> shared copy of one k-tile (register-staged | cp.async)
    fragments.py  shared -> register fragments of one k-step (lds)
    math.py       accumulators and the math of one k-step (FMA outer product)
    pipeline.py   the k-loop, composed from a copy, a fragment and a math engine
    epilogue.py   accumulators -> C (store | alpha_beta | atomic add)
    fuse.py       the fuse chain (scale, bias, activation, residual): one rendering every path's epilogue calls
    kernel.py     one __global__ kernel wired from the parts chosen for the plan
    launcher.py   the host launchers

The wgmma path's parts (TMA, mbarriers, wgmma, its epilogues and launcher) live in gemmdsl/paths/wgmma/;
each instruction path supplies its own parts (gemmdsl/paths).
"""
from __future__ import annotations

from pathlib import Path

from .. import ir
from ..abi import arch_flag, build_command
from ..emitter import Emitter
from ..plan import KernelPlan
from ..source import printable, word_list
from ..targets import INSTRUCTION_TARGETS
from ..version import __version__
from .fuse import FuseChain
from .helpers import HelperEmitter
from .kernel import emit_kernel
from .launcher import LauncherEmitter
from .prelude import Helper, emit_helpers, plan_prelude
from .scale_c import emit_scale_c_kernel
from .scheduler import emit_prepare_kernel

def includes(*plans: KernelPlan) -> str:
    """The #include lines of a file that holds `plans`' kernels (a family's members, or one spec), all at the top
    (a family wraps each member in a namespace, where no header may be opened): the host launchers'
    headers, which NVRTC, compiling the kernels alone, skips; then the 16-bit and FP8 types the kernels use."""
    host = ["<cstdint>", "<cuda_runtime.h>"]
    specs = [plan.spec for plan in plans]
    for plan in plans:
        host += [header for header in plan.path.host_includes(plan.spec) if header not in host]
    dtypes = {dtype for spec in specs for dtype in (*(spec.problem.matrix(op).dtype for op in ir.Operand),
                                                    *(spec.fuse.dtypes if spec.fuse else ()))}
    headers = sorted({dtype.c_header for dtype in dtypes if dtype.c_header})
    return "\n".join(["", "#ifndef __CUDACC_RTC__", *(f"#include {header}" for header in host), "#endif",
                      *(f"#include <{header}>" for header in headers)])


# The most of a spec's or family's text its .cu quotes in its opening comment; a note counts the rest.
COPIED_LINES = 200
COPIED_BYTES = 16 * 1024


def quote_source(text: str, o: Emitter) -> None:
    """`text` as comment lines, indented (Emitter.comment escapes what could end or extend one): at most
    COPIED_LINES lines and COPIED_BYTES bytes of UTF-8, a line that would pass them cut, then a note of how
    much was left out."""
    text = text.strip("\n")
    rows = text.split("\n", COPIED_LINES)  # the lines that may be quoted, and the rest in one piece
    budget = COPIED_BYTES
    whole = 0  # lines quoted whole
    for row in rows[:COPIED_LINES]:
        data = row.encode("utf-8", "surrogatepass")
        if len(data) > budget:
            o.comment(f"  {data[:budget].decode('utf-8', 'ignore')}")
            budget = 0
            break
        o.comment(f"  {row}")
        budget -= min(len(data) + 1, budget)
        whole += 1
    left_lines = text.count("\n") + 1 - whole
    if left_lines > 0:
        left_bytes = len(text.encode("utf-8", "surrogatepass")) - (COPIED_BYTES - budget)
        o.comment(f"  [{left_lines:,} more lines ({left_bytes:,} bytes) of the source left out: a .cu quotes at "
                  f"most {COPIED_LINES} lines and {COPIED_BYTES:,} bytes of it]")


def arch_guard(name: str, target: ir.Target, instructions: set[str], o: Emitter) -> None:
    """The #error that stops a device pass for a target older than `instructions` need
    (targets.INSTRUCTION_TARGETS), or for another architecture than an `a` target's, naming the flag to build
    with; nothing where no instruction needs more than every target has. The host pass and the CPU emulator
    (no __CUDA_ARCH__) and NVRTC for the target pass it."""
    if not instructions:
        return
    oldest = max(INSTRUCTION_TARGETS[instruction] for instruction in instructions)
    named = word_list(sorted(i for i in instructions if INSTRUCTION_TARGETS[i] == oldest), "and")
    if oldest.arch_specific:
        test = f"!defined(__CUDA_ARCH_FEAT_SM{oldest.sm}_ALL)"
        fix = (f"instructions of {oldest} alone: build it with {arch_flag(str(oldest))} (-arch={oldest} also "
               f"compiles a compute_{oldest.sm} pass)")
    else:
        test = f"__CUDA_ARCH__ < {oldest.sm * 10}"
        fix = (f"instructions of {oldest} and later: build it for one of those (its target's flag: "
               f"{arch_flag(str(target))})")
    o.line()
    o.comment("A device pass for a GPU these kernels cannot run on stops here.")
    o.line(f"#if defined(__CUDA_ARCH__) && {test}")
    o.line(f'#error "{name}.cu: its kernels use {named}, {fix}"')
    o.line("#endif")


def emit_cuda(plan: KernelPlan, source_text: str, summary: list[str]) -> str:
    """The whole .cu file: header comment, the prelude of helpers, kernels, launchers."""
    o = Emitter()
    o.comment(f"Generated by gemmdsl {__version__} from {printable(Path(plan.spec.span.file).name)}. Do not edit: "
              "change the spec and")
    o.comment("recompile. The file is self-contained; the host launcher needs only the CUDA runtime.")
    o.comment(f"Build: {build_command(plan.spec.name, plan.spec.target)}")
    o.comment("")
    o.comment("Spec:")
    quote_source(source_text, o)
    if summary:
        o.comment("")
        o.comment("Analysis (gemmdsl check):")
        for row in summary:
            o.line(f"//   {row}")
    o.line()
    o.lines(includes(plan))
    body = Emitter()
    emit_definitions(plan, body)
    arch_guard(plan.spec.name, plan.spec.target, body.instructions, o)
    emit_prelude(plan_prelude([body]).shared, o)
    o.line()
    o.extend(body)
    return o.text()


def emit_prelude(helpers: list[Helper], o: Emitter) -> None:
    """The file's device helpers (emit/prelude.py), after its includes and guard."""
    if not helpers:
        return
    o.line()
    o.comment("Device helpers: the PTX wrappers and functions the kernels below call, each defined once.")
    emit_helpers(helpers, o)


def emit_definitions(plan: KernelPlan, o: Emitter) -> None:
    """Everything the file defines after its includes, as the plan's path emits it. A kernel family's file
    (emit/family.py) holds one such body per member."""
    plan.path.emit_definitions(plan, o)


def emit_tile_definitions(plan: KernelPlan, o: Emitter) -> None:
    """The FMA and mma.sync paths' definitions: kernels, launchers, and the helpers they may call (for the file's
    prelude, emit/prelude.py)."""
    with o.helpers():
        HelperEmitter(plan, o).emit()
        if plan.spec.fuse is not None:
            FuseChain(plan.spec).emit_helpers(o)
    for index, variant in enumerate(plan.variants):
        if index:
            o.line()
        emit_kernel(plan, variant, o)
    if plan.launch.entries.prepare:
        o.line()
        emit_prepare_kernel(plan, o)
    o.line()
    emit_scale_c_kernel(plan, o)
    o.line()
    LauncherEmitter(plan, o).emit()
