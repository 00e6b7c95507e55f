"""`batch: grouped` on the wgmma path: G GEMMs of one N and K, each with its own M (a mixture of experts'
tokens per expert), in one persistent launch. The layout is torch._grouped_mm's 2-D x 3-D one: A holds
every group's rows stacked (M x K), B one matrix per group (G x N x K for `b: col`, nn.Linear's weights;
G x K x N for `b: row`), C the stacked rows of the results (M x N); `offs`, G int32 on the GPU, are the
groups' cumulative row ends.

The scheduler (`GroupedScheduler`) walks the groups' tiles with a cursor, the walk grouped_schedule.py
states and the tests check: per tile, `group`, the group's rows and (through the raster) block_m and
block_n; inside the tile's body `M` is the group's end row, so the epilogue's row guards stop at the
group's last row. The copies read A through a map over all M rows (rows of the next group that fill a
partial tile multiply into rows no store writes) and B through a 3-D map whose third dimension is the
group, so tails in n and k read zeros. A tile whose rows all lie in its group leaves through TMA stores
over C's map; a partial one (the group's last, when its rows are not a multiple of BM) through guarded
stores from the accumulators (store.py's stage_test), since TMA would clip it at C's last row only.

The launcher (`GroupedTensorMapLauncher`) cannot count the tiles without reading offs from the GPU; it
starts grouped_schedule.grid_rule's blocks, one per SM at most, and the blocks that find no tile exit.
"""
from __future__ import annotations

from typing import Callable

from ... import ir
from ...abi import fuse_arguments, outer_extent, tile_count
from ...emit.launcher import emit_kernel_launch
from ...expr import Const, Var
from ...grouped_schedule import grid_rule, group_end, group_tiles
from ...rule import Index
from ...emit.scheduler import emit_raster
from .launcher import TensorMapLauncher
from .persistent import PersistentScheduler

MAX_GROUPS = 65535  # B's map's third dimension (cuTensorMapEncodeTiled takes up to 2^32) kept to an int's comfort


def grouped_contract(spec: ir.KernelSpec) -> list[str]:
    """The launchers' rules on the groups, for the .cu's and the header's comments."""
    b_rows = outer_extent(spec, ir.Operand.B)
    return [f"- 1 <= groups <= {MAX_GROUPS} and offs not null: offs holds `groups` int32 on the GPU, the groups'",
            "  cumulative row ends, nondecreasing, offs[groups - 1] <= M (group g owns rows offs[g - 1] .. offs[g] - 1",
            "  of A and C, offs[-1] = 0; the kernel clamps each end to [the previous end, M]); group g's B is at",
            f"  B + g * ldb * {b_rows}. Rows of C from offs[groups - 1] on are never written, K = 0 included."] + (
        ["- row_scale: M f32 values, one per row of A (each token's); col_scale: groups x N f32 values, row-major",
         "  (group g's N at col_scale + g * N)."] if spec.fuse is not None and spec.fuse.scale is not None else [])


class GroupedScheduler(PersistentScheduler):
    def emit_counts(self) -> None:
        o = self.out
        o.line(f"const int n_tiles = {tile_count(self.spec, 'N', 'BN')};  // tiles across N, in every group")
        o.line("const int k_tiles = (K + BK - 1) / BK;")

    def emit_loop(self, body: Callable[[], None], coordinates: bool = True) -> None:
        """for each of this block's tiles: `group`, `M` (the group's end row), block_m and block_n, then `body`.
        The cursor (group, its first row and its first tile) only moves forward, since a block's tiles grow."""
        o = self.out
        with o.block(""):
            o.comment("The cursor: the group of the block's next tile, that group's rows and first tile (grouped_schedule.py).\n"
                      "Group ends are clamped to [the previous end, rows], so no offs sends a tile outside A and C.")
            offs, row, end = Var("offs"), Var("group_row"), Var("group_end")
            o.line("int group = 0, group_row = 0, group_tile = 0;")
            o.line(f"int group_end = {group_end(Index(offs, Const(0)), 0).render()};")
            o.line(f"int group_tiles = {group_tiles(0, end).render()};")
            with o.block("for (int tile = blockIdx.x;; tile += gridDim.x)"):
                with o.block("while (tile >= group_tile + group_tiles && group < groups)"):
                    o.line("group_tile += group_tiles;")
                    o.line("if (++group == groups) break;")
                    o.line("group_row = group_end;")
                    o.line(f"group_end = {group_end(Index(offs, Var('group')), row).render()};")
                    o.line(f"group_tiles = {group_tiles(row, end).render()};")
                o.line("if (group == groups) break;")
                if coordinates:
                    o.line("const int group_local = tile - group_tile;  // the tile's number within its group")
                    emit_raster(self.spec, o, "group_local", rows="(group_end - group_row)", first_row="group_row")
                body()


    def emit_consumer_names(self) -> None:
        """The epilogue's `M`: the end of the tile's group, where its row guards stop."""
        self.out.line("const int M = group_end;  // the tile's rows end with its group's")


class GroupedTensorMapLauncher(TensorMapLauncher):
    """NAME_launch_ld of a grouped spec, which checks the call and launches (NAME_launch passes on to it): both
    take offs and the group count after K."""

    def emit_launch(self) -> None:
        o, spec, layout, launch = self.out, self.spec, self.layout, self.plan.launch
        bm, bn, _ = launch.block_tile
        invalid = "return cudaErrorInvalidValue;"
        with o.block(f'extern "C" cudaError_t {self.names["launcher_ld"]}({self.parameters["launcher_ld"]})'):
            self._emit_extent_checks(invalid, first=f" || groups < 1 || groups > {MAX_GROUPS} || offs == nullptr")
            self._emit_tma_alignment_checks(invalid, note=f"; group g's B lies g * ldb * "
                                                          f"{outer_extent(spec, ir.Operand.B)} elements after the first")
            o.line("int device = 0, sms = 0;")
            o.line("cudaError_t status = cudaGetDevice(&device);")
            o.line("if (status == cudaSuccess) "
                   "status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);")
            o.line("if (status != cudaSuccess) return status;")
            grid_rule(bm, bn).render_inline(o)
            o.line("const long long stride_a = (long long)lda * M, stride_c = (long long)ldc * M;  // one matrix each")
            o.line(f"const long long stride_b = (long long)ldb * {outer_extent(spec, ir.Operand.B)};")
            o.line(f"const {self.name}_map_cache* maps = nullptr;")
            c_arguments = "C, ldc, stride_c, " if layout.c_box is not None else ""
            o.line(f"cudaError_t err = {self.name}_tensor_maps(A, lda, stride_a, B, ldb, stride_b, {c_arguments}"
                   "M, N, K, groups, &maps);")
            o.line("if (err != cudaSuccess) return err;")
            self._emit_kernel_smem()
            c_map = "maps->map_c, " if layout.c_box is not None else ""
            emit_kernel_launch(o, launch, "kernel", "dim3((unsigned)blocks)", "smem_bytes",
                               f"maps->map_a, maps->map_b, {c_map}C, M, N, K, ldc, alpha, beta, "
                               f"{fuse_arguments(spec)}offs, groups")
            o.line("return cudaGetLastError();")
