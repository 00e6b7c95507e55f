"""The kinds of file gemmdsl reads, by suffix, and which of them each command takes: the one statement
of both. Each command's --help names its files from here (`inputs_help`), and tests/test_docs_cli.py
checks the README's list of commands against it."""
from __future__ import annotations

SPEC_SUFFIX = ".gemm"
FAMILY_SUFFIX = ".gemmf"
TEMPLATE_SUFFIX = ".tgemm"
FILE_KINDS = {SPEC_SUFFIX: "spec", FAMILY_SUFFIX: "kernel family", TEMPLATE_SUFFIX: "tuning template"}

COMMAND_INPUTS: dict[str, tuple[str, ...]] = {
    "compile": (SPEC_SUFFIX, FAMILY_SUFFIX),
    "check": (SPEC_SUFFIX, FAMILY_SUFFIX),
    "verify": (SPEC_SUFFIX, FAMILY_SUFFIX),
    "bench": (SPEC_SUFFIX, FAMILY_SUFFIX),
    "profile": (SPEC_SUFFIX,),
    "tune": (TEMPLATE_SUFFIX,),
}


def inputs_help(command: str, purpose: str) -> str:
    """The help of a command's file argument: `.gemm (spec) or .gemmf (kernel family) files to analyse`."""
    kinds = " or ".join(f"{suffix} ({FILE_KINDS[suffix]})" for suffix in COMMAND_INPUTS[command])
    return f"{kinds} {purpose}"
