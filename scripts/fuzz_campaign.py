"""A fuzz campaign: thousands of mutants of the shipped specs, families and templates through `check`,
`compile --no-nvcc` and `tune --screen-only --no-nvcc`, then nvcc builds of a sample of the accepted ones.

    python3 scripts/fuzz_campaign.py OUT_DIR --count 10000 --seed 1 --jobs 16 --build-sample 200
    python3 scripts/fuzz_campaign.py OUT_DIR --seed 1 --replay INDEX     # one mutant again, its traceback shown

Mutant INDEX of seed S is tests/fuzz_mutants.mutant_at(S, INDEX) on any machine, and is judged by the same
oracle as tests/test_fuzz_cli.py: exit status 0 or 1, no traceback, every diagnostic positioned, complete
outputs. Each runs in a worker process (JOBS of them, forked, with at most --memory-gb of address space
each) and may take --timeout seconds: one that takes longer is killed and recorded as a hang, one whose
worker dies as a crash.

OUT_DIR/results.jsonl holds one line per mutant and OUT_DIR/builds.jsonl one per build, so a campaign that
is stopped resumes where it was (with the same seed; --count may grow); OUT_DIR/findings/ holds each
finding's input and detail; OUT_DIR/summary.json the figures, printed as a table last. The build sample
(nvcc on PATH) is drawn from the specs and families `check` or `compile` accepted and built for their own
targets with gemmdsl.build, JOBS at a time.

Needs only gemmdsl's own dependencies (lark, numpy, networkx); no hypothesis.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import datetime
import itertools
import json
import multiprocessing
import os
import platform
import random
import resource
import signal
import sys
import time
from multiprocessing.connection import wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fuzz_mutants import FINDINGS, SUFFIX, mutant_at, prepare_workdir, run_mutant, toolkit_hidden  # noqa: E402

HANG, CRASH = "hang", "crash"
DETAIL_CHARS = 4000  # of a finding's traceback or message kept in results.jsonl


# --- running the mutants --------------------------------------------------------------------------


def _worker(connection, seed: str, workdir: Path, memory_bytes: int) -> None:
    """Run the mutants whose indices arrive, one at a time, and send back each one's record. A mutant may
    grow the address space by `memory_bytes` beyond what the worker starts with (numpy's thread pools
    reserve more on a big host), and then meets a MemoryError, which is recorded as a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C stops the campaign in the parent, which ends the workers
    limit = os.sysconf("SC_PAGE_SIZE") * int(Path("/proc/self/statm").read_text().split()[0]) + memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    prepare_workdir(workdir)
    with toolkit_hidden():
        while (index := connection.recv()) is not None:
            mutant = mutant_at(seed, index)
            start = time.perf_counter()
            outcome = run_mutant(mutant, workdir)
            connection.send(record(index, mutant, outcome.verdict, outcome.exit_status, outcome.detail,
                                   time.perf_counter() - start))


def record(index: int, mutant, verdict: str, exit_status: int | None, detail: str, seconds: float) -> dict:
    return {"index": index, "kind": mutant.kind, "seed_file": mutant.seed.name, "command": mutant.command,
            "operations": list(mutant.operations), "verdict": verdict, "exit_status": exit_status,
            "seconds": round(seconds, 3), "detail": detail[-DETAIL_CHARS:] if detail else ""}


class Pool:
    """JOBS forked workers, each killed and replaced when a mutant outlasts the timeout or kills it."""

    def __init__(self, jobs: int, seed: str, out: Path, timeout: float, memory_bytes: int):
        import gemmdsl.cli  # noqa: F401 - imported once here, before the workers fork

        mutant_at(seed, 0)  # the corpus and the vocabulary, read once
        self.context = multiprocessing.get_context("fork")  # the workers start with gemmdsl imported
        self.seed, self.out, self.timeout, self.memory_bytes = seed, out, timeout, memory_bytes
        self.workers = [self._start(number) for number in range(jobs)]

    def _start(self, number: int) -> dict:
        parent, child = self.context.Pipe()
        process = self.context.Process(target=_worker, daemon=True,
                                       args=(child, self.seed, self.out / "work" / f"w{number}", self.memory_bytes))
        process.start()
        child.close()
        return {"number": number, "process": process, "connection": parent, "index": None, "since": 0.0}

    def _restart(self, worker: dict) -> None:
        worker["process"].kill()
        worker["process"].join()
        worker["connection"].close()
        self.workers[worker["number"]] = self._start(worker["number"])

    def run(self, indices: list[int]):
        """Yield each index's record as it finishes (in no particular order)."""
        pending = list(reversed(indices))
        while pending or any(w["index"] is not None for w in self.workers):
            for worker in self.workers:
                if worker["index"] is None and pending:
                    worker["index"], worker["since"] = pending.pop(), time.monotonic()
                    worker["connection"].send(worker["index"])
            busy = {w["connection"]: w for w in self.workers if w["index"] is not None}
            oldest = min(w["since"] for w in busy.values())
            for connection in wait(list(busy), timeout=max(0.0, oldest + self.timeout - time.monotonic())):
                worker = busy[connection]
                try:
                    result = connection.recv()
                except (EOFError, OSError):  # the worker died: killed by the kernel, or a crash in C
                    worker["process"].join(timeout=5)
                    result = self._lost(worker, CRASH, f"worker exit status {worker['process'].exitcode}")
                worker["index"] = None
                yield result
            for worker in list(busy.values()):
                if worker["index"] is not None and time.monotonic() - worker["since"] > self.timeout:
                    result = self._lost(worker, HANG, f"still running after {self.timeout:g} s")
                    worker["index"] = None
                    yield result

    def _lost(self, worker: dict, verdict: str, detail: str) -> dict:
        index = worker["index"]
        self._restart(worker)
        return record(index, mutant_at(self.seed, index), verdict, None, detail, time.monotonic() - worker["since"])

    def close(self) -> None:
        for worker in self.workers:
            try:
                worker["connection"].send(None)
            except OSError:  # it died already
                pass
            worker["process"].join(timeout=5)
            if worker["process"].is_alive():
                worker["process"].kill()


def read_jsonl(path: Path) -> dict[int, dict]:
    """The records of a results or builds file by index; a line cut short by a kill is dropped."""
    records = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue
            records[item["index"]] = item
    return records


def save_finding(out: Path, seed: str, item: dict) -> None:
    """The finding's input (as bytes) and its record, under OUT/findings/."""
    folder = out / "findings"
    folder.mkdir(exist_ok=True)
    stem = f"{item['index']:06d}-{item['verdict'].replace(' ', '-')}"
    mutant = mutant_at(seed, item["index"])
    (folder / f"{stem}{SUFFIX[mutant.kind]}").write_bytes(mutant.data)
    (folder / f"{stem}.txt").write_text(json.dumps({k: v for k, v in item.items() if k != "detail"}) + "\n\n"
                                        + item["detail"])


def run_mutants(args: argparse.Namespace, results: dict[int, dict]) -> None:
    todo = [index for index in range(args.count) if index not in results]
    if not todo:
        return
    print(f"running {len(todo):,} mutants ({len(results):,} done before) on {args.jobs} worker(s)", flush=True)
    pool = Pool(args.jobs, args.seed, args.out, args.timeout, int(args.memory_gb * 2 ** 30))
    start, last = time.monotonic(), time.monotonic()
    try:
        with (args.out / "results.jsonl").open("a") as log:
            for done, item in enumerate(pool.run(todo), 1):
                results[item["index"]] = item
                log.write(json.dumps(item) + "\n")
                log.flush()
                if item["verdict"] in (*FINDINGS, HANG, CRASH):
                    save_finding(args.out, args.seed, item)
                    print(f"  #{item['index']}: {item['verdict']} ({item['seed_file']}, {item['command']}): "
                          f"{first_line(item)}", flush=True)
                if time.monotonic() - last > 30 or done == len(todo):
                    last = time.monotonic()
                    print(f"  {done:,}/{len(todo):,} in {last - start:.0f} s", flush=True)
    finally:
        pool.close()


def first_line(item: dict) -> str:
    """What a finding's detail says, in a line: a traceback's last line, else its first."""
    lines = [line for line in item["detail"].splitlines() if line.strip()]
    if not lines:
        return ""
    return (lines[-1] if lines[0].startswith("Traceback") else lines[0])[:200]


# --- building a sample ----------------------------------------------------------------------------


def compiled(seed: str, index: int, workdir: Path):
    """(cuda, name, sm, entry) of an accepted spec or family mutant, compiled from its file as `compile` does."""
    from gemmdsl.compiler import compile_path
    from gemmdsl.family import compile_family_path

    mutant = mutant_at(seed, index)
    path = workdir / mutant.file_name
    path.write_bytes(mutant.data)
    if mutant.kind == "family":
        family = compile_family_path(path)
        return family.cuda, family.name, family.spec.target.code, family.members[0].artifacts.metadata["entry"]
    artifacts = compile_path(path)
    return artifacts.cuda, artifacts.name, artifacts.spec.target.code, None


def build_sample(args: argparse.Namespace, results: dict[int, dict], builds: dict[int, dict]) -> None:
    from gemmdsl.build import BuildError, build, find_nvcc
    from gemmdsl.source import CompileError

    nvcc = find_nvcc()
    accepted = sorted(i for i, item in results.items()
                      if item["verdict"] == "accepted" and item["kind"] in ("spec", "family"))
    sample = random.Random(f"{args.seed}:build").sample(accepted, min(args.build_sample, len(accepted)))
    todo = [index for index in sample if index not in builds]
    if not todo:
        return
    if nvcc is None:
        print("note: nvcc is not on PATH: no build sample", file=sys.stderr)
        return
    print(f"building {len(todo)} of {len(accepted):,} accepted mutants with nvcc, {args.jobs} at a time", flush=True)
    workdir = prepare_workdir(args.out / "work" / "build")

    def build_one(index: int, source: tuple) -> dict:
        start = time.monotonic()
        cuda, name, sm, entry = source
        try:
            build(cuda, name, sm, nvcc=nvcc, entry=entry)
            error = ""
        except BuildError as err:
            error = str(err)
        return {"index": index, "built": not error, "seconds": round(time.monotonic() - start, 1),
                "error": error[-DETAIL_CHARS:]}

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as executor, \
            (args.out / "builds.jsonl").open("a") as log:
        futures, refused = [], []
        for index in todo:
            try:
                futures.append(executor.submit(build_one, index, compiled(args.seed, index, workdir)))
            except CompileError as err:  # accepted by `check` but refused by `compile`: a finding too
                refused.append({"index": index, "built": False, "seconds": 0.0,
                                "error": "compile refused it: " + err.render()})
        for item in itertools.chain(refused, (future.result() for future in concurrent.futures.as_completed(futures))):
            builds[item["index"]] = item
            log.write(json.dumps(item) + "\n")
            log.flush()
            if not item["built"]:
                print(f"  #{item['index']}: build failed: {item['error'].splitlines()[0][:200]}", flush=True)


# --- the summary ----------------------------------------------------------------------------------


def summarize(args: argparse.Namespace, results: dict[int, dict], builds: dict[int, dict], seconds: float) -> dict:
    kinds = ("spec", "family", "template")
    by_kind = {kind: collections.Counter(item["verdict"] for item in results.values() if item["kind"] == kind)
               for kind in kinds}
    verdicts = collections.Counter(item["verdict"] for item in results.values())
    findings = [dict(index=item["index"], verdict=item["verdict"], kind=item["kind"], seed_file=item["seed_file"],
                     command=item["command"], operations=item["operations"], what=first_line(item))
                for item in sorted(results.values(), key=lambda item: item["index"])
                if item["verdict"] in (*FINDINGS, HANG, CRASH)]
    distinct = collections.Counter(f"{finding['verdict']}: {finding['what']}" for finding in findings)
    return {
        "seed": args.seed, "count": len(results), "jobs": args.jobs, "timeout_s": args.timeout,
        "finished": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "command": " ".join(sys.argv), "seconds": round(seconds),
        "verdicts": dict(verdicts), "by_kind": {kind: dict(counter) for kind, counter in by_kind.items()},
        "by_command": {command: dict(collections.Counter(item["verdict"] for item in results.values()
                                                         if item["command"] == command))
                       for command in ("check", "compile", "tune")},
        "tracebacks": verdicts["traceback"], "hangs": verdicts[HANG], "crashes": verdicts[CRASH],
        "accepted": verdicts["accepted"], "findings": findings, "distinct_findings": dict(distinct),
        "builds": {"sampled": len(builds), "built": sum(item["built"] for item in builds.values()),
                   "failed": [dict(index=item["index"], error=item["error"].splitlines()[0][:300] if item["error"]
                                   else "") for item in builds.values() if not item["built"]]},
    }


def table(summary: dict) -> str:
    kinds = ("spec", "family", "template")
    verdicts = ["accepted", "refused", *FINDINGS, HANG, CRASH]
    lines = [f"{summary['count']:,} mutants of seed {summary['seed']} in {summary['seconds']:,} s",
             f"{'':18}" + "".join(f"{kind:>10}" for kind in kinds) + f"{'all':>10}"]
    for verdict in verdicts:
        row = [summary["by_kind"][kind].get(verdict, 0) for kind in kinds]
        lines.append(f"{verdict:18}" + "".join(f"{n:>10,}" for n in row) + f"{sum(row):>10,}")
    builds = summary["builds"]
    lines.append(f"built with nvcc: {builds['built']} of a sample of {builds['sampled']} accepted")
    lines += [f"  {count} x {what}" for what, count in summary["distinct_findings"].items()]
    lines += [f"  build of #{item['index']} failed: {item['error']}" for item in builds["failed"]]
    return "\n".join(lines)


def replay(seed: str, index: int, out: Path) -> int:
    """Run one mutant in this process and print it, its command and its outcome."""
    mutant = mutant_at(seed, index)
    outcome = run_mutant(mutant, prepare_workdir(out / "work" / "replay"))
    print(f"mutant {index} of seed {seed}: {mutant.seed.name}, {mutant.command}; {'; '.join(mutant.operations)}")
    print(repr(mutant.data))
    print(f"{outcome.verdict} (exit status {outcome.exit_status})\n{outcome.detail}")
    return 1 if outcome.finding else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="where the results go (and are resumed from)")
    parser.add_argument("--count", type=int, default=1000, help="mutants, numbered 0 to COUNT - 1")
    parser.add_argument("--seed", default="1", help="the campaign's seed: with an index it fixes a mutant")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes and nvcc builds")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds a mutant may take before it is a hang")
    parser.add_argument("--memory-gb", type=float, default=4.0, help="address space of each worker")
    parser.add_argument("--build-sample", type=int, default=0, metavar="N",
                        help="build N of the accepted spec and family mutants with nvcc")
    parser.add_argument("--replay", type=int, metavar="INDEX", help="run one mutant in-process and show it")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.replay is not None:
        return replay(args.seed, args.replay, args.out)
    settings = args.out / "campaign.json"
    if settings.exists() and json.loads(settings.read_text())["seed"] != args.seed:
        parser.error(f"{args.out} holds a campaign of another seed; use another directory")
    settings.write_text(json.dumps({"seed": args.seed}) + "\n")
    start = time.monotonic()
    results = read_jsonl(args.out / "results.jsonl")
    run_mutants(args, results)
    builds = read_jsonl(args.out / "builds.jsonl")
    if args.build_sample:
        build_sample(args, {i: item for i, item in results.items() if i < args.count}, builds)
    summary = summarize(args, {i: item for i, item in results.items() if i < args.count}, builds,
                        time.monotonic() - start)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(table(summary))
    return 1 if summary["findings"] or summary["builds"]["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
