"""The README and docs/ say what the commands do: the sample error is what `check` prints, each command's
--help names the files file_kinds.COMMAND_INPUTS says it takes, the README's command list agrees with that
table, and every option the docs pass to a command exists."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from gemmdsl import cli
from gemmdsl.file_kinds import COMMAND_INPUTS, FAMILY_SUFFIX, FILE_KINDS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
SUFFIX = re.compile(r"(?<![\w.])(" + "|".join(re.escape(suffix) for suffix in FILE_KINDS) + r")\b")


def readme_sample() -> tuple[str, str]:
    """The tour's spec (its first fenced block) and the error printed for it (the indented block after it)."""
    spec = re.search(r"\*\*1\. Write a spec\.\*\*.*?\n```\n(.*?)```\n", README, re.S)[1]
    error = re.search(r"\*\*2\. Check it\.\*\*.*?\n\n((?:    [^\n]*\n)+)", README, re.S)[1]
    return spec, "\n".join(line[4:] for line in error.splitlines()) + "\n"


def test_the_readme_sample_error_is_what_check_prints(tmp_path, monkeypatch, capsys):
    """The README's spec with the line the error quotes put in place of its own, through `gemmdsl check`."""
    spec, error = readme_sample()
    where = re.match(r"(\S+):(\d+):\d+: error: ", error)
    assert where, f"the README's sample error does not start as a diagnostic: {error.splitlines()[0]!r}"
    number = int(where[2])
    quoted = re.search(rf"^ *{number} \| (.*)$", error, re.M)[1]
    lines = spec.splitlines()
    assert lines[number - 1] != quoted, "the sample error should quote a changed line"
    lines[number - 1] = quoted
    (tmp_path / where[1]).write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["check", where[1]]) == 1
    assert capsys.readouterr().err == error


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    return next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction)).choices


def file_argument_help(command: str) -> str:
    """The help of the command's positional file argument, as --help prints it."""
    (action,) = [action for action in subparsers()[command]._actions
                 if not action.option_strings and not isinstance(action, argparse._SubParsersAction)]
    return action.help


@pytest.mark.parametrize("command", sorted(COMMAND_INPUTS))
def test_help_names_the_files_the_command_takes(command):
    assert set(SUFFIX.findall(file_argument_help(command))) == set(COMMAND_INPUTS[command])


def test_every_file_command_is_in_the_table():
    takes_files = {name for name in subparsers() if name not in ("tunedb", "calibrate", "quantize")}  # no spec files
    assert takes_files == set(COMMAND_INPUTS)


def readme_commands() -> str:
    return re.search(r"\n## Commands\n(.*?)\n## ", README, re.S)[1]


def test_readme_synopsis_names_each_commands_argument():
    synopsis = dict(re.findall(r"^    gemmdsl (\w+) +(\w+)", readme_commands(), re.M))
    for command, kinds in COMMAND_INPUTS.items():
        assert synopsis.get(command) == ("TEMPLATE" if kinds == (".tgemm",) else "SPEC"), command


def test_readme_says_which_commands_take_families():
    sentence = re.search(r"SPEC is a `\.gemm` spec or, for (.*?), a `\.gemmf` kernel family", readme_commands(), re.S)
    assert sentence, "the README's command list does not say which commands take a .gemmf family"
    assert set(re.findall(r"`(\w+)`", sentence[1])) == {c for c, kinds in COMMAND_INPUTS.items() if FAMILY_SUFFIX in kinds}


def command_options() -> dict[str, set[str]]:
    """Every option string of every command (and of its own subcommands)."""
    options: dict[str, set[str]] = {}
    for name, parser in subparsers().items():
        parsers = [parser] + [sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
                              for sub in action.choices.values()]
        options[name] = {option for sub in parsers for action in sub._actions for option in action.option_strings}
    return options


USAGE = re.compile(r"\bgemmdsl (\w+)\b([^`\n|]*)")


def unknown_options(text: str, options: dict[str, set[str]]) -> list[str]:
    """`gemmdsl CMD ... --flag` usages in the text whose command has no such option."""
    return [f"gemmdsl {command} {flag}" for command, rest in USAGE.findall(text) if command in options
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest) if flag not in options[command]]


def documentation_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").rglob("*.md"))]


@pytest.mark.parametrize("page", documentation_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_documented_options_exist(page):
    assert not unknown_options(page.read_text(), command_options())


def test_the_option_check_notices_an_unknown_option():
    assert unknown_options("run `gemmdsl check x.gemm --problem 8x8x8 --warp-size 64`", command_options()) == [
        "gemmdsl check --warp-size"]
