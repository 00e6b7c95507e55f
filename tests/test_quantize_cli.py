"""`gemmdsl quantize` (docs/quantized.md): a float weight or a checkpoint's tensors into the kernel's .npz, and
every mistake an error line with exit status 1, no traceback and no file."""
from __future__ import annotations

import numpy as np
import pytest

from gemmdsl import ir
from gemmdsl.cli import main
from gemmdsl.quant_layout import QuantFormat, unpack
from gemmdsl.quantize import quantize

from test_quantize import awq_pack, gptq_pack


@pytest.fixture
def weight(tmp_path):
    w = np.random.default_rng(3).standard_normal((32, 256)).astype(np.float32)
    np.save(tmp_path / "w.npy", w)
    return w


def test_a_float_weight_becomes_the_kernel_layout(tmp_path, weight, capsys):
    out = tmp_path / "w4.npz"
    assert main(["quantize", str(tmp_path / "w.npy"), "-o", str(out), "--type", "u4", "--group", "64"]) == 0
    assert "32 x 256 u4 weights, group 64, zero points" in capsys.readouterr().out
    expected = quantize(weight, ir.DType.U4, 64, ir.DType.BF16)
    with np.load(out) as packed:
        arrays = {name: packed[name] for name in packed.files}
    assert arrays.pop("shape").tolist() == [32, 256]
    q, scales, zeros = unpack(arrays, 32, 256, QuantFormat("u4", "bf16", 64, True))
    assert np.array_equal(q, expected.q) and np.array_equal(scales, expected.scales)
    assert np.array_equal(zeros, expected.zeros)


@pytest.mark.parametrize("source", ["gptq", "awq"])
def test_a_checkpoint_s_tensors_become_canonical_arrays(tmp_path, source):
    rng = np.random.default_rng(4)
    q, zeros = rng.integers(0, 16, (16, 128), dtype=np.int8), rng.integers(1, 16, (16, 1), dtype=np.int8)
    scales = rng.uniform(0.01, 0.1, (1, 16)).astype(np.float16)
    qweight, qzeros = gptq_pack(q, zeros, 1) if source == "gptq" else awq_pack(q, zeros)
    prefix = "model.layers.0.mlp.up_proj."
    tensors = {"qweight": qweight, "qzeros": qzeros, "scales": scales}
    np.savez(tmp_path / "ckpt.npz", **{prefix + name: tensor for name, tensor in tensors.items()})
    out = tmp_path / "canonical.npz"
    assert main(["quantize", str(tmp_path / "ckpt.npz"), "--from", source, "--prefix", prefix, "--group", "128",
                 "--activation", "f16", "--canonical", "-o", str(out)]) == 0
    with np.load(out) as canonical:
        assert np.array_equal(canonical["q"], q) and np.array_equal(canonical["zeros"], zeros)
        assert np.array_equal(canonical["scales"], scales.T.astype(np.float32))


@pytest.mark.parametrize("arguments, message", [
    (["missing.npy"], "missing.npy: no such file"),
    (["w.npy", "--group", "512"], "K = 256 is not a multiple of the group (512)"),
    (["w.npy", "--group", "48"], "a power of two of at least 32"),
    (["w.npy", "--from", "awq"], "holds no 'qweight'"),
    (["two.npz"], "the file holds 2 arrays: name the weight with --weight"),
    (["two.npz", "--weight", "c"], "no weight named 'c' (found: a, b)"),
    (["flat.npy"], "a weight is a 2-D N x K matrix, found shape (8,)"),
    (["w.npy", "--from", "gptq", "--type", "s8"], "GPTQ checkpoints hold u4 codes, not s8"),
])
def test_mistakes_are_one_error_line(tmp_path, weight, capsys, arguments, message):
    np.savez(tmp_path / "two.npz", a=np.ones((2, 32)), b=np.ones((2, 32)))
    np.save(tmp_path / "flat.npy", np.ones(8))
    out = tmp_path / "out.npz"
    argv = ["quantize", str(tmp_path / arguments[0]), *arguments[1:], "-o", str(out)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("gemmdsl quantize: error: ") and message in err and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".out.npz*"))
