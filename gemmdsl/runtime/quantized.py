"""A compiled dequantizing decode spec (paths/dequant) loaded as a callable: `kernel(a, packed, c=None)`, with
`packed` the GPU arrays of quant_layout.pack's dict (docs/python-api.md).

The kernel's grid and split-K workspace are launch_plan.decode_grid, the rule its C launcher prints, built from
NAME.json's `decode` figures; the operands are checked against NAME.json's `quant` format before anything runs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy

from ..arrays import ArrayView, array_view
from ..launch_plan import decode_grid, dequantize_grid
from ..quant_layout import QuantFormat, packed_shapes
from ..rule import Refused
from ..call_plan import Allocation
from .allocations import matrix_maker
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
        dequantize = self.metadata["dequantize"]
        self.dequantize_rule = dequantize_grid(dequantize["chunk_k"], dequantize["items_per_block"])
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
            n, packed_k = weight_shape(packed, self.name)
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

    def bind_dequantize(self, packed: dict[str, Any], w: Any) -> BoundLaunch:
        """The launch writing W (N x K, row-major, A's type; N and K the packed dict's `shape`) = the packed
        weight dequantized and rounded once to A's type, as dequantize-then-GEMM rounds it."""
        n, k = weight_shape(packed, f"{self.name}.dequantize")
        w_view = array_view("W", w)
        _check_matrix(w_view, ACTIVATION_DTYPES[self.format.activation], "W", (n, k))
        if w_view.pointer % 16:
            raise ValueError(f"W's address {w_view.pointer:#x} is not 16-byte aligned")
        call = self.check(w, packed, None)  # W has A's type and K columns: the packed arrays checked against it
        device = self._device(call)
        loaded = self._module_on(device)
        dequantize = self.metadata["dequantize"]
        bound = BoundLaunch(dequantize["entry"], (), w, (w, *packed.values()), w_view.library, device)
        if n == 0 or k == 0:
            return bound
        try:
            grid = (self.dequantize_rule.evaluate({"N": n, "K": k})["grid_x"], 1, 1)
        except Refused:
            raise ValueError(f"a {n} x {k} weight needs a dequantize grid past CUDA's limit") from None
        pointer = lambda name: numpy.uint64(0 if call.views.get(name) is None else call.views[name].pointer)  # noqa: E731
        args = (pointer("weights"), pointer("scales"), pointer("zeros"), numpy.uint64(w_view.pointer),
                numpy.int32(n), numpy.int32(k))
        launch = KernelLaunch(loaded.functions[dequantize["entry"]], grid, (dequantize["threads"], 1, 1), args,
                              dequantize["smem"])
        return BoundLaunch(dequantize["entry"], (launch,), w, bound.operands, bound.library, device)

    def dequantize(self, packed: dict[str, Any], w: Any, stream: Any = None) -> Any:
        """W (N x K, row-major, A's type: the caller's array) = the packed weight dequantized, rounded once to A's
        type (what dequantize-then-cuBLAS multiplies); returns W. For a dense GEMM of many rows of A: the
        prefill route of QuantizedLinear."""
        return run_returning_c(self.bind_dequantize(packed, w), True, self.format.activation, stream)

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


def weight_shape(packed: Any, who: str) -> tuple[int, int]:
    """N and K from the packed dict's `shape` [N, K] (as `gemmdsl quantize` writes it); ValueError naming `who`
    where there is none."""
    if not isinstance(packed, dict) or "shape" not in packed:
        raise ValueError(f"{who} needs the packed dict's `shape` [N, K] (gemmdsl quantize writes it)")
    n, k = (int(extent) for extent in numpy.asarray(packed["shape"]).reshape(-1)[:2])
    return n, k


# Rows of A from which QuantizedLinear dequantizes W into memory and runs the dense kernel: where that measured
# faster than the decode kernel at 8192 x 8192, 28672 x 8192 and 8192 x 28672 int4 weights (H200,
# docs/performance.md, "Quantized weights").
PREFILL_FROM = 128
DENSE_LAYOUTS = {"A": "row", "B": "col", "C": "row"}


class QuantizedLinear:
    """C = A W^T at any M, W packed: `decode` (a QuantizedKernel, or several of one weight format and C type, such as
    the 8-, 16- and 32-row shapes of one spec) runs calls of fewer than `prefill_from` rows of A, the one the cycle
    model predicts fastest at the call's M x N x K (`check --problem`'s time; docs/quantized-kernel.md, "The time
    model"), the first listed on a tie; from there (prefill) W is dequantized into a scratch of N x K in A's type
    (2 N K bytes, kept per GPU and weight shape, made in A's library) by the first decode kernel's dequantize
    kernel, and `dense` (a Kernel or kernel family computing A (row) x B (col) -> C (row) in decode's types, e.g.
    hgemm_h100_bf16c_family for bf16 A and C) multiplies A by it. Calls share the scratch: queue them on one
    stream."""

    def __init__(self, decode: QuantizedKernel | list[QuantizedKernel] | tuple[QuantizedKernel, ...], dense: Any,
                 prefill_from: int = PREFILL_FROM):
        kernels = ((decode,) if isinstance(decode, QuantizedKernel) else
                   tuple(decode) if isinstance(decode, (list, tuple)) else ())
        if not kernels or not all(isinstance(kernel, QuantizedKernel) for kernel in kernels):
            given = ", ".join(type(kernel).__name__ for kernel in kernels) if kernels else type(decode).__name__
            raise TypeError(f"decode must be a QuantizedKernel (gemmdsl.load of a dequantizing spec) or a list of "
                            f"them, not {given}")
        first = kernels[0]
        unlike = [kernel.name for kernel in kernels[1:]
                  if (kernel.format, kernel.requirements.dtypes["C"]) != (first.format, first.requirements.dtypes["C"])]
        if unlike:
            raise ValueError(f"the decode kernels must share {first.name}'s weight format and C type; "
                             f"{', '.join(unlike)} do not")
        activation = ACTIVATION_DTYPES[first.format.activation]
        wanted = {"A": activation, "B": activation, "C": first.requirements.dtypes["C"]}
        required = dense.requirements
        wrong = [f"{operand} {required.dtypes[operand]} {required.layouts[operand]}" for operand in wanted
                 if (required.dtypes[operand], required.layouts[operand]) != (wanted[operand], DENSE_LAYOUTS[operand])]
        if wrong or required.batched or required.grouped or dense.metadata.get("fuse"):
            raise ValueError(f"dense must compute A ({activation} row) x B ({activation} col) -> C "
                             f"({wanted['C']} row), unbatched and with no fuse chain, as {first.name} does; "
                             f"{dense.name} has " + (", ".join(wrong) if wrong else "a batch or a fuse chain"))
        if prefill_from < 1:
            raise ValueError(f"prefill_from must be at least 1, not {prefill_from}")
        self.decode, self.decoders, self.dense, self.prefill_from = first, kernels, dense, prefill_from
        self._models = _decode_models(kernels) if len(kernels) > 1 else ()
        self._chosen: dict[tuple[int, int, int], QuantizedKernel] = {}
        self._scratch: dict[tuple[int, int, int], Any] = {}

    def decoder_for(self, m: int, n: int, k: int) -> QuantizedKernel:
        """The decode kernel that runs M x N x K: the one the cycle model predicts fastest (kept per shape)."""
        if len(self.decoders) == 1:
            return self.decode
        chosen = self._chosen.get((m, n, k))
        if chosen is None:
            from ..cycles import estimate

            cycles = [estimate(model, m, n, k).cycles for model in self._models]
            chosen = self._chosen[m, n, k] = self.decoders[cycles.index(min(cycles))]
        return chosen

    def __call__(self, a: Any, packed: dict[str, Any], c: Any | None = None, stream: Any = None) -> Any:
        """C = A W^T, as QuantizedKernel.__call__; returns C."""
        view = array_view("A", a)
        if len(view.shape) != 2 or view.shape[0] < self.prefill_from:
            if len(self.decoders) == 1 or len(view.shape) != 2:  # one kernel, or an A its checks refuse
                return self.decode(a, packed, c, stream)
            return self.decoder_for(view.shape[0], *weight_shape(packed, "QuantizedLinear"))(a, packed, c, stream)
        n, k = weight_shape(packed, "the prefill route")
        w = self.scratch(view, n, k)
        self.decode.dequantize(packed, w, stream)
        return self.dense(a, w.transpose(1, 0), c, stream=stream)  # B (K x N, column-major) is W's transpose

    def scratch(self, a: ArrayView, n: int, k: int) -> Any:
        """The N x K scratch of A's GPU, made once in A's library."""
        device = operands_device({"A": a}, driver.pointer_device)
        key = (driver.current_device() if device is None else device, n, k)
        if key not in self._scratch:
            activation = ACTIVATION_DTYPES[self.decode.format.activation]
            make = matrix_maker(a.library, activation, n, k, key[0])
            if make is None:
                raise TypeError(f"the prefill route makes its {activation} scratch with PyTorch (or CuPy where CuPy "
                                f"has the type), not for A of {a.library}")
            self._scratch[key] = make()[0]
        return self._scratch[key]

    def __repr__(self) -> str:
        decoders = " or ".join(kernel.name for kernel in self.decoders)
        return (f"<gemmdsl.QuantizedLinear: {decoders} below {self.prefill_from} rows, "
                f"{self.dense.name} on the dequantized weight from there>")


def _decode_models(kernels: tuple[QuantizedKernel, ...]) -> tuple:
    """Each decode kernel's cycle model (cycles.MemberModel, paths/dequant/facts.py's decode_model), from its
    analysis; imported here, not at the module's top, since only a choice among kernels needs the compiler's."""
    from ..family import member_model

    return tuple(member_model(kernel._artifacts) for kernel in kernels)


def _contiguous(view: ArrayView) -> bool:
    if 0 in view.shape:  # no elements: any strides lay them out
        return True
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

