"""Importing a toy plug-in (a fuse op, an operand kind) from a module written into a temporary folder."""
from __future__ import annotations

import importlib
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Iterator


@contextmanager
def module_from_folder(folder: Path, name: str, text: str) -> Iterator[ModuleType]:
    """`text` as the module `name`, written into `folder` and imported from there; forgotten afterwards (what it
    registered, the caller unregisters)."""
    (folder / f"{name}.py").write_text(textwrap.dedent(text))
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(name)
    finally:
        sys.modules.pop(name, None)
        sys.path.remove(str(folder))
