"""What a fuse op is, and the registry of ops (docs/fusion.md, "Adding an op").

An op is one class, in a module of its own under `gemmdsl/fuse_ops/`: a frozen dataclass that is the IR node
of its step (with the span of its value), whose class attributes and methods say everything the pipeline asks
of the op: its key and syntax, its checks, its C, its float64 reference, its operands and its cost. Shared
code (the parser, validate, emit, the ABI, the header, the metadata, the reference, passes/fuse) iterates over
the chain's steps and never names an op.

Two orders, both fixed by the op rather than by the spec's text:
- `order`, where the step applies in the chain. Steps before `BETA_ORDER` scale the product (they take
  alpha's place, `epilogue: alpha_beta` adds `beta * C` after them); the others follow `+ beta * C`.
  The shipped ops: scale 10, bias 30, activation 40, residual 50.
- `operand_order`, where the step's operands come among the kernels' parameters (and the Python API's
  keyword arguments): bias 10, residual 20, scale 30. The launchers' ABI predates the ops and puts the
  bias before the scales, so this order is its own; a new op's operands go after the shipped ones.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar

from .. import ir
from ..source import Span
from .kinds import OperandKind, operand_kind

BETA_ORDER = ir.FUSE_BETA_ORDER  # `+ beta * C` (epilogue: alpha_beta): after the steps that scale the product

Report = Callable[[Span, str, str | None], None]


@dataclass(frozen=True)
class Operand:
    """One array a step reads, as the kernels take it.

    kind: its OperandKind (gemmdsl/fuse_ops/kinds.py), or the name it is registered as: "vector" (one value per
    row or column of C, along `along`, loaded into `fuse_m` / `fuse_n` as the field `field`), "scalar" (one value
    for the whole launch in device memory, read by the kernel with each row's values into `fuse_m` as `field`:
    per-tensor scales), "matrix" (M x N in `layout`, with a leading dimension `ld`; read per element as `r`), or
    "k_loop" (read by the main loop, not the epilogue: FP8 block scales, a row per `per` rows or columns of C
    along `along`)."""

    name: str  # the Python API's keyword argument
    kind: OperandKind
    dtype: ir.DType
    pointer: str = ""  # the C parameter's name (default: `name`)
    along: ir.Broadcast | None = None
    layout: ir.MatrixLayout | None = None
    ld: str = ""  # a matrix's leading dimension parameter
    field: str = ""  # a vector's field in fuse_m / fuse_n
    per: int = 1  # rows (columns) of C that one row of its values covers
    scale: bool = False  # a quantization scale: positive (verify draws its values so)

    def __post_init__(self):
        if isinstance(self.kind, str):
            object.__setattr__(self, "kind", operand_kind(self.kind))

    @property
    def parameter(self) -> str:
        return self.pointer or self.name

    @property
    def parameters(self) -> tuple[tuple[str, str], ...]:
        """(C type, name) of the kernel parameters it takes."""
        return self.kind.parameters(self)


@dataclass(frozen=True)
class Work:
    """One element's share of a step in instructions, beyond the unfused epilogue's."""

    alu: int = 0  # FP32 and integer instructions
    sfu: int = 0  # special-function instructions (ex2, rcp, tanh)
    loads: int = 0  # global loads per element


@dataclass(frozen=True, kw_only=True)
class FuseStep(ir.Node):
    """One step of a fuse chain: the IR node (its span: its value's) and the op's behaviour."""

    key: ClassVar[str]  # the `fuse` section's key
    syntax: ClassVar[Callable[[Any, Any], Any]]  # reads the key's value (parser's readers: reader.name, ...)
    order: ClassVar[int]  # where it applies in the chain (module docstring)
    operand_order: ClassVar[int] = 1000  # where its operands come among the kernels' parameters
    uses_r: ClassVar[bool] = False  # its C statement reads the element's matrix value `r`

    # --- syntax and IR
    @classmethod
    def from_value(cls, value: Any, span: Span) -> "FuseStep":
        """The step from what `syntax` read."""
        raise NotImplementedError

    @property
    def value(self) -> Any:
        """What `spec.fuse.KEY` gives (the value `syntax` read)."""
        raise NotImplementedError

    def metadata(self) -> Any:
        """NAME.json's `fuse.KEY` (JSON); `fuse_reference` and the runtime read it back."""
        raise NotImplementedError

    # --- checks
    def check(self, spec: ir.KernelSpec, error: Report) -> None:
        """The step's rules against the rest of the spec; `error` takes (span, message, hint)."""

    # --- the formula and C
    def describe(self, x: str) -> str:
        """The chain's formula after this step, given it before as `x` (e.g. `x + bias[n]`)."""
        return x

    def operands(self) -> tuple[Operand, ...]:
        return ()

    def types(self) -> str:
        """The types the spec chose for its operands, for a family's message on members that differ ('' none)."""
        return ""

    def header(self, spec: ir.KernelSpec) -> tuple[str, ...]:
        """What its operands point at, for NAME.h (`bias: N bf16 values, one per column`)."""
        return ()

    def c_helpers(self, spec: ir.KernelSpec) -> tuple[str, ...]:
        """Device functions the step's statement calls, as lines of C."""
        return ()

    def c_factors(self) -> tuple[str, ...]:
        """A step before BETA_ORDER: what it multiplies the accumulator by (`m.scale`, ...)."""
        return ()

    def c_statement(self, spec: ir.KernelSpec) -> str | None:
        """A step after BETA_ORDER: its statement on the f32 value `x` (m, n: the row's and column's values;
        r: the element's matrix value)."""
        return None

    # --- float64 reference (from the metadata, like the runtime)
    @staticmethod
    def reference(entry: Any, x: Any, operands: dict[str, Any]) -> Any:
        """`x` (M x N, float64) after the step NAME.json records as `entry`; `operands` by keyword name."""
        return x

    @staticmethod
    def operands_of(entry: Any) -> tuple[Operand, ...]:
        """The operands NAME.json's `entry` says the step reads (the runtime's view of `operands`)."""
        return ()

    # --- cost
    def work(self, spec: ir.KernelSpec, reads: Any) -> Work:
        """One element's instructions (`reads`: the layout's ChainReads); vectors read per element are counted
        by passes/fuse from `operands`."""
        return Work()

    def extra_bytes(self, spec: ir.KernelSpec, reads: Any, m: int, n: int, k: int) -> dict[str, tuple[int, int, int]]:
        """Bytes of operands that are neither vectors nor matrices (k-loop operands): name -> (through DRAM,
        fetched by blocks, requested by threads); `reads` None where only the DRAM figure is asked for."""
        return {}


_REGISTRY: dict[str, type[FuseStep]] = {}


def register(op: type[FuseStep]) -> type[FuseStep]:
    """Make `op` a key of the `fuse` section (usable as a class decorator)."""
    if op.key in _REGISTRY and _REGISTRY[op.key] is not op:
        raise ValueError(f"fuse op {op.key!r} is registered already")
    if op.key in {f.name for f in fields(ir.FuseChain)} or hasattr(ir.FuseChain, op.key):
        raise ValueError(f"fuse op key {op.key!r} would hide FuseChain's own {op.key!r}")
    _REGISTRY[op.key] = op
    ir.FUSE_KEYS.add(op.key)
    return op


def unregister(op: type[FuseStep]) -> None:
    if _REGISTRY.get(op.key) is op:
        del _REGISTRY[op.key]
        ir.FUSE_KEYS.discard(op.key)


def ops() -> tuple[type[FuseStep], ...]:
    """The registered ops in chain order."""
    return tuple(sorted(_REGISTRY.values(), key=lambda op: op.order))


def op(key: str) -> type[FuseStep]:
    return _REGISTRY[key]
