"""Untrusted input at the front end: limits checked before the work they bound, diagnostics capped per file,
control characters escaped wherever a file's text or name is echoed, a byte order mark accepted, and a
family's `use` paths that the OS refuses reported at their line (docs/language.md, "Input limits")."""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl import family as family_module
from gemmdsl.compiler import compile_source
from gemmdsl.family import compile_family_path
from gemmdsl.frontend import load
from gemmdsl.source import MAX_ERRORS_SHOWN, MAX_TOKENS, CompileError, SourceFile, printable

ROOT = Path(__file__).resolve().parents[1]
BASE = (ROOT / "specs" / "sgemm_v3.gemm").read_text()
CHECKED = (ROOT / "specs" / "checked_64x64.gemm").read_text()
KEY = "bounds: exact; "
# Every character that must not reach a terminal or an emitted comment raw: C0 controls, DEL, C1's NEL, the
# Unicode line and paragraph separators, a bidi override.
CONTROLS = [chr(code) for code in (*range(0x20), 0x7F, 0x85, 0x2028, 0x2029, 0x202E)]


def _script():
    spec = importlib.util.spec_from_file_location("adversarial_specs", ROOT / "scripts" / "adversarial_specs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rendered_error(text: str, path: str = "case.gemm") -> str:
    with pytest.raises(CompileError) as info:
        load(SourceFile(path, text))
    return info.value.render()


def raw_controls(text: str) -> set[str]:
    """The characters of `text` a terminal would act on or hide, a newline and a tab aside."""
    return {char for char in text if char not in "\n\t" and unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp")}


# --- the cap on diagnostics -----------------------------------------------------------------------


def test_diagnostics_are_capped_per_file_with_a_count_of_the_rest():
    text = BASE.replace("epilogue: alpha_beta;", "epilogue: alpha_beta; " + KEY * 1000)
    rendered = rendered_error(text)
    assert rendered.count(": error: duplicate key 'bounds'") == MAX_ERRORS_SHOWN
    assert rendered.endswith(f"case.gemm: note: and {1000 - MAX_ERRORS_SHOWN} more errors "
                             f"(the first {MAX_ERRORS_SHOWN} errors of a file are shown)")


def test_a_spec_past_the_token_limit_gets_one_error_at_the_first_token_beyond():
    text = BASE.replace("epilogue: alpha_beta;", "epilogue: alpha_beta; " + KEY * MAX_TOKENS)
    with pytest.raises(CompileError) as info:
        load(SourceFile("case.gemm", text))
    (error,) = info.value.diagnostics
    assert error.message == f"the spec holds more than {MAX_TOKENS:,} tokens; gemmdsl reads no further"
    assert error.span.line == 3
    assert len(info.value.render()) < 600


@pytest.mark.parametrize("shape", sorted(set(_script().SHAPES) - {"none"}))
def test_a_5_megabyte_adversarial_spec_gets_a_short_answer(shape, tmp_path):
    """Each shape of scripts/adversarial_specs.py through the CLI: a capped answer, no traceback. Its time is
    the script's to measure; the timeout only stops a hang."""
    path = tmp_path / "adversarial.gemm"
    path.write_text(_script().SHAPES[shape](5_000_000))
    done = subprocess.run([sys.executable, "-m", "gemmdsl.cli", "check", str(path)], capture_output=True, text=True,
                          timeout=300)
    assert "Traceback" not in done.stderr
    valid = shape in ("huge_comment", "many_comment_lines")
    assert done.returncode == (0 if valid else 1), done.stderr[-2000:]
    assert len(done.stderr) < 20_000 and len(done.stderr.splitlines()) <= 4 * MAX_ERRORS_SHOWN + 1


# --- control characters, echoed ----------------------------------------------------------------


@pytest.mark.parametrize("char", CONTROLS, ids=[f"U+{ord(c):04X}" for c in CONTROLS])
def test_a_control_character_in_an_echoed_line_is_escaped_and_the_caret_follows(char):
    """In the file's name, and before the error on its line (`pad: 4<char>@;`) and in a comment after it, a
    control character is shown escaped; the caret stays under what it points at (a newline: in the name only)."""
    inline = "" if char == "\n" else char
    line = f"    smem a   {{ order: km; pad: 4{inline}@; }}  // note{inline}end"
    text = BASE.replace("    smem a   { order: km; pad: 4; }", line)
    rendered = rendered_error(text, path=f"dir{char}/case.gemm")
    assert not raw_controls(rendered), rendered
    rows = rendered.split("\n")
    assert rows[0].startswith(f"dir{printable(char)}/case.gemm:")
    carets = [(quoted, caret.index("^")) for quoted, caret in zip(rows, rows[1:]) if re.match(r" +\| [ \t]*\^", caret)]
    assert carets, rendered
    for quoted, column in carets:
        assert quoted[column] == "@" or quoted[column:].startswith(printable(char)), rendered


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_printable_leaves_nothing_a_terminal_acts_on(text):
    assert not raw_controls(printable(text).replace("\t", ""))
    assert "\n" not in printable(text)


def test_printable_writes_a_file_name_byte_as_that_byte():
    name = os.fsdecode(b"spec\xff\x1b[2J.gemm")
    assert printable(name) == "spec\\xff\\x1b[2J.gemm"


# --- a byte order mark -------------------------------------------------------------------------


def test_a_byte_order_mark_starts_a_spec_a_family_and_a_template(tmp_path):
    from gemmdsl.tune import read_template

    (tmp_path / "a.gemm").write_bytes(b"\xef\xbb\xbf" + CHECKED.encode())
    (tmp_path / "f.gemmf").write_bytes(b"\xef\xbb\xbffamily f {\n    use a.gemm;\n}\n")
    template = (ROOT / "gemmdsl" / "templates" / "sgemm_warp.tgemm").read_bytes()
    (tmp_path / "t.tgemm").write_bytes(b"\xef\xbb\xbf" + template)
    assert compile_family_path(tmp_path / "f.gemmf").members[0].artifacts.name == "checked_64x64"
    assert compile_source(SourceFile("s.gemm", "\ufeff" + CHECKED)).name == "checked_64x64"
    args = argparse.Namespace(template=str(tmp_path / "t.tgemm"), sizes="256x256x256", max_candidates=5000)
    path, candidates, sizes = read_template(args)
    assert candidates and sizes == [(256, 256, 256)]


# --- a family's `use` paths --------------------------------------------------------------------


def family_error(tmp_path: Path, text: str) -> str:
    (tmp_path / "f.gemmf").write_text(text)
    with pytest.raises(CompileError) as info:
        compile_family_path(tmp_path / "f.gemmf")
    return info.value.render()


def test_a_member_path_the_os_refuses_is_an_error_at_its_line(tmp_path):
    (tmp_path / "dir.gemm").mkdir()
    os.mkfifo(tmp_path / "pipe.gemm")
    too_long = "x" * 300 + ".gemm"
    lines = ["checked\0.gemm", "dir.gemm", "pipe.gemm", too_long, "missing.gemm"]
    rendered = family_error(tmp_path, "family f {\n" + "".join(f"    use {line};\n" for line in lines) + "}\n")
    assert "f.gemmf:2:9: error: member checked\\x00.gemm cannot be read: its name holds a NUL byte" in rendered
    assert "f.gemmf:3:9: error: member dir.gemm cannot be read: Is a directory" in rendered
    assert "f.gemmf:4:9: error: member pipe.gemm cannot be read: not a regular file" in rendered
    assert f"f.gemmf:5:9: error: member {too_long} cannot be read: File name too long" in rendered
    assert "f.gemmf:6:9: error: member missing.gemm cannot be read: No such file or directory" in rendered
    assert not raw_controls(rendered) and "Traceback" not in rendered


def test_a_repeated_member_is_compiled_once_and_each_repeat_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "a.gemm").write_text(CHECKED)
    (tmp_path / "b.gemm").write_text(CHECKED.replace("checked_64x64", "other"))
    compiled = []
    monkeypatch.setattr(family_module, "compile_source",
                        lambda source, target=None: compiled.append(source.path) or compile_source(source, target))
    repeats = 300
    text = "family f {\n" + "    use a.gemm;\n" * (repeats + 1) + "    use ./a.gemm;\n    use b.gemm;\n}\n"
    rendered = family_error(tmp_path, text)
    assert sorted(Path(path).name for path in compiled) == ["a.gemm", "b.gemm"]
    assert "f.gemmf:3:9: error: a.gemm is a member already (line 2)" in rendered
    assert rendered.count(": error: ") == MAX_ERRORS_SHOWN
    assert rendered.endswith(f"f.gemmf: note: and {repeats + 1 - MAX_ERRORS_SHOWN} more errors "
                             f"(the first {MAX_ERRORS_SHOWN} errors of a file are shown)")


def test_two_spellings_of_one_member_are_one_member(tmp_path):
    (tmp_path / "a.gemm").write_text(CHECKED)
    rendered = family_error(tmp_path, "family f {\n    use a.gemm;\n    use ./a.gemm;\n}\n")
    assert "f.gemmf:3:9: error: ./a.gemm names the same file as a.gemm, which is a member already (line 2)" in rendered


def test_a_family_past_the_token_limit_gets_one_error(tmp_path):
    rendered = family_error(tmp_path, "family f {\n" + "    use a.gemm;\n" * MAX_TOKENS + "}\n")
    assert rendered.count(": error: ") == 1 and f"more than {MAX_TOKENS:,} tokens" in rendered
