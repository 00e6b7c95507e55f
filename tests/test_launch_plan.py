"""The launch rule is stated once (gemmdsl/launch_plan.py): every spec's LaunchPlan survives NAME.json, the
runtime decides a call's launch from what it reads back exactly as the compiler's plan does, and the
decisions follow schedule.py's split."""
import json
from dataclasses import replace
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl.compiler import compile_path
from gemmdsl.emit.launcher import LauncherEmitter
from gemmdsl.emitter import Emitter
from gemmdsl.launch_plan import DEQUANTIZE_MAX_GRID_X, GridRule, LaunchPlan, StreamKLaunch, dequantize_grid
from gemmdsl.paths.wgmma.launcher import TensorMapLauncher
from gemmdsl.rule import Refused
from gemmdsl.runtime import KernelRequirements, check_unclustered
from gemmdsl.schedule import LAUNCHED_MIN_SAVED_K_TILES, call_split

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.gemm"))


@cache
def compiled(path: Path):
    return compile_path(path)


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_every_launch_plan_round_trips_through_the_metadata(spec):
    artifacts = compiled(spec)
    written = json.loads(artifacts.metadata_json())["launch"]
    assert LaunchPlan.from_json(written) == artifacts.plan.launch
    assert KernelRequirements.from_metadata(json.loads(artifacts.metadata_json())).launch == artifacts.plan.launch


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_the_metadatas_launch_fields_are_the_plans(spec):
    artifacts = compiled(spec)
    metadata, launch = artifacts.metadata, artifacts.plan.launch
    assert metadata["grid"] == list(launch.grid) and metadata["block_tile"] == list(launch.block_tile)
    assert metadata["entries"] == metadata["launch"]["entries"]
    assert metadata["dynamic_smem_bytes"] == launch.smem_bytes and metadata["threads"] == launch.threads


shapes = st.tuples(st.integers(1, 20000), st.integers(1, 20000), st.integers(1, 70000), st.integers(1, 300),
                   st.integers(1, 200), st.integers(1, 8))


@settings(max_examples=300, deadline=None)
@given(spec=st.sampled_from(SPECS), shape=shapes)
def test_the_runtimes_decisions_from_the_json_are_the_compile_time_plans(spec, shape):
    m, n, k, batch, sms, per_sm = shape
    artifacts = compiled(spec)
    planned = artifacts.plan.launch
    read = KernelRequirements.from_metadata(json.loads(artifacts.metadata_json())).launch
    batch = batch if artifacts.spec.problem.batched else 1
    for launch in (planned, read):
        assert launch.grid_for(m, n, k, batch, sms) == planned.grid_for(m, n, k, batch, sms)
        assert launch.split_for(m, n, k, batch, sms, per_sm) == planned.split_for(m, n, k, batch, sms, per_sm)
        assert launch.workspace_for(m, n, k, sms) == planned.workspace_for(m, n, k, sms)
        assert launch.sub_launches(m, n, k, batch, sms, per_sm) == planned.sub_launches(m, n, k, batch, sms, per_sm)
    # ... and they are schedule.py's rule for the spec's schedule.
    tile = planned.block_tile
    tiles = -(-m // tile[0]) * -(-n // tile[1])
    schedule = artifacts.spec.block.schedule.value
    split = read.split_for(m, n, k, batch, sms, per_sm)
    if planned.stream_k is StreamKLaunch.LAUNCHED:
        assert split == call_split(tile, m, n, k, sms * per_sm, batch, LAUNCHED_MIN_SAVED_K_TILES)
    elif planned.stream_k is StreamKLaunch.PERSISTENT:
        assert split == call_split(tile, m, n, k, sms, aligned=True)
        # enough blocks for the stream-K ranges and for one wave of the plain tiles
        assert read.grid_for(m, n, k, batch, sms) == (max(split.sk_blocks, min(split.dp_tiles, sms)), 1, 1)
        sized = read.workspace_for(m, n, k, sms)
        assert (sized is None) == (split.sk_tiles == 0)
        if sized is not None:
            assert sized[1] == (sms * tile[0] * tile[1] * 4, sms * artifacts.plan.layout.consumers)
    else:
        assert split.sk_tiles == 0 and split.tiles == tiles
    if planned.grid_rule is GridRule.TILES:
        assert read.grid_for(m, n, k, batch, sms) == (tiles, 1, batch)
    elif planned.grid_rule is GridRule.PERSISTENT:
        assert schedule in ("persistent", "pingpong")
        assert read.grid_for(m, n, k, batch, sms) == (min(tiles * batch, sms), 1, 1)
    elif planned.grid_rule is GridRule.BATCH_TILES:
        assert read.grid_for(m, n, k, batch, sms) == (tiles * batch, 1, 1)


def test_the_runtime_reads_the_rule_without_the_compiler():
    """The launch rule sits below the runtime; loading the runtime loads neither the compiler nor an emitter."""
    code = ("import sys, gemmdsl.runtime, gemmdsl.launch_plan; "
            "print(sorted(m for m in sys.modules if m.startswith('gemmdsl')))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for module in ("gemmdsl.compiler", "gemmdsl.emit", "gemmdsl.plan", "gemmdsl.analysis", "gemmdsl.paths"):
        assert f"'{module}'" not in loaded


def clustered(name: str, cluster: tuple[int, int, int]):
    """The plan of spec `name` with thread-block clusters of `cluster` (no shipped spec has them yet)."""
    plan = compiled(ROOT / "specs" / f"{name}.gemm").plan
    return replace(plan, launch=replace(plan.launch, cluster=cluster))


def test_cluster_dimensions_round_trip_and_a_plain_plan_writes_none():
    plan = clustered("sgemm_h100", (2, 1, 1))
    written = plan.launch.to_json()
    assert written["cluster"] == [2, 1, 1] and LaunchPlan.from_json(written) == plan.launch
    plain = compiled(ROOT / "specs" / "sgemm_h100.gemm").plan.launch
    assert "cluster" not in plain.to_json() and LaunchPlan.from_json(plain.to_json()).cluster == (1, 1, 1)


@pytest.mark.parametrize("name, emitter", [("sgemm_h100", LauncherEmitter), ("checked_64x64", LauncherEmitter),
                                           ("hgemm_h100", TensorMapLauncher)])
def test_the_launcher_launches_clusters_through_cudaLaunchKernelEx_only_with_clusters(name, emitter):
    """Every GEMM kernel launch (tiles, interior and strips, stream-K and plain; the persistent TMA kernel)
    carries the cluster attribute; a plan of 1x1x1 launches with <<<>>> as before."""
    plain, cluster = Emitter(), Emitter()
    emitter(compiled(ROOT / "specs" / f"{name}.gemm").plan, plain).emit()
    emitter(clustered(name, (2, 1, 1)), cluster).emit()
    assert "cudaLaunchKernelEx" not in plain.text()
    launches = plain.text().count("smem_bytes, stream>>>")
    assert launches and cluster.text().count("cudaLaunchKernelEx(&config, ") == launches
    assert cluster.text().count("cluster[0].val.clusterDim.x = 2;") == launches
    assert "smem_bytes, stream>>>" not in cluster.text()


def test_the_runtime_refuses_to_launch_clusters_itself():
    artifacts = compiled(ROOT / "specs" / "sgemm_h100.gemm")
    metadata = json.loads(artifacts.metadata_json())
    metadata["launch"]["cluster"] = [2, 1, 1]
    with pytest.raises(ValueError, match="clusters of 2x1x1"):
        check_unclustered(KernelRequirements.from_metadata(metadata))
    check_unclustered(KernelRequirements.from_metadata(json.loads(artifacts.metadata_json())))


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 1 << 31), k=st.integers(0, 1 << 31), chunk_k=st.sampled_from((16, 32, 64)),
       items_per_block=st.sampled_from((1, 32, 48)))
def test_the_dequantize_grid_covers_every_item_of_the_packed_weight(n, k, chunk_k, items_per_block):
    """A block per items_per_block (16-row tile, chunk) items, the last one short; refused past CUDA's grid."""
    items = -(-n // 16) * -(-k // chunk_k)
    rule = dequantize_grid(chunk_k, items_per_block)
    blocks = -(-items // items_per_block)
    if blocks > DEQUANTIZE_MAX_GRID_X:
        with pytest.raises(Refused):
            rule.evaluate({"N": n, "K": k})
        return
    values = rule.evaluate({"N": n, "K": k})
    assert values["items"] == items and values["grid_x"] == blocks
    assert (values["grid_x"] - 1) * items_per_block < items <= values["grid_x"] * items_per_block or items == 0


@pytest.mark.parametrize("n, k", [(-1, 64), (64, -1)])
def test_the_dequantize_grid_refuses_negative_sizes(n, k):
    with pytest.raises(Refused):
        dequantize_grid(64, 32).evaluate({"N": n, "K": k})
