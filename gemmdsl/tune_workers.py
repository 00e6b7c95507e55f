"""Timing candidates on every GPU of a host, or as Ray tasks on a cluster, with faults contained.

The unit of work is a `Task`: one candidate at one size. A backend times it (`GpuBackend`: compile,
load, `bench.bench` beside cuBLAS) in a worker process that sees one GPU. Both pools have one interface,
`start()` (the device the workers see), `warm_up(task)` and `run(tasks, record)` (`record` gets each `Outcome` as it
arrives, which the driver writes to the tuning database at once), so `measure` does not know which ran:

    LocalPool   one worker process per GPU (`python -m gemmdsl.tune_workers`, CUDA_VISIBLE_DEVICES set to
                that GPU), fed from one queue by the driver; compilation stays with the driver's prebuild
    RayPool     one Ray task per task, `num_gpus=1`; Ray places and retries them; each runs its task in
                a one-worker LocalPool, so a fault or a hang is contained the same way

Faults cost one worker, never the run:
- the backend raises: the task is recorded failed with the message, the worker goes on;
- it raises `ContextLost` (a CUDA error: an illegal address poisons the process's context): recorded
  failed, and the worker exits and is restarted;
- no result within the timeout (a hang): the worker is killed and restarted, the task recorded timeout;
- the worker dies without a word (a crash, or kill -9 from outside): the task goes back to the front of
  the queue; a task during which a worker died MAX_DEATHS times is recorded failed.

A worker's first timing pays for loading what every timing after it shares (cuBLAS, the helper kernels,
the FMA peak): seconds, where a candidate takes tens of milliseconds. `warm_up(task)` has every worker
time one small task and drop the result before the run, so that this cost is paid by all workers at once
rather than once per worker inside the run.

Workers die with the driver (PR_SET_PDEATHSIG), so a killed driver leaves nothing running; restarted, it
skips what the database holds and re-times at most the one task each worker had in hand.

A backend is named "module:Class" and built in the worker; it has `device() -> Device` and
`time(task) -> Timed`. Tests use fake ones that need no GPU.
"""
from __future__ import annotations

import collections
import ctypes
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Callable, Iterable, Sequence

Size = tuple[int, int, int]
GPU_BACKEND = "gemmdsl.tune_workers:GpuBackend"
DEFAULT_TIMEOUT_S = 300.0  # a cache miss builds the kernel in the worker: NVRTC takes tens of seconds on wgmma
STARTUP_TIMEOUT_S = 120.0
MAX_DEATHS = 2
WARM_UP_SIZE: Size = (256, 256, 256)  # small enough to cost nothing, and a size every kernel takes


@dataclass(frozen=True)
class Task:
    spec_hash: str
    size: Size
    name: str  # the candidate's kernel name
    source: object  # its spec: the text, or what renders it on demand (`.text`: a template's candidate)
    path: str  # where diagnostics say it comes from: template.tgemm[t12]
    runs: int
    warmup: int
    predicted: float | None = None  # the cost model's score, stored beside the timing

    @property
    def key(self) -> tuple[str, Size]:
        return (self.spec_hash, self.size)

    @property
    def text(self) -> str:
        return self.source if isinstance(self.source, str) else self.source.text


@dataclass(frozen=True)
class Device:
    """What a worker's GPU and software are: the database keys timings by `gpu` and keeps the rest."""

    gpu: str
    driver: str
    compiler: str
    cupy: str
    host: str


@dataclass(frozen=True)
class Timed:
    median_ms: float
    cublas_ms: float  # median of the cuBLAS launches interleaved with the candidate's
    peak_tflops: float  # the FP32 FMA peak measured in the same process


@dataclass(frozen=True)
class Outcome:
    task: Task
    status: str  # ok, failed, timeout
    device: Device
    worker: str  # host/gpuN
    timed: Timed | None = None
    error: str = ""


@dataclass(frozen=True)
class WarmUp:
    """A task a worker times only to load what every timing shares; nothing is recorded."""

    task: Task


def warm_up_task(task: Task) -> Task:
    """`task` at WARM_UP_SIZE with one warm-up launch: the candidate's libraries and kernels, little time."""
    return dataclasses.replace(task, size=WARM_UP_SIZE, warmup=1)


class ContextLost(RuntimeError):
    """The worker's GPU context is unusable (a CUDA error); the worker reports the task and exits."""


class WorkerError(RuntimeError):
    """A worker could not start (no GPU, no CuPy) or the workers see different GPU models."""


# --- the worker process ----------------------------------------------------------------------------


def resolve(reference: str):
    """"module:Name" -> the object."""
    import importlib

    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def error_text(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the process that started it exits."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: an orphan finishes its task and exits on EOF
        pass
    if os.getppid() == 1:
        sys.exit(0)


def worker_main(backend_ref: str, fd: int) -> None:
    """A worker: say what device it sees, then time tasks until the driver closes the connection."""
    _die_with_parent()
    connection = Connection(fd)
    try:
        try:
            backend = resolve(backend_ref)()
            device = backend.device()
        except Exception as err:
            connection.send(("broken", error_text(err)))
            return
        connection.send(("ready", device))
        while True:
            task = connection.recv()
            if isinstance(task, WarmUp):
                try:
                    backend.time(task.task)
                except ContextLost:
                    return
                except Exception:  # a warm-up that fails warms nothing: the run times the task again
                    pass
                connection.send(("warm",))
                continue
            try:
                connection.send(("ok", task.key, backend.time(task)))
            except ContextLost as err:
                connection.send(("failed", task.key, str(err)))
                return
            except Exception as err:
                connection.send(("failed", task.key, error_text(err)))
    except (EOFError, BrokenPipeError, ConnectionResetError):  # the driver is gone
        return


# --- the local pool --------------------------------------------------------------------------------


class _Slot:
    """One worker process for one GPU (`visible`: its CUDA_VISIBLE_DEVICES, None to inherit)."""

    def __init__(self, backend_ref: str, visible: str | None):
        self.backend_ref, self.visible = backend_ref, visible
        seen = visible if visible is not None else os.environ.get("CUDA_VISIBLE_DEVICES", "0")
        self.label = f"{socket.gethostname()}/gpu{seen}"
        self.process: subprocess.Popen | None = None
        self.connection: Connection | None = None
        self.device: Device | None = None
        self.task: Task | None = None
        self.deadline = 0.0

    def start(self) -> None:
        mine, theirs = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        if self.visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.visible
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"from gemmdsl.tune_workers import worker_main; "
                                   f"worker_main({self.backend_ref!r}, {theirs.fileno()})"],
            pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL)
        theirs.close()
        self.connection = Connection(mine.detach())
        self.device, self.task = None, None

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            self.connection.close()
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def assign(self, task: Task, timeout: float) -> None:
        self.task, self.deadline = task, time.monotonic() + timeout
        self.connection.send(task)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def messages(self) -> list[tuple]:
        out = []
        try:
            while self.connection.poll():
                out.append(self.connection.recv())
        except (EOFError, OSError):  # it died: what it sent before is kept
            pass
        return out

    def exit_description(self) -> str:
        code = self.process.wait()
        return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"


def visible_devices(count: int | None = None) -> list[str]:
    """The GPUs workers may use, the first `count` of them: CUDA_VISIBLE_DEVICES's entries, else 0..count-1,
    else every device CUDA finds."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        devices = [item.strip() for item in listed.split(",") if item.strip()]
        return devices if count is None else devices[:count]
    if count is not None:
        return [str(i) for i in range(count)]
    try:
        import cupy

        return [str(i) for i in range(cupy.cuda.runtime.getDeviceCount())]
    except Exception as err:  # no CuPy, no driver: say what to do instead
        raise WorkerError(f"cannot count the GPUs ({error_text(err)}); name them with --gpus N or "
                          "CUDA_VISIBLE_DEVICES") from None


class LocalPool:
    """One worker process per GPU of this host; see the module docstring."""

    def __init__(self, backend_ref: str, devices: Sequence[str | None], timeout: float = DEFAULT_TIMEOUT_S):
        if not devices:
            raise WorkerError("no GPU to time on")
        self.slots = [_Slot(backend_ref, visible) for visible in devices]
        self.timeout = timeout
        self.device: Device | None = None

    def __enter__(self) -> LocalPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for slot in self.slots:
            slot.stop()

    def start(self) -> Device:
        """Start every worker and wait until each says which device it sees; they must be one GPU model."""
        for slot in self.slots:
            slot.start()
        return self._await_ready()

    def _await_ready(self) -> Device:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while any(slot.device is None for slot in self.slots):
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerError(f"a worker did not start within {STARTUP_TIMEOUT_S:g} s")
            wait([slot.connection for slot in self.slots if slot.device is None], timeout=left)
            for slot in self.slots:
                if slot.device is None:
                    self._read(slot, None)
                    if slot.device is None and slot.process.poll() is not None:
                        raise WorkerError(f"the worker for {slot.label} exited at start ({slot.exit_description()})")
        models = sorted({slot.device.gpu for slot in self.slots})
        if len(models) > 1:
            raise WorkerError(f"the GPUs are of different models ({', '.join(models)}); time on one model per "
                              "run (--gpus, CUDA_VISIBLE_DEVICES)")
        self.device = self.slots[0].device
        return self.device

    def warm_up(self, task: Task) -> None:
        """Have every worker time `task` (see warm_up_task) and drop the result; a worker that dies doing
        it is restarted, cold."""
        for slot in self.slots:
            slot.connection.send(WarmUp(task))
        deadline = time.monotonic() + self.timeout
        cold = list(self.slots)
        while cold and time.monotonic() < deadline:
            wait([slot.connection for slot in cold], timeout=max(0.0, deadline - time.monotonic()))
            for slot in list(cold):
                if any(kind == "warm" for kind, *_ in slot.messages()):
                    cold.remove(slot)
                elif slot.process.poll() is not None:
                    cold.remove(slot)
                    slot.restart()
        for slot in cold:  # hung: the run must not wait on it
            slot.restart()
        self._await_ready()

    def pids(self) -> list[int]:
        """The workers' process ids, busy ones first."""
        return [slot.pid for slot in sorted(self.slots, key=lambda s: s.task is None) if slot.pid is not None]

    def run(self, tasks: Iterable[Task], record: Callable[[Outcome], None]) -> None:
        """Time every task, calling `record` with each outcome as it arrives."""
        queue = collections.deque(tasks)
        deaths: collections.Counter = collections.Counter()
        while queue or any(slot.task is not None for slot in self.slots):
            for slot in self.slots:
                if slot.device is not None and slot.task is None and queue:
                    try:
                        slot.assign(queue[0], self.timeout)
                    except OSError:  # it is exiting after a lost context: the task waits for the next worker
                        slot.restart()
                        continue
                    queue.popleft()
            deadlines = [slot.deadline for slot in self.slots if slot.task is not None]
            left = max(0.0, min(deadlines) - time.monotonic()) if deadlines else STARTUP_TIMEOUT_S
            wait([slot.connection for slot in self.slots], timeout=left)
            for slot in self.slots:
                self._read(slot, record)
                self._check(slot, queue, deaths, record)

    def _read(self, slot: _Slot, record: Callable[[Outcome], None] | None) -> None:
        for kind, *rest in slot.messages():
            if kind == "broken":
                raise WorkerError(f"the worker for {slot.label} cannot time: {rest[0]}")
            if kind == "ready":
                if self.device is not None and rest[0].gpu != self.device.gpu:
                    raise WorkerError(f"{slot.label} restarted on a {rest[0].gpu}, not a {self.device.gpu}")
                slot.device = rest[0]
                continue
            task, slot.task = slot.task, None
            if kind == "ok":
                record(Outcome(task, "ok", slot.device, slot.label, timed=rest[1]))
            else:
                record(Outcome(task, "failed", slot.device, slot.label, error=rest[1]))

    def _check(self, slot: _Slot, queue: collections.deque, deaths: collections.Counter,
               record: Callable[[Outcome], None]) -> None:
        """Restart a worker that died or overran its task's time."""
        task = slot.task
        if slot.process.poll() is not None:
            if task is not None:
                deaths[task.key] += 1
                if deaths[task.key] >= MAX_DEATHS:
                    record(Outcome(task, "failed", slot.device or self.device, slot.label,
                                   error=f"the worker died ({slot.exit_description()}) each of the "
                                         f"{MAX_DEATHS} times it timed this"))
                else:
                    queue.appendleft(task)
            slot.restart()
        elif task is not None and time.monotonic() >= slot.deadline:
            record(Outcome(task, "timeout", slot.device, slot.label,
                           error=f"no result within {self.timeout:g} s: the worker was killed and restarted"))
            slot.restart()


# --- Ray ---------------------------------------------------------------------------------------------


def import_ray():
    try:
        import ray
    except ImportError:
        raise WorkerError("--ray needs Ray: pip install 'gemmdsl[ray]' (or pip install ray) on every node") from None
    return ray


def probe_isolated(backend_ref: str) -> Device:
    """The device a Ray task's GPU is (a worker process started and stopped)."""
    with LocalPool(backend_ref, [None]) as pool:
        return pool.start()


def time_isolated(backend_ref: str, task: Task, timeout: float) -> Outcome:
    """One task timed in a worker process of its own, on the GPU Ray gave this task."""
    outcomes: list[Outcome] = []
    with LocalPool(backend_ref, [None], timeout) as pool:
        pool.start()
        pool.run([task], outcomes.append)
    return outcomes[0]


class RayPool:
    """The same work as Ray tasks, one per task with `num_gpus=1`; `address` as `ray.init` takes it
    (None: a local Ray, or RAY_ADDRESS)."""

    def __init__(self, backend_ref: str, address: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 runtime_env: dict | None = None):
        self.ray = import_ray()
        self.backend_ref, self.address, self.timeout = backend_ref, address, timeout
        self.runtime_env = runtime_env
        self.device: Device | None = None
        self.started = False

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()

    def start(self) -> Device:
        ray = self.ray
        ray.init(address=self.address, runtime_env=self.runtime_env, log_to_driver=False)
        self.started = True
        self.device = ray.get(ray.remote(num_gpus=1)(probe_isolated).remote(self.backend_ref))
        return self.device

    def warm_up(self, task: Task) -> None:
        """Nothing: each Ray task times in a worker process of its own, which pays its own loading."""

    def run(self, tasks: Iterable[Task], record: Callable[[Outcome], None]) -> None:
        ray = self.ray
        remote = ray.remote(num_gpus=1)(time_isolated)
        pending = {remote.remote(self.backend_ref, task, self.timeout): task for task in tasks}
        while pending:
            [done], _ = ray.wait(list(pending), num_returns=1)
            task = pending.pop(done)
            try:
                record(ray.get(done))
            except ray.exceptions.RayError as err:  # the node or its worker went away, after Ray's retries
                record(Outcome(task, "failed", self.device, "ray", error=f"the Ray task failed: {error_text(err)}"))


# --- measuring into the database -------------------------------------------------------------------


def row_of(outcome: Outcome):
    from .tune_db import Row

    task, timed, device = outcome.task, outcome.timed, outcome.device
    return Row(task.spec_hash, *task.size, device.gpu, outcome.status,
               timed.median_ms if timed else None, timed.cublas_ms if timed else None, task.runs,
               timed.peak_tflops if timed else None, device.driver, device.compiler, device.cupy, task.name,
               task.predicted, device.host, outcome.worker, outcome.error)


def pending(tasks: Sequence[Task], db, gpu: str) -> list[Task]:
    """The tasks (one of each key) the database holds no row of for this GPU model."""
    held = db.measured(gpu)
    return list({task.key: task for task in tasks if task.key not in held}.values())


def measure(pool, tasks: Sequence[Task], db, progress: Callable[[str], None] = lambda line: None) -> None:
    """Time the tasks on a started pool, writing each outcome to the database as it arrives."""
    done = 0

    def record(outcome: Outcome) -> None:
        nonlocal done
        done += 1
        row = db.record(row_of(outcome), outcome.task.text)  # a timing that is no time comes back failed
        task = outcome.task
        figures = (f"{row.median_ms:.3f} ms, {row.pct_cublas:.1f}% of cuBLAS" if row.status == "ok"
                   else f"{row.status}: {row.error}")
        progress(f"[{done}/{len(tasks)}] {task.name} {'x'.join(map(str, task.size))} on {outcome.worker}: {figures}")

    pool.run(tasks, record)


# --- the GPU backend -------------------------------------------------------------------------------


def build_failure(log: str) -> str:
    """The line of a compiler's log that says why it failed (ptxas's fatal, nvcc's error), else its first."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    fatal = [line for line in lines if "fatal" in line or ": error" in line]
    return (fatal or lines or ["no message"])[0]


class GpuBackend:
    """Times a task as `gemmdsl tune` always has: compile, load (the cubin cache the driver's prebuild
    filled), `bench.bench` with cuBLAS interleaved launch by launch."""

    def __init__(self):
        from .runtime.environment import require_fp32_cublas, require_gpu

        require_gpu()
        require_fp32_cublas()

    def device(self) -> Device:
        import cupy

        from .runtime.binaries import chosen_compiler, compiler_version

        name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
        driver = cupy.cuda.runtime.driverGetVersion()
        compiler = chosen_compiler()
        return Device(name.decode() if isinstance(name, bytes) else name, f"{driver // 1000}.{driver % 1000 // 10}",
                      f"{compiler} {compiler_version(compiler)}", cupy.__version__, socket.gethostname())

    def time(self, task: Task) -> Timed:
        import cupy

        from .bench import Progress, bench
        from .compiler import compile_source
        from .runtime.binaries import KernelBuildError
        from .runtime.kernel import Kernel
        from .source import SourceFile

        artifacts = compile_source(SourceFile(task.path, task.text))
        try:
            kernel = Kernel(artifacts)
        except KernelBuildError as err:
            raise RuntimeError(f"it does not build ({build_failure(str(err))})") from None
        with open(os.devnull, "w") as quiet:
            try:
                report = bench([kernel], [task.size], runs=task.runs, warmup=task.warmup,
                               progress=Progress(1, quiet))
            except (cupy.cuda.runtime.CUDARuntimeError, cupy.cuda.driver.CUDADriverError) as err:
                raise ContextLost(f"CUDA error: {err}") from None
        [row] = [row for row in report.rows if row.name == kernel.name]
        if row.median_ms is None:
            raise ValueError(row.note)
        return Timed(row.median_ms, row.cublas_ms, report.peak_tflops)
