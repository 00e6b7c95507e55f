"""How long `gemmdsl check` takes on adversarial specs of several megabytes: each must get a capped answer
(a few dozen lines at most) in well under 10 s on the 2-core CI machine (docs/language.md, "Input limits").

    PYTHONPATH=. python scripts/adversarial_specs.py [--megabytes 5] [--shape NAME ...]

Each shape is a shipped spec (specs/sgemm_v3.gemm) grown to the size asked for in one way; the script writes
it to a temporary directory, runs `python -m gemmdsl.cli check` on it once and prints the wall time, the exit
status and the lines printed. tests/test_input_limits.py checks the same shapes' answers (not their times).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = (ROOT / "specs" / "sgemm_v3.gemm").read_text()
KEY = "bounds: exact; "


def _spread_errors(size: int, separator: str) -> str:
    """Syntax errors (a stray `$`) in 25 entries, far apart: each costs the recovery a new parse of the text."""
    gap = separator * max(1, size // 25 // len(separator))
    return BASE.replace("stages: 2;", gap.join(f"k{index}: 1$;" for index in range(25)))


SHAPES = {
    # The spec itself: what `check` takes anyway (with nvcc on PATH, mostly nvcc's build for ptxas's figures).
    "none": lambda size: BASE,
    # One line of repeated keys, each a duplicate-key error.
    "repeated_keys": lambda size: BASE.replace("epilogue: alpha_beta;",
                                               "epilogue: alpha_beta; " + KEY * (size // len(KEY))),
    # Braces nested as deep as the size allows.
    "deep_nesting": lambda size: BASE.replace("gemm sgemm_v3 {",
                                              "gemm sgemm_v3 {" + "{" * (size // 2) + "}" * (size // 2)),
    # One number of `size` digits.
    "huge_number": lambda size: BASE.replace("pad: 4;", f"pad: {'9' * size};"),
    # One comment line of `size` bytes: a valid spec.
    "huge_comment": lambda size: f"// {'x' * size}\n{BASE}",
    # Short comment lines, 100 bytes each: a valid spec.
    "many_comment_lines": lambda size: ("// " + "y" * 96 + "\n") * (size // 100) + BASE,
    # Errors far apart across blank lines, and across comment lines.
    "errors_across_lines": lambda size: _spread_errors(size, "\n"),
    "errors_across_comments": lambda size: _spread_errors(size, "// c\n"),
}


def check(path: Path) -> tuple[float, int, int]:
    """(seconds, exit status, lines printed) of `gemmdsl check PATH`."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gemmdsl.cli", "check", str(path)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    seconds = time.perf_counter() - start
    return seconds, done.returncode, len((done.stdout + done.stderr).splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=5.0)
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES), help="default: every shape")
    args = parser.parse_args()
    size = int(args.megabytes * 1e6)
    with tempfile.TemporaryDirectory() as directory:
        print(f"{'shape':<24} {'MB':>6} {'seconds':>8} {'exit':>5} {'lines':>6}")
        for name in args.shape or SHAPES:
            path = Path(directory) / f"{name}.gemm"
            path.write_text(SHAPES[name](size))
            seconds, status, lines = check(path)
            print(f"{name:<24} {path.stat().st_size / 1e6:>6.1f} {seconds:>8.2f} {status:>5} {lines:>6}", flush=True)


if __name__ == "__main__":
    main()
