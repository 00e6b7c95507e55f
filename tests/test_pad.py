"""Padded copies for TMA (paths/wgmma/pad.py): which operands are copied and how, the padded launcher and kernel
in every 2-D wgmma file, and the family launchers that run a refused call on them before the fallback."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gemmdsl.compiler import compile_path
from gemmdsl.family import compile_family_path
from gemmdsl.frontend import load_spec
from gemmdsl.paths import path_of
from gemmdsl.paths.wgmma.pad import STORAGE
from gemmdsl.launch_plan import PAD_GRID, PAD_MIN_REUSE, PAD_MIN_WORK, PAD_ROW_BYTES, PAD_SEGMENT, PAD_THREADS
from gemmdsl.runtime import KernelRequirements, OperandView, padded_copies

ROOT = Path(__file__).resolve().parent.parent
WGMMA_SPECS = [path for path in sorted((ROOT / "specs").glob("*.gemm"))
               if path_of(load_spec(path)).name in ("wgmma", "wgmma_fp8")]


def requirements(name: str) -> KernelRequirements:
    return KernelRequirements.from_metadata(compile_path(ROOT / "specs" / f"{name}.gemm").metadata)


@given(spec=st.sampled_from(["hgemm_h100_bf16c", "hgemm_h100_nn", "tf32_h100", "fp8_h100"]),
       m=st.integers(1, 9000), n=st.integers(1, 9000), k=st.integers(1, 9000),
       extra=st.tuples(st.integers(0, 20), st.integers(0, 20)), offset=st.tuples(st.integers(0, 17), st.integers(0, 17)))
def test_an_operand_is_copied_where_tma_refuses_it_or_reads_it_slowly_and_its_reuse_pays(spec, m, n, k, extra, offset):
    """Copied: what TMA refuses (not 16-byte aligned), and rows off a 32-byte sector where each element is used
    PAD_MIN_REUSE times or more (N for A, M for B) in a call of PAD_MIN_WORK multiply-adds or more; the copy's rows
    128 bytes apart, as the C launcher makes them."""
    req = requirements(spec)
    views = {}
    for (name, rows, cols), more, off in zip((("A", m, k), ("B", k, n)), extra, offset):
        itemsize = {"bfloat16": 2, "float16": 2, "float32": 4}.get(req.dtypes[name], 1)
        inner = cols if req.layouts[name] == "row" else rows
        views[name] = OperandView(name, rows, cols, 1, inner + more, 0, 1 << 20 | off * itemsize, itemsize)
    copies = padded_copies(req, views)
    for name, view in views.items():
        refused = view.pointer % 16 != 0 or (view.ld * view.itemsize) % 16 != 0
        off_sector = view.pointer % 32 != 0 or (view.ld * view.itemsize) % 32 != 0
        reuse = n if name == "A" else m
        assert (name in copies) == (refused or off_sector and reuse >= PAD_MIN_REUSE and m * n * k >= PAD_MIN_WORK)
        if name in copies:
            rows, cols, ld = copies[name]
            outer, inner = (view.rows, view.cols) if req.layouts[name] == "row" else (view.cols, view.rows)
            assert (rows, cols) == (outer, inner)
            assert (ld * view.itemsize) % 128 == 0 and cols <= ld < cols + 128 // view.itemsize


@pytest.mark.parametrize("path", WGMMA_SPECS, ids=lambda path: path.stem)
def test_every_2d_wgmma_file_has_the_padded_launcher_over_its_own(path):
    artifacts = compile_path(path)
    name, problem = artifacts.name, artifacts.spec.problem
    entry = artifacts.metadata["entries"].get("pad_operands")
    if problem.batched or problem.grouped:
        assert entry is None and "_launch_ld_padded" not in artifacts.cuda
        return
    assert entry == f"{name}_pad_operands"
    assert f'extern "C" __global__ void __launch_bounds__(256) {entry}(' in artifacts.cuda
    launcher = artifacts.cuda[artifacts.cuda.index(f'extern "C" cudaError_t {name}_launch_ld_padded('):]
    launcher = launcher[:launcher.index("\n}\n")]
    # copies what TMA refuses or reads off its sectors, launches the copy and then the member's own launcher on the
    # copies, frees after
    order = ["cudaMallocAsync", f"{entry}<<<", f"{name}_launch_ld(pad_a ? a_copy : A", "cudaFreeAsync"]
    assert [launcher.index(step) for step in order] == sorted(launcher.index(step) for step in order)
    assert "% 16 != 0" in launcher and "% 32 != 0" in launcher and f">= {PAD_MIN_REUSE}" in launcher


@pytest.mark.parametrize("family", ["hgemm_h100_bf16c_family", "tf32_h100_family", "linear_gelu_family",
                                    "moe_grouped_family"])
def test_a_family_launcher_calls_its_tma_members_padded_launcher_then_the_fallback(family):
    compiled = compile_family_path(ROOT / "specs" / f"{family}.gemmf")
    cuda = compiled.cuda
    padded = [member.artifacts.plan.launch.entries.pad_operands is not None for member in compiled.members]
    if not any(padded):
        assert f"{family}_padded" not in cuda
        return
    table = re.search(rf"{family}_padded\[\]\)\(.*?\) = \{{(.*)\}};", cuda).group(1).split(", ")
    assert [entry != "nullptr" for entry in table] == padded
    for launcher in ("launch", "launch_ld"):
        body = cuda[cuda.index(f'extern "C" cudaError_t {family}_{launcher}('):]
        body = body[:body.index("\n}\n")]
        assert body.index(f"{family}_padded[member](") < body.index(f"{family}_choose(M, N, K, false)")


@pytest.mark.parametrize("k, offset, promotion", [(1024, 0, "256"), (1000, 0, "128"), (1008, 0, "256"), (1024, 8, "128"),
                                                  (1024, 16, "256")])
def test_a_tensor_map_fetches_256_bytes_into_l2_unless_its_rows_start_off_a_sector(k, offset, promotion):
    """BF16 rows of K = 1000 start 16 bytes into a 32-byte sector every other row (a pointer 8 elements in, every
    row): those maps use 128-byte L2 promotion, as the C launcher's tensor_map_of decides."""
    from gemmdsl.tensor_maps import L2_PROMOTION_128B, L2_PROMOTION_256B, tensor_map_requests

    artifacts = compile_path(ROOT / "specs" / "hgemm_h100_bf16c.gemm")
    base = 1 << 20
    requests = tensor_map_requests(artifacts.metadata["tensor_maps"], {"a": base + 2 * offset, "b": base, "c": None},
                                   512, 512, k, {"a": k, "b": 1024, "c": 512})
    expected = {"128": L2_PROMOTION_128B, "256": L2_PROMOTION_256B}[promotion]
    assert requests["a"].promotion == expected and requests["b"].promotion == L2_PROMOTION_256B
    assert ("off_sector ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B : CU_TENSOR_MAP_L2_PROMOTION_L2_256B"
            in artifacts.cuda)


PAD_SPECS = {1: "fp8_h100", 2: "hgemm_h100_bf16c", 4: "tf32_h100"}  # a wgmma spec per element size


@pytest.fixture(scope="module")
def pad_runners(tmp_path_factory):
    """tests/emulator/pad_runner.cpp built around each element size's padded-copy kernel, cut from its file."""
    if shutil.which("g++") is None:
        pytest.skip("no g++")
    runners = {}
    for size, spec in PAD_SPECS.items():
        cuda = compile_path(ROOT / "specs" / f"{spec}.gemm").cuda
        entry = f"{spec}_pad_operands"
        start = cuda.rindex("\n", 0, cuda.index(f" {entry}(")) + 1
        kernel = cuda[start:cuda.index("\n}\n", start) + 3]
        directory = tmp_path_factory.mktemp(f"pad{size}")
        (directory / "kernel.inc").write_text(kernel)
        runner = directory / "runner"
        subprocess.run(["g++", "-std=c++17", "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                        "-Wno-unknown-pragmas", f"-I{directory}", '-DPAD_KERNEL="kernel.inc"', f"-DPAD_ENTRY={entry}",
                        f"-DPAD_THREADS={PAD_THREADS}", f"-DPAD_ELEMENT={STORAGE[size]}", str(ROOT / "tests" / "emulator" / "pad_runner.cpp"),
                        "-o", str(runner)], check=True, capture_output=True, text=True)
        runners[size] = runner
    return runners


def run_pad(runner: Path, size: int, a: tuple[int, int, int], b: tuple[int, int, int], blocks: int | None = None) -> str:
    """Copies A and B (rows, cols, ld) into rows PAD_ROW_BYTES apart on `blocks` blocks (PAD_GRID's by default)."""
    row = PAD_ROW_BYTES // size
    args = [str(size)]
    for rows, cols, ld in (a, b):
        args += [str(rows), str(cols), str(ld), str(-(-cols // row) * row)]
    if blocks is None:
        blocks = PAD_GRID.evaluate({"a_rows": a[0], "a_cols": a[1], "b_rows": b[0], "b_cols": b[1]})["pad_blocks"]
    done = subprocess.run([str(runner), *args, str(blocks)], capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


@pytest.mark.parametrize("a, b", [((3, 5001, 5001), (5, 5001, 5003)),  # decode: a few rows of a long K
                                  ((700, 2, 2), (3, 2, 2)),  # rows shorter than a warp
                                  ((0, 77, 77), (513, 77, 80)),  # A not copied
                                  ((37, 1, 1), (0, 9, 9))])
@pytest.mark.parametrize("size", sorted(PAD_SPECS))
def test_the_padded_copy_kernel_copies_every_element_and_nothing_else(pad_runners, size, a, b):
    assert run_pad(pad_runners[size], size, a, b).strip() == "ok"


@given(size=st.sampled_from(sorted(PAD_SPECS)), rows=st.tuples(st.integers(0, 40), st.integers(0, 40)),
       cols=st.tuples(st.integers(1, 1500), st.integers(1, 1500)), extra=st.tuples(st.integers(0, 9), st.integers(0, 9)),
       blocks=st.one_of(st.none(), st.integers(1, 3)))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_padded_copy_covers_any_extents_on_any_grid(pad_runners, size, rows, cols, extra, blocks):
    """Rows of one segment or several, a matrix left out, and a grid smaller than the segments (the blocks stride
    over them)."""
    a, b = ((r, c, c + e) for r, c, e in zip(rows, cols, extra))
    assert run_pad(pad_runners[size], size, a, b, blocks).strip() == "ok"


def test_the_padded_copy_spreads_a_few_long_rows_over_the_gpu():
    """A decode call's copy: 16 + 8 rows of K = 28,000 take as many blocks as their elements need, not 3."""
    grid = PAD_GRID.evaluate({"a_rows": 16, "a_cols": 28000, "b_rows": 8, "b_cols": 28000})["pad_blocks"]
    assert grid == -(-(16 + 8) * -(-28000 // PAD_SEGMENT) // 8) > 132
