"""No input text changes the emitted code: a spec's or family's text and the names of their files reach the
.cu and .h only as comments, which no character of them can end or extend (docs/emitted-code.md, "Text from
the input").

The exhaustive test compiles, for every control character, a spec and a family with the character and a
payload of C (`#error`, `#include`, a line-continuation backslash) injected into their comments and the names
of their files, and compares the emitted files with the clean ones token for token, as a C compiler reads
them: lines ended the way GCC (nvcc's preprocessor) ends them, trigraphs on (`-std=c++14` turns them on for
GCC), lines spliced, then one `g++ -fpreprocessed -dD -E -P` call over every file strips the comments.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl.compiler import compile_path, compile_text
from gemmdsl.emit import COPIED_BYTES, COPIED_LINES
from gemmdsl.emitter import Emitter
from gemmdsl.family import compile_family_path

ROOT = Path(__file__).resolve().parents[1]
SPEC = (ROOT / "specs" / "sgemm_v3.gemm").read_text()
MEMBER = (ROOT / "specs" / "checked_64x64.gemm").read_text()
FAMILY = "// the family\nfamily injected {\n    use MEMBER;\n}\n"
# Every C0 control, DEL, NEL, the Unicode line and paragraph separators; and no character at all, for the
# payload's own line-continuation backslash and trigraph.
CHARACTERS = [chr(code) for code in (*range(0x20), 0x7F, 0x85, 0x2028, 0x2029)] + [""]
# What a line break would let through: a directive that stops the build, one that pulls in a file, a
# definition; then a trigraph backslash (`??/`) and a backslash that would splice the next line into this one.
# Each piece starts with `#`, a comment in a spec or family after a newline.
PAYLOAD = "#error INJECTED{c}#include <injected.h>{c}#define INJECTED 1{c}#pragma injected ??/{c}#pragma injected \\"
BLANK = re.compile(r"\s")
SEPARATOR = "gemmdsl_injection_case_separator ;"
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')
TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|\w+|\S')


def _file_name_part(char: str) -> str:
    """The character as a file name may hold it (not a NUL, which none may; not a `/`)."""
    return "" if char == "\0" else char


def _injected(text: str, char: str) -> str:
    """`text` with the payload at the end of its first line, a comment: after a newline each piece of the
    payload is a `#` comment of the language itself, so the spec stays the same spec."""
    first, rest = text.split("\n", 1)
    return f"{first} {PAYLOAD.format(c=char)}\n{rest}"


def _compile_spec(directory: Path, char: str | None) -> list[str]:
    """The .cu and .h of the spec, clean (`char` None) or with `char` and the payload in a comment and in the
    file's name."""
    directory.mkdir()
    name = "spec.gemm" if char is None else f"spec{_file_name_part(char)}#error {_file_name_part(char)}x.gemm"
    (directory / name).write_text(SPEC if char is None else _injected(SPEC, char))
    artifacts = compile_path(directory / name)
    return [artifacts.cuda, artifacts.header]


def _compile_family(directory: Path, char: str | None) -> list[str]:
    """The .cu and .h of a one-member family, clean or with `char` in its text, its file's name and its
    member's name (where a `use` path may hold it: not a blank)."""
    directory.mkdir()
    part = "" if char is None else _file_name_part(char)
    member = "member.gemm" if BLANK.fullmatch(part) else f"member{part}.gemm"  # a `use` path holds no blank
    (directory / member).write_text(MEMBER)
    text = FAMILY.replace("MEMBER", member)
    name = "family.gemmf" if char is None else f"family{part}#error {part}x.gemmf"
    (directory / name).write_text(text if char is None else _injected(text, char))
    family = compile_family_path(directory / name)
    return [family.cuda, family.header]


def as_compiled(text: str) -> str:
    """The text after translation phases 1 and 2 as GCC runs them: CR LF and a lone CR end a line, `??/` is a
    backslash (trigraphs on), a backslash before the end of a line (blanks between allowed) joins the lines."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("??/", "\\")
    return re.sub(r"\\[ \t\f\v]*\n", "", text)


def tokens_outside_comments(texts: list[str]) -> list[list[str]]:
    """Each text's tokens, comments removed by one g++ call over them all, string literals' contents blanked."""
    source = f"\n{SEPARATOR}\n".join(as_compiled(text) for text in texts)
    done = subprocess.run(["g++", "-x", "c++", "-fpreprocessed", "-dD", "-E", "-P", "-"], input=source,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    parts = done.stdout.split(SEPARATOR)
    assert len(parts) == len(texts), "a comment or literal ran across a case's end"
    return [[STRING.sub('""', token) for token in TOKEN.findall(part)] for part in parts]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_no_injected_character_changes_the_emitted_tokens(tmp_path):
    cases = [("spec", None), ("family", None)] + [(kind, char) for char in CHARACTERS for kind in ("spec", "family")]
    texts = []
    for index, (kind, char) in enumerate(cases):
        compile_case = _compile_spec if kind == "spec" else _compile_family
        texts += compile_case(tmp_path / str(index), char)
    tokens = tokens_outside_comments(texts)
    clean = {"spec": tokens[0:2], "family": tokens[2:4]}
    for index, (kind, char) in enumerate(cases):
        for file, (found, expected) in enumerate(zip(tokens[2 * index:2 * index + 2], clean[kind])):
            assert found == expected, (kind, repr(char), (".cu", ".h")[file],
                                       [token for token in found if token not in expected][:20])


def _unsafe_in_a_comment(line: str) -> list[str]:
    """What would end or extend a `//` comment line, or hide text in it."""
    problems = [char for char in line if char != "\t" and unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp")]
    if line.rstrip().endswith("\\") or "??/" in line:
        problems.append("continuation")
    return problems


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_a_comment_of_any_text_is_safe_line_by_line(text):
    out = Emitter()
    out.comment(text)
    for line in out.text().split("\n")[:-1]:
        assert line.startswith("//") and not _unsafe_in_a_comment(line), repr(line)


@settings(max_examples=40, deadline=None)
@given(comment=st.text(st.characters(blacklist_characters="\n"), max_size=40))
def test_a_spec_comment_of_any_text_reaches_the_cu_safely(comment):
    for line in compile_text(f"// {comment}\n{SPEC}", "case.gemm").cuda.split("\n"):
        if line.startswith("//"):
            assert not _unsafe_in_a_comment(line), repr(line)


def test_a_file_name_of_undecodable_bytes_is_written_as_escapes(tmp_path):
    path = Path(os.fsdecode(bytes(tmp_path) + b"/spec\xff\xfe.gemm"))
    path.write_text(SPEC)
    artifacts = compile_path(path)
    assert "from spec\\xff\\xfe.gemm." in artifacts.cuda and "from spec\\xff\\xfe.gemm." in artifacts.header
    assert artifacts.cuda.encode() and artifacts.header.encode()  # no lone surrogate left to stop the write


def test_the_copied_text_is_capped_with_a_note_of_what_was_left_out():
    """A spec of 50,000 comment lines and a 1 MB line: the .cu quotes COPIED_LINES lines, COPIED_BYTES at most."""
    comments = "".join(f"// line {index}\n" for index in range(50_000))
    cuda = compile_text(comments + SPEC).cuda
    quoted = cuda.split("// Spec:\n", 1)[1].split("\n//\n// Analysis", 1)[0].split("\n")
    assert len(quoted) == COPIED_LINES + 1
    left_lines = 50_000 + SPEC.strip("\n").count("\n") + 1 - COPIED_LINES
    left_bytes = len(comments + SPEC.strip("\n")) - sum(len(f"// line {index}\n") for index in range(COPIED_LINES))
    assert quoted[-1] == (f"//   [{left_lines:,} more lines ({left_bytes:,} bytes) of the source left out: a .cu "
                          f"quotes at most {COPIED_LINES} lines and {COPIED_BYTES:,} bytes of it]")
    one_line = compile_text("// " + "x" * 1_000_000 + "\n" + SPEC).cuda
    assert len(one_line) < len(cuda) + COPIED_BYTES and "x" * (COPIED_BYTES - 100) in one_line


def test_a_lone_surrogate_in_text_given_to_the_api_compiles_to_encodable_output():
    artifacts = compile_text(f"// \ud800\n{SPEC}", "case.gemm")
    assert artifacts.cuda.encode() and "\\ud800" in artifacts.cuda
