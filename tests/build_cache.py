"""Builds the tests share (the emulator's runners, nvcc's builds of the shipped specs), kept on disk under a
hash of everything that decides their result: the source, the commands and the toolchain's version.

A build is made once per key: by whichever test (or pytest-xdist worker) needs it first, while any other
that needs it waits on the key's lock, and it is reused by later runs until its source, its commands or
the toolchain change. The directory is $GEMMDSL_TEST_CACHE, else build/test-cache/ in the checkout;
deleting it only costs the builds again.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cache_root() -> Path:
    return Path(os.environ.get("GEMMDSL_TEST_CACHE") or ROOT / "build" / "test-cache")


@cache
def tool_version(tool: str) -> str:
    """`tool --version`, which names the compiler's release: part of every key built with it."""
    done = subprocess.run([tool, "--version"], capture_output=True, text=True)
    return done.stdout + done.stderr


def cached_build(kind: str, key: str, make: Callable[[Path], None]) -> Path:
    """The directory holding what `make(directory)` writes for `key`. A directory is complete once it has
    its name (made under a temporary one, then renamed), so a build that fails leaves nothing behind."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    final = cache_root() / kind / digest
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f"{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not final.is_dir():
            work = Path(tempfile.mkdtemp(prefix=f"{digest}.", dir=final.parent))
            try:
                make(work)
            except BaseException:
                shutil.rmtree(work, ignore_errors=True)
                raise
            work.rename(final)
    return final
