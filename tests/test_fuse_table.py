"""scripts/fuse_table.py: the fused kernels' ratios to their twins and library baselines, from bench's JSON."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("fuse_table", ROOT / "scripts" / "fuse_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(name, ms, size=(4096, 4096, 4096)):
    m, n, k = size
    return {"name": name, "m": m, "n": n, "k": k, "median_ms": ms}


def test_each_size_gives_the_baselines_time_over_the_kernels(tmp_path):
    script = _script()
    gelu, residual = script.formula("linear_gelu"), script.formula("hgemm_h100_relu_residual")
    report = {"rows": [row("linear_gelu", 0.200), row("linear_bf16", 0.190), row(f"cuBLASLt: {gelu}", 0.210),
                       row(f"torch unfused: {gelu}", 0.300), row("hgemm_h100_relu_residual", 0.250),
                       row(f"torch unfused: {residual}", 0.325), row("linear_gelu", None, (1, 2, 3)),
                       row("linear_gelu", 1.0, (8192, 8192, 8192))]}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(report))
    lines = script.table([str(path)])
    assert lines[0].split()[:2] == ["4096x4096x4096", "linear_gelu"] and "0.2000 ms" in lines[0]
    assert "linear_bf16 0.950x" in lines[0] and f"cuBLASLt: {gelu} 1.050x" in lines[0]
    assert f"torch unfused: {gelu} 1.500x" in lines[0]
    assert lines[1].split()[:2] == ["4096x4096x4096", "hgemm_h100_relu_residual"] and "linear_bf16 0.760x" in lines[1]
    assert f"torch unfused: {residual} 1.300x" in lines[1] and "cuBLASLt" not in lines[1]
    assert lines[2].split() == ["8192x8192x8192", "linear_gelu", "1.0000", "ms"]  # no baseline there
    assert len(lines) == 3  # the unmeasured row is left out


def test_a_kernel_is_held_to_the_baseline_run_interleaved_with_it(tmp_path):
    """bench writes each kernel's baselines just before it: two kernels with one baseline get their own runs."""
    script = _script()
    gelu = script.formula("linear_gelu")
    report = {"rows": [row(f"cuBLASLt: {gelu}", 0.200), row("linear_gelu", 0.200),
                       row(f"cuBLASLt: {gelu}", 0.220), row("linear_gelu_pingpong", 0.200)]}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(report))
    first, second = script.table([str(path)])
    assert f"cuBLASLt: {gelu} 1.000x" in first and f"cuBLASLt: {gelu} 1.100x" in second
