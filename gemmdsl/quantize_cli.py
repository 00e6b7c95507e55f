"""`gemmdsl quantize`: a weight (a float `.npy`/`.npz`, or a GPTQ or AWQ checkpoint's tensors) into the `.npz` the
dequantizing kernel takes (quant_layout.pack), or with --canonical into the canonical arrays (docs/quantized.md).

    gemmdsl quantize w.npy --type s4 --group 128 -o w4.npz
    gemmdsl quantize layer.npz --from gptq --prefix model.layers.0.mlp.down_proj. --group 128 -o down.npz
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from . import ir
from .quant_layout import QuantFormat, pack, packed_bytes
from .quantize import Canonical, QuantizeError, import_awq, import_gptq, quantize
from .source import printable

WEIGHT_TYPES = ("s4", "u4", "s8", "e4m3")
CHECKPOINT_TENSORS = ("qweight", "qzeros", "scales")


def parse_group(text: str) -> int | None:
    if text == "channel":
        return None
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a group size such as 128, or channel, not {text!r}")
    return int(text)


def add_quantize_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", metavar="INPUT", help="a float N x K weight (.npy, or .npz with --weight), or a "
                                                       "GPTQ or AWQ checkpoint's tensors (.npz, with --from)")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.npz", help="the .npz to write")
    parser.add_argument("--from", dest="source", choices=("float", "gptq", "awq"), default="float",
                        help="what INPUT holds (default: a float weight to quantize here)")
    parser.add_argument("--type", choices=WEIGHT_TYPES, default="s4",
                        help="the weight type to quantize a float weight to (default s4; checkpoints are u4)")
    parser.add_argument("--group", type=parse_group, default=128, metavar="N|channel",
                        help="weights along K per scale (default 128), or channel")
    parser.add_argument("--activation", choices=("bf16", "f16"), default="bf16",
                        help="A's type, in which the scales are stored (default bf16)")
    parser.add_argument("--weight", metavar="NAME", help="the float weight's name in an .npz")
    parser.add_argument("--prefix", default="", metavar="TEXT",
                        help="what precedes qweight, qzeros, scales (and g_idx) in a checkpoint's .npz")
    parser.add_argument("--gptq-zeros", choices=("plus-one", "stored"), default="plus-one",
                        help="GPTQ's zero points: stored less one, as its original format (default), or as they "
                             "are (the gptq_v2 format)")
    parser.add_argument("--canonical", action="store_true",
                        help="write the canonical arrays q, scales (and zeros) instead of the kernel's layout")


def quantize_main(args: argparse.Namespace) -> int:
    try:
        canonical, w = _canonical(args)
        arrays = canonical.arrays() if args.canonical else _packed(canonical, args.activation)
        _write_npz(Path(args.output), arrays)
    except (QuantizeError, ValueError, OSError, zipfile.BadZipFile) as err:
        print(f"gemmdsl quantize: error: {err}", file=sys.stderr)
        return 1
    n, k = canonical.q.shape
    fmt = _format(canonical, args.activation)
    group = "per channel" if canonical.group is None else f"group {canonical.group}"
    print(f"wrote {printable(args.output)}: {n} x {k} {canonical.dtype.value} weights, {group}"
          f"{', zero points' if canonical.zeros is not None else ''}; "
          f"{packed_bytes(n, k, fmt) / (n * k):.4g} bytes per weight in the kernel's layout")
    if w is not None:
        print(f"largest |w - dequantized|: {np.abs(canonical.dequantized() - w).max():.4g}")
    return 0


def _canonical(args: argparse.Namespace) -> tuple[Canonical, np.ndarray | None]:
    """The canonical weight, and the float weight it was quantized from (None for a checkpoint)."""
    activation = ir.DType(args.activation)
    arrays = _read(Path(args.input))
    if args.source == "float":
        w = _float_weight(arrays, args.weight)
        return quantize(w, ir.DType(args.type), args.group, activation), np.asarray(w, dtype=np.float64)
    if args.type != "s4" and args.type != "u4":
        raise QuantizeError(f"{args.source.upper()} checkpoints hold u4 codes, not {args.type}")
    tensors = {}
    for name in (*CHECKPOINT_TENSORS, "g_idx"):
        key = args.prefix + name
        if key not in arrays and name != "g_idx":
            found = ", ".join(sorted(arrays)) or "none"
            raise QuantizeError(f"{printable(args.input)} holds no {key!r} (found: {found})")
        tensors[name] = arrays.get(key)
    if args.source == "gptq":
        return import_gptq(tensors["qweight"], tensors["qzeros"], tensors["scales"], args.group, activation,
                           zeros_plus_one=args.gptq_zeros == "plus-one", g_idx=tensors["g_idx"]), None
    return import_awq(tensors["qweight"], tensors["qzeros"], tensors["scales"], args.group, activation), None


def _read(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise QuantizeError(f"{printable(str(path))}: no such file")
    if path.suffix not in (".npy", ".npz"):
        raise QuantizeError(f"{printable(str(path))}: expected a .npy or .npz file")
    loaded = np.load(path, allow_pickle=False)
    if isinstance(loaded, np.ndarray):
        return {"": loaded}
    with loaded:
        return {name: loaded[name] for name in loaded.files}


def _float_weight(arrays: dict[str, np.ndarray], name: str | None) -> np.ndarray:
    if name is not None:
        if name not in arrays:
            raise QuantizeError(f"no weight named {name!r} (found: {', '.join(sorted(arrays)) or 'none'})")
        return arrays[name]
    if len(arrays) != 1:
        raise QuantizeError(f"the file holds {len(arrays)} arrays: name the weight with --weight "
                            f"(found: {', '.join(sorted(arrays))})")
    return next(iter(arrays.values()))


def _format(canonical: Canonical, activation: str) -> QuantFormat:
    return QuantFormat(canonical.dtype.value, activation, canonical.group, canonical.zeros is not None)


def _packed(canonical: Canonical, activation: str) -> dict[str, np.ndarray]:
    n, k = canonical.q.shape
    packed = pack(canonical.q, canonical.scales, canonical.zeros, _format(canonical, activation))
    return {**packed, "shape": np.array([n, k], dtype=np.int64)}


def _write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Written under another name and renamed into place: never a half-written file."""
    if path.suffix != ".npz":
        raise QuantizeError(f"{printable(str(path))}: the output is an .npz file")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".npz", delete=False) as out:
        np.savez(out, **arrays)
    os.replace(out.name, path)
