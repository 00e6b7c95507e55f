"""docs/language.md's key tables state what the parser takes: every key has a row, each integer key the
parser's range (`parser.IntRange`), each named value the parser's choices (`parser.Choice`), each default
what the parser fills in, and the limits stated in prose the validator's."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import pytest

from gemmdsl import ir, parser, targets, validate
from gemmdsl.paths import path_of

ROOT = Path(__file__).resolve().parent.parent
LANGUAGE = ROOT / "docs" / "language.md"
CELL_BREAK = re.compile(r"(?<!\\)\|")  # a table's cell boundary; `\|` stays inside a cell
PATHS = ("FMA", "mma.sync", "wgmma")


def key_rows(text: str) -> dict[tuple[str, str], dict[str, str]]:
    """(section, key) -> the row's cells by column name, from every table under a `### `section`` heading."""
    rows: dict[tuple[str, str], dict[str, str]] = {}
    sections: list[str] = []
    header: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            # `### `smem a`, `smem b``: both name the section `smem`
            sections = sorted({word.split()[0] for word in re.findall(r"`([^`]+)`", line)}
                              & set(parser.SECTIONS)) if line.startswith("### ") else []
            header = []
            continue
        if not line.startswith("|") or not sections:
            header = [] if not line.startswith("|") else header
            continue
        cells = [cell.strip() for cell in CELL_BREAK.split(line)[1:-1]]
        if not header:
            header = cells
        elif not set("".join(cells)) <= set("- "):
            row = dict(zip(header, cells))
            for key in re.findall(r"`([^`]+)`", row.get("key", "")):
                for section in sections:
                    assert (section, key) not in rows, f"two rows for {section}.{key}"
                    rows[(section, key)] = row
    return rows


ROWS = key_rows(LANGUAGE.read_text())
SCHEMA_KEYS = sorted((name, key) for name, section in parser.SECTIONS.items() if not section.short
                     for key in section.keys)


def reader(section: str, key: str) -> Any:
    return parser.SECTIONS[section].keys[key].read


def test_every_key_has_a_row_and_every_row_a_key():
    assert set(ROWS) == set(SCHEMA_KEYS), (
        f"keys without a row: {sorted(set(SCHEMA_KEYS) - set(ROWS))}; rows without a key: "
        f"{sorted(set(ROWS) - set(SCHEMA_KEYS))}")


def test_the_section_list_names_every_section():
    text = " ".join(LANGUAGE.read_text().split())
    listed = re.search(r"Sections are (.*?)\. ", text)[1]
    every = {f"{name} {label}" for name, section in parser.SECTIONS.items() for label in section.labels}
    every |= {name for name, section in parser.SECTIONS.items() if not section.labels}
    assert set(re.findall(r"`([^`]+)`", listed)) == every


INT_KEYS = [sk for sk in SCHEMA_KEYS if isinstance(reader(*sk), parser.IntRange)]
CHOICE_KEYS = [sk for sk in SCHEMA_KEYS if isinstance(reader(*sk), parser.Choice)]


def stated_range(values: str) -> tuple[int, int] | None:
    """`LOW to HIGH` in a values cell, or a single number (`1`) for a key that takes one value."""
    ranges = re.findall(r"\b(\d+) to (\d+)\b", values)
    if len(ranges) == 1:
        return int(ranges[0][0]), int(ranges[0][1])
    numbers = set(re.findall(r"\d+", values))
    return (int(min(numbers)),) * 2 if len(numbers) == 1 and not ranges else None


def test_the_keys_are_read_by_the_inspected_readers():
    """The two checks below reach the keys they must: a key whose range or choices went back to an
    opaque reader would silently leave the check."""
    assert {("threads", "warpgroups"), ("threads", "producer"), ("pipeline", "stages"),
            ("budget", "registers"), ("smem", "pad")} <= set(INT_KEYS)
    assert {("problem", "epilogue"), ("block", "schedule"), ("pipeline", "copy"),
            ("mma", "precision"), ("fuse", "activation")} <= set(CHOICE_KEYS)


@pytest.mark.parametrize("section,key", INT_KEYS, ids=lambda x: x)
def test_documented_range_is_the_parsers(section, key):
    read = reader(section, key)
    values = ROWS[(section, key)]["values"]
    assert stated_range(values) == (read.low, read.high), (
        f"docs/language.md states {section}.{key} as {values!r}; the parser takes {read.low} to {read.high}")


@pytest.mark.parametrize("section,key", CHOICE_KEYS, ids=lambda x: x)
def test_documented_choices_are_the_parsers(section, key):
    values = ROWS[(section, key)]["values"]
    assert set(re.findall(r"`([^`]+)`", values)) == set(reader(section, key).choices)


# Keys read by their own functions, and the words from the code each row must name.
OTHER_WORDS: dict[tuple[str, str], set[str]] = {
    ("problem", "a"): {dtype.value for dtype in ir.DType} | {f"T {layout.value}" for layout in ir.MatrixLayout},
    ("problem", "b"): {dtype.value for dtype in ir.DType},
    ("problem", "c"): {dtype.value for dtype in ir.DType},
    ("fuse", "residual"): {f"T {layout.value}" for layout in ir.MatrixLayout},
    ("fuse", "bias"): {"m", "n", "f32", "f16", "bf16"},
    ("smem", "swizzle"): {"xor(B, M, S)"} | {f"{size}B" for size in parser.SWIZZLE_MODES},
    ("smem", "read"): {"32", "64", "128", ir.SmemRead.LDMATRIX.value},
    # FP8 operands are wgmma's, which loads with TMA and takes no `load` section
    ("load", "vector"): {str(width) for dtype in ir.DType if not dtype.fp8 for width in dtype.vector_widths},
    ("mma", "shape"): {shape.value for shape in ir.MmaShape} | {"m64nNk16", "m64nNk8", "m64nNk32"},
    ("block", "raster"): {"row", "col", "group(G)"},
    ("block", "tile"): {"BMxBNxBK"},
    ("threads", "warps"): {"WmxWn"},
    ("threads", "lanes"): {"LmxLn [row\\|col\\|zigzag]"},
    ("threads", "micro"): {"TmxTn"},
    ("threads", "repeat"): {"RmxRn [block\\|warp]"},
    ("mma", "repeat"): {"RmxRn"},
    ("quant", "group"): {"channel"},
    ("quant", "zeros"): {"yes", "no"},
}


@pytest.mark.parametrize("section,key", sorted(set(SCHEMA_KEYS) - set(INT_KEYS) - set(CHOICE_KEYS)),
                         ids=lambda x: x)
def test_other_keys_name_what_they_take(section, key):
    assert (section, key) in OTHER_WORDS, f"{section}.{key}: add the words its reader takes to OTHER_WORDS"
    missing = OTHER_WORDS[(section, key)] - set(re.findall(r"`([^`]+)`", ROWS[(section, key)]["values"]))
    assert not missing, f"docs/language.md's row for {section}.{key} leaves out {sorted(missing)}"


# --- defaults ---------------------------------------------------------------------------------

# The smallest spec of each path; the parser fills in every default (nothing here is validated).
MINIMAL = {
    "FMA": "gemm d { problem { } block { tile: 128x128x8; } threads { warps: 4x2; lanes: 4x8; micro: 4x4; } }",
    "mma.sync": "gemm d { problem { a: bf16 row; b: bf16 col; } block { tile: 128x128x32; } threads { warps: 4x2; }"
                " mma { shape: m16n8k16; } }",
    "wgmma": "gemm d { problem { a: e4m3 row; b: e4m3 col; } target sm_90a; block { tile: 128x256x128; }"
             " threads { warpgroups: 2; } mma { shape: m64n256k32; } }",
}


def swizzle_word(smem: ir.SmemLayout) -> str | None:
    if smem.swizzle_bytes:
        return f"{smem.swizzle_bytes}B"
    return None if smem.swizzle is None else f"xor({smem.swizzle.bits}, {smem.swizzle.base}, {smem.swizzle.shift})"


def enum_word(value: Any) -> str | None:
    return None if value is None else value.value


# What the parser filled in for a key, as the docs write it (None: no value).
FILLED: dict[tuple[str, str], Callable[[ir.KernelSpec], Any]] = {
    ("problem", "a"): lambda s: f"{s.problem.a.dtype.value} {s.problem.a.layout.value}",
    ("problem", "b"): lambda s: f"{s.problem.b.dtype.value} {s.problem.b.layout.value}",
    ("problem", "c"): lambda s: f"{s.problem.c.dtype.value} {s.problem.c.layout.value}",
    ("problem", "epilogue"): lambda s: s.problem.epilogue.value,
    ("problem", "bounds"): lambda s: s.problem.bounds.value,
    ("problem", "batch"): lambda s: s.problem.batch.value,
    ("block", "raster"): lambda s: s.block.raster.kind.value,
    ("block", "schedule"): lambda s: s.block.schedule.value,
    ("threads", "repeat"): lambda s: f"{s.threads.repeat.m}x{s.threads.repeat.n} {s.threads.repeat_level.value}",
    ("threads", "fma_order"): lambda s: s.threads.fma_order.value,
    ("threads", "producer"): lambda s: str(s.threads.producers),
    ("mma", "repeat"): lambda s: f"{s.mma.repeat.m}x{s.mma.repeat.n}",
    ("mma", "accumulate"): lambda s: enum_word(s.mma.accumulate),
    ("smem", "pad"): lambda s: str(s.smem_a.pad),
    ("smem", "swizzle"): lambda s: swizzle_word(s.smem_a),
    ("pipeline", "stages"): lambda s: str(s.pipeline.stages),
    ("pipeline", "copy"): lambda s: s.pipeline.copy.value,
    ("pipeline", "fragments"): lambda s: s.pipeline.fragments.value,
    ("pipeline", "unroll"): lambda s: str(s.pipeline.unroll),
    ("pipeline", "store"): lambda s: s.pipeline.store.value,
    ("budget", "registers"): lambda s: s.budget.registers,
    ("budget", "blocks_per_sm"): lambda s: s.budget.blocks_per_sm,
    ("fuse", "scale"): lambda s: enum_word(s.fuse and s.fuse.scale),
    ("fuse", "bias"): lambda s: s.fuse and s.fuse.bias,
    ("fuse", "activation"): lambda s: enum_word(s.fuse and s.fuse.activation),
    ("fuse", "residual"): lambda s: s.fuse and s.fuse.residual,
}
# Defaults the docs describe in words, as they depend on more than the path (the layout, the type, the tile).
DESCRIBED = {("smem", "order"), ("smem", "read"), ("load", "vector"), ("mma", "precision"), ("quant", "zeros")}
REQUIRED = "required"


def documented_default(key_cell: str, cell: str, path: str) -> Any:
    """What a default cell says for `path`: REQUIRED, None (`none`, no value) or the value's text.

    Its `;`-separated parts may name paths (`FMA: `registers``, `wgmma: `tma``, `required (wgmma)`,
    `` `1` (wgmma) ``); a part naming none holds for every path no other part names."""
    if "(required)" in key_cell:
        return REQUIRED
    chosen = None
    for part in (part.strip() for part in cell.split(";")):
        named = re.match(rf"({'|'.join(map(re.escape, PATHS))}): (.*)", part)
        paren = re.search(r"\(([^)]*)\)$", part)
        if named:
            if named[1] == path:
                chosen = named[2]
        elif paren and set(p.strip() for p in paren[1].split(",")) <= set(PATHS):
            if path in [p.strip() for p in paren[1].split(",")]:
                chosen = part[: paren.start()].strip()
        elif chosen is None:
            chosen = part
    if chosen is None:
        return None
    if chosen.startswith(REQUIRED):
        return REQUIRED
    code = re.match(r"`([^`]+)`", chosen)
    if code:
        return code[1]
    if re.fullmatch(r"\d+", chosen):
        return chosen
    assert chosen == "none", f"a default cell part the test cannot read: {chosen!r}"
    return None


def key_paths(section: str, key: str) -> list[str]:
    """The paths whose specs may hold the key, from the parser's table and the paths' key sets (an `mma`
    section makes a tensor-core spec), less those whose minimal spec sets the key itself."""
    spec_key = parser.SECTIONS[section].keys[key]
    key_sets = {path: path_of(parser.parse_text(MINIMAL[path])).key_sets for path in PATHS}
    return [path for path in PATHS
            if (spec_key.only is None or spec_key.only.name in key_sets[path])
            and not (section == "mma" and path == "FMA") and not re.search(rf"\b{key}:", MINIMAL[path])]


@pytest.mark.parametrize("section,key", SCHEMA_KEYS, ids=lambda x: x)
def test_documented_default_is_what_the_parser_fills_in(section, key):
    row = ROWS[(section, key)]
    if (section, key) in DESCRIBED:
        assert row["default"], f"{section}.{key}: describe its default"
        return
    for path in key_paths(section, key):
        documented = documented_default(row["key"], row["default"], path)
        spec_key = parser.SECTIONS[section].keys[key]
        if documented == REQUIRED:
            assert spec_key.required, f"docs/language.md calls {section}.{key} required; the parser does not"
            continue
        assert not spec_key.required, f"{section}.{key} is required; docs/language.md gives a default"
        filled = FILLED[(section, key)](parser.parse_text(MINIMAL[path]))
        assert filled == documented, (f"{section}.{key} on the {path} path: docs/language.md says "
                                      f"{documented!r}, the parser fills in {filled!r}")


def test_the_default_reader_notices_a_wrong_default():
    row = ROWS[("pipeline", "copy")]
    assert documented_default(row["key"], row["default"], "mma.sync") == ir.CopyMode.CP_ASYNC.value
    assert documented_default("`copy`", "FMA: `registers`; mma.sync: `tma`", "mma.sync") == "tma"
    assert documented_default("`producer`", "`1` (wgmma)", "wgmma") == "1"
    assert documented_default("`warps`", "required (FMA, mma.sync)", "FMA") == REQUIRED


def test_the_target_default_is_the_parsers():
    spec = parser.parse_text(MINIMAL["FMA"])
    assert f"Default `{targets.TargetName(spec.target.sm, spec.target.arch_specific)}`." in LANGUAGE.read_text()


def test_target_table_is_targets_py():
    """Each target's row names the reference GPU's SM count and the shared memory per block of targets.py."""
    rows = {}
    for line in LANGUAGE.read_text().splitlines():
        cells = [cell.strip() for cell in CELL_BREAK.split(line)[1:-1]]
        if cells and re.fullmatch(r"`sm_\d+a?`", cells[0]):
            rows[cells[0].strip("`")] = cells
    assert set(rows) == {str(target) for target in targets.TARGETS}
    for name, cells in rows.items():
        target = targets.parse_target(name)
        arch = (targets.ARCH_SPECIFIC if target.arch_specific else targets.ARCHS)[target.sm]
        assert f"{arch.reference_gpu}, {arch.reference_sms} SMs" == cells[1], name
        assert f"{arch.smem_per_block // 1024} KiB" == cells[2], name


@pytest.mark.parametrize("stated,value", [
    ("a C\nidentifier of at most {} characters", validate.MAX_NAME),
    ("threads per block = Wm*Wn*32 (at most {})", parser.MAX_BLOCK_THREADS),
    ("Consumers plus producer at most {} threads", parser.MAX_BLOCK_THREADS),
])
def test_limits_in_prose_are_the_validators(stated, value):
    text = " ".join(LANGUAGE.read_text().split())
    assert " ".join(stated.format(value).split()) in text
