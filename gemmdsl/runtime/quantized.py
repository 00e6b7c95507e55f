"""A compiled dequantizing decode spec (paths/dequant) loaded as a callable: `kernel(a, packed, c=None)`, with
`packed` the GPU arrays of quant_layout.pack's dict (docs/python-api.md).

The kernel's grid and split-K workspace are launch_plan.decode_grid, the rule its C launcher prints, built from
NAME.json's `decode` figures; the operands are checked against NAME.json's `quant` format before anything runs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy

from ..arrays import ArrayView, array_view
from ..launch_plan import decode_grid
from ..quant_layout import QuantFormat, packed_shapes
from ..rule import Refused
from ..call_plan import Allocation
from ..devices import operands_device
from . import driver, kernel as spec_kernel  # module attributes, which the fake GPU of the tests replaces
from .driver import BoundLaunch, KernelLaunch, run_returning_c
from .kernel import Kernel, compile_spec
from .launch_arguments import zeroed_workspace

ACTIVATION_DTYPES = {"bf16": "bfloat16", "f16": "float16"}
HALF_DTYPES = ("uint16", "int16", "bfloat16", "float16")  # scales and zero points: 16-bit patterns, any view
WORD_DTYPES = ("uint32", "int32")
C_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}


@dataclass(frozen=True)
class DecodeCall:
    """A checked call: its sizes and the operands' views (None for an array the format lacks)."""

    m: int
    n: int
    k: int
    views: dict[str, ArrayView | None]


class QuantizedKernel(Kernel):
    """A dequantizing decode kernel: C (M x N) = A (M x K) W^T, W given packed. Calls on one kernel object share
    its split-K workspace per GPU: queue them on one stream."""

    def __init__(self, artifacts: Any):
        super().__init__(artifacts)
        quant, decode = self.metadata["quant"], self.metadata["decode"]
        self.format = QuantFormat(quant["weight"], quant["activation"], quant["group"], quant["zeros"])
        self.k_multiple = quant["k_multiple"]
        self.grid_rule = decode_grid(decode["rows"], decode["block_rows"], decode["k_slice"])
        self._workspaces: dict[int, Any] = {}

    def check(self, a: Any, packed: dict[str, Any], c: Any | None) -> DecodeCall:
        """The call's sizes and views; ValueError or TypeError naming what is wrong."""
        if not isinstance(packed, dict):
            raise TypeError(f"{self.name}: `packed` is quant_layout.pack's dict of GPU arrays ({', '.join(self._arrays())}),"
                            f" not {type(packed).__name__}")
        extra = sorted(set(packed) - {*self._arrays(), "shape"})
        missing = [name for name in self._arrays() if name not in packed]
        if extra or missing:
            raise ValueError(f"{self.name} takes the packed arrays {', '.join(self._arrays())} (and `shape`)"
                             + (f"; missing {', '.join(missing)}" if missing else "")
                             + (f"; {', '.join(extra)} not of its format" if extra else ""))
        a_view = array_view("A", a)
        _check_matrix(a_view, ACTIVATION_DTYPES[self.format.activation], "A")
        m, k = a_view.shape
        n = self._columns(packed, c, k)
        if k % self.k_multiple:
            raise ValueError(f"K = {k} is not a multiple of {self.k_multiple}: {self.name}'s rows of A are read 16 bytes "
                             "at a time and its groups are whole")
        if a_view.pointer % 16:
            raise ValueError(f"A's address {a_view.pointer:#x} is not 16-byte aligned")
        views: dict[str, ArrayView | None] = {"A": a_view}
        for name, (shape, dtype) in packed_shapes(n, k, self.format).items():
            view = views[name] = array_view(name, packed[name])
            kinds = WORD_DTYPES if dtype == "uint32" else HALF_DTYPES
            if view.dtype not in kinds or tuple(view.shape) != shape or not _contiguous(view):
                raise ValueError(f"{name} must be a contiguous {dtype} array of shape {shape} for N x K = {n} x {k} "
                                 f"(quant_layout.pack's), not {view.dtype} {tuple(view.shape)}")
            if view.pointer % (16 if name == "weights" else 4):
                raise ValueError(f"{name}'s address {view.pointer:#x} is not {16 if name == 'weights' else 4}-byte "
                                 "aligned")
        if c is not None:
            views["C"] = array_view("C", c)
            _check_matrix(views["C"], C_DTYPES[self.metadata["dtypes"]["c"]], "C", (m, n))
        return DecodeCall(m, n, k, views)

    def _arrays(self) -> tuple[str, ...]:
        return tuple(packed_shapes(16, self.format.chunk_k, self.format))

    def _columns(self, packed: dict[str, Any], c: Any | None, k: int) -> int:
        """N: the packed dict's `shape` (N, K), as `gemmdsl quantize` writes it, else C's columns."""
        if "shape" in packed:
            n, packed_k = (int(extent) for extent in numpy.asarray(packed["shape"]).reshape(-1)[:2])
            if packed_k != k:
                raise ValueError(f"the packed weight is {n} x {packed_k} (its `shape`), but A has K = {k} columns")
            return n
        if c is None:
            raise ValueError("N is unknown: pass C (M x N) or the packed dict's `shape` [N, K] (gemmdsl quantize "
                             "writes it)")
        return array_view("C", c).shape[-1]

    def bind(self, a: Any, packed: dict[str, Any], c: Any | None = None) -> BoundLaunch:  # type: ignore[override]
        """Check the operands once and allocate C if needed; the result launches on call."""
        call = self.check(a, packed, c)
        device = self._device(call)
        loaded = self._module_on(device)
        allocations = ()
        if c is None:
            make = spec_kernel.c_maker(self.requirements, call.views["A"].library, call.m, call.n, 1, device)
            allocations = (Allocation(make(), make),)
            c = allocations[0].arrays[0]
            call.views["C"] = array_view("C", c)
        bound = BoundLaunch(self.entry, (), c, (a, *packed.values()), call.views["A"].library, device, allocations)
        if call.m == 0 or call.n == 0:
            return bound
        if call.k == 0:
            raise ValueError(f"K = 0: {self.name} has nothing to multiply (C would be zero)")
        try:
            sizes = self.grid_rule.evaluate({"M": call.m, "N": call.n, "K": call.k})
        except Refused:
            raise ValueError(f"{call.m}x{call.n}x{call.k} needs a grid past CUDA's 65535 blocks along y or z") from None
        workspace = self._workspace(device, sizes["workspace_bytes"]) if sizes["workspace_bytes"] else 0
        pointer = lambda name: numpy.uint64(0 if call.views.get(name) is None else call.views[name].pointer)  # noqa: E731
        args = (pointer("A"), pointer("weights"), pointer("scales"), pointer("zeros"), pointer("C"),
                numpy.uint64(workspace), numpy.uint64(workspace + call.m * call.n * 4 if workspace else 0),
                numpy.int32(call.m), numpy.int32(call.n), numpy.int32(call.k))
        grid = (sizes["grid_x"], sizes["grid_y"], sizes["grid_z"])
        launch = KernelLaunch(loaded.functions[self.entry], grid, (self.metadata["threads"], 1, 1), args,
                              self.dynamic_smem_bytes)
        return BoundLaunch(self.entry, (launch,), c, bound.operands, bound.library, device, allocations)

    @property
    def entry(self) -> str:
        return self.requirements.launch.entries.vector

    def _device(self, call: DecodeCall) -> int:
        """The GPU that holds the operands (the current one where none says)."""
        device = operands_device({name: view for name, view in call.views.items() if view is not None},
                                 driver.pointer_device)
        return driver.current_device() if device is None else device

    def _workspace(self, device: int, nbytes: int) -> int:
        """The address of this GPU's workspace, grown (zero) to `nbytes`."""
        held = self._workspaces.get(device)
        if held is None or held[1] < nbytes:
            with driver.on_device(device):
                self._workspaces[device] = held = (zeroed_workspace(nbytes), nbytes)
        return array_view("workspace", held[0]).pointer

    def __call__(self, a: Any, packed: dict[str, Any], c: Any | None = None,  # type: ignore[override]
                 stream: Any = None) -> Any:
        """C = A W^T for A (M x K, row-major, A's type), `packed` quant_layout.pack's arrays on the GPU (and
        `shape` [N, K]), C (M x N, row-major) or None for a new one; returns C."""
        return run_returning_c(self.bind(a, packed, c), c is not None, self.requirements.dtypes["C"], stream)

    def __repr__(self) -> str:
        fmt = self.format
        return (f"<gemmdsl.QuantizedKernel {self.name}: {fmt.weight} weights, "
                f"{'group ' + str(fmt.group) if fmt.group else 'per channel'}{', zero points' if fmt.zeros else ''}, "
                f"{fmt.activation} activations, {self.metadata['target']}>")


def _contiguous(view: ArrayView) -> bool:
    expected, stride = [], 1
    for extent in reversed(view.shape):
        expected.append(stride)
        stride *= extent
    return all(extent <= 1 or s == e for extent, s, e in zip(view.shape, view.strides, reversed(expected)))


def _check_matrix(view: ArrayView, dtype: str, name: str, shape: tuple[int, int] | None = None) -> None:
    if len(view.shape) != 2 or view.dtype != dtype or not _contiguous(view):
        raise ValueError(f"{name} must be a contiguous row-major 2-D {dtype} array"
                         + (f" of shape {shape}" if shape else "") + f", not {view.dtype} {tuple(view.shape)}")
    if shape is not None and tuple(view.shape) != shape:
        raise ValueError(f"{name} must be {shape[0]} x {shape[1]} (M x N), not {view.shape[0]} x {view.shape[1]}")


def load(spec_or_path: Any, *, text: str | None = None) -> Kernel:
    """Compile and load a spec (runtime.kernel.load's arguments): a QuantizedKernel for a dequantizing spec,
    else a Kernel."""
    artifacts = compile_spec(spec_or_path, text=text)
    return (QuantizedKernel if "quant" in artifacts.metadata else Kernel)(artifacts)

