"""Run the whole GPU test suite (`pytest -m gpu`) in pieces that each fit one device call, and resume.

The device machine starts bare for every call and a call is cut at its limit, so the suite is run as a
sequence of calls that share a state file: each call runs the tests not yet recorded, stops cleanly
before its time budget is spent, and writes the state back. A test that is still running when the
budget's hard limit kills pytest is recorded as `killed` and is not run again.

    # on the device, from the repository root; carry the state folder between calls
    python3 scripts/gpu_suite.py run --state .gpu_suite/state.json --budget 480 --prebuild [-- extra pytest args]
    python3 scripts/gpu_suite.py summary --state .gpu_suite/state.json

`--prebuild` first builds every shipped spec's cubin on all cores (scripts/prebuild_cubins.py) into
the state's folder, which the tests' `load_kernel` fixture and gemmdsl's cache then read
($GEMMDSL_TEST_CUBINS, $GEMMDSL_CACHE); a warm machine keeps the folder between calls.

`run` prints the summary of everything recorded so far as its last lines and exits 0 when every test
that ran passed or skipped (whether or not tests remain), 1 otherwise; `summary` exits 0 only when
none remain and none failed. The state is JSON: {"outcomes": {nodeid: {"outcome", "seconds"}}}.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAILING = ("failed", "error", "killed")


class Recorder:
    """A pytest plugin: skips the tests the state already holds, appends each finished test's outcome
    to a log as it ends (so a kill loses nothing), and lets no test start once the budget is spent."""

    def __init__(self, done: set[str], log: Path, deadline: float):
        self.done, self.log, self.deadline = done, log, deadline

    @pytest.hookimpl(trylast=True)  # after `-m gpu` has deselected the rest
    def pytest_collection_modifyitems(self, config, items):
        # Written at once, so that the count of tests left survives a kill.
        self.log.with_suffix(".collected.json").write_text(json.dumps([item.nodeid for item in items]))
        keep = [item for item in items if item.nodeid not in self.done]
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid in self.done])
        items[:] = keep

    def pytest_runtest_logstart(self, nodeid, location):
        self._append({"nodeid": nodeid, "outcome": "started"})

    def pytest_runtest_logreport(self, report):
        # One record per test: the call phase, or the setup phase that skipped or errored it, or an
        # error in teardown.
        if report.when == "call" or (report.when == "setup" and not report.passed) or \
                (report.when == "teardown" and report.failed):
            outcome = "error" if report.when != "call" and report.failed else report.outcome
            self._append({"nodeid": report.nodeid, "outcome": outcome, "seconds": round(report.duration, 3)})

    def pytest_runtest_logfinish(self, nodeid, location):
        if time.monotonic() > self.deadline:  # the test is over and recorded: start no other
            pytest.exit("gpu_suite: time budget spent", returncode=0)

    def _append(self, record: dict) -> None:
        with self.log.open("a") as log:
            log.write(json.dumps(record) + "\n")


def load_state(path: Path) -> dict:
    if path.exists():
        return json.loads(path.read_text())
    return {"outcomes": {}, "collected": []}


def fold_log(state: dict, log: Path) -> dict:
    """Fold one call's log into the state: a test's last record wins; a test that started and never
    finished was killed."""
    outcomes = dict(state["outcomes"])
    started: set[str] = set()
    if log.exists():
        for line in log.read_text().splitlines():
            record = json.loads(line)
            nodeid = record.pop("nodeid")
            if record["outcome"] == "started":
                started.add(nodeid)
                continue
            started.discard(nodeid)
            previous = outcomes.get(nodeid)
            # A test whose call passed but whose teardown errored is an error.
            if previous is None or record["outcome"] == "error" or previous["outcome"] not in FAILING:
                outcomes[nodeid] = record
    for nodeid in started:
        outcomes[nodeid] = {"outcome": "killed", "seconds": None}
    return {**state, "outcomes": outcomes}


def summarise(state: dict) -> tuple[str, bool]:
    outcomes = state["outcomes"]
    counts = Counter(record["outcome"] for record in outcomes.values())
    remaining = [nodeid for nodeid in state.get("collected", []) if nodeid not in outcomes]
    seconds = sum(record.get("seconds") or 0 for record in outcomes.values())
    lines = [f"{nodeid}: {outcomes[nodeid]['outcome']}" for nodeid in sorted(outcomes)
             if outcomes[nodeid]["outcome"] in FAILING]
    parts = [f"{counts[name]} {name}" for name in ("passed", "failed", "error", "killed", "skipped") if counts[name]]
    lines.append(f"gpu suite: {', '.join(parts) or 'nothing run'}; {len(remaining)} remaining; "
                 f"{seconds:.0f} s in tests")
    complete = not remaining and not any(counts[name] for name in FAILING)
    return "\n".join(lines), complete


def run(args: argparse.Namespace) -> int:
    state_path = Path(args.state).resolve()  # tests may change the working directory
    state = load_state(state_path)
    state_path.parent.mkdir(parents=True, exist_ok=True)
    log = state_path.with_suffix(".log.jsonl")
    log.unlink(missing_ok=True)
    deadline = time.monotonic() + args.budget
    recorder = Recorder(set(state["outcomes"]), log, deadline)
    if args.child:
        return int(pytest.main(["-m", "gpu", "-q", "-p", "no:cacheprovider", *args.pytest_args], plugins=[recorder]))
    if args.prebuild:
        cubins = str((state_path.parent / "cubins").resolve())
        os.environ["GEMMDSL_CACHE"] = os.environ["GEMMDSL_TEST_CUBINS"] = cubins
        specs = sorted(str(path) for path in (ROOT / "specs").glob("*.gemm"))
        built = subprocess.run([sys.executable, str(ROOT / "scripts" / "prebuild_cubins.py"), *specs], cwd=ROOT,
                               capture_output=True, text=True)
        print(f"gpu_suite: prebuilt {built.stdout.count('built ')} cubins into {cubins}"
              + ("" if built.returncode == 0 else f"; the prebuild failed:\n{built.stderr[-2000:]}"))
    # pytest runs in a child process so that a test that hangs past the budget can be killed whole.
    left = max(deadline - time.monotonic(), 0.0)
    command = [sys.executable, __file__, "run", "--child", "--state", str(state_path),
               "--budget", str(left), "--", *args.pytest_args]
    try:
        subprocess.run(command, cwd=ROOT, timeout=left + args.kill_after)
    except subprocess.TimeoutExpired:
        print(f"gpu_suite: pytest killed after {left + args.kill_after:.0f} s", file=sys.stderr)
    collected_path = log.with_suffix(".collected.json")
    if collected_path.exists():
        state["collected"] = sorted(set(state.get("collected", [])) | set(json.loads(collected_path.read_text())))
        collected_path.unlink()
    state = fold_log(state, log)
    state_path.write_text(json.dumps(state, indent=1, sort_keys=True))
    text, _ = summarise(state)
    print(text)
    return 1 if any(record["outcome"] in FAILING for record in state["outcomes"].values()) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="run the tests not yet recorded, within a time budget")
    run_parser.add_argument("--state", default=".gpu_suite/state.json")
    run_parser.add_argument("--budget", type=float, default=480.0,
                            help="seconds after which no new test starts")
    run_parser.add_argument("--kill-after", type=float, default=60.0,
                            help="seconds past the budget after which pytest is killed, with the test in flight")
    run_parser.add_argument("--prebuild", action="store_true",
                            help="first build every shipped spec's cubin on all cores into the state's folder")
    run_parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    run_parser.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments (paths, -k)")
    summary_parser = sub.add_parser("summary", help="print the summary of the recorded outcomes")
    summary_parser.add_argument("--state", default=".gpu_suite/state.json")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    if args.command == "run":
        return run(args)
    text, complete = summarise(load_state(Path(args.state)))
    print(text)
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
