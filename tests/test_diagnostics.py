"""Diagnostics: every mistake is reported at the exact `file:line:col`, with the source line and a caret.

Each case edits a known-good spec (BASE) and lists the errors it must produce, in source
order. A location is written as an anchor: a piece of the edited text that occurs once,
with `|` marking the column the diagnostic must point at (no `|` = the anchor's start).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gemmdsl import ir, parser, targets
from gemmdsl.frontend import load, load_path
from gemmdsl.source import CompileError, Diagnostic, Severity, SourceFile

ROOT = Path(__file__).resolve().parents[1]
FILE = "case.gemm"

BASE = """\
gemm sgemm_v3 {
    problem  { a: f32 row; b: f32 row; c: f32 row; epilogue: alpha_beta; }
    target   sm_90;
    block    { tile: 128x128x8; raster: row; }
    threads  { warps: 4x2; lanes: 4x8 row; micro: 4x4; repeat: 2x2 block; }
    smem a   { order: km; pad: 4; }
    smem b   { order: kn; }
    load a   { vector: 4; }
    load b   { vector: 4; }
    pipeline { stages: 2; copy: registers; fragments: double; }
}
"""
# The tensor-core fixture specs (tests/fixtures/): BF16 with ldmatrix, and FP32 through 3xTF32.
MMA = (ROOT / "tests" / "fixtures" / "hgemm_mma.gemm").read_text()
TF32 = (ROOT / "tests" / "fixtures" / "sgemm_3xtf32.gemm").read_text()
MMA_SECTION = "mma      { shape: m16n8k16; repeat: 4x8; }"
THREADS = "threads  { warps: 4x2; lanes: 4x8 row; micro: 4x4; repeat: 2x2 block; }"
SMEM_A = "smem a   { order: km; pad: 4; }"
PIPELINE = "pipeline { stages: 2; copy: registers; fragments: double; }"
PIPELINE_MMA = "pipeline { stages: 4; copy: cp_async; fragments: double; }"

@dataclass
class Case:
    id: str
    edits: list[tuple[str, str]]  # (old, new) replacements of BASE; old must occur exactly once
    expect: list[tuple[str | tuple[int, int], str]]  # (anchor, message substring), in source order
    hints: list[str] = field(default_factory=list)  # substrings of the rendered output
    text: str | None = None  # the whole text instead of edits of BASE
    absent: list[str] = field(default_factory=list)  # substrings the messages must not contain
    base: str = BASE  # the spec the edits apply to

    def source(self) -> str:
        if self.text is not None:
            return self.text
        text = self.base
        for old, new in self.edits:
            assert text.count(old) == 1, f"{self.id}: {old!r} occurs {text.count(old)} times"
            text = text.replace(old, new)
        return text


def locate(text: str, anchor: str | tuple[int, int]) -> tuple[int, int]:
    if isinstance(anchor, tuple):
        return anchor
    marker = anchor.index("|") if "|" in anchor else 0
    plain = anchor.replace("|", "")
    assert text.count(plain) == 1, f"anchor {plain!r} occurs {text.count(plain)} times"
    pos = text.index(plain) + marker
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, column


def check_rendering(diagnostic: Diagnostic, source: SourceFile, line: int, column: int) -> None:
    """The rendered diagnostic: `file:line:col: severity: message`, the source line, a caret under `column`."""
    rendered = diagnostic.render(source).split("\n")
    assert rendered[0] == f"{FILE}:{line}:{column}: {diagnostic.severity.value}: {diagnostic.message}"
    text = source.line_text(line)
    if not text:  # an empty file has no line to show
        return
    assert re.fullmatch(r" +\| +\^~*", rendered[2]), rendered[2]
    caret = rendered[2].index("^") - rendered[2].index("|") - 2
    if len(text) <= 100:
        assert rendered[1] == f"{line:>5} | {text}"
        assert caret == column - 1
    else:  # a window of the line, around the caret
        quoted = rendered[1].split(" | ", 1)[1]
        assert len(quoted) <= 106 and quoted.strip(".") in text
        assert quoted[caret:caret + 1] == text[column - 1:column]
    if diagnostic.hint:
        assert rendered[3] == f"  hint: {diagnostic.hint}"


def m(old: str, new: str) -> tuple[str, str]:
    return old, new


CASES = [
    # --- syntax --------------------------------------------------------------------------------
    Case("missing_semicolon", [m("128x128x8; raster", "128x128x8 raster")],
         [("128x128x8| raster", "expected ';' after this value")], ["every entry ends with ';'"]),
    Case("missing_semicolon_short_section", [m("target   sm_90;", "target   sm_90")],
         [("sm_90|", "expected ';' after this value, found '{'")]),
    Case("missing_semicolon_before_brace", [m("fragments: double; }", "fragments: double }")],
         [("double| }", "expected ';' after this value, found '}'")]),
    Case("missing_closing_brace_at_eof", [m("double; }\n}\n", "double; }\n")],
         [("double; }|", "unexpected end of file; expected '}'")],
         ["is a closing '}' missing? the '{' at line 1, column 15 is never closed"]),
    Case("missing_closing_brace_of_section", [m("2x2 block; }", "2x2 block;")],
         [("smem |a   { order: km", "expected ':', found 'a'")],
         ["'smem' starts a section; is the '}' closing the section before it missing?"]),
    Case("missing_opening_brace", [m("block    { tile:", "block    tile:")],
         [("block    tile|:", "expected '{' to open the section")]),
    Case("unexpected_character", [m("micro: 4x4;", "micro: 4x4$;")],
         [("4x4|$", "unexpected character '$'")], ["comments start with // or #"]),
    Case("unexpected_character_non_ascii", [m("pad: 4;", "pad: 4;\u00e9")],
         [("4;|\u00e9", "unexpected character '\u00e9'")]),
    # --- recovery: a syntax error cuts out its entry, and the rest of the file is still read ----
    Case("two_unexpected_characters", [m("micro: 4x4;", "micro: 4x4$;"), m("stages: 2;", "stages: 2@;")],
         [("4x4|$", "unexpected character '$'"), ("2|@", "unexpected character '@'")]),
    Case("unexpected_character_in_section_heads", [m("target   sm_90;", "target   sm_9$0;"),
                                                   m("smem b   {", "sm%em b   {")],
         [("sm_9|$0", "unexpected character '$'"), ("sm|%em", "unexpected character '%'")]),
    Case("syntax_error_then_bad_value", [m("128x128x8; raster", "128x128x8 raster"),
                                         m("vector: 4; }\n    load b", "vector: 3; }\n    load b")],
         [("128x128x8| raster", "expected ';' after this value"),
          ("vector: |3; }\n    load b", "a vector width in elements must be 1, 2 or 4, found 3")],
         absent=["missing required"]),
    Case("bad_tile_then_syntax_error", [m("tile: 128x128x8;", "tile: 128x128;"), m("pad: 4;", "pad: 4;;")],
         [("tile: |128x128;", "expected 3 sizes for a block tile"), ("pad: 4;|;", "expected '}' or a name")]),
    Case("damaged_required_entry_is_not_missing", [m("lanes: 4x8 row;", "lanes: 4x8 row$;")],
         [("row|$", "unexpected character '$'")], absent=["missing required"]),
    Case("damaged_required_section_is_not_missing", [m("block    {", "bl$ock    {")],
         [("bl|$ock", "unexpected character '$'")], absent=["missing required"]),
    Case("empty_file", [], [((1, 1), "the file holds no kernel")], text=""),
    Case("only_comments", [], [((1, 1), "the file holds no kernel")], text="// nothing here\n# nor here\n"),
    Case("trailing_junk", [m("}\n}\n", "}\n}\njunk here\n")],
         [("|junk", "unexpected 'junk' after the end of the kernel")]),
    Case("trailing_brace", [m("}\n}\n", "}\n}\n}\n")],
         [((12, 1), "unexpected '}' after the end of the kernel")]),
    Case("second_kernel", [], [((12, 1), "unexpected 'gemm' after the end of the kernel")],
         text=BASE + BASE.replace("sgemm_v3", "other")),
    Case("missing_kernel_header", [m("gemm sgemm_v3 {", "sgemm_v3 {")],
         [("|sgemm_v3 {", "expected 'gemm', found 'sgemm_v3'")]),
    # --- the schema: sections, keys and values -------------------------------------------------
    Case("unknown_section", [m("pipeline {", "pipelin {")],
         [("|pipelin {", "unknown section 'pipelin'")], ["did you mean 'pipeline'?"]),
    Case("unknown_section_no_suggestion", [m("smem b   { order: kn; }", "epilog { order: kn; }")],
         [("|epilog {", "unknown section 'epilog'")], ["sections are: problem, target"]),
    Case("misspelt_required_section", [m("threads  {", "thread  {")],
         [("|thread  {", "unknown section 'thread'")], ["did you mean 'threads'?"],
         absent=["missing required section"]),
    Case("unknown_key", [m("tile: 128x128x8", "tiles: 128x128x8")],
         [("|tiles", "unknown key 'tiles' in section 'block'")], ["did you mean 'tile'?"],
         absent=["missing required key"]),
    Case("unknown_key_no_suggestion", [m("raster: row", "colour: row")],
         [("|colour", "unknown key 'colour' in section 'block'")], ["keys of 'block': tile, raster"]),
    Case("duplicate_section", [m("target   sm_90;\n", "target   sm_90;\n    target sm_80;\n")],
         [("|target sm_80", "duplicate section 'target'")], ["first defined at line 3"]),
    Case("duplicate_labelled_section", [m("smem b   { order: kn; }\n", "smem b   { order: kn; }\n    smem a { }\n")],
         [("|smem a { }", "duplicate section 'smem a'")], ["first defined at line 6"]),
    Case("duplicate_key", [m("stages: 2;", "stages: 2; stages: 3;")],
         [("stages: 2; |stages", "duplicate key 'stages' in section 'pipeline'")], ["first set at line 10"]),
    Case("missing_required_section", [m(f"    {THREADS}\n", "")],
         [("gemm |sgemm_v3", "missing required section 'threads'")], ["add `threads { ... }`"]),
    Case("missing_two_required_sections", [m(f"    {THREADS}\n", ""),
                                           m("    block    { tile: 128x128x8; raster: row; }\n", "")],
         [("gemm |sgemm_v3", "missing required section 'block'"),
          ("gemm |sgemm_v3", "missing required section 'threads'")]),
    Case("missing_required_key", [m(" micro: 4x4;", "")],
         [("|threads", "section 'threads' is missing required key 'micro'")]),
    Case("missing_operand_label", [m("smem b   {", "smem   {")],
         [("|smem   {", "section 'smem' needs an operand label: a or b")]),
    Case("wrong_operand_label", [m("load b   {", "load c   {")],
         [("load |c", "section 'load' needs an operand label: a or b")]),
    Case("short_section_with_braces", [m("target   sm_90;", "target { target: sm_90; }")],
         [("|target {", "section 'target' is written as `target VALUE;`")]),
    Case("bad_enum_value", [m("epilogue: alpha_beta", "epilogue: alpha_bta")],
         [("epilogue: |alpha_bta", "expected store or alpha_beta, found 'alpha_bta'")],
         ["did you mean 'alpha_beta'?"]),
    Case("bad_dtype", [m("a: f32 row", "a: fp32 row")], [("a: |fp32", "expected an element type, found 'fp32'")],
         ["did you mean 'f32'?"]),
    Case("vector_width_3", [m("load a   { vector: 4; }", "load a   { vector: 3; }")],
         [("vector: |3", "a vector width in elements must be 1, 2 or 4, found 3")]),
    Case("vector_width_8", [m("load b   { vector: 4; }", "load b   { vector: 8; }")],
         [("vector: |8", "a vector width in elements must be 1, 2 or 4, found 8")]),
    Case("read_width_96", [m(SMEM_A, "smem a   { order: km; pad: 4; read: 96; }")],
         [("read: |96", "a read width in bits must be 32, 64 or 128, found 96")]),
    Case("unknown_target", [m("target   sm_90;", "target   sm_75;")],
         [("|sm_75", "unknown target 'sm_75'")], ["supported targets: sm_80, sm_86, sm_89, sm_90"]),
    Case("huge_tile", [m("tile: 128x128x8", "tile: 99999999999999999999x8x8")],
         [("tile: |9999", "each size in a block tile BMxBNxBK must be between 1 and 1048576")]),
    Case("huge_stage_count", [m("stages: 2", "stages: " + "9" * 5000)],
         [("stages: |9999", "a stage count must be between 1 and 64, found 99999")]),
    Case("tile_needs_three_sizes", [m("tile: 128x128x8", "tile: 128x128")],
         [("tile: |128x128;", "expected 3 sizes for a block tile BMxBNxBK")]),
    Case("zero_size", [m("micro: 4x4", "micro: 4x0")], [("micro: |4x0", "must be between 1 and")]),
    Case("swizzle_arity", [m(SMEM_A, "smem a   { order: km; swizzle: xor(1, 2); }")],
         [("swizzle: |xor", "xor(...) takes 3 numbers, found 2")]),
    Case("swizzle_nested_call", [m(SMEM_A, "smem a   { order: km; swizzle: xor(f(g(1)), 2, 3); }")],
         [("xor(|f(g", "expected an argument of xor(...), found 'f(g(1))'")]),
    Case("pad_not_a_number", [m("pad: 4", "pad: four")], [("pad: |four", "expected a padding in elements")]),
    # --- semantics: the thread layout ----------------------------------------------------------
    Case("tile_product_m", [m("tile: 128x128x8", "tile: 64x128x8")],
         [("repeat: |2x2 block", "warps x lanes x micro x repeat along m is 4*4*4*2 = 128, "
                                 "but the block tile's BM is 64")],
         ["use `repeat: 1x2` to cover BM = 64"]),
    Case("tile_product_n", [m(THREADS, "threads  { warps: 4x2; lanes: 4x8 row; micro: 8x3; }")],
         [("micro: |8x3", "along n is 2*8*3*1 = 48, but the block tile's BN is 128")],
         ["use `micro: 8x8` to cover BN = 128"]),
    Case("tile_product_both", [m("tile: 128x128x8", "tile: 96x96x8")],
         [("micro: |4x4", "along m is 4*4*4*2 = 128, but the block tile's BM is 96; "
                          "along n is 2*8*4*2 = 128, but the block tile's BN is 96")],
         ["use `micro: 3x3` to cover BM = 96 and BN = 96, or make the block tile 128x128x8"],
         absent=["micro: 3x4", "micro: 4x3"]),
    Case("too_many_threads", [m("warps: 4x2", "warps: 8x8"), m("tile: 128x128x8", "tile: 256x512x8")],
         [("warps: |8x8", "warps 8x8 make 8*8*32 = 2048 threads per block, more than the 1024")]),
    Case("lanes_not_a_warp", [m("lanes: 4x8 row", "lanes: 4x4 row")],
         [("lanes: |4x4", "lanes 4x4 hold 4*4 = 16 threads, but a warp has 32"),
          ("repeat: |2x2", "along n is 2*4*4*2 = 64, but the block tile's BN is 128")]),
    Case("zigzag_needs_even_lanes_n",
         [m(THREADS, "threads  { warps: 1x8; lanes: 32x1 zigzag; micro: 4x4; repeat: 1x4 block; }")],
         [("lanes: |32x1", "lane order zigzag needs an even lanes.n (at least 2), found 32x1")]),
    # --- semantics: problem, smem, loads -------------------------------------------------------
    Case("column_major_a_tile_runs_along_m", [m("a: f32 row", "a: f32 col"), m("tile: 128x128x8", "tile: 128x128x6"),
                                              m("load b   { vector: 4; }", "load b   { vector: 1; }")],
         [("load a   { vector: |4", "A's 6x128 tile is 192 loads of vector 4, fewer than the 256 threads")]),
    Case("column_major_b_vector_along_k", [m("b: f32 row", "b: f32 col"), m("tile: 128x128x8", "tile: 128x128x6"),
                                           m("load a   { vector: 4; }", "load a   { vector: 1; }")],
         [("load b   { vector: |4", "vector 4 does not divide the contiguous extent of B's tile (BK = 6)")],
         ["B is col-major, so its tile is 128 runs of 6 contiguous elements in global memory"]),
    Case("unknown_bounds", [m("epilogue: alpha_beta;", "epilogue: alpha_beta; bounds: fast;")],
         [("bounds: |fast", "expected checked or exact, found 'fast'")]),
    Case("unknown_batch", [m("epilogue: alpha_beta;", "epilogue: alpha_beta; batch: strides;")],
         [("batch: |strides", "expected none, strided or grouped, found 'strides'")], ["did you mean 'strided'?"]),
    Case("smem_a_order_of_b", [m("order: km", "order: kn")],
         [("order: |kn; pad", "order kn is not a layout of A; smem a is stored as mk or km")]),
    Case("smem_b_order_of_a", [m("smem b   { order: kn; }", "smem b   { order: mk; }")],
         [("order: |mk", "order mk is not a layout of B; smem b is stored as kn or nk")]),
    Case("vector_does_not_divide_bk", [m("tile: 128x128x8", "tile: 128x128x6"),
                                       m("load b   { vector: 4; }", "load b   { vector: 1; }")],
         [("load a   { vector: |4", "vector 4 does not divide the contiguous extent of A's tile (BK = 6)")],
         ["use `vector: 1;` in `load a`"]),
    Case("vector_does_not_divide_bn", [m(THREADS, "threads  { warps: 8x1; lanes: 16x2 row; micro: 1x3; }"),
                                       m("tile: 128x128x8", "tile: 128x6x8")],
         [("load b   { vector: |4", "vector 4 does not divide the contiguous extent of B's tile (BN = 6)")],
         ["no vector width fits: the 8x6 tile of B has 48 elements for 256 threads"]),
    Case("too_few_chunks", [m("tile: 128x128x8", "tile: 128x128x4")],
         [("load a   { vector: |4", "A's 128x4 tile is 128 loads of vector 4, fewer than the 256 threads"),
          ("load b   { vector: |4", "B's 4x128 tile is 128 loads of vector 4, fewer than the 256 threads")],
         ["use `vector: 2;` in `load a`"]),
    Case("chunks_not_a_multiple", [m("tile: 128x128x8", "tile: 128x128x12")],
         [("load a   { vector: |4", "384 loads of vector 4, not a multiple of the 256 threads"),
          ("load b   { vector: |4", "384 loads of vector 4, not a multiple of the 256 threads")]),
    Case("default_vector_chunks", [m("    load a   { vector: 4; }\n", ""), m("tile: 128x128x8", "tile: 128x128x4")],
         [("tile: |128x128x4", "(load a defaults to vector 4)"),
          ("load b   { vector: |4", "fewer than the 256 threads")]),
    Case("swizzle_breaks_vector_reads", [m(SMEM_A, "smem a   { order: km; swizzle: xor(1, 0, 3); read: 128; }")],
         [("read: |128", "read: 128 is wider than the layout allows (32 bits): the swizzle xor(1, 0, 3) "
                         "moves elements in groups of 2^0 = 1, which breaks 128-bit reads")],
         ["use M >= 2"]),
    Case("swizzle_breaks_128_but_not_64", [m(SMEM_A, "smem a   { order: km; swizzle: xor(2, 1, 3); read: 128; }")],
         [("read: |128", "(64 bits): the swizzle xor(2, 1, 3) moves elements in groups of 2^1 = 2")]),
    Case("read_on_k_contiguous_order", [m(SMEM_A, "smem a   { order: mk; read: 64; }")],
         [("read: |64", "read: 64 is wider than the layout allows (32 bits): order mk keeps k contiguous")],
         ["use `order: km;`"]),
    Case("read_breaks_on_pad", [m(SMEM_A, "smem a   { order: km; pad: 2; read: 128; }")],
         [("read: |128", "(64 bits): pad 2 makes each row 130 elements long")]),
    Case("read_wider_than_micro", [m(THREADS, "threads  { warps: 4x2; lanes: 4x8 row; micro: 2x4; repeat: 4x2 block; }"),
                                   m(SMEM_A, "smem a   { order: km; pad: 4; read: 128; }")],
         [("read: |128", "the micro tile has 2 elements along m, which allows at most 64-bit reads")]),
    Case("swizzle_s_below_b", [m(SMEM_A, "smem a   { order: km; swizzle: xor(3, 2, 1); }")],
         [("swizzle: |xor(3, 2, 1)", "invalid swizzle xor(3, 2, 1): S must be at least B")]),
    Case("swizzle_zero_bits", [m(SMEM_A, "smem a   { order: km; swizzle: xor(0, 2, 3); }")],
         [("swizzle: |xor", "invalid swizzle xor(0, 2, 3): B (the number of bits xor-ed) must be at least 1")]),
    Case("swizzle_too_wide", [m(SMEM_A, "smem a   { order: km; swizzle: xor(8, 2, 8); }")],
         [("swizzle: |xor", "invalid swizzle xor(8, 2, 8): B + M + S is 18, more than 16")]),
    # --- semantics: shared memory, pipeline, budget, name --------------------------------------
    Case("shared_memory_over_limit", [m("tile: 128x128x8", "tile: 256x256x64"), m("warps: 4x2", "warps: 8x4"),
                                      m(PIPELINE, "pipeline { stages: 4; copy: cp_async; }")],
         [("tile: |256x256x64", "need 528384 bytes of shared memory (516.0 KiB), more than the 232448 bytes "
                                "(227 KiB) sm_90 allows per block")],
         ["use fewer pipeline stages"]),
    Case("shared_memory_over_sm86_limit", [m("sm_90", "sm_86"), m("tile: 128x128x8", "tile: 128x128x32"),
                                           m(PIPELINE, "pipeline { stages: 4; copy: cp_async; }")],
         [("tile: |128x128x32", "need 133120 bytes of shared memory (130.0 KiB), more than the 101376 bytes "
                                "(99 KiB) sm_86 allows")]),
    Case("zero_stages", [m("stages: 2", "stages: 0")], [("stages: |0", "a stage count must be between 1 and 64, found 0")]),
    Case("register_copy_three_stages", [m("stages: 2", "stages: 3")],
         [("stages: |3", "register-staged copies double-buffer: stages must be 1 or 2; "
                         "use copy: cp_async for deeper pipelines")]),
    Case("raster_group_zero", [m("raster: row", "raster: group(0)")],
         [("raster: |group(0)", "group(0) needs at least one row of blocks per group")]),
    Case("too_few_registers", [m(PIPELINE, PIPELINE + "\n    budget { registers: 8; }")],
         [("registers: |8", "a register count must be between 16 and 255, found 8")]),
    Case("too_many_registers", [m(PIPELINE, PIPELINE + "\n    budget { registers: 300; }")],
         [("registers: |300", "a register count must be between 16 and 255, found 300")]),
    Case("register_file_overflow", [m(PIPELINE, PIPELINE + "\n    budget { registers: 255; blocks_per_sm: 8; }")],
         [("registers: |255", "255 registers x 256 threads x 8 block(s) per SM need 524288 registers")],
         ["use at most 32 registers"]),
    Case("too_many_threads_per_sm", [m(PIPELINE, PIPELINE + "\n    budget { blocks_per_sm: 16; }")],
         [("blocks_per_sm: |16", "16 blocks of 256 threads are 4096 threads, more than the 2048")]),
    Case("too_many_blocks_per_sm", [m(PIPELINE, PIPELINE + "\n    budget { blocks_per_sm: 33; }")],
         [("blocks_per_sm: |33", "a block count must be between 1 and 32, found 33")]),
    Case("keyword_name", [m("gemm sgemm_v3", "gemm while")],
         [("gemm |while", "kernel name 'while' is a C/C++ keyword or CUDA built-in")]),
    Case("cuda_builtin_name", [m("gemm sgemm_v3", "gemm threadIdx")],
         [("gemm |threadIdx", "kernel name 'threadIdx' is a C/C++ keyword")]),
    Case("long_name", [m("gemm sgemm_v3", "gemm " + "k" * 65)],
         [("gemm |kkk", "kernel name is 65 characters long; at most 64 are allowed")]),
    # --- stream-K, FMA order, unroll -------------------------------------------------------------
    Case("unknown_schedule", [m("raster: row;", "raster: row; schedule: streamk;")],
         [("schedule: |streamk", "expected tiles, stream_k, persistent or pingpong")], ["did you mean 'stream_k'?"]),
    Case("unknown_fma_order", [m("repeat: 2x2 block;", "repeat: 2x2 block; fma_order: zigzag;")],
         [("fma_order: |zigzag", "expected row, col or snake")]),
    Case("unroll_out_of_range", [m("fragments: double;", "fragments: double; unroll: 0;")],
         [("unroll: |0", "an unroll factor must be between 1 and 16")]),
    # --- tensor cores: the mma section and what it changes ---------------------------------------
    Case("mma_section_typo", [m("mma      {", "mmma     {")],
         [("|mmma", "unknown section 'mmma'")], ["did you mean 'mma'?"], base=MMA),
    Case("mma_unknown_key", [m("shape: m16n8k16", "shap: m16n8k16")],
         [("|shap:", "unknown key 'shap' in section 'mma'")], ["did you mean 'shape'?"],
         absent=["missing required key"], base=MMA),
    Case("mma_missing_shape", [m(MMA_SECTION, "mma      { repeat: 4x8; }")],
         [("|mma      {", "section 'mma' is missing required key 'shape'")], base=MMA),
    Case("mma_shape_typo", [m("shape: m16n8k16", "shape: m16n8k6")],
         [("shape: |m16n8k6", "expected m16n8k16, m16n8k8, a wgmma shape m64nNk16, gemv, gemv_m16n8k16, found 'm16n8k6'")], ["did you mean 'm16n8k16'?"],
         base=MMA),
    Case("mma_precision_typo", [m("precision: 3xtf32", "precision: 3xtf23")],
         [("precision: |3xtf23", "expected tf32 or 3xtf32, found '3xtf23'")], ["did you mean '3xtf32'?"],
         base=TF32),
    Case("mma_precision_native_is_not_written", [m("precision: 3xtf32", "precision: native")],
         [("precision: |native", "expected tf32 or 3xtf32, found 'native'")], base=TF32),
    Case("mma_fma_keys_in_threads",
         [m("threads  { warps: 2x2; }",
            "threads  { warps: 2x2; lanes: 4x8; micro: 4x4; repeat: 2x2; fma_order: snake; }")],
         [("2x2; |lanes", "'lanes' does not apply to an mma spec: the mma instruction fixes which lane holds "
                          "which element"),
          ("|micro", "'micro' does not apply to an mma spec: each warp's tile is the mma shape times the mma "
                     "section's `repeat`"),
          ("4x4; |repeat", "'repeat' does not apply to an mma spec: the mma section's `repeat` says how often"),
          ("|fma_order", "'fma_order' does not apply to an mma spec: tensor-core instructions multiply")],
         ["hint: remove it; in an mma spec 'threads' holds only warps, and `mma { shape: ...; repeat: ...; }` "
          "sets each warp's tile"], base=MMA),
    Case("mma_missing_warps", [m("threads  { warps: 2x2; }", "threads  { }")],
         [("|threads  {", "section 'threads' is missing required key 'warps'")],
         absent=["'lanes'", "'micro'"], base=MMA),
    Case("fma_spec_with_e4m3", [m("a: f32 row; b: f32 row;", "a: e4m3 row; b: f32 row;")],
         [("a: |e4m3", "A is e4m3, but without an `mma` section the kernel multiplies with f32 FMAs, of f32, bf16 or "
                       "f16 operands"), ("b: |f32", "B is f32 but A is e4m3")],
         ["hint: add tensor cores, e.g. `mma { shape: m16n8k16; repeat: 4x8; }` with `threads { warps: 2x2; }`"]),
    Case("fma_spec_with_f16_c", [m("c: f32 row", "c: f16 row")],
         [("c: |f16", "C is f16, but without an `mma` section the kernel accumulates in f32 and writes f32 C or C of "
                      "the operands' type (f32)")], ["hint: write `c: f32 row;`"]),
    Case("fma_bf16_with_f16_c", [m("a: f32 row; b: f32 row; c: f32 row;", "a: bf16 row; b: bf16 row; c: f16 row;")],
         [("c: |f16", "C is f16, but without an `mma` section the kernel accumulates in f32 and writes f32 C or C of "
                      "the operands' type (bf16)")], ["hint: write `c: f32 row;` or `c: bf16 row;`"]),
    Case("fma_bf16_with_cp_async", [m("a: f32 row; b: f32 row;", "a: bf16 row; b: bf16 row;"),
                                    m(PIPELINE, "pipeline { stages: 2; copy: cp_async; fragments: double; }")],
         [("copy: |cp_async", "copy: cp_async moves bytes as they are, but the FMA path widens bf16 operands to the "
                              "f32 its shared memory holds on their way through registers")],
         ["hint: write `copy: registers;`"]),
    Case("fma_bf16_c_with_stream_k", [m("a: f32 row; b: f32 row; c: f32 row;", "a: bf16 row; b: bf16 row; c: bf16 row;"),
                                      m("raster: row; }", "raster: row; schedule: stream_k; }")],
         [("schedule: |stream_k", "stream-K on the FMA path adds its shares into C with f32 atomics, but C is bf16")]),
    Case("fma_bf16_load_vector_past_the_registers", [m("a: f32 row; b: f32 row;", "a: bf16 row; b: bf16 row;"),
                                                    m("load a   { vector: 4; }", "load a   { vector: 8; }")],
         [("vector: |8", "")], ["4 x bf16 = 8 bytes is the widest global load the path's registers take"]),
    Case("mma_operand_types_differ", [m("b: bf16 row", "b: f16 row")],
         [("b: |f16", "B is f16 but A is bf16; A and B must have the same element type")],
         ["write `b: bf16 row;`"], base=MMA),
    Case("mma_precision_on_16_bit", [m(MMA_SECTION, "mma      { shape: m16n8k16; repeat: 4x8; precision: tf32; }")],
         [("precision: |tf32", "precision: tf32 applies to f32 operands; bf16 operands are multiplied as bf16")],
         ["remove `precision`"], base=MMA),
    Case("mma_f32_without_precision", [m(" precision: 3xtf32;", "")],
         [("|mma      {", "f32 operands on tensor cores need a precision: tf32 or 3xtf32")],
         ["add `precision: tf32;` (one product, 10-bit mantissa) or `precision: 3xtf32;`"], base=TF32),
    Case("mma_f32_shape_k16", [m("shape: m16n8k8", "shape: m16n8k16")],
         [("shape: |m16n8k16", "shape m16n8k16 takes 16-bit operands; TF32 mma is m16n8k8")],
         ["use `shape: m16n8k8;`"], base=TF32),
    Case("mma_tile_product_m", [m("tile: 128x128x32", "tile: 64x128x32")],
         [("repeat: |4x8", "warps x repeat x shape along m is 2*4*16 = 128, but the block tile's BM is 64")],
         ["use `repeat: 2x8` to cover BM = 64, or make the block tile 128x128x32"], base=MMA),
    Case("mma_tile_product_n", [m("tile: 128x128x32", "tile: 128x96x32")],
         [("repeat: |4x8", "warps x repeat x shape along n is 2*8*8 = 128, but the block tile's BN is 96")],
         ["use `repeat: 4x6` to cover BN = 96"], base=MMA),
    Case("mma_tile_product_blames_warps_without_repeat", [m(MMA_SECTION, "mma      { shape: m16n8k16; }"),
                                                          m("tile: 128x128x32", "tile: 64x16x32")],
         [("warps: |2x2", "warps x repeat x shape along m is 2*1*16 = 32, but the block tile's BM is 64")],
         ["use `warps: 4x2` to cover BM = 64"], base=MMA),
    Case("mma_bk_not_a_multiple_of_k", [m("tile: 128x128x32", "tile: 128x128x24")],
         [("tile: |128x128x24", "BK = 24 is not a multiple of the k of m16n8k16 (16)")],
         ["e.g. 128x128x32 or `shape: m16n8k8;`"], base=MMA),
    Case("mma_read_ldmatrix_on_f32_across_k", [m("smem a   { order: mk; pad: 4; }",
                                                  "smem a   { order: km; pad: 4; read: ldmatrix; }")],
         [("read: |ldmatrix", "read: ldmatrix gives f32 (TF32) fragments only from rows that run along k, but "
                              "order km keeps m contiguous; ldmatrix.trans moves 16-bit elements only")],
         ["use `order: mk;` (k contiguous), or `read: 32;` (one 32-bit load per fragment register)"], base=TF32),
    Case("mma_read_ldmatrix_on_f32_b_across_k", [m("smem b   { order: kn; pad: 8; }",
                                                    "smem b   { order: kn; pad: 8; read: ldmatrix; }")],
         [("read: |ldmatrix", "read: ldmatrix gives f32 (TF32) fragments only from rows that run along k, but "
                              "order kn keeps n contiguous")], ["use `order: nk;` (k contiguous)"], base=TF32),
    Case("mma_pad_breaks_f32_ldmatrix_rows", [m("smem a   { order: mk; pad: 4; }",
                                                 "smem a   { order: mk; pad: 2; read: ldmatrix; }")],
         [("pad: |2", "rows of 18 f32 (72 bytes) break the alignment of the reads: ldmatrix reads rows of 16 "
                      "bytes (4 f32)")], ["use a pad that keeps rows a multiple of 4 elements (16 bytes)"], base=TF32),
    Case("mma_swizzle_breaks_f32_ldmatrix_rows", [m("smem a   { order: mk; pad: 4; }",
                                                     "smem a   { order: mk; swizzle: xor(2,1,3); read: ldmatrix; }")],
         [("swizzle: |xor(2,1,3)", "the swizzle xor(2, 1, 3) moves elements in groups of 2^1 = 2, but ldmatrix "
                                   "reads rows of 16 bytes (4 f32)")], ["use M >= 2, e.g. xor(2, 2, 3)"], base=TF32),
    Case("mma_read_32_across_k", [m("smem b   { order: kn; swizzle: xor(3,3,4); }",
                                     "smem b   { order: kn; swizzle: xor(3,3,4); read: 32; }")],
         [("read: |32", "read: 32 loads 2 bf16 that lie along k, but order kn keeps n contiguous")],
         ["use `read: ldmatrix;` (it transposes), or `order: nk;`"], base=MMA),
    Case("mma_transposing_copy_of_bf16", [m("smem a   { order: mk; swizzle: xor(2,3,3); }",
                                             "smem a   { order: km; }")],
         [("order: |km", "order km transposes the row-major bf16 tile of A on its way to shared memory, which "
                         "cp.async cannot do for 2-byte elements")],
         ["use `order: mk;` (ldmatrix transposes where the instruction needs it)"], base=MMA),
    Case("mma_two_byte_copies", [m("load a   { vector: 8; }", "load a   { vector: 1; }")],
         [("vector: |1", "vector 1 copies 2-byte pieces of bf16, but cp.async copies 4, 8 or 16 bytes")],
         ["use `vector: 2;` or wider in `load a`"], base=MMA),
    Case("mma_read_64", [m("swizzle: xor(2,3,3); }", "swizzle: xor(2,3,3); read: 64; }")],
         [("read: |64", "an mma spec's read width in bits must be 32, found 64")],
         ["its fragments are read with ldmatrix or 32-bit loads: use `read: ldmatrix;` or `read: 32;`"], base=MMA),
    Case("mma_read_typo", [m("swizzle: xor(2,3,3); }", "swizzle: xor(2,3,3); read: ldmatrx; }")],
         [("read: |ldmatrx", "expected ldmatrix or a width in bits, found 'ldmatrx'")], ["did you mean 'ldmatrix'?"],
         base=MMA),
    Case("fma_read_ldmatrix", [m(SMEM_A, "smem a   { order: km; pad: 4; read: ldmatrix; }")],
         [("read: |ldmatrix", "read: ldmatrix needs an `mma` section; the FMA path reads fragments with 32-, 64- "
                              "or 128-bit loads")]),
    Case("mma_vector_over_16_bytes", [m("load a   { vector: 8; }", "load a   { vector: 16; }")],
         [("vector: |16", "a vector width in elements must be 1, 2, 4 or 8, found 16")],
         ["hint: 8 x bf16 = 16 bytes is the widest global load"], base=MMA),
    Case("mma_vector_8_of_f32", [m("pipeline {", "load a   { vector: 8; }\n    pipeline {")],
         [("vector: |8", "a vector width in elements must be 1, 2 or 4, found 8")],
         ["hint: 4 x f32 = 16 bytes is the widest global load"], base=TF32),
    Case("mma_swizzle_breaks_ldmatrix_rows", [m("xor(2,3,3)", "xor(2,2,3)")],
         [("swizzle: |xor(2,2,3)", "the swizzle xor(2, 2, 3) moves elements in groups of 2^2 = 4, but ldmatrix "
                                   "reads rows of 16 bytes (8 bf16)")], ["use M >= 3, e.g. xor(2, 3, 3)"], base=MMA),
    Case("mma_pad_breaks_ldmatrix_rows", [m("swizzle: xor(2,3,3);", "pad: 4;")],
         [("pad: |4", "rows of 36 bf16 (72 bytes) break the alignment of the reads: ldmatrix reads rows of 16 "
                      "bytes (8 bf16)")], ["use a pad that keeps rows a multiple of 8 elements (16 bytes)"], base=MMA),
    Case("mma_copy_registers", [m("copy: cp_async", "copy: registers")],
         [("copy: |registers", "copy: registers is not supported for mma specs yet")],
         ["use `copy: cp_async;` (the default for mma specs)"], base=MMA),
    Case("mma_stream_k_needs_f32_c", [m("c: f32 row", "c: bf16 row"), m("bounds: checked", "bounds: exact"),
                                      m("raster: group(8);", "raster: group(8); schedule: stream_k;")],
         [("schedule: |stream_k", "schedule: stream_k adds partial sums into C with f32 atomics, but C is bf16")],
         ["use `c: f32 row;` or `schedule: tiles;`"], base=MMA),
    Case("mma_shared_memory_over_limit", [m("tile: 128x128x32", "tile: 128x128x64"), m("stages: 4", "stages: 8")],
         [("stages: |8", "the tiles of A (128x64 bf16) and B (64x128 bf16) in 8 stage(s) need 262144 bytes of "
                         "shared memory (256.0 KiB), more than the 166912 bytes (163 KiB) sm_80 allows per block")],
         ["use `stages: 5;`, the most that fit"], base=MMA),
    # --- several errors in one file ------------------------------------------------------------
    Case("several_schema_errors", [m("tile: 128x128x8", "tiles: 128x128x8"), m("sm_90", "sm_70"),
                                   m("load b   { vector: 4; }", "load b   { vector: 5; }"),
                                   m("stages: 2;", "stages: 2; stages: 2;")],
         [("|sm_70", "unknown target 'sm_70'"),
          ("|tiles", "unknown key 'tiles'"),
          ("vector: |5", "a vector width in elements must be 1, 2 or 4"),
          ("stages: 2; |stages", "duplicate key 'stages'")]),
    Case("several_semantic_errors", [m("gemm sgemm_v3", "gemm class"),
                                     m("raster: row", "raster: group(0)"), m("lanes: 4x8 row", "lanes: 8x4 row"),
                                     m("order: kn", "order: nk; swizzle: xor(2, 2, 1)"), m("stages: 2", "stages: 3")],
         [("gemm |class", "C/C++ keyword"),
          ("raster: |group(0)", "needs at least one row"),
          ("repeat: |2x2 block", "along m is 4*8*4*2 = 256, but the block tile's BM is 128; along n is 2*4*4*2 = 64"),
          ("swizzle: |xor(2, 2, 1)", "invalid swizzle"),
          ("stages: |3", "register-staged copies double-buffer")]),
]

# --- the fuse section (docs/fusion.md) --------------------------------------------------------
FUSE_AT = "pipeline { stages: 2;"
WGMMA_BASE = (ROOT / "specs" / "hgemm_h100_bf16c.gemm").read_text().replace(
    "    target   sm_90a;", "    fuse     { bias: n; activation: gelu_tanh; }\n    target   sm_90a;")
CASES += [
    Case("fuse_unknown_activation", [m(FUSE_AT, "fuse { activation: gleu; }\n    " + FUSE_AT)],
         [("activation: |gleu", "expected an activation, found 'gleu'")], ["did you mean 'gelu'?"]),
    Case("fuse_unknown_key", [m(FUSE_AT, "fuse { bais: n; }\n    " + FUSE_AT)],
         [("|bais", "unknown key 'bais' in section 'fuse'")], ["did you mean 'bias'?"]),
    Case("fuse_bias_axis", [m(FUSE_AT, "fuse { bias: k; }\n    " + FUSE_AT)],
         [("bias: |k", "expected m (one value per row) or n (one per column), found 'k'")]),
    Case("fuse_bias_type_unreadable", [m(FUSE_AT, "fuse { bias: n f64; }\n    " + FUSE_AT)],
         [("bias: n |f64", "expected the bias's element type, found 'f64'")], ["did you mean 'f16'?"]),
    Case("fuse_bias_too_many_words", [m(FUSE_AT, "fuse { bias: n f32 row; }\n    " + FUSE_AT)],
         [("bias: |n f32 row", "expected `m` or `n` and an optional element type")]),
    Case("fuse_residual_needs_type_and_layout", [m(FUSE_AT, "fuse { residual: f32; }\n    " + FUSE_AT)],
         [("residual: |f32", "expected a type and a layout")]),
    Case("fuse_empty", [m(FUSE_AT, "fuse { }\n    " + FUSE_AT)], [("|fuse", "the fuse section has no step")]),
    Case("fuse_scale_with_alpha_beta", [m(FUSE_AT, "fuse { scale: rowcol; }\n    " + FUSE_AT)],
         [("scale: |rowcol", "scale vectors take alpha's place")], ["remove `epilogue: alpha_beta;`"]),
    Case("fuse_16_bit_bias_on_the_fma_path", [m(FUSE_AT, "fuse { bias: n bf16; }\n    " + FUSE_AT)],
         [("bias: |n bf16", "the bias is bf16, but the FMA path reads f32 only")], ["write `bias: n f32;`"]),
    Case("fuse_with_stream_k", [m("raster: row;", "raster: row; schedule: stream_k;"),
                                m(FUSE_AT, "fuse { activation: relu; }\n    " + FUSE_AT)],
         [("schedule: |stream_k", "a fuse chain needs each element's whole sum in one place")],
         ["the wgmma path's stream-K takes one"]),
    Case("fuse_residual_on_a_batch", [m("epilogue: alpha_beta;", "epilogue: alpha_beta; batch: strided;"),
                                      m(FUSE_AT, "fuse { residual: f32 row; }\n    " + FUSE_AT)],
         [("residual: |f32 row", "a residual is not supported with batch: strided")]),
    Case("fuse_duplicate_section", [m(FUSE_AT, "fuse { bias: m; }\n    fuse { bias: n; }\n    " + FUSE_AT)],
         [("|fuse { bias: n", "duplicate section 'fuse'")]),
]

# --- quantized weights (docs/quantized.md): the base is a wgmma spec, which cannot dequantize, so each case's B is
# refused too, with a hint naming the dequant path ------------------------------------------------------------
QUANT_BASE = """\
gemm w4a16 {
    problem  { a: bf16 row; b: s4 col; c: bf16 row; bounds: checked; }
    quant b  { group: 128; zeros: yes; }
    target   sm_90a;
    block    { tile: 64x128x64; }
    threads  { warpgroups: 1; }
    mma      { shape: m64n128k16; }
    pipeline { stages: 4; copy: tma; }
}
"""
NO_DEQUANTIZER = "the wgmma path cannot dequantize s4 weights"
CASES += [
    Case("quant_wgmma_refuses_and_names_the_dequant_path", [], [("b: |s4 col", NO_DEQUANTIZER)],
         ["the dequant path takes them: see docs/quantized.md for its spec"], base=QUANT_BASE),
    Case("quant_mma_sync_refuses", [m("warpgroups: 1;", "warps: 1x4;"), m("m64n128k16;", "m16n8k16; repeat: 4x4;"),
                                    m("copy: tma;", "copy: cp_async;"), m("sm_90a", "sm_80")],
         [("b: |s4 col", "the mma_sync path cannot dequantize s4 weights")], base=QUANT_BASE),
    Case("quant_weight_type_on_a", [m("a: bf16 row; b: s4 col", "a: s4 row; b: bf16 col")],
         [("a: |s4 row", "A is s4, a weight type: only B holds quantized weights"),
          ("|quant b", "a `quant b` section needs a weight type on B, which is bf16")],
         ["write `a: bf16 row;` (or f16), and `b: s4 col;` with `quant b { group: 128; }`"], base=QUANT_BASE),
    Case("quant_integer_a_and_b", [m("a: bf16 row", "a: s8 row"), m("b: s4 col", "b: s8 col")],
         [("a: |s8 row", "A is s8, a weight type"), ("b: |s8 col", "the wgmma path cannot dequantize s8")],
         absent=["same element type"], base=QUANT_BASE),
    Case("quant_section_without_weight_type", [m("b: s4 col", "b: bf16 col")],
         [("|quant b", "a `quant b` section needs a weight type on B, which is bf16")],
         ["or remove the section"], base=QUANT_BASE),
    Case("quant_weight_type_without_section", [m("    quant b  { group: 128; zeros: yes; }\n", "")],
         [("b: |s4 col", "B is s4, a weight type, but no `quant b` section says how its scales apply"),
          ("b: |s4 col", NO_DEQUANTIZER)], ["add `quant b { group: 128; }`"], base=QUANT_BASE),
    Case("quant_a_16_bit_a_is_needed", [m("a: bf16 row", "a: f32 row")],
         [("a: |f32 row", "A is f32, but s4 weights multiply bf16 or f16 activations"), ("b: |s4 col", NO_DEQUANTIZER)],
         absent=["same element type"], base=QUANT_BASE),
    Case("quant_zeros_on_e4m3", [m("b: s4 col", "b: e4m3 col")],
         [("b: |e4m3 col", "the wgmma_fp8 path cannot dequantize e4m3 weights"),
          ("zeros: |yes", "zeros: yes on e4m3 weights: zero points are integers")], ["remove `zeros: yes;`"],
         base=QUANT_BASE),
    Case("quant_group_not_a_power_of_two", [m("group: 128", "group: 96")],
         [("group: |96", "a quantization group must be a power of two, found 96")],
         ["or write `group: channel;`"], base=QUANT_BASE),
    Case("quant_group_below_32", [m("group: 128", "group: 16")],
         [("group: |16", "a quantization group must be between 32 and")], base=QUANT_BASE),
    Case("quant_group_misspelt", [m("group: 128", "group: chanel")],
         [("group: |chanel", "expected a group size such as 128, or channel")], ["did you mean 'channel'?"],
         base=QUANT_BASE),
    Case("quant_group_and_block_k_apart", [m("64x128x64", "64x128x96"), m("group: 128", "group: 64")],
         [("b: |s4 col", NO_DEQUANTIZER),
          ("group: |64", "group 64 and the block tile's K (96) do not divide one another: k-tiles would start "
                         "inside a group")], ["or `group: 32;`"], base=QUANT_BASE),
    Case("quant_b_row", [m("b: s4 col", "b: s4 row")],
         [("b: |s4 row", "quantized B must be `col`: N x K with K contiguous"), ("b: |s4 row", NO_DEQUANTIZER)],
         ["write `b: s4 col;`"], base=QUANT_BASE),
    Case("quant_c_integer", [m("c: bf16 row", "c: s8 row")],
         [("b: |s4 col", NO_DEQUANTIZER),
          ("c: |s8 row", "C is s8; FP8 and the integer weight types are operand types only")], base=QUANT_BASE),
    Case("quant_bias_integer", [m("    target", "    fuse     { bias: n u4; }\n    target")],
         [("b: |s4 col", NO_DEQUANTIZER), ("bias: |n u4", "the bias is u4; FP8 and the integer weight types")],
         base=QUANT_BASE),
    Case("quant_a", [m("quant b", "quant a")],
         [("quant |a", "section 'quant' needs an operand label: b (only B, the weights, is quantized")],
         ["write `quant b { ... }`"], base=QUANT_BASE),
    Case("quant_group_missing", [m("group: 128; ", "")],
         [("|quant b", "section 'quant' is missing required key 'group'")], base=QUANT_BASE),
    Case("quant_zeros_word", [m("zeros: yes", "zeros: true")],
         [("zeros: |true", "expected yes or no, found 'true'")], base=QUANT_BASE),
    # Without an `mma` section no path takes weights against an f32 A (the dequant path needs a 16-bit one, the
    # FMA path multiplies no weights), nor FP8 operands: one error at B, before any key is judged by a path.
    Case("no_path_takes_s4_weights_against_f32", [m("b: f32 row", "b: s4 col")],
         [("b: |s4 col", "no instruction path multiplies f32 A by s4 B without an `mma` section")],
         ["the dequant path takes s4 B with f16 or bf16 A"]),
    Case("no_path_takes_fp8_without_mma", [m("a: f32 row; b: f32 row", "a: e5m2 row; b: e5m2 col")],
         [("b: |e5m2 col", "no instruction path multiplies e5m2 A by e5m2 B without an `mma` section")],
         ["docs/language.md lists the element types each path takes"]),
]


def _errors(case: Case) -> tuple[CompileError, str]:
    text = case.source()
    with pytest.raises(CompileError) as info:
        load(SourceFile(FILE, text))
    return info.value, text


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_diagnostic(case: Case):
    error, text = _errors(case)
    assert error.source is not None and error.source.text == text
    found = [d for d in error.diagnostics if d.severity is Severity.ERROR]
    summary = "\n".join(d.render(error.source) for d in found)
    assert len(found) == len(case.expect), summary
    for diagnostic, (anchor, message) in zip(found, case.expect):
        line, column = locate(text, anchor)
        prefix = f"{FILE}:{line}:{column}: error: "
        assert diagnostic.render(error.source).startswith(prefix), summary
        assert message in diagnostic.message, summary
        check_rendering(diagnostic, error.source, line, column)
    rendered = error.render()
    for hint in case.hints:
        assert hint in rendered, rendered
    for word in case.absent:
        assert word not in rendered, rendered
    assert "Traceback" not in rendered
    # every diagnostic in source order
    positions = [(d.span.line, d.span.column) for d in error.diagnostics]
    assert positions == sorted(positions)


@pytest.mark.parametrize("text", [MMA, TF32], ids=["hgemm_mma", "sgemm_3xtf32"])
def test_mma_fixtures_are_clean(text):
    _, diagnostics = load(SourceFile(FILE, text))
    assert diagnostics == []


def test_f32_ldmatrix_with_k_contiguous_is_accepted():
    """ldmatrix serves TF32 where k is contiguous (A mk; B nk, here through a transposing 4-byte copy);
    without `read:` f32 fragments keep their 32-bit loads."""
    text = TF32.replace("smem a   { order: mk; pad: 4; }", "smem a   { order: mk; pad: 4; read: ldmatrix; }")
    text = text.replace("smem b   { order: kn; pad: 8; }", "smem b   { order: nk; pad: 4; read: ldmatrix; }")
    spec, diagnostics = load(SourceFile(FILE, text))
    assert not [d for d in diagnostics if d.severity is Severity.ERROR]
    assert spec.smem_a.read is spec.smem_b.read is ir.SmemRead.LDMATRIX
    assert load(SourceFile(FILE, TF32))[0].smem_a.read is ir.SmemRead.LDS32


def test_mma_needs_an_arch_that_has_it(monkeypatch):
    monkeypatch.setitem(targets.ARCHS, 80, dataclasses.replace(targets.ARCHS[80], has_mma_sync=False))
    error, _ = _errors(Case("mma_sync", [], [], text=MMA))
    (diagnostic,) = error.diagnostics
    line, column = locate(MMA, "|mma      {")
    assert diagnostic.render(error.source).startswith(f"{FILE}:{line}:{column}: error: mma needs sm_80 or newer")
    check_rendering(diagnostic, error.source, line, column)


def test_mma_register_budget_warning():
    text = MMA.replace(PIPELINE_MMA, PIPELINE_MMA + "\n    budget { registers: 64; }")
    _, warnings = load(SourceFile(FILE, text))
    (warning,) = warnings
    # a warp's 64x64 tile: 128 accumulators per thread, and 4x4 + 8x2 fragment registers
    assert "registers: 64 cannot hold a thread's 128 accumulators and fragments (160 values)" in warning.message
    assert (warning.span.line, warning.span.column) == locate(text, "registers: |64")


def test_base_spec_is_clean():
    spec, warnings = load(SourceFile(FILE, BASE))
    assert spec.name == "sgemm_v3" and warnings == []


def test_shared_memory_fits_on_sm90():
    """The spec that is over sm_86's limit in `shared_memory_over_sm86_limit` is fine on sm_90."""
    text = BASE.replace("tile: 128x128x8", "tile: 128x128x32").replace(PIPELINE, "pipeline { stages: 4; copy: cp_async; }")
    spec, warnings = load(SourceFile(FILE, text))
    assert spec.pipeline.stages == 4 and warnings == []


def test_cp_async_needs_an_arch_that_has_it(monkeypatch):
    monkeypatch.setitem(targets.ARCHS, 90, dataclasses.replace(targets.ARCHS[90], has_cp_async=False))
    text = BASE.replace(PIPELINE, "pipeline { stages: 3; copy: cp_async; }")
    error, _ = _errors(Case("cp_async", [], [], text=text))
    (diagnostic,) = error.diagnostics
    line, column = locate(text, "copy: |cp_async")
    assert diagnostic.render(error.source).startswith(f"{FILE}:{line}:{column}: error: copy: cp_async needs sm_80")


def test_warnings_do_not_fail():
    text = BASE.replace(SMEM_A, "smem a   { order: km; pad: 1; }")
    spec, warnings = load(SourceFile(FILE, text))
    assert spec.smem_a.pad == 1
    (warning,) = warnings
    assert warning.severity is Severity.WARNING
    line, column = locate(text, "pad: |1")
    assert warning.render(SourceFile(FILE, text)).startswith(
        f"{FILE}:{line}:{column}: warning: fragment reads of A are 32-bit instead of 128-bit: pad 1")
    check_rendering(warning, SourceFile(FILE, text), line, column)


def test_swizzle_warning_for_narrowed_reads():
    text = BASE.replace(SMEM_A, "smem a   { order: km; swizzle: xor(1, 0, 3); }")
    _, warnings = load(SourceFile(FILE, text))
    (warning,) = warnings
    assert "the swizzle xor(1, 0, 3) moves elements in groups of 2^0 = 1, which breaks 128-bit reads" in warning.message
    assert (warning.span.line, warning.span.column) == locate(text, "swizzle: |xor")


def test_column_major_a_runs_along_m_so_km_takes_vector_stores():
    # Row-major A reaches km transposed, one element per store, so a pad cannot narrow its stores;
    # column-major A arrives along m, which km keeps contiguous, so the stores are float4 unless a
    # pad breaks their alignment.
    narrowing = "shared-memory stores of A are 64-bit instead of 128-bit: pad 2"
    row = BASE.replace(SMEM_A, "smem a   { order: km; pad: 2; }")
    col = row.replace("a: f32 row", "a: f32 col")
    assert not any(w.message.startswith(narrowing) for w in load(SourceFile(FILE, row))[1])
    (warning,) = [w for w in load(SourceFile(FILE, col))[1] if w.message.startswith(narrowing)]
    assert (warning.span.line, warning.span.column) == locate(col, "pad: |2")


def test_register_budget_warning():
    text = BASE.replace(PIPELINE, PIPELINE + "\n    budget { registers: 64; }")
    _, warnings = load(SourceFile(FILE, text))
    (warning,) = warnings
    assert "cannot hold a thread's 8x8 accumulators" in warning.message


def test_errors_carry_warnings_too():
    text = BASE.replace(SMEM_A, "smem a   { order: km; pad: 1; }").replace("raster: row", "raster: group(0)")
    error, _ = _errors(Case("mixed", [], [], text=text))
    assert [d.severity for d in error.diagnostics] == [Severity.ERROR, Severity.WARNING]


def test_syntax_errors_stop_at_the_cap():
    text = BASE.replace("stages: 2;", " ".join(f"k{i}: 1$;" for i in range(parser.MAX_SYNTAX_ERRORS + 5)))
    error, _ = _errors(Case("many", [], [], text=text))
    assert len(error.diagnostics) == parser.MAX_SYNTAX_ERRORS
    assert all("unexpected character '$'" in d.message for d in error.diagnostics)


def test_an_unclosed_brace_stops_the_recovery():
    """Past a missing '}' every later section would read as a broken entry: one error, not a cascade."""
    text = BASE.replace("2x2 block; }", "2x2 block;").replace("stages: 2;", "stages: 2$;")
    error, _ = _errors(Case("unclosed", [], [], text=text))
    assert [d.message for d in error.diagnostics] == ["expected ':', found 'a'"]


def test_a_damaged_mma_shape_leaves_the_path_open():
    """A cut-out wgmma shape makes no FMA spec of the rest: its wgmma-only keys are not errors."""
    text = (ROOT / "specs" / "fp8_h100.gemm").read_text()
    damaged = re.sub(r"shape:\s*(m64n\w+);", r"shape: \1$;", text, count=1)
    assert damaged != text
    error, _ = _errors(Case("wgmma", [], [], text=damaged))
    assert [d.message for d in error.diagnostics] == ["unexpected character '$'"]


def test_every_error_in_one_rendering():
    error, text = _errors(next(c for c in CASES if c.id == "several_semantic_errors"))
    rendered = error.render()
    assert rendered.count(": error: ") == 5
    assert rendered.count("^") == 5


# --- files -------------------------------------------------------------------------------------


def _file_error(path: Path) -> Diagnostic:
    with pytest.raises(CompileError) as info:
        load_path(path)
    (diagnostic,) = info.value.diagnostics
    assert diagnostic.severity is Severity.ERROR
    return diagnostic


def test_not_a_gemm_file(tmp_path):
    path = tmp_path / "spec.txt"
    path.write_text(BASE)
    diagnostic = _file_error(path)
    assert diagnostic.render().startswith(f"{path}:1:1: error: not a .gemm file")


def test_missing_file(tmp_path):
    path = tmp_path / "missing.gemm"
    diagnostic = _file_error(path)
    assert diagnostic.render().startswith(f"{path}:1:1: error: cannot read file")


def test_directory_is_unreadable(tmp_path):
    path = tmp_path / "dir.gemm"
    path.mkdir()
    assert _file_error(path).render().startswith(f"{path}:1:1: error: cannot read file")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path):
    path = tmp_path / "secret.gemm"
    path.write_text(BASE)
    path.chmod(0)
    try:
        assert _file_error(path).render().startswith(f"{path}:1:1: error: cannot read file")
    finally:
        path.chmod(0o600)


def test_non_utf8_file(tmp_path):
    path = tmp_path / "latin1.gemm"
    path.write_bytes(BASE.encode().replace(b"pad: 4;", b"pad: 4; \xe9"))
    line, column = locate(BASE.replace("pad: 4;", "pad: 4; \u00e9"), "pad: 4; |\u00e9")
    assert _file_error(path).render().startswith(f"{path}:{line}:{column}: error: file is not valid UTF-8")


def test_file_errors_go_through_the_same_path(tmp_path):
    path = tmp_path / "bad.gemm"
    path.write_text(BASE.replace("stages: 2", "stages: 3"))
    with pytest.raises(CompileError) as info:
        load_path(path)
    line, column = locate(BASE, "stages: |2")
    assert info.value.render().startswith(f"{path}:{line}:{column}: error: register-staged copies double-buffer")
    assert f"{line:>5} | " in info.value.render()


# --- the command line --------------------------------------------------------------------------


def test_cli_rejects_bad_spec(tmp_path):
    if importlib.util.find_spec("gemmdsl.cli") is None:
        pytest.skip("gemmdsl.cli does not exist yet")
    bad = tmp_path / "bad.gemm"
    bad.write_text(BASE.replace("tile: 128x128x8", "tile: 64x128x8"))
    out = tmp_path / "out"
    # Run it the way the `gemmdsl` console script does: import main and exit with what it returns.
    code = "import sys; from gemmdsl.cli import main; sys.argv[0] = 'gemmdsl'; sys.exit(main())"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, "-c", code, "compile", str(bad), "-o", str(out)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    line, column = locate(bad.read_text(), "repeat: |2x2 block")
    assert result.returncode == 1, result.stderr
    assert f"{bad}:{line}:{column}: error: warps x lanes x micro x repeat along m" in result.stderr
    assert f"{line:>5} | " in result.stderr and "^" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*"))


# --- validate() on its own ---------------------------------------------------------------------


def test_validate_returns_nothing_for_a_good_spec():
    from gemmdsl.parser import parse
    from gemmdsl.paths import path_of
    from gemmdsl.validate import validate

    spec = parse(SourceFile(FILE, BASE))
    assert validate(spec, path_of(spec)) == []


def test_validate_an_unknown_target_set_after_parsing():
    from gemmdsl.parser import parse
    from gemmdsl.paths import path_of
    from gemmdsl.validate import validate

    spec = parse(SourceFile(FILE, BASE)).with_target(75)
    (diagnostic,) = validate(spec, path_of(spec))
    assert diagnostic.severity is Severity.ERROR
    assert diagnostic.message == "unknown target sm_75"
    assert (diagnostic.span.line, diagnostic.span.column) == locate(BASE, "|sm_90")


def test_validate_per_target_limits():
    """sm_86 holds 1536 threads per SM, sm_90 2048: the same budget passes on one and fails on the other."""
    from gemmdsl.parser import parse
    from gemmdsl.paths import path_of
    from gemmdsl.validate import validate

    text = BASE.replace(PIPELINE, PIPELINE + "\n    budget { blocks_per_sm: 8; }")
    spec = parse(SourceFile(FILE, text))
    assert validate(spec, path_of(spec)) == []
    (diagnostic,) = validate(spec.with_target(86), path_of(spec))
    assert "8 blocks of 256 threads are 2048 threads, more than the 1536 an sm_86 SM can hold" in diagnostic.message


# --- numeric ranges: each stated once, by the parser, and what it states is what is taken --------

WGMMA = (ROOT / "specs" / "hgemm_h100.gemm").read_text()
RANGED_KEYS = [  # (spec, the text the key's value replaces, how the key is written with a value)
    (BASE, "stages: 2; copy: registers;", "stages: {}; copy: cp_async;"),
    (BASE, PIPELINE, PIPELINE + "\n    budget { registers: {}; }"),
    (BASE, PIPELINE, PIPELINE + "\n    budget { blocks_per_sm: {}; }"),
    (BASE, "stages: 2;", "stages: 2; unroll: {};"),
    (BASE, "order: km; pad: 4;", "order: km; pad: {};"),
    (WGMMA, "warpgroups: 2;", "warpgroups: {};"),
    (WGMMA, "producer: 1;", "producer: {};"),
]
RANGE = re.compile(r"must be (?:between (\d+) and (\d+)|(\d+)), found")


@pytest.mark.parametrize("spec, old, new", RANGED_KEYS, ids=[new.split(": {}")[0].split()[-1] for _, _, new in RANGED_KEYS])
def test_a_stated_range_is_the_range_taken(spec, old, new):
    """The message for a far too large value states [low, high]; low - 1 gets the same message, and
    neither low nor high is refused by the front end for any reason that names a range."""
    assert spec.count(old) == 1, old
    key = new.split("{}")[0].split()[-1]

    def errors(value: str) -> list[str]:
        try:
            load(SourceFile(FILE, spec.replace(old, new.replace("{}", value))))
        except CompileError as err:
            return [d.message for d in err.diagnostics if d.severity is Severity.ERROR]
        return []

    (huge,) = errors("1" + "0" * 21)
    stated = RANGE.search(huge)
    low, high = (int(stated[3]),) * 2 if stated[3] else (int(stated[1]), int(stated[2]))
    if low > 0:
        assert errors(str(low - 1)) == [huge.replace("1" + "0" * 21, str(low - 1))], key
    for value in {low, high}:
        assert not [message for message in errors(str(value)) if "must be" in message or "at least" in message], \
            (key, value, errors(str(value)))


@pytest.mark.parametrize("before, after", [(0, 5_000_000), (3000, 5_000_000), (5_000_000, 10), (40, 40)])
def test_a_long_line_is_quoted_around_its_caret(before, after):
    """A one-line spec of megabytes gets a diagnostic of a few hundred bytes, its caret under the culprit."""
    one_line = " ".join(BASE.split("\n")).replace("tile: 128x128x8;", " " * before + "tile: 128x1@28x8;" + " " * after)
    with pytest.raises(CompileError) as info:
        load(SourceFile(FILE, one_line))
    rendered = info.value.render()
    assert len(rendered) < 600, len(rendered)
    quoted, caret = [row.split(" | ", 1)[1] for row in rendered.split("\n")[1:3]]
    assert quoted[caret.index("^")] == "@"
    assert len(quoted) <= 106 and quoted.startswith("...") and quoted.endswith("...")


def test_a_tile_neither_axis_fits_gets_one_error_and_one_block_tile():
    """`tile: 1x1x1`: one error for both axes, whose hint names one block tile that fits both."""
    with pytest.raises(CompileError) as info:
        load(SourceFile(FILE, BASE.replace("tile: 128x128x8", "tile: 1x1x1")))
    (error,) = [d for d in info.value.diagnostics if d.severity is Severity.ERROR]
    assert error.hint == ("make the block tile 128x128x1, or change the thread layout so its product is 1 along m "
                          "and 1 along n")
