"""Where gemmdsl keeps what it builds once and reads back: $GEMMDSL_CACHE, default ~/.cache/gemmdsl.

A folder of the user's own, never a shared temporary directory: the parser's tables are read back with
pickle, which must only ever read files the user wrote. Its entries are JSON files written atomically
(`write_entry`), read back by `read_entry`."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    """$GEMMDSL_CACHE, default ~/.cache/gemmdsl: the parser's tables, compiled entries and cubins."""
    return Path(os.environ.get("GEMMDSL_CACHE") or Path.home() / ".cache" / "gemmdsl")


def read_entry(path: Path) -> dict | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):  # none yet, or cut short by a full disk: compile again
        return None


def write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in its directory: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def write_entry(path: Path, entry: dict) -> None:
    """Keep an entry; a cache that cannot be written (a read-only home) only costs the next load a compile."""
    try:
        write_atomically(path, json.dumps(entry, sort_keys=True).encode())
    except OSError:
        pass
