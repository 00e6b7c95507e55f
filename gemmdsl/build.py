"""Build stage: run nvcc, or NVRTC, on emitted CUDA and read back what ptxas decided.

Everything here depends on the installed toolkit, so none of it goes into the
golden files; the compiler adds these figures to the metadata only when nvcc ran.
Without nvcc, NVRTC (through CuPy's bindings of its C API; no GPU needed) gives the
same figures for the kernel the runtime would load: `check` and `tune` use it then.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .abi import arch_flag
from .errors import GemmdslError
from .cache_root import cache_dir, read_entry, write_entry

NVCC_TIMEOUT_S = 600
# What the runtime's cubins are compiled with, by nvcc -cubin and NVRTC alike (-lineinfo lets ncu map
# stalls to source lines), beside the architecture.
COMPILER_OPTIONS = ("-std=c++17", "-lineinfo")
DEFAULT_TOOLKIT = Path("/usr/local/cuda")  # where the CUDA installers put the toolkit
FIRST_GOOD_NVRTC = (13, 1)  # NVRTC 13.0's PTX takes up to 95 more registers than nvcc's (docs/python-api.md, "nvcc and NVRTC")

_USED = re.compile(r"Used (\d+) registers")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_SMEM = re.compile(r"(\d+) bytes smem")
# ptxas's note that it made a function's wgmma wait for each other (performance, not correctness):
# "(C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized ... in the function 'NAME'".
_SERIALIZED = re.compile(r"\(C75\d\d\) Potential Performance Loss: wgmma.* in the function '(\w+)'")


class BuildError(GemmdslError):
    """nvcc failed; the message carries nvcc's own output."""


@dataclass(frozen=True)
class PtxasResources:
    registers: int
    spill_stores: int
    spill_loads: int
    stack: int
    static_smem: int
    wgmma_serialized: bool = False  # ptxas C75xx: the kernel's wgmma do not overlap each other

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads

    def as_dict(self) -> dict[str, int]:
        return {"registers": self.registers, "spill_stores": self.spill_stores, "spill_loads": self.spill_loads,
                "stack": self.stack, "static_smem": self.static_smem, "wgmma_serialized": self.wgmma_serialized}

    def __str__(self) -> str:
        text = (f"ptxas: {self.registers} registers, {self.stack} bytes stack, "
                f"{self.spill_stores} bytes spill stores, {self.spill_loads} bytes spill loads")
        if self.wgmma_serialized:
            text += "; wgmma SERIALIZED by ptxas (C7515): expect a large slowdown"
        return text


@dataclass
class BuildResult:
    resources: PtxasResources
    outputs: dict[str, bytes] = field(default_factory=dict)  # extension -> file content
    log: str = ""


def find_nvcc() -> str | None:
    return shutil.which("nvcc")


def nvcc_release() -> str:
    """The release of the nvcc on PATH ("13.0.88", from `nvcc --version`; "unavailable" without one), asked once
    per toolkit: kept in the cache under nvcc's and ptxas's paths, sizes and modification times, since running
    nvcc takes longer than loading a kernel from the cache may."""
    nvcc = find_nvcc()
    if nvcc is None:
        return "unavailable"
    stamps = []
    for tool in (Path(nvcc).resolve(), Path(nvcc).resolve().with_name("ptxas")):
        try:
            status = tool.stat()
        except OSError:
            continue
        stamps.append(f"{tool}:{status.st_size}:{status.st_mtime_ns}")
    key = "|".join(stamps)
    record = cache_dir() / "nvcc-releases.json"
    known = read_entry(record) or {}
    if key not in known:
        try:
            done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=NVCC_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError):  # the build that follows says what is wrong
            return "unavailable"
        release = re.search(r"V(\d+(?:\.\d+)+)", done.stdout)
        known = {**known, key: release.group(1) if release else done.stdout.strip()}
        write_entry(record, known)
    return known[key]


def parse_ptxas(log: str, entry: str) -> PtxasResources:
    """Resources of function `entry` from `ptxas -v` output."""
    lines = log.splitlines()
    start = next((i for i, line in enumerate(lines) if "Compiling entry function" in line and f"'{entry}'" in line), None)
    if start is None:
        raise BuildError(f"ptxas reported nothing for {entry}:\n{log}")
    section = "\n".join(lines[start:start + 6])
    used, stack, smem = _USED.search(section), _STACK.search(section), _SMEM.search(section)
    if used is None or stack is None:
        raise BuildError(f"could not read ptxas resources for {entry}:\n{section}")
    return PtxasResources(registers=int(used.group(1)), stack=int(stack.group(1)),
                          spill_stores=int(stack.group(2)), spill_loads=int(stack.group(3)),
                          static_smem=int(smem.group(1)) if smem else 0,
                          wgmma_serialized=any(match.group(1) == entry for match in _SERIALIZED.finditer(log)))


def _run(cmd: list[str], cwd: Path) -> str:
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BuildError(f"nvcc did not finish within {NVCC_TIMEOUT_S} s: {' '.join(cmd)}") from None
    except OSError as err:
        raise BuildError(f"cannot run nvcc: {err}") from None
    log = done.stdout + done.stderr
    if done.returncode != 0:
        raise BuildError(f"nvcc failed (exit {done.returncode}): {' '.join(cmd)}\n{log.strip()}")
    return log


def build(cuda: str, name: str, sm: int | str, emit: frozenset[str] = frozenset(), nvcc: str = "nvcc",
          entry: str | None = None) -> BuildResult:
    """Compile `cuda` (host launcher included) for sm_XX (`sm` 90, or '90a' for an arch-specific target); also produce any of 'ptx', 'cubin' in `emit`.
    The resources are those of `entry` (default NAME_kernel)."""
    arch = arch_flag(f"sm_{sm}")
    with tempfile.TemporaryDirectory(prefix="gemmdsl-") as tmp:
        work = Path(tmp)
        (work / f"{name}.cu").write_text(cuda)
        log = _run([nvcc, arch, "-std=c++17", "-c", "-Xptxas", "-v", "-o", f"{name}.o", f"{name}.cu"], work)
        result = BuildResult(parse_ptxas(log, entry or f"{name}_kernel"), log=log)
        for kind in sorted(emit & {"ptx", "cubin"}):
            _run([nvcc, arch, "-std=c++17", f"-{kind}", "-o", f"{name}.{kind}", f"{name}.cu"], work)
            result.outputs[kind] = (work / f"{name}.{kind}").read_bytes()
        return result


def nvrtc_available() -> bool:
    """Whether CuPy's NVRTC loads here (it needs the library, not a GPU)."""
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
    except Exception:  # noqa: BLE001 - no CuPy, or CuPy without a loadable NVRTC: either way, none
        return False
    return True


def nvrtc_version() -> str:
    from cupy.cuda import nvrtc

    return ".".join(map(str, nvrtc.getVersion()))


def old_nvrtc_note() -> str | None:
    """The note for an NVRTC older than FIRST_GOOD_NVRTC, whose kernels take more registers than nvcc's."""
    from cupy.cuda import nvrtc

    if nvrtc.getVersion() >= FIRST_GOOD_NVRTC:
        return None
    return (f"note: NVRTC {nvrtc_version()} builds take more registers than nvcc's (fixed in NVRTC 13.1): "
            f"pip install 'nvidia-cuda-nvrtc>=13.1', or put nvcc on PATH")


def nvrtc_compile(source: str, target: str, options: tuple[str, ...] = ()) -> tuple[bytes, str]:
    """NVRTC's cubin for `target` (sm_XX or sm_XXa) and its log, with COMPILER_OPTIONS and `options`.

    NVRTC is driven directly (not through CuPy's `compile_using_nvrtc`, which parses the
    architecture as a number and so refused `sm_90a`) with nvcc's options and nothing else;
    the cubin is NVRTC's own, ptxas included. The emitted host launchers sit behind
    `#ifndef __CUDACC_RTC__`, so NVRTC sees the kernels alone.
    """
    from cupy.cuda import nvrtc

    flags = (f"-arch={target}", *COMPILER_OPTIONS, *options, *(f"-I{path}" for path in cuda_include_dirs()))
    program = nvrtc.createProgram(source, "kernel.cu", (), ())
    try:
        try:
            nvrtc.compileProgram(program, flags)
        except nvrtc.NVRTCError as err:
            raise BuildError(f"NVRTC failed ({err}):\n{nvrtc.getProgramLog(program)}") from None
        return bytes(nvrtc.getCUBIN(program)), nvrtc.getProgramLog(program)
    finally:
        nvrtc.destroyProgram(program)


def cuda_include_dirs() -> list[str]:
    """Where NVRTC finds cuda_fp16.h and cuda_bf16.h, which the 16-bit kernels include.

    NVRTC has no built-in copy of them and searches nothing by default, so the directory is
    passed explicitly: the toolkit's (CUDA_PATH, CUDA_HOME, beside nvcc, /usr/local/cuda) or,
    in a pip-only setup, the one the `nvidia-cuda-runtime` wheel installs. The first that holds
    the headers is used; none is fine for FP32 kernels, which include neither.
    """
    candidates = [Path(os.environ[name], "include") for name in ("CUDA_PATH", "CUDA_HOME") if os.environ.get(name)]
    nvcc = find_nvcc()
    if nvcc is not None:
        candidates.append(Path(nvcc).resolve().parent.parent / "include")
    candidates.append(DEFAULT_TOOLKIT / "include")
    for entry in filter(None, sys.path):
        candidates.extend(sorted(Path(entry, "nvidia").glob("*/include")))
    for directory in candidates:
        if (directory / "cuda_fp16.h").is_file() and (directory / "cuda_bf16.h").is_file():
            return [str(directory)]
    return []


def ptxas_compiler() -> str | None:
    """What gives ptxas's figures here: "nvcc" on PATH, else "nvrtc" where CuPy's NVRTC loads, else None."""
    if find_nvcc() is not None:
        return "nvcc"
    return "nvrtc" if nvrtc_available() else None


def kernel_resources(cuda: str, name: str, sm: int | str, compiler: str, entry: str | None = None) -> PtxasResources:
    """ptxas's figures for `entry` (default NAME_kernel) of `cuda` built for sm_XX by `compiler`
    ("nvcc": the whole .cu, as `gemmdsl compile` builds it; "nvrtc": the kernels, as the runtime
    builds them without nvcc; the two agree from NVRTC 13.1 on, docs/python-api.md, "nvcc and NVRTC")."""
    if compiler == "nvcc":
        return build(cuda, name, sm, entry=entry).resources
    return parse_ptxas(nvrtc_ptxas_log(cuda, f"sm_{sm}"), entry or f"{name}_kernel")


@dataclass(frozen=True)
class PtxasFigures:
    """ptxas's figures for a kernel, which compiler gave them, and whether they were read back from the cache."""

    resources: PtxasResources
    compiler: str  # "nvcc 13.0.88", "nvrtc 13.1"
    cached: bool

    def note(self) -> str:
        return f"ptxas's figures: {self.compiler}{', from the cache' if self.cached else ''}"


PTXAS_CACHE_FORMAT = 1  # of the cache's records, and of the builds `kernel_resources` runs


def cached_kernel_resources(cuda: str, name: str, sm: int | str, compiler: str,
                            entry: str | None = None) -> PtxasFigures:
    """`kernel_resources`, kept in the cache by the hash of `cuda`, the target, the entry and the compiler's
    release: a spec whose .cu has not changed is not built again (a second `gemmdsl check` waits on no nvcc)."""
    release = nvcc_release() if compiler == "nvcc" else nvrtc_version()
    key = hashlib.sha256(f"{PTXAS_CACHE_FORMAT}\0{name}\0{sm}\0{entry}\0{compiler} {release}\0".encode()
                         + cuda.encode()).hexdigest()
    record = cache_dir() / "ptxas" / f"{name}-{key[:32]}.json"
    known = read_entry(record)
    if known is not None:
        return PtxasFigures(PtxasResources(**known), f"{compiler} {release}", True)
    resources = kernel_resources(cuda, name, sm, compiler, entry)
    write_entry(record, resources.as_dict())
    return PtxasFigures(resources, f"{compiler} {release}", False)


def nvrtc_ptxas_log(source: str, target: str) -> str:
    """NVRTC's `ptxas -v` log for `source`, from a child process with the CUDA compute cache off.

    NVRTC 13 takes a cubin from the driver's compute cache (~/.nv/ComputeCache) when it has built
    the same PTX before, and then ptxas neither runs nor logs: on the H100 a second build of
    sgemm_v3 logged nothing, with CUDA_CACHE_DISABLE=1 at process start it logged every time, and
    set later in a running process it is not read. So the build runs where the variable is set
    from the start; the cubin is the one the cache would have served (same source and options)."""
    package_root = str(Path(__file__).resolve().parent.parent)
    command = [sys.executable, "-c", f"import sys; sys.path.insert(0, {package_root!r}); "
               "from gemmdsl.build import print_nvrtc_ptxas_log; print_nvrtc_ptxas_log(sys.argv[1])", target]
    try:
        done = subprocess.run(command, input=source, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S,
                              env=dict(os.environ, CUDA_CACHE_DISABLE="1"))
    except (OSError, subprocess.TimeoutExpired) as err:
        raise BuildError(f"cannot run NVRTC: {err}") from None
    if done.returncode != 0:
        raise BuildError(done.stderr.strip() or f"NVRTC's child process failed (exit {done.returncode})")
    return done.stdout


def print_nvrtc_ptxas_log(target: str) -> None:
    """`nvrtc_ptxas_log`'s child: the source on stdin, the log on stdout, a failure on stderr (exit 1)."""
    try:
        _, log = nvrtc_compile(sys.stdin.read(), target, ("-Xptxas=-v",))
    except BuildError as err:
        sys.exit(str(err))
    sys.stdout.write(log)
