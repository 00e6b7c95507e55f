"""Kernel families on the GPU: a family's members loaded as runtime Kernels, each call run on the member the
family's rule (family.choose) picks, as its C launcher does; and the shape lists bench and verify read.

Beside the runtime, above family.py, so that `check` and `compile` of a family never load the runtime; it
imports the rule (cycles.choose) but not the compiler, which a family read back from the cache does not need.
"""
from __future__ import annotations

import sys
from collections import OrderedDict
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Callable

from .call_plan import MISS, Signature, call_signature, keep
from .cycles import choose
from .devices import DeviceMismatch
from .file_kinds import is_family_path
from .load_cache import compiled_family
from .runtime.binaries import KernelBuildError
from .runtime.commands import parse_sizes, run_on_kernels
from .runtime.driver import run_returning_c
from .runtime.kernel import PLANS_KEPT, Kernel
from .runtime.operands import CALL_OPERANDS, Size, call_operands
from .source import CompileError

NO_CHAIN = (None,) * (len(CALL_OPERANDS) - 3)  # a call's operands beyond A, B and C, none given


def read_shapes(path: str | Path) -> list[tuple[int, int, int]]:
    """A shape list: one MxNxK (or N for a cube) per line; `#` starts a comment. A bad line raises
    ValueError naming the file and line."""
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot read the shape list: {err}") from None
    shapes = []
    for number, line in enumerate(lines, 1):
        item = line.split("#", 1)[0].strip()
        if not item:
            continue
        try:
            shapes += parse_sizes(item)
        except ValueError as err:
            raise ValueError(f"{path}:{number}: {err}") from None
    if not shapes:
        raise ValueError(f"{path}: no shapes in the file")
    return shapes


class FamilyKernel:
    """A family loaded on the GPU: each call runs the member the rule picks, as the C launcher does."""

    def __init__(self, family: Any):
        """`family`: family.FamilyArtifacts, or load_cache.CompiledFamily."""
        self.name = family.name
        self.models = family.models
        self.kernels = [Kernel(member.artifacts) for member in family.members]
        self.requirements = self.kernels[0].requirements  # layouts, epilogue, batch: shared by the members
        # What verify and bench read of a kernel's metadata: its unit, element types, fuse chain and FP8's
        # accumulation, the members' own (a family's members share their fuse section and accumulation).
        self.metadata = {key: self.kernels[0].metadata[key] for key in ("unit", "dtypes", "fuse", "accumulate")
                         if key in self.kernels[0].metadata}
        # The rule runs every member's cycle model; callers repeat shapes, so each shape's choice is kept.
        self._choose = lru_cache(maxsize=4096)(partial(choose, self.models, measured=family.measured))
        # By call signature and options: the plan (call_plan.py) of the member that ran it, on padded copies or not.
        self._routes: OrderedDict[tuple, Any] = OrderedDict()

    def member_index(self, m: int, n: int, k: int, aligned: bool = True) -> int | None:
        """The index in `kernels` (and `models`) of the member the rule picks (aligned=False: among those that run
        operands of any alignment; None when no member does)."""
        return self._choose(m, n, k, aligned)

    def member_for(self, m: int, n: int, k: int, aligned: bool = True) -> Any:
        """The member the rule picks (`member_index`'s kernel; None when no member runs the call)."""
        index = self.member_index(m, n, k, aligned)
        return None if index is None else self.kernels[index]

    @property
    def epilogue(self) -> str:
        """The members' epilogue (`store` or `alpha_beta`), as Kernel.epilogue."""
        return self.requirements.epilogue

    def bind(self, a: Any, b: Any, c: Any | None = None, alpha: float = 1.0, beta: float = 0.0,
             stream_k: bool = True, interior: bool = True, **chain: Any) -> Any:
        """The chosen member's `Kernel.bind` (stream_k, interior and the fuse chain's operands as there), on padded
        copies of A and B where it has that launcher and they need one (Kernel.bind_padded); where it refuses the
        operands, the member the rule picks among those that run any alignment, as the C launcher falls back."""
        return self._bind(call_operands(a, b, c, chain), (alpha, beta, stream_k, interior))

    def _bind(self, operands: tuple, options: tuple, signature: Signature | None = None) -> Any:
        """`bind` of `operands` (runtime.CALL_OPERANDS) with `options` (alpha, beta, stream_k, interior). The plan
        the chosen member made for the call (on padded copies or not) is kept by signature, so that the next call
        goes to it without choosing again."""
        a, b, c = operands[:3]
        chain = {name: operand for name, operand in zip(CALL_OPERANDS[3:], operands[3:]) if operand is not None}
        m, k = (a.shape[-2], a.shape[-1])
        n = b.shape[-1]
        index = self.member_index(m, n, k)
        kernel, padded = self.kernels[index], True
        try:
            # A TMA member on copies of the operands TMA refuses or reads slowly (paths/wgmma/pad.py), as the C
            # launcher; bind_padded is None where there is nothing to copy.
            bound = kernel.bind_padded(a, b, c, *options, **chain)
            if bound is None:
                bound, padded = kernel.bind(a, b, c, *options, **chain), False
        except DeviceMismatch:
            raise
        except ValueError:
            fallback = self.member_for(m, n, k, aligned=False)
            if self.models[index].any_alignment or fallback is None:
                raise  # not the operands' alignment, or no member runs them
            kernel, padded = fallback, False
            bound = kernel.bind(a, b, c, *options, **chain)
        signature = signature or call_signature(operands)
        plan = None if signature is None else getattr(kernel, "_plans", {}).get((signature.key, options, padded))
        if plan is not None:
            keep(self._routes, (signature.key, options), plan, PLANS_KEPT)
        return bound

    def __call__(self, a: Any, b: Any, c: Any | None = None, alpha: float = 1.0, beta: float = 0.0,
                 stream: Any = None, stream_k: bool = True, interior: bool = True, **chain: Any) -> Any:
        """`Kernel.__call__` on the member the rule picks for A's and B's shape: the same operands, streams,
        fuse chain operands and returned C."""
        operands = call_operands(a, b, c, chain) if chain else (a, b, c, *NO_CHAIN)
        options = (alpha, beta, stream_k, interior)
        signature = call_signature(operands)
        plan = None if signature is None else self._routes.get((signature.key, options))
        if plan is not None:  # a repeated call: the plan of the member it went to, nothing chosen again
            made = plan.call(signature.pointers, stream)
            if made is not MISS:
                return c if c is not None else made
        launch = self._bind(operands, options, signature)
        return run_returning_c(launch, c is not None, self.requirements.dtypes["C"], stream)


def run_on_specs_and_families(paths: list[str], sizes_text: str, work: Callable[[list[Any], list[Size]], int],
                              as_members: bool = False) -> int:
    """runtime.run_on_kernels for `.gemm` specs and `.gemmf` families: `work` gets the specs' kernels,
    then each family as one FamilyKernel or, with as_members, as its members' kernels. Families
    compile before anything needs the GPU, as specs do; the exit statuses are run_on_kernels'."""
    try:
        families = [compiled_family(path) for path in paths if is_family_path(path)]
    except CompileError as err:
        print(err.render(), file=sys.stderr)
        return 1

    def with_families(kernels: list[Any], sizes: list[Size]) -> int:
        try:
            if as_members:
                loaded = [Kernel(member.artifacts) for family in families for member in family.members]
            else:
                loaded = [FamilyKernel(family) for family in families]
        except KernelBuildError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        return work(kernels + loaded, sizes)

    return run_on_kernels([path for path in paths if not is_family_path(path)], sizes_text, with_families)


def load_family(path: str | Path) -> FamilyKernel:
    """Compile a `.gemmf` family (or read it back from the cache of compiled families) and load every member on
    the current device."""
    return FamilyKernel(compiled_family(path))
