"""`gemmdsl tune TEMPLATE --shapes FILE`: a kernel family for a model's GEMM shapes.

Each shape of FILE (one `MxNxK` a line, optionally followed by a weight: how much of the model's time
that shape takes, 1 by default) is searched on its own (screen, rank, select, as `gemmdsl tune` does
for one size); the kept candidates of every shape are timed together in one run of the workers, the
tuning database reused as always. The fastest candidate at each shape is its winner; the winners, one
file each however many shapes they win, become the family's members, and the family file's measured
table (gemmdsl/family.py) lists the shapes where the family's cycle model would pick another member
than the measured winner. The family is compiled before anything is written: one whose winners hold
no `bounds: checked` member is refused, since a family must take every shape.
"""
from __future__ import annotations

import argparse
import datetime
import math
import sys
from pathlib import Path
from typing import Sequence

from .runtime.commands import parse_sizes
from .runtime.operands import Size
from .source import CompileError, SourceFile
from .tune import (refuse_late_failures, run_tasks, search, template_stem, time_with_options, timing_from_rows,
                   timing_tasks, winner_text)
from .tune.command import _progress


def read_weighted_shapes(path: str | Path) -> list[tuple[Size, float]]:
    """`MxNxK [weight]` per line, `#` comments; a bad line raises ValueError naming the file and line."""
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot read the shape list: {err}") from None
    shapes: dict[Size, float] = {}
    for number, line in enumerate(lines, 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        try:
            if len(fields) > 2:
                raise ValueError(f"expected `MxNxK [weight]`, found {len(fields)} fields")
            [shape] = parse_sizes(fields[0])
            weight = float(fields[1]) if len(fields) == 2 else 1.0
            if not weight > 0 or math.isinf(weight):
                raise ValueError(f"the weight {fields[1]} is not a positive number")
            if shape in shapes:
                raise ValueError(f"{fields[0]} is listed twice")
        except ValueError as err:
            raise ValueError(f"{path}:{number}: {err}") from None
        shapes[shape] = weight
    if not shapes:
        raise ValueError(f"{path}: no shapes in the file")
    return list(shapes.items())


def tune_family_main(args: argparse.Namespace, path: str, candidates: Sequence) -> int:

    try:
        shapes = read_weighted_shapes(args.shapes)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    output = Path(args.output or f"{template_stem(path)}_family.gemmf")
    name = args.name or template_stem(output)
    refused = refuse_late_failures(args, [name, f"{name}_m{len(shapes) - 1}"], [("-o", str(output))])
    if refused is not None:
        return refused
    kept_by_shape, tasks = {}, []
    for shape, weight in sorted(shapes, key=lambda item: -item[1]):  # the heaviest shapes are timed first
        _, _, kept, _, _ = search(candidates, [shape], args, path)
        print(f"{'x'.join(map(str, shape))} (weight {weight:g}): {len(kept)} candidate(s) kept to time")
        kept_by_shape[shape] = kept
        tasks += timing_tasks(kept, [shape], args.runs, args.warmup, path)
    if not tasks:
        print(f"{path}: error: no candidate survived the screening at any shape; nothing to time", file=sys.stderr)
        return 1
    survivors = list({s.candidate.name: s for kept in kept_by_shape.values() for s in kept}.values())
    rows = time_with_options(args, path, lambda pool, db: run_tasks(tasks, survivors, pool, db, args.jobs, path,
                                                                    _progress))
    if isinstance(rows, int):
        return rows
    names = {task.spec_hash: task.name for task in tasks}
    winners: dict[Size, tuple] = {}
    for shape, _ in shapes:
        timing = timing_from_rows(rows, names, [shape])
        if timing.measurements:
            winners[shape] = (timing.ranking()[0], timing)
        else:
            print(f"note: no candidate was timed at {'x'.join(map(str, shape))}; the model picks its member",
                  file=sys.stderr)
    if not winners:
        print("error: no candidate could be timed at any shape", file=sys.stderr)
        return 1
    by_name = {s.candidate.name: s for s in survivors}
    return write_family(output, name, path, args.shapes, shapes, winners, by_name)


def write_family(output: Path, name: str, template_path: str, shapes_path: str, shapes: Sequence[tuple[Size, float]],
                 winners: dict, by_name: dict) -> int:
    """Write one member spec per distinct winner and the family file, once the family compiles."""
    from .compiler import write_outputs
    from .family import choose, compile_family
    from .tune_db import spec_hash

    member_of: dict[str, int] = {}  # spec hash -> member number
    members: list[tuple[str, str]] = []  # (file name, text)
    for shape, (measurement, timing) in winners.items():
        candidate = by_name[measurement.name].candidate
        key = spec_hash(candidate.text)
        if key not in member_of:
            member_of[key] = len(members)
            member = f"{name}_m{len(members)}"
            header = [f"{member}: a member of {name}, tuned by `gemmdsl tune {template_path} --shapes {shapes_path}`",
                      f"candidate {candidate.name}, choices {candidate.describe()}; device {timing.device}"]
            members.append((f"{member}.gemm", winner_text(candidate, member, header)))
    wins = {index: [s for s, (m, _) in winners.items() if member_of[spec_hash(by_name[m.name].candidate.text)] == index]
            for index in range(len(members))}
    directory = output.parent if str(output.parent) else Path(".")
    sources = {file: text for file, text in members}

    def family_text(measured: Sequence[tuple[Size, int]]) -> str:
        lines = [f"// {name}: tuned by `gemmdsl tune {template_path} --shapes {shapes_path}` on "
                 f"{datetime.date.today().isoformat()}, {next(iter(winners.values()))[1].device}",
                 "// shape: winner, % of cuBLAS timed beside it (weight)"]
        weights = dict(shapes)
        for shape, (measurement, _) in winners.items():
            index = member_of[spec_hash(by_name[measurement.name].candidate.text)]
            lines.append(f"//   {'x'.join(map(str, shape))}: {members[index][0]}, "
                         f"{measurement.geomean_pct_cublas:.1f}% ({weights[shape]:g})")
        total = sum(weights[s] for s in winners)
        mean = math.exp(sum(weights[s] * math.log(m.geomean_pct_cublas) for s, (m, _) in winners.items()) / total)
        lines.append(f"// weighted geomean over the shapes: {mean:.1f}% of cuBLAS")
        lines.append(f"family {name} {{")
        lines += [f"    use {file};  // wins {', '.join('x'.join(map(str, s)) for s in wins[i])}"
                  for i, (file, _) in enumerate(members)]
        if measured:
            lines.append("    measured {  // where the cycle model picks another member than the one timed fastest")
            lines += [f"        {'x'.join(map(str, s))}: {members[i][0]};" for s, i in measured]
            lines.append("    }")
        return "\n".join(lines + ["}"]) + "\n"

    try:
        family = compile_with_members(compile_family, output, family_text(()), sources)
        measured = [(shape, member_of[spec_hash(by_name[m.name].candidate.text)]) for shape, (m, _) in winners.items()]
        disagree = [(shape, index) for shape, index in measured if choose(family.models, *shape) != index]
        text = family_text(disagree)
        compile_with_members(compile_family, output, text, sources)
    except CompileError as err:
        print(err.render(), file=sys.stderr)
        print(f"error: the winners do not make a family ({len(members)} member(s)); a template needs a "
              "`bounds: checked` candidate among the winners, e.g. a `bounds: {exact,checked}` group",
              file=sys.stderr)
        return 1
    write_outputs(directory, {**{file: data.encode() for file, data in sources.items()}, output.name: text.encode()})
    print(f"family {name}: {len(members)} member(s) for {len(winners)} shape(s), {len(disagree)} measured "
          f"override(s) of the model, written to {output}")
    return 0


def compile_with_members(compile_family, output: Path, text: str, sources: dict[str, str]):
    """Compile the family text against member texts not yet written (in a scratch directory)."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        for file, member in sources.items():
            (Path(scratch) / file).write_text(member)
        return compile_family(SourceFile(str(Path(scratch) / output.name), text))
