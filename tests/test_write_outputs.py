"""compiler.write_outputs: a set of files (NAME.cu, NAME.h, NAME.json) lands whole, also when several
processes write the same set at once."""
import multiprocessing

from gemmdsl.compiler import write_outputs

NAMES = ("k.cu", "k.h", "k.json")
TRIALS = 60
WRITERS = 3


def write_trials(directory, writer, barrier, mixed):
    """Each trial: every writer writes the whole set at once, tagged with its number and the trial's; then
    writer 0 reads the set back and counts it mixed when its files carry different tags."""
    for trial in range(TRIALS):
        barrier.wait()
        tag = f"writer {writer} trial {trial}\n".encode() * 64
        write_outputs(directory, {name: tag for name in NAMES})
        barrier.wait()
        if writer == 0:
            contents = {(directory / name).read_bytes() for name in NAMES}
            with mixed.get_lock():
                mixed.value += len(contents) > 1
        barrier.wait()


def test_concurrent_writers_of_one_output_set_leave_one_writers_whole_set(tmp_path):
    context = multiprocessing.get_context("fork")
    barrier, mixed = context.Barrier(WRITERS), context.Value("i", 0)
    workers = [context.Process(target=write_trials, args=(tmp_path, writer, barrier, mixed))
               for writer in range(WRITERS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert all(worker.exitcode == 0 for worker in workers)
    assert mixed.value == 0, f"{mixed.value} of {TRIALS} trials left a mixed set"
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(NAMES)  # no temporary or lock file left


def test_a_set_is_written_whole(tmp_path):
    written = write_outputs(tmp_path / "out", {name: name.encode() for name in NAMES})
    assert [path.read_text() for path in written] == list(NAMES)
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == sorted(NAMES)
