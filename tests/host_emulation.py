"""Run generated kernels on the CPU: the `.cu` file, compiled as C++ against tests/emulator/.

There is no GPU in CI, but whether a checked kernel handles a 7x13x5 problem, a transposed
operand or a batch is a question about its index arithmetic, which the CPU can answer. The
PTX wrappers are replaced by plain C++ (tests/emulator/cuda_host.h), each thread of a block
runs as a thread with a barrier for __syncthreads(), and AddressSanitizer and UBSan catch any
access outside an operand or any misaligned vector access. The host launchers are not
compiled (they use `<<<...>>>`); `runtime.choose_entry` makes their choice of kernel here.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from build_cache import cached_build, tool_version
from gemmdsl.emit import emit_definitions
from gemmdsl.emitter import Emitter
from gemmdsl.ir import KernelSpec
from gemmdsl.paths import plan_kernel

EMULATOR = Path(__file__).resolve().parent / "emulator"
# -Og: a checked spec's runner builds in 2.8 s of CPU instead of -O1's 6.9 s and runs its calls 25% slower
# (1.6 s instead of 1.2 s), g++ 12; a stream-K one builds in 4 s instead of 13 s.
CXX_FLAGS = ("-std=c++20", "-Og", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
             "-fno-omit-frame-pointer", "-pthread", "-Wno-unknown-pragmas")
BUILD_TIMEOUT_S = 600
RUN_TIMEOUT_S = 600
# The runner's numbers (glue's cases) for NAME_kernel_interior and NAME_kernel_interior_partial_k; 5 is
# NAME_kernel_stream_k_scalar.
INTERIOR_ENTRY = 4
INTERIOR_PARTIAL_K_ENTRY = 6
# NAME_scale_c, the K = 0 kernel, on sk_blocks blocks of SCALE_C_THREADS; NO_LAUNCH: an empty C, nothing runs.
SCALE_C_ENTRY = 7
NO_LAUNCH = -1
# Narrow kernel i (metadata entries["narrow"], widest first) is NARROW_FIRST_ENTRY + 2 * i, its stream-K twin the
# number after it.
NARROW_FIRST_ENTRY = 8


# The instructions (keys of targets.INSTRUCTION_TARGETS) that tests/emulator/cuda_host.h stands in for in every
# path's kernels, and those it stands in for in one path's only: the dequantizing path's mma.sync m16n8k16 of
# bf16 or f16 and its ldmatrix (tests/emulator/warp_host.h). The other tensor-core paths' fragments and wgmma
# have none here.
STOOD_IN = frozenset({"cp.async", "float2 and float4 atomicAdd"})
STOOD_IN_BY_PATH = {"dequant": frozenset({"mma.sync", "ldmatrix"})}


def emulates(spec: KernelSpec) -> bool:
    """Whether the kernels `spec`'s instruction path emits use only instructions the emulator stands in for, as
    the path's emitter declares them (Emitter.uses)."""
    body = Emitter()
    plan = plan_kernel(spec)
    emit_definitions(plan, body)
    return body.instructions <= STOOD_IN | STOOD_IN_BY_PATH.get(plan.path.name, frozenset())


def find_cxx() -> str | None:
    return shutil.which("g++")


# What the emulator does not compile of a generated file: CUDA's 8- and 16-bit float headers (warp_host.h has
# the types the kernels use).
CUDA_HEADER = re.compile(r"#include <cuda_(bf16|fp16|fp8)\.h>")
# A kernel's dynamic shared memory, of whatever type and name: the emulator's one array, cuda_host.h's float `smem`.
DYNAMIC_SHARED = re.compile(r"extern __shared__ __align__\(\d+\) ([\w ]+) (\w+)\[\];")
# A __shared__ variable of a function (not an extern array): one per block, so a static of the emulated function.
SHARED_LOCAL = re.compile(r"^(\s+)__shared__ (?!__align__)", re.M)


def emulated_shared(declaration: re.Match) -> str:
    """A dynamic shared array as the emulator's: `smem` itself, or a pointer of the array's type and name to it."""
    element, name = declaration[1], declaration[2]
    if name == "smem":
        return "extern __shared__ float smem[];"
    return f"{element}* const {name} = reinterpret_cast<{element}*>(smem);"


def host_source(cuda: str) -> str:
    """The generated file without its inline-PTX helpers (volatile or not), which cuda_host.h provides instead (a
    `static` one and the dequantizing path's, which live in a namespace), with its dynamic shared memory and shared variables
    as the emulator has them."""
    lines = cuda.split("\n")
    kept: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.removeprefix("static ").startswith("__device__ __forceinline__") and not line.endswith("}"):
            end = lines.index("}", index)
            body = "\n".join(lines[index:end + 1])
            if "asm volatile" in body or "asm(" in body:
                if kept and kept[-1].startswith("template <"):
                    kept.pop()
                index = end + 1
                continue
        kept.append(line)
        index += 1
    host = CUDA_HEADER.sub("", "\n".join(kept))
    host = DYNAMIC_SHARED.sub(emulated_shared, host)
    return SHARED_LOCAL.sub(r"\1static ", host)


def glue(metadata: dict) -> str:
    """main.cpp: the kernels, the runner, and a switch that calls the chosen kernel for one thread."""
    arguments = ", ".join(f"p.{argument['name']}" for argument in metadata["arguments"])
    entries = metadata["entries"]
    beta_first = "p.beta" if metadata["epilogue"] == "alpha_beta" else "0.0f"
    stride_c = ", p.stride_c" if metadata["batch"] == "strided" else ""
    names = [argument["name"] for argument in metadata["arguments"]]
    after_beta = names[names.index("beta") + 1:names.index("stride_a") if "stride_a" in names else len(names)]
    scale_c = ", ".join(["p.C", "p.M", "p.N", "p.ldc", beta_first, *(f"p.{name}" for name in after_beta)])
    calls = [(entries["vector"], arguments), (entries["scalar"], arguments),
             (entries["stream_k"], f"{arguments}, p.sk_tiles"),
             (entries["prepare"], f"p.C, p.M, p.N, p.ldc, {beta_first}{stride_c}, p.sk_tiles"),
             (entries["interior"], arguments), (entries.get("stream_k_scalar"), f"{arguments}, p.sk_tiles"),
             (entries.get("interior_partial_k"), arguments), (entries["scale_c"], f"{scale_c}{stride_c}")]
    for narrow in entries.get("narrow", ()):
        calls += [(narrow["entry"], arguments), (narrow["stream_k"], f"{arguments}, p.sk_tiles")]
    cases = "\n".join(f"    case {index}: {entry}({args}); break;"
                      for index, (entry, args) in enumerate(calls) if entry is not None)
    rows = ", ".join("true" if metadata["layouts"][op] == "row" else "false" for op in ("a", "b", "c"))
    tile_m, tile_n, _ = metadata["block_tile"]
    alpha_beta = "true" if metadata["epilogue"] == "alpha_beta" else "false"
    fuse = metadata.get("fuse")
    layout = f"Layout{{{rows}, {metadata['threads']}, {tile_m}, {tile_n}, {alpha_beta}" + (", shift_fuse}" if fuse
                                                                                          else "}")
    operand, c = (ELEMENTS[metadata["dtypes"][name]] for name in ("a", "c"))
    # fused kernels (f32 operands): the chain's float64 reference is the test's (emulate_fused)
    fused = (f'    if (argc > 1 && std::string(argv[1]) == "fused") return emulate_fused(argc, argv, {layout}, launch);\n'
             if fuse else "")
    return f"""#include "cuda_host.h"
{_gemv_mma(metadata)}#include "kernel.cu"
#include "runner.h"

using P = ProblemOf<{operand}, {c}>;

static void launch(int entry, const P& p)
{{
    switch (entry) {{
{cases}
    default: std::fprintf(stderr, "no kernel %d\\n", entry); std::abort();
    }}
}}
{_shift_fuse(fuse) if fuse else ""}
int main(int argc, char** argv)
{{
{fused}    return emulate<{operand}, {c}>(argc, argv, {layout}, launch, {C_TOLERANCE[metadata["dtypes"]["c"]]});
}}
"""


# The emulator's element types by the metadata's names (warp_host.h's 16-bit ones), and C's relative error the dense
# runner allows: f32 accumulation, or twice C's unit roundoff where C is 16-bit (bf16 2^-8, f16 2^-10 apart).
ELEMENTS = {"f32": "float", "bf16": "__nv_bfloat16", "f16": "__half"}
C_TOLERANCE = {"f32": 1e-5, "bf16": 2.0 ** -8, "f16": 2.0 ** -10}


def main_source(metadata: dict) -> str:
    """main.cpp for a generated file: the decode runner's for the dequantizing path's kernel (it has a `decode`
    entry), the dense runner's for the others."""
    return decode_glue(metadata) if "decode" in metadata else glue(metadata)


def decode_glue(metadata: dict) -> str:
    """main.cpp of the dequantizing decode kernel: its mma helper, which names A's type in its PTX, as
    warp_host.h's stand-in of that type; the kernel; a call of it on decode_runner.h's operands; and with the
    first argument `dequantize`, a call of the dequantize-into-memory kernel on its operands instead."""
    name = metadata["kernel"]
    operand = {"bf16": "__nv_bfloat16", "f16": "__half"}[metadata["dtypes"]["a"]]
    arguments = ", ".join(f"reinterpret_cast<{argument['type']}>(p.{argument['name']})"
                          if argument["type"].endswith("*") else f"p.{argument['name']}"
                          for argument in metadata["arguments"])
    dequantize = metadata["dequantize"]
    return f"""#include "cuda_host.h"
namespace {name}_detail {{
inline void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {{ warp_mma<{operand}>(d, a, b0, b1); }}
}}
#include "kernel.cu"
#include "decode_runner.h"

static void launch(const DecodeProblem& p) {{ {metadata["entry"]}({arguments}); }}

static void dequantize(const DequantizeProblem& p) {{
    {dequantize["entry"]}(static_cast<const uint4*>(p.weights), static_cast<const uint32_t*>(p.scales),
        static_cast<const uint32_t*>(p.zeros), static_cast<{operand}*>(p.W), p.N, p.K);
}}

int main(int argc, char** argv) {{
    if (argc > 1 && std::string(argv[1]) == "dequantize")
        return emulate_dequantize(argc, argv, {dequantize["threads"]}, {dequantize["smem"]}, dequantize);
    return emulate_decode(argc, argv, {metadata["threads"]}, {metadata["dynamic_smem_bytes"]}, launch);
}}
"""


def _gemv_mma(metadata: dict) -> str:
    """The GEMV path's tensor kernel's mma and load helpers (inline PTX, removed by host_source) as warp_host.h's
    stand-ins."""
    if metadata.get("gemv", {}).get("instruction") != "mma.sync m16n8k16":
        return ""
    operand = ELEMENTS[metadata["dtypes"]["a"]]
    name = metadata["kernel"]
    return (f"inline void {name}_mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) "
            f"{{ warp_mma<{operand}>(d, a, b0, b1); }}\n"
            f"inline uint4 {name}_ldg(const uint4* p) {{ return __ldg(p); }}\n")


def _shift_fuse(fuse: dict) -> str:
    """The fuse operands offset to a sub-launch's block of C, as the C launcher offsets them."""
    lines = []
    if fuse["bias"]:
        lines.append(f"if (q.bias) q.bias += {'row' if fuse['bias']['along'] == 'm' else 'col'};")
    if fuse["residual"]:
        offset = "(long long)row * q.ldr + col" if fuse["residual"]["layout"] == "row" else "(long long)col * q.ldr + row"
        lines.append(f"q.R += {offset};")
    lines += ["if (q.row_scale) q.row_scale += row;", "if (q.col_scale) q.col_scale += col;"]
    body = "\n".join(f"    {line}" for line in lines)
    return f"\nstatic void shift_fuse(Problem& q, int row, int col)\n{{\n{body}\n}}\n"


class EmulationBuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Call:
    """One launch: shape, leading dimensions, batch, scalars, kernel and pointer offsets (in floats)."""

    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    batch: int = 1
    stride_a: int = 0
    stride_b: int = 0
    stride_c: int = 0
    alpha: float = 1.0
    beta: float = 0.0
    entry: int = 0  # 0: the vector kernel, 1: the scalar kernel, NARROW_FIRST_ENTRY + 2 * i: narrow kernel i
    offset_a: int = 0
    offset_b: int = 0
    offset_c: int = 0
    sk_tiles: int = 0  # stream-K: tiles shared by sk_blocks blocks (schedule.StreamKSplit); 0: none
    sk_blocks: int = 0
    # launches over blocks of C, each a GEMM of its own (schedule.SubLaunch: interior, row, col, m, n,
    # partial_k), instead of one over all of C; the others run `entry`, the interior ones INTERIOR_ENTRY
    # or, with partial_k, INTERIOR_PARTIAL_K_ENTRY
    sub_launches: tuple[tuple[bool, int, int, int, int, bool], ...] = ()

    def argv(self) -> list[str]:
        values = [self.m, self.n, self.k, self.lda, self.ldb, self.ldc, self.batch, self.stride_a, self.stride_b,
                  self.stride_c, self.alpha, self.beta, self.entry, self.offset_a, self.offset_b, self.offset_c,
                  self.sk_tiles, self.sk_blocks]
        for interior, row, col, m, n, partial_k in self.sub_launches:
            entry = (INTERIOR_PARTIAL_K_ENTRY if partial_k else INTERIOR_ENTRY) if interior else self.entry
            values += [entry, row, col, m, n]
        return [str(value) for value in values]


def build(cuda: str, metadata: dict, directory: Path) -> Path:
    """Compile the kernels of one generated file into a runner executable."""
    (directory / "kernel.cu").write_text(host_source(cuda))
    (directory / "main.cpp").write_text(main_source(metadata))
    binary = directory / "runner"
    command = [find_cxx() or "g++", *CXX_FLAGS, f"-I{EMULATOR}", "main.cpp", "-o", str(binary)]
    done = subprocess.run(command, cwd=directory, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    if done.returncode != 0:
        raise EmulationBuildError(f"{' '.join(command)}\n{done.stdout}{done.stderr}")
    return binary


def shared_build(cuda: str, metadata: dict) -> Path:
    """build()'s runner, made once for this generated file, emulator and compiler (tests/build_cache.py): the
    tests and workers that run the same kernels share it."""
    headers = [path.read_text() for path in sorted(EMULATOR.glob("*.h"))]
    key = "\n".join([host_source(cuda), main_source(metadata), *headers, *CXX_FLAGS, tool_version(find_cxx() or "g++")])
    return cached_build("emulator", key, lambda directory: build(cuda, metadata, directory)) / "runner"


def run(binary: Path, call: Call) -> tuple[bool, str]:
    """(passed, the runner's output) for one call; a sanitizer report fails the call."""
    return run_argv(binary, call.argv())


def run_argv(binary: Path, argv: list[str]) -> tuple[bool, str]:
    """(passed, the runner's output) for one run with these arguments (runner.h)."""
    done = subprocess.run([str(binary), *argv], capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          env={"ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "print_stacktrace=1"})
    output = (done.stdout + done.stderr).strip()
    return done.returncode == 0 and output.startswith("OK"), output


def sanitizer_reported(output: str) -> bool:
    return bool(re.search(r"AddressSanitizer|runtime error|EMULATION FAULT", output))
