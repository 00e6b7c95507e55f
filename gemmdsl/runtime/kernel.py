"""A compiled spec loaded as a callable `Kernel`: its modules per GPU, and the binding of a call's operands
to launches (checked in full, or from the plan of an earlier call of the same signature)."""
from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from dataclasses import replace
from functools import partial
from typing import Any

import numpy

from ..arrays import ArrayView, array_view
from ..cache_root import cache_dir
from ..call_plan import (MISS, Allocation, CallPlan, Placement, Signature, address_of, call_signature, extent_bytes,
                         keep)
from ..devices import operands_device
from ..fuse_operands import (FUSE_OPERANDS, FuseOperands, check_no_overlap_with_c, check_operand_names,
                             fuse_arguments, fuse_views, moved)
from ..grouped_call import check_offs, check_offs_given, map_batches
from ..launch_plan import PAD_GRID, PAD_THREADS, SCALE_C_THREADS
from ..load_cache import compiled_spec
from ..schedule import SubLaunch
from ..source import SourceFile
from ..targets import ARCHS, arch, occupancy_of
from ..tensor_maps import MapInputs
from .allocations import c_maker, padded_copies, padded_maker
from .binaries import BinaryCache, build_target, compile_cubin, cubin_cache_name, parse_target
from .driver import (BoundLaunch, DeviceModule, KernelLaunch, LoadedFunction, current_device, on_device,
                     pointer_device, queue, run_returning_c)
from .environment import require_gpu
from .launch_arguments import (kernel_arguments, map_batch_strides, stream_k_workspace, sub_call,
                               tensor_map_kernel_arguments)
from .operands import (CALL_OPERANDS, CheckedCall, KernelRequirements, call_operands, check_call,
                       check_unclustered, check_writable, choose_entry, operand_view)

PLANS_KEPT = 256  # call signatures whose plans a kernel keeps; the oldest goes first


class Kernel:
    """A compiled spec, callable like a function on any GPU: it follows its operands' device, and loads
    its module on each GPU the first time a call runs there (one cubin per architecture)."""

    def __init__(self, artifacts: Any):
        require_gpu()  # no CuPy or no usable driver: a GpuUnavailable saying so, as the commands print it
        self._artifacts = artifacts  # compiler.Artifacts, or load_cache.CompiledSpec (its IR compiled on demand)
        self.metadata = artifacts.metadata
        self.source = artifacts.cuda
        self.name: str = self.metadata["kernel"]
        self.requirements = KernelRequirements.from_metadata(self.metadata)
        self.fuse = FuseOperands.from_metadata(self.metadata)  # what the fuse chain reads; None without one
        self._modules: dict[int, DeviceModule] = {}
        self._loading = threading.Lock()
        # The plans of the calls checked in full, by signature, scalars, options and padding (call_plan.py): a
        # call's checks and launch arguments cost several times what a launch does, and callers repeat calls.
        self._plans: OrderedDict[tuple, CallPlan] = OrderedDict()
        # Built and loaded now on the current GPU, so that build errors surface at load.
        self._home = self._module_on(current_device())

    @property
    def spec(self) -> Any:
        """The spec's IR (ir.KernelSpec)."""
        return self._artifacts.spec

    @property
    def built_for(self) -> str:
        """The architecture the cubin loaded on the GPU current at load time was built for."""
        return self._home.built_for

    def _module_on(self, device: int) -> DeviceModule:
        """The module on `device`, loaded there on first use (thread-safe)."""
        loaded = self._modules.get(device)
        if loaded is not None:
            return loaded
        with self._loading:
            if device not in self._modules:
                self._modules[device] = self._load_on(device)
            return self._modules[device]

    def _load_on(self, device: int) -> DeviceModule:
        import cupy

        target = self.metadata["target"]
        with cupy.cuda.Device(device):
            properties = cupy.cuda.Device(device)
            built_for = build_target(target, properties.compute_capability)
            if built_for != target and not any(m.built_for == built_for for m in self._modules.values()):
                print(f"note: {self.name} targets {target}; built for this GPU's {built_for}", file=sys.stderr)
            cubin = BinaryCache(cache_dir()).get_or_build(cubin_cache_name(self.metadata, self.source, built_for),
                                                          lambda: compile_cubin(self.source, built_for))
            module = cupy.RawModule(path=str(cubin))
            raw = {entry: module.get_function(entry) for entry in self.requirements.launch.entries.all()}
            if self.dynamic_smem_bytes > arch(parse_target(target)[0]).default_smem_per_block:
                for function in raw.values():
                    function.max_dynamic_shared_size_bytes = self.dynamic_smem_bytes
            # CuPy's RawKernel loads its function on the current GPU when asked for it: that is `device` here.
            functions = {entry: LoadedFunction(entry, function.kernel.ptr, function.num_regs)
                         for entry, function in raw.items()}
            sms = properties.attributes["MultiProcessorCount"]  # read once, not per call
        return DeviceModule(device, built_for, module, functions, sms)

    @property
    def dynamic_smem_bytes(self) -> int:
        return self.metadata["dynamic_smem_bytes"]

    @property
    def epilogue(self) -> str:
        return self.requirements.epilogue

    @property
    def registers(self) -> dict[str, int]:
        """Registers per thread of each kernel in the cubin loaded at load time, by entry name."""
        return {entry: function.num_regs for entry, function in self._home.functions.items()}

    def _views(self, operands: dict[str, Any]) -> tuple[dict[str, ArrayView], int]:
        """The operands as the launch sees them, and the one GPU that holds them all (asking the driver
        where an array's protocol does not say)."""
        views = {name: array_view(name, array) for name, array in operands.items()}
        device = operands_device(views, pointer_device)
        if device is None:  # empty arrays that name no GPU: the current one serves
            device = current_device()
        return views, device

    def _fused(self, bias: Any, residual: Any, row_scale: Any, col_scale: Any, a_scale: Any = None,
               b_scale: Any = None) -> dict[str, Any]:
        """The fuse chain's operands given, by name, once checked to be exactly those the chain reads."""
        values = (bias, residual, row_scale, col_scale, a_scale, b_scale)
        if self.fuse is None and all(value is None for value in values):
            return {}
        given = {name: value for name, value in zip(FUSE_OPERANDS, values) if value is not None}
        if given or self.fuse is not None:
            check_operand_names(self.name, self.fuse, given)
        return given

    def bind(self, a: Any, b: Any, c: Any | None = None, alpha: float = 1.0, beta: float = 0.0,
             stream_k: bool = True, interior: bool = True, *, bias: Any = None, residual: Any = None,
             row_scale: Any = None, col_scale: Any = None, a_scale: Any = None, b_scale: Any = None,
             offs: Any = None) -> BoundLaunch:
        """Validate the operands once and allocate C if needed; the result launches on call, on the GPU
        that holds the operands. bias, residual, row_scale, col_scale, a_scale and b_scale: the fuse chain's
        operands (docs/fusion.md, docs/fp8.md), exactly those the spec's `fuse` section reads.

        stream_k=False runs a `schedule: stream_k` spec's plain kernel on every tile: no atomics,
        so bitwise-repeatable results. interior=False runs a checked spec's vector kernel on every
        tile, inner ones too, instead of the interior kernel and the edge strips (which it runs where
        they pay: schedule.interior_split_pays). With both False a
        call is one launch over every tile, the launch the analysis passes describe (`profile`).

        offs: a `batch: grouped` kernel's groups (docs/grouped.md): G int32 cumulative row ends on the GPU, as
        torch._grouped_mm takes them, with A M x K, B G x K x N (for `b: col`: `w.mT` of G x N x K weights), C M x N."""
        return self._bind((a, b, c, bias, residual, row_scale, col_scale, a_scale, b_scale, offs),
                          (alpha, beta, stream_k, interior))

    def bind_padded(self, a: Any, b: Any, c: Any | None = None, alpha: float = 1.0, beta: float = 0.0,
                    stream_k: bool = True, interior: bool = True, **chain: Any) -> BoundLaunch | None:
        """`bind` on copies of A and B whose rows TMA reads at full speed, as the C launcher
        NAME_launch_ld_padded runs (paths/wgmma/pad.py, `padded_copies`): each launch copies those operands
        first. None where nothing is to be copied, the kernel has no such launcher or the operands' library
        cannot allocate the copies (then call `bind`)."""
        return self._bind(call_operands(a, b, c, chain), (alpha, beta, stream_k, interior), padded=True)

    def _bind(self, operands: tuple, options: tuple, padded: bool = False,
              signature: Signature | None = None) -> BoundLaunch | None:
        """`bind` (padded: `bind_padded`) of `operands` (CALL_OPERANDS) with `options` (alpha, beta, stream_k,
        interior): from the plan of their signature where there is one, else checked in full, which makes the
        plan for the next call."""
        signature = signature or call_signature(operands)
        key = None if signature is None else (signature.key, options, padded)
        plan = None if key is None else self._plans.get(key)
        if plan is not None:
            bound = self._bound_from(plan, signature.pointers, operands)
            if bound is not MISS:
                return bound
        bound = self._bind_padded_checked(operands, options) if padded else self._bind_operands(operands, options)
        if key is not None and bound is not None:
            self._remember(key, bound, operands, signature.pointers)
        return bound

    def _remember(self, key: tuple, bound: BoundLaunch, operands: tuple, pointers: tuple[int, ...]) -> None:
        """Keep the plan of a call checked in full (call_plan.py), for its signature's later calls."""
        named = [(name, operand) for name, operand in zip(CALL_OPERANDS, operands) if operand is not None]
        allocated = [array for allocation in bound.allocations for array in allocation.arrays]
        views = [array_view(name, operand) for name, operand in (*named, *(("allocated", a) for a in allocated))]
        extents = tuple(map(extent_bytes, views))
        if None in extents:
            return
        names = [name for name, _ in named]
        checked = ()
        if operands[2] is not None and extents[names.index("C")]:  # C given: it must not overlap what is read
            c = names.index("C")
            checked = tuple((c, slot) for slot, name in enumerate(names)
                            if name not in ("C", "offs") and extents[slot] and pointers[slot] != pointers[c])
        c_index = next((index for index, array in enumerate(allocated) if array is bound.c), None)
        plan = CallPlan.build(bound.launches, pointers + tuple(map(address_of, allocated)), extents, len(names),
                              checked, bound.allocations, self._module_on(bound.device).tensor_maps,
                              Placement(bound.entry, bound.library, bound.device, c_index, queue))
        if plan is None:
            return
        keep(self._plans, key, plan, PLANS_KEPT)

    def _bound_from(self, plan: CallPlan, pointers: tuple[int, ...], operands: tuple) -> BoundLaunch | object:
        """A BoundLaunch of its own for these operands, from the plan of their signature; MISS where the plan
        cannot take their addresses."""
        taken = plan.take(pointers)
        if taken is MISS:
            return MISS
        made, pointers = taken
        allocations = tuple(Allocation(arrays, make) for arrays, make in zip(made, plan.makers))
        arrays = tuple(array for allocation in allocations for array in allocation.arrays)
        args = plan.relocated(pointers)
        launches = tuple(replace(planned.launch, args=launch_args, maps=None)
                         for planned, launch_args in zip(plan.launches, args))
        where = plan.placement
        c = operands[2] if where.c_index is None else arrays[where.c_index]
        return BoundLaunch(where.entry, launches, c, tuple(operand for operand in operands if operand is not None),
                           where.library, where.device, allocations)

    def _bind_operands(self, operands: tuple, options: tuple) -> BoundLaunch:
        """`bind` checked in full."""
        a, b, c, *chain, offs = operands
        alpha, beta, stream_k, interior = options
        fused = self._fused(*chain)
        check_offs_given(self.name, self.requirements.grouped, offs is not None)
        views, device = self._views({"A": a, "B": b, **({} if c is None else {"C": c}), **fused,
                                     **({} if offs is None else {"offs": offs})})
        loaded = self._module_on(device)
        if c is not None:
            check_writable(views["C"])
        offs_view = views.pop("offs", None)
        with on_device(device):
            bound = self._bind_checked(loaded, c, views, alpha, beta, stream_k, interior, fused, offs_view)
        return replace(bound, operands=tuple(operand for operand in operands if operand is not None))

    def _bind_padded_checked(self, operands: tuple, options: tuple) -> BoundLaunch | None:
        """`bind_padded` checked in full."""
        if self.requirements.launch.entries.pad_operands is None:
            return None
        a, b = operands[:2]
        views, device = self._views({"A": a, "B": b})
        req = self.requirements
        given = {name: operand_view(req, name, views[name]) for name in ("A", "B")}
        copies = padded_copies(req, given)
        if not copies or min(given["A"].rows, given["A"].cols, given["B"].cols) == 0 \
                or max(view.batch for view in given.values()) > 1:
            return None
        padded, allocations, arguments = {"A": a, "B": b}, [], []
        for name in ("A", "B"):
            view = given[name]
            if name not in copies:
                arguments += [numpy.uint64(0), numpy.int64(0), numpy.uint64(0), numpy.int64(0), numpy.int32(0),
                              numpy.int32(0)]
                continue
            rows, cols, ld = copies[name]
            make = padded_maker(getattr(operands[name == "B"], "dtype", None), views[name].library, rows, cols, ld,
                                req.layouts[name] == "col", device)
            if make is None:  # a library the runtime cannot allocate in
                return None
            allocations.append(Allocation(make(), make))
            padded[name] = allocations[-1].arrays[0]
            arguments += [numpy.uint64(view.pointer), numpy.int64(view.ld),
                          numpy.uint64(array_view(name, padded[name]).pointer), numpy.int64(ld), numpy.int32(rows),
                          numpy.int32(cols)]
        bound = self._bind_operands((padded["A"], padded["B"], *operands[2:]), options)
        extents = {f"{name.lower()}_{axis}": copies[name][i] if name in copies else 0
                   for name in ("A", "B") for i, axis in enumerate(("rows", "cols"))}
        grid = (PAD_GRID.evaluate(extents)["pad_blocks"], 1, 1)
        pad = KernelLaunch(self._module_on(device).functions[req.launch.entries.pad_operands], grid,
                           (PAD_THREADS, 1, 1), tuple(arguments), 0)
        # The caller's operands, and the copies (the launches hold their addresses) before what the call made.
        return replace(bound, launches=(pad, *bound.launches), operands=tuple(o for o in operands if o is not None),
                       allocations=(*allocations, *bound.allocations))

    def _bind_checked(self, loaded: DeviceModule, c: Any | None, views: dict[str, ArrayView],
                      alpha: float, beta: float, stream_k: bool, interior: bool,
                      fused: dict[str, Any], offs: ArrayView | None = None) -> BoundLaunch:
        """`bind` after the operands' views, with their GPU current: check the call and the fuse chain's
        operands, allocate C if it is None, build the launches (the BoundLaunch's operands are left to the caller)."""
        req = self.requirements
        call = check_call(req, views["A"], views["B"], views.get("C"), alpha, beta)
        if call.entry not in (None, req.launch.entries.scale_c):
            check_unclustered(req)
        library = views["A"].library
        allocations: tuple[Allocation, ...] = ()
        if c is None:
            make = c_maker(req, library, call.m, call.n, 1 if req.grouped else call.batch, loaded.device)
            allocations = (Allocation(make(), make),)
            c = allocations[0].arrays[0]
            views["C"] = array_view("C", c)
            call = check_call(req, views["A"], views["B"], views["C"], alpha, beta)  # C's alignment counts too
        groups = ()  # a grouped kernel's trailing arguments: offs and G
        if offs is not None:
            check_offs(self.name, offs, call.batch, loaded.device)
            groups = (numpy.uint64(offs.pointer), numpy.int32(call.batch))
        chain = {}
        if self.fuse is not None and call.entry is not None:  # M or N = 0: C has no elements for the chain
            chain = fuse_views(self.name, self.fuse, {name: views[name] for name in fused}, call.m, call.n, call.k,
                               call.batch if req.grouped else 0)
            c_view = call.views["C"]
            check_no_overlap_with_c(chain, c_view.pointer, c_view.ld, req.layouts["C"], c_view.itemsize, call.m,
                                    call.n)
        bound = partial(BoundLaunch, call.entry, c=c, operands=(), library=library, device=loaded.device,
                        allocations=allocations)
        if call.entry in (None, req.launch.entries.scale_c):
            return bound(self._empty_problem_launches(loaded, call, beta, chain, groups))
        block = (self.metadata["threads"], 1, 1)
        function = loaded.functions[call.entry]
        if req.tensor_maps is not None:  # A and B through tensor maps: the launch its C launcher makes
            launch, workspace = self._tensor_map_launch(loaded, call, function, alpha, beta, block,
                                                        fuse_arguments(chain), groups)
            return bound((launch,), allocations=allocations + workspace)
        args = kernel_arguments(call, alpha, beta, req.batched, fuse_arguments(chain))
        smem = self.dynamic_smem_bytes
        grids = None
        if stream_k and req.launch.stream_k is not None:
            grids = req.launch.stream_k_launch(call.m, call.n, call.k, call.batch, loaded.sms,
                                               self._blocks_per_sm(loaded, call.entry), numpy.float32(beta),
                                               req.epilogue == "alpha_beta")
        if grids is None or not grids["sk_tiles"]:
            return bound(self._tile_launches(loaded, call, alpha, beta, block, smem, interior, chain))
        # The launcher's steps (emit/launcher.py's stream-K launch, LaunchPlan.stream_k_launch_rule), in the same
        # order, over the batch.
        launches = []
        sk_tiles = numpy.int32(grids["sk_tiles"])
        if grids["prepare_blocks"]:
            beta_first = numpy.float32(beta if req.epilogue == "alpha_beta" else 0.0)
            c_view = call.views["C"]
            prepare_args = (numpy.uint64(c_view.pointer), numpy.int32(call.m), numpy.int32(call.n),
                            numpy.int32(c_view.ld), beta_first)
            if req.batched:
                prepare_args += (numpy.int64(c_view.batch_stride),)
            launches.append(KernelLaunch(loaded.functions[req.launch.entries.prepare],
                                         (grids["prepare_blocks"], 1, call.batch), block, prepare_args + (sk_tiles,), 0))
        launches.append(KernelLaunch(loaded.functions[choose_entry(req, call.views, "stream_k_kernel")],
                                     (grids["sk_blocks"], 1, call.batch), block, args + (sk_tiles,), smem))
        if grids["plain_blocks"]:
            launches.append(KernelLaunch(function, (grids["plain_blocks"], 1, call.batch), block, args, smem))
        return bound(tuple(launches))

    def _empty_problem_launches(self, loaded: DeviceModule, call: CheckedCall, beta: float,
                                chain: dict, groups: tuple = ()) -> tuple[KernelLaunch, ...]:
        """An empty problem's launches, the C launcher's (empty_problem_entry): none for M or N = 0; for K = 0 the
        K = 0 kernel over C, which applies beta (0 for a store epilogue, check_scalars) and the fuse chain."""
        if call.entry is None:
            return ()
        req, c = self.requirements, call.views["C"]
        arguments = (numpy.uint64(c.pointer), numpy.int32(call.m), numpy.int32(call.n), numpy.int32(c.ld),
                     numpy.float32(beta), *fuse_arguments(chain))
        if req.batched:
            arguments += (numpy.int64(c.batch_stride),)
        arguments += groups
        return (KernelLaunch(loaded.functions[call.entry], req.launch.scale_c_grid(call.m, call.n, call.batch),
                             (SCALE_C_THREADS, 1, 1), arguments, 0),)

    def _tensor_map_launch(self, loaded: DeviceModule, call: CheckedCall, function: Any, alpha: float, beta: float,
                           block: tuple[int, int, int], fuse: tuple,
                           groups: tuple = ()) -> tuple[KernelLaunch, tuple[Allocation, ...]]:
        """The launch, and the workspace it allocated (stream-K)."""
        from ..tensor_maps import TensorMapCache, driver_encoder

        if loaded.tensor_maps is None:
            loaded.tensor_maps = TensorMapCache(driver_encoder())
        views = call.views
        pointers: dict[str, int | None] = {"a": views["A"].pointer, "b": views["B"].pointer}
        lds = {"a": views["A"].ld, "b": views["B"].ld, "c": views["C"].ld}
        req = self.requirements
        strides = map_batch_strides(req, call) if req.batched or req.grouped else None
        c_map = req.tensor_maps.get("c")
        if c_map is not None:  # store: tma, where TMA can store C (the kernel tests the same condition)
            c = views["C"]
            alignment = self.metadata["alignment_bytes"]
            size = c_map["element_bytes"]
            staged = c.pointer % alignment == 0 and c.ld * size % alignment == 0 and call.n * size % alignment == 0
            if req.batched:  # and each GEMM's C as aligned as the first (check_no_overlap: stride > 0)
                staged = staged and c.batch_stride * size % alignment == 0
            pointers["c"] = c.pointer if staged else None
        batch = map_batches(call.batch) if req.grouped else call.batch
        inputs = MapInputs(req.tensor_maps, pointers, call.m, call.n, call.k, lds, strides, batch)
        maps = inputs.encode(loaded.tensor_maps)
        sms = loaded.sms
        arguments, workspace = tensor_map_kernel_arguments(call, maps, alpha, beta, req.batched, fuse) + groups, ()
        if req.launch.workspace is not None:
            stream_k, workspace = stream_k_workspace(req, call, sms)
            arguments += stream_k
        grid = req.launch.grid_for(call.m, call.n, call.k, call.batch, sms)
        return KernelLaunch(function, grid, block, arguments, self.dynamic_smem_bytes, inputs), workspace

    def _tile_launches(self, loaded: DeviceModule, call: CheckedCall, alpha: float, beta: float,
                       block: tuple[int, int, int], smem: int, interior: bool,
                       chain: dict) -> tuple[KernelLaunch, ...]:
        """Every tile, one block each: on a checked spec's vector kernel, where the split pays
        (schedule.interior_split_pays on this GPU's SMs x resident blocks), the tiles inside C on the
        interior kernel (the partial-k one when K % BK != 0) and the edge strips on the vector one
        (schedule.interior_launches), as the C launcher does; otherwise (or with interior=False) the
        chosen kernel on the whole of C. The fuse chain's operands move with C."""
        req = self.requirements
        entries = req.launch.entries
        pieces: tuple[SubLaunch, ...] = (SubLaunch(False, 0, 0, call.m, call.n),)
        if interior and call.entry == entries.vector:
            pieces = req.launch.sub_launches(call.m, call.n, call.k, call.batch, loaded.sms,
                                             self._blocks_per_sm(loaded, call.entry))
        launches = []
        for piece in pieces:
            part = sub_call(req, call, piece)
            entry = call.entry
            if piece.interior:
                entry = entries.interior_partial_k if piece.partial_k else entries.interior
            launches.append(KernelLaunch(loaded.functions[entry],
                                         req.launch.grid_for(part.m, part.n, part.k, part.batch, loaded.sms), block,
                                         kernel_arguments(part, alpha, beta, req.batched,
                                                          fuse_arguments(moved(chain, piece.row, piece.col))),
                                         smem))
        return tuple(launches)

    def _blocks_per_sm(self, loaded: DeviceModule, entry: str) -> int:
        """Resident blocks per SM of the loaded binary's `entry` (what cudaOccupancyMaxActiveBlocksPerMultiprocessor
        says), with the limits of the architecture it was built for where they are known, else the target's."""
        if entry not in loaded.resident_blocks:
            sm = parse_target(loaded.built_for)[0]
            limits = arch(sm) if sm in ARCHS else arch(parse_target(self.metadata["target"])[0])
            loaded.resident_blocks[entry] = max(1, occupancy_of(limits, loaded.functions[entry].num_regs,
                                                                self.metadata["threads"],
                                                                self.dynamic_smem_bytes).blocks_per_sm)
        return loaded.resident_blocks[entry]

    def __call__(self, a: Any, b: Any, c: Any | None = None, alpha: float = 1.0, beta: float = 0.0,
                 stream: Any = None, stream_k: bool = True, interior: bool = True, *, bias: Any = None,
                 residual: Any = None, row_scale: Any = None, col_scale: Any = None, a_scale: Any = None,
                 b_scale: Any = None, offs: Any = None) -> Any:
        """C = A@B (store) or alpha*A@B + beta*C (alpha_beta), then the spec's fuse chain (docs/fusion.md)
        with its operands bias, residual, row_scale, col_scale, or FP8's block scales a_scale and b_scale
        (docs/fp8.md); returns C.

        A, B and C: GPU arrays of any library with `__cuda_array_interface__` or DLPack (PyTorch,
        CuPy, JAX, Numba), read and written in place, never copied. They may be views (a transposed
        view is column-major; a slice of wider rows has a leading dimension larger than its width)
        as long as each is laid out as the spec says. Batched kernels take 3-D arrays (batch, rows,
        cols); a 2-D A or B is used by every GEMM. C, when left out, is a new array of A's library
        (always for JAX, whose arrays are immutable).

        The call runs on the GPU that holds the operands (all on one GPU), whatever device is current.
        The launch goes on `stream` (CuPy or PyTorch stream, or a cudaStream_t; one of another GPU is
        refused), else on that GPU's current stream of A's library: PyTorch's for tensors, CuPy's for
        the rest. stream_k=False and interior=False: see `bind`.
        """
        operands = (a, b, c, bias, residual, row_scale, col_scale, a_scale, b_scale, offs)
        options = (alpha, beta, stream_k, interior)
        signature = call_signature(operands)
        plan = None if signature is None else self._plans.get((signature.key, options, False))
        if plan is not None:  # a repeated call: its plan's launches at these addresses, nothing else
            made = plan.call(signature.pointers, stream)
            if made is not MISS:
                return c if c is not None else made
        launch = self._bind(operands, options, signature=signature)
        return run_returning_c(launch, c is not None, self.requirements.dtypes["C"], stream)

    def __repr__(self) -> str:
        req = self.requirements
        layouts = "".join("N" if req.layouts[name] == "row" else "T" for name in ("A", "B"))
        built = "" if self.built_for == self.metadata["target"] else f" built for {self.built_for}"
        return (f"<gemmdsl.Kernel {self.name}: {'x'.join(map(str, req.block_tile))} tile, "
                f"{self.metadata['threads']} threads, {layouts}, {self.metadata['bounds']} bounds, "
                f"{req.epilogue} epilogue, {self.metadata['target']}{built}>")


def load(spec_or_path: Any, *, text: str | None = None) -> Kernel:
    """Compile a spec (a `.gemm` path, or `text` with spec_or_path as its display name) and load it.

    Already compiled `Artifacts` are accepted as they are.
    """
    return Kernel(compile_spec(spec_or_path, text=text))


def compile_spec(spec_or_path: Any, *, text: str | None = None) -> Any:
    """A spec compiled, read back from the cache of compiled specs where it is there (load_cache.py)."""
    if text is not None:
        path = os.fspath(spec_or_path) if spec_or_path is not None else "<string>.gemm"
        return compiled_spec(SourceFile(path, text))
    if hasattr(spec_or_path, "cuda") and hasattr(spec_or_path, "metadata"):
        return spec_or_path
    if isinstance(spec_or_path, (str, os.PathLike)):
        return compiled_spec(SourceFile.read(spec_or_path))
    raise TypeError(f"load() takes a .gemm path, compiled Artifacts or text=..., got {type(spec_or_path).__name__}")
