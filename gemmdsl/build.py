"""Build stage: run nvcc on emitted CUDA and read back what ptxas decided.

Everything here depends on the installed toolkit, so none of it goes into the
golden files; the compiler adds these figures to the metadata only when nvcc ran.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

NVCC_TIMEOUT_S = 600

_USED = re.compile(r"Used (\d+) registers")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_SMEM = re.compile(r"(\d+) bytes smem")
# ptxas's note that it made a function's wgmma wait for each other (performance, not correctness):
# "(C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized ... in the function 'NAME'".
_SERIALIZED = re.compile(r"\(C75\d\d\) Potential Performance Loss: wgmma.* in the function '(\w+)'")


class BuildError(Exception):
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


def arch_flag(target: str) -> str:
    """nvcc's flag for one target: -arch=sm_XX; for an arch-specific sm_XXa the explicit
    -gencode=arch=compute_XXa,code=sm_XXa, since nvcc 13's -arch=sm_90a also embeds compute_90 PTX,
    which ptxas then assembles and which has no wgmma or setmaxnreg."""
    if target.endswith("a"):
        code = target.removeprefix("sm_")
        return f"-gencode=arch=compute_{code},code=sm_{code}"
    return f"-arch={target}"


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
