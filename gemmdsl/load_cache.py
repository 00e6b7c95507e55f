"""Compiled specs and families kept on disk, so that `gemmdsl.load` in another process reads back what the
runtime needs (each kernel's launch metadata, NAME.json's, and its CUDA source) instead of compiling again
(docs/python-api.md, "Loading from the cache").

An entry is keyed by everything that decides the compiler's output: the file's text and the path it was loaded
by (the .cu quotes it), and gemmdsl itself, by its version and the names, sizes and modification times of the
package's own files, so that an edited compiler never serves an entry of the old one. A family's entry also
holds the hash of each member file it compiled, which a load compares with the member files it reads. The
cubin has its own cache (runtime.BinaryCache), keyed by the source, the architecture, the compiler and its
version.

Entries are JSON files under $GEMMDSL_CACHE/compiled/, written atomically. An entry that cannot be read, or
whose member files differ, is compiled again and replaced; compile errors are never cached.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from .cache_root import cache_dir, read_entry, write_entry
from .file_kinds import FAMILY_SUFFIX
from .source import SourceFile
from .version import __version__

PACKAGE = Path(__file__).resolve().parent
FORMAT = 1  # of the entries' JSON


@cache
def package_fingerprint() -> str:
    """gemmdsl's version and its files (name, size, modification time), hashed: what makes the compiler."""
    digest = hashlib.sha256(f"{__version__}\0{FORMAT}".encode())
    for directory, folders, files in sorted(os.walk(PACKAGE)):
        folders[:] = sorted(folder for folder in folders if folder != "__pycache__")
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            status = os.stat(os.path.join(directory, name))
            digest.update(f"{os.path.relpath(os.path.join(directory, name), PACKAGE)}\0{status.st_size}\0"
                          f"{status.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def entry_path(kind: str, source: SourceFile) -> Path:
    key = hashlib.sha256(f"{package_fingerprint()}\0{kind}\0{source.path}\0".encode() + source.text.encode())
    return cache_dir() / "compiled" / f"{Path(source.path).stem}-{key.hexdigest()[:32]}.json"


class CompiledSpec:
    """A compiled spec as the runtime loads it: its launch metadata and CUDA source (`cuda`). The IR (`spec`)
    is compiled on first use only (from `source`, or the file at `path`), which a kernel read back from the
    cache never needs to ask for."""

    def __init__(self, path: str, metadata: dict, cuda: str, *, source: SourceFile | None = None, spec: Any = None):
        self.path = path
        self.metadata = metadata
        self.cuda = cuda
        self.source = source
        if spec is not None:
            self.spec = spec

    @property
    def name(self) -> str:
        return self.metadata["kernel"]

    @cached_property
    def spec(self) -> Any:
        from .compiler import compile_source

        return compile_source(self.source or SourceFile.read(self.path)).spec


def compiled_spec(source: SourceFile) -> CompiledSpec:
    """The spec of `source` compiled, from the cache where it is there (compile errors raise CompileError)."""
    path = entry_path("spec", source)
    entry = read_entry(path)
    if entry is not None:
        return CompiledSpec(source.path, entry["metadata"], entry["cuda"], source=source)
    from .compiler import compile_source

    artifacts = compile_source(source)
    entry = {"metadata": artifacts.metadata, "cuda": artifacts.cuda}
    write_entry(path, entry)
    # The metadata as a later load reads it back (JSON: lists for tuples), so that both loads run alike.
    return CompiledSpec(source.path, json.loads(json.dumps(artifacts.metadata)), artifacts.cuda, source=source,
                        spec=artifacts.spec)


@dataclass(frozen=True)
class CompiledMember:
    path: str  # as the family file writes it
    artifacts: CompiledSpec
    model: Any  # cycles.MemberModel


@dataclass(frozen=True)
class CompiledFamily:
    """A compiled family as family_kernel.FamilyKernel loads it: its members' compiled specs and cycle models,
    and the measured table."""

    name: str
    members: tuple[CompiledMember, ...]
    measured: tuple[tuple[tuple[int, int, int], int], ...]

    @property
    def models(self) -> list:
        return [member.model for member in self.members]


def compiled_family(path: str | Path) -> CompiledFamily:
    """The family at `path` compiled, from the cache where its entry and member files match (compile errors
    raise CompileError)."""
    source = SourceFile.read(path, FAMILY_SUFFIX, "family")
    entry_file = entry_path("family", source)
    entry = read_entry(entry_file)
    if entry is not None and all(member_matches(member) for member in entry["members"]):
        return family_from_entry(entry)
    from .family import compile_family

    family = compile_family(source)
    directory = Path(source.path).parent
    entry = {"name": family.name, "measured": [[list(shape), index] for shape, index in family.measured],
             "members": [{"path": member.path, "file": str(directory / member.path),
                          "text": text_hash(SourceFile.read(directory / member.path).text),
                          "metadata": member.artifacts.metadata, "cuda": member.artifacts.cuda,
                          "model": dataclasses.asdict(member.model)} for member in family.members]}
    write_entry(entry_file, entry)
    return family_from_entry(json.loads(json.dumps(entry)), [member.artifacts.spec for member in family.members])


def member_matches(member: dict) -> bool:
    try:
        return text_hash(Path(member["file"]).read_bytes().decode("utf-8")) == member["text"]
    except (OSError, UnicodeDecodeError):
        return False


def family_from_entry(entry: dict, specs: list | None = None) -> CompiledFamily:
    from .cycles import MemberModel

    members = []
    for index, member in enumerate(entry["members"]):
        artifacts = CompiledSpec(member["file"], member["metadata"], member["cuda"],
                                 spec=None if specs is None else specs[index])
        members.append(CompiledMember(member["path"], artifacts, MemberModel(**tuples(member["model"]))))
    measured = tuple((tuple(shape), index) for shape, index in entry["measured"])
    return CompiledFamily(entry["name"], tuple(members), measured)


def tuples(value: Any) -> Any:
    """JSON's lists as the tuples they were written from (a MemberModel's fields are tuples)."""
    if isinstance(value, list):
        return tuple(tuples(item) for item in value)
    if isinstance(value, dict):
        return {key: tuples(item) for key, item in value.items()}
    return value
