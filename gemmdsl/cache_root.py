"""Where gemmdsl keeps what it builds once and reads back: $GEMMDSL_CACHE, default ~/.cache/gemmdsl.

A folder of the user's own, never a shared temporary directory: the parser's tables are read back with
pickle, which must only ever read files the user wrote."""
import os
from pathlib import Path


def cache_dir() -> Path:
    """$GEMMDSL_CACHE, default ~/.cache/gemmdsl: the parser's tables, compiled entries and cubins."""
    return Path(os.environ.get("GEMMDSL_CACHE") or Path.home() / ".cache" / "gemmdsl")
