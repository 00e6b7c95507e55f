"""Every member of a family, the family itself (the member its rule picks) and cuBLAS at every shape of a set, timed
launch for launch in one process (bench.time_interleaved: events around back-to-back launches behind a spin
kernel, inputs rotated past L2). The JSON it writes is what the regret, prediction-error and per-shape tables of
docs/performance.md are computed from (scripts/family_tables.py); nothing in it is a prediction.

    python3 scripts/family_study.py specs/hgemm_h100_bf16c_family.gemmf --shapes random:200:1 --shapes models \
        --json out/study.json [--runs 10] [--budget 400]

A member that refuses a shape (an exact tile, an alignment) has no time there. The reference is the library's own
call on the operands as they are: cuBLAS, or for the FP8 families torch._scaled_mm with rowwise unit scales in the
family's accumulation mode (use_fast_accum); where it refuses the shape (torch._scaled_mm's K and N multiples of 16)
the row records its message as `reference_refused` and times the family and its members alone. --budget gives each family that
many seconds of wall time: it stops after the shape that passes them, keeping what was measured; the shapes run
in an order shuffled by a fixed seed, so a family stopped early has a sample of the set, not its head. The rows are
written as each shape finishes.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gemmdsl.bench import UNPADDED, buffer_sets, in_layouts, input_set, matrix_bytes, time_interleaved  # noqa: E402
from gemmdsl.family_kernel import load_family  # noqa: E402
from gemmdsl.precisions import comparison  # noqa: E402
from gemmdsl.shape_sets import RandomShapes, shape_source  # noqa: E402
from gemmdsl.family_kernel import read_shapes  # noqa: E402
from gemmdsl.verify import arrays_for, chain_operands  # noqa: E402


MAX_SETS = 256  # input sets rotated at most: a small shape's sets bind every member once each


def shapes_of(sources: list[str]) -> list[tuple[int, int, int]]:
    shapes: list[tuple[int, int, int]] = []
    for text in sources:
        source = shape_source(text)
        found = source.shapes() if isinstance(source, RandomShapes) else read_shapes(source)
        shapes += [shape for shape in found if shape not in shapes]
    random.Random(0).shuffle(shapes)
    return shapes


def member_launch(kernel, operands, chain):
    """A member's launch as the family would make it: on padded copies where it has that launcher."""
    bound = kernel.bind_padded(*operands, **chain)
    return bound if bound is not None else kernel.bind(*operands, **chain)


def study_family(path: str, shapes: list, runs: int, warmup: int, budget: float, rows: list, dump,
                 family_last: bool = False) -> None:
    import cupy

    deadline = time.monotonic() + budget
    family = load_family(path)
    compared = comparison(family.metadata)
    arrays = arrays_for(compared, seed=0)
    l2 = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["l2CacheSize"]
    for shape in shapes:
        if time.monotonic() > deadline:
            print(f"budget spent: {family.name} stopped before {shape}", flush=True)
            return
        try:
            row = study_shape(family, compared, arrays, l2, shape, runs, warmup, family_last)
        except Exception as err:  # noqa: BLE001 - a study records what failed and goes on
            row = {"family": family.name, "shape": list(shape), "error": f"{type(err).__name__}: {err}"}
            print(f"{family.name} {shape}: {row['error']}", flush=True)
            rows.append(row)
            continue
        rows.append(row)
        dump()
        if "cublas" in row:
            print(f"{family.name} {'x'.join(map(str, shape))}: cublas {row['cublas']:.4f} family {row['family']:.4f} "
                  f"ratio {row['cublas'] / row['family']:.3f} chosen {row['chosen']}", flush=True)
        else:
            print(f"{family.name} {'x'.join(map(str, shape))}: family {row['family']:.4f} chosen {row['chosen']}; "
                  f"reference refused: {row['reference_refused']}", flush=True)
        cupy.get_default_memory_pool().free_all_blocks()


def reference_launches(arrays, sets: list) -> tuple[list, str | None]:
    """The library's own call on each input set (arrays.library_call: cuBLAS, or torch._scaled_mm on the FP8
    operands as they are), or none and why, where it refuses the shape (torch._scaled_mm's K and N off 16)."""
    launches = [arrays.library_call(a, b, c) for a, b, c in sets]
    try:
        launches[0]()
    except (RuntimeError, ValueError) as err:
        return [], f"{type(err).__name__}: {str(err).splitlines()[0]}"
    return launches, None


def study_shape(family, compared, arrays, l2: int, shape, runs: int, warmup: int, family_last: bool = False) -> dict:
    """cuBLAS, the family and each member that takes `shape`, interleaved launch for launch: their medians (ms).
    Where the library refuses the shape, the row holds `reference_refused` (its message) instead of `cublas`."""
    count = min(buffer_sets(matrix_bytes(shape, compared.input_dtype), l2), MAX_SETS)
    sets = [input_set(arrays, compared, shape) for _ in range(count)]
    operands = [in_layouts(family, arrays, s) for s in sets]
    fuse = family.kernels[0].metadata.get("fuse")  # the members share one fuse chain (an FP8 family's scales)
    chains = [chain_operands(arrays, fuse, *shape, UNPADDED) if fuse else {} for _ in sets]
    reference, refused = reference_launches(arrays, sets)
    groups = [reference] if reference else []
    names = ["cublas"] if reference else []
    for index, kernel in enumerate(family.kernels):
        try:
            groups.append([member_launch(kernel, abc, chain) for abc, chain in zip(operands, chains)])
            names.append(f"member{index}")
        except ValueError:  # an exact tile, or operands this member refuses
            pass
    family_group = [family.bind(*abc, **chain) for abc, chain in zip(operands, chains)]
    at = len(groups) if family_last else int(bool(reference))  # right after the reference, where there is one
    groups.insert(at, family_group)
    names.insert(at, "family")
    times = time_interleaved(groups, runs, warmup)
    return {"shape": list(shape), "chosen": family.member_index(*shape), "sets": count,
            "members": [model.name for model in family.models], **({"reference_refused": refused} if refused else {}),
            **{name: statistics.median(t) for name, t in zip(names, times)}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("families", nargs="+")
    parser.add_argument("--shapes", action="append", required=True)
    parser.add_argument("--json", required=True)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--budget", type=float, default=1e9, help="seconds of wall time per family")
    parser.add_argument("--family-last", action="store_true",
                        help="time the family's launches after the members' in each round, not right after cuBLAS's")
    args = parser.parse_args(argv)
    shapes = shapes_of(args.shapes)
    rows: list[dict] = []
    out = Path(args.json)

    def dump() -> None:
        out.write_text(json.dumps({"shapes": args.shapes, "runs": args.runs, "rows": rows}))

    for path in args.families:
        study_family(path, shapes, args.runs, args.warmup, args.budget, rows, dump, args.family_last)
    dump()
    return 0


if __name__ == "__main__":
    sys.exit(main())
