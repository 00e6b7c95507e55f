"""`gemmdsl tune`: the command over tune/ (a template searched for a few sizes) and tune_family.py (a family
for a model's list of shapes), which both build on tune/; `--report` times nothing."""
from __future__ import annotations

import argparse

from .tune import add_tune_arguments, print_report, read_template, tune_sizes_main
from .tune_family import tune_family_main

__all__ = ["add_tune_arguments", "tune_main"]


def tune_main(args: argparse.Namespace) -> int:
    """1: a bad template or nothing survives; 2: bad sizes, or no GPU to time on (after the screening report)."""
    read = read_template(args)
    if isinstance(read, int):
        return read
    path, candidates, sizes = read
    if args.report:
        return print_report(args.db, path, candidates, sizes)
    if args.shapes:
        return tune_family_main(args, path, candidates)
    return tune_sizes_main(args, path, candidates, sizes)
