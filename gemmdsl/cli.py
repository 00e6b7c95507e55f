"""Command line: `gemmdsl compile|check|verify|bench|profile ...`.

Every command reports bad input as compiler diagnostics on stderr and exits 1;
a Python traceback reaching the user is a bug.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from .build import BuildError, build, find_nvcc, nvrtc_available, parse_ptxas
from .analysis import summary_lines
from .compiler import Artifacts, OutputError, compile_path, write_outputs
from .family import compile_family_path, parse_family
from .file_kinds import inputs_help, is_family_path
from .launch_plan import Entries
from .source import CompileError, Diagnostic, Severity, SourceFile, Span, printable
from .gpu_profile import PROFILE_ENV
from .targets import PROFILE_ERROR, TARGETS, TargetName, parse_target
from .version import __version__

EMIT_KINDS = ("cu", "ptx", "cubin")

# Subcommands implemented in their own modules: (name, module, help).
TOOLS = (
    ("check", "gemmdsl.check", "print what the analysis passes found"),
    ("verify", "gemmdsl.verify", "run kernels on the GPU and compare with cuBLAS"),
    ("bench", "gemmdsl.bench", "time kernels on the GPU beside cuBLAS"),
    ("profile", "gemmdsl.profile", "compare predictions with Nsight Compute counters"),
    ("tune", "gemmdsl.tune_cli", "search a template's space: prune with the analysis, time the best on the GPU"),
    ("tunedb", "gemmdsl.tune_db", "merge tuning databases from several hosts"),
    ("calibrate", "gemmdsl.calibrate", "measure this GPU's rates for the cycle model (a profile)"),
    ("quantize", "gemmdsl.quantize_cli", "quantize a weight, or import a GPTQ or AWQ checkpoint, for the kernels"),
)


def parse_arch(text: str) -> TargetName:
    target = parse_target(text)
    if target is None:
        known = ", ".join(map(str, TARGETS))
        raise argparse.ArgumentTypeError(f"unknown target {text!r} (known: {known})")
    return target


def parse_emit(text: str) -> frozenset[str]:
    kinds = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = kinds - set(EMIT_KINDS)
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"--emit takes a comma-separated list of {', '.join(EMIT_KINDS)}")
    return kinds


def compile_main(args: argparse.Namespace) -> int:
    nvcc = None if args.no_nvcc else find_nvcc()
    if not args.no_nvcc and nvcc is None:
        figures = ("`gemmdsl check` reads ptxas's figures from NVRTC" if nvrtc_available() else "registers unknown")
        print(f"gemmdsl: note: nvcc not found on PATH; writing CUDA source only ({figures})", file=sys.stderr)
    if nvcc is None and args.emit - {"cu"}:
        print("gemmdsl: error: --emit ptx/cubin needs nvcc", file=sys.stderr)
        return 1
    failed = 0
    sources: dict[str, str] = {}  # kernel name -> the file it was compiled from
    try:
        for path in args.specs:
            if is_family_path(path):
                failed += not _compile_family(path, args, nvcc, sources)
                continue
            try:
                artifacts = compile_path(path, args.arch)
                _claim_name(artifacts.name, artifacts.spec.at("name"), SourceFile.read(path), sources)
            except CompileError as err:
                print(err.render(), file=sys.stderr)
                failed += 1
                continue
            failed += not _build_and_write(artifacts, args, nvcc)
    except OutputError as err:  # the next spec's files would meet the same directory: stop here
        print(f"gemmdsl: error: {err}", file=sys.stderr)
        return 1
    return 1 if failed else 0


def _claim_name(name: str, where: Span, source: SourceFile, sources: dict[str, str]) -> None:
    """Record that `source` makes NAME.cu, NAME.h and NAME.json; a second file of that name raises CompileError."""
    if name in sources:
        raise CompileError([Diagnostic(Severity.ERROR, where, f"kernel name '{name}' is also that of {sources[name]}, "
                                       "earlier on the command line",
                                       hint=f"both would write {name}.cu, {name}.h and {name}.json; rename one, "
                                            "or compile them into different directories (-o)")], source)
    sources[name] = source.path


def _build_and_write(artifacts: Artifacts, args: argparse.Namespace, nvcc: str | None) -> bool:
    name = artifacts.name
    for warning in artifacts.warnings:
        print(warning.render(), file=sys.stderr)
    files: dict[str, bytes] = {}
    resources = None
    if nvcc is not None:
        try:
            result = build(artifacts.cuda, name, artifacts.spec.target.code, args.emit, nvcc)
        except BuildError as err:
            print(f"{printable(artifacts.spec.span.file)}: error: {err}", file=sys.stderr)
            return False
        resources = result.resources
        entries = Entries.from_json(artifacts.metadata["entries"]).all()  # the narrow rungs' too
        others = [(entry, parse_ptxas(result.log, entry)) for entry in entries if entry != artifacts.metadata["entry"]]
        artifacts = artifacts.with_ptxas(resources)
        files.update({f"{name}.{kind}": data for kind, data in result.outputs.items()})
    _write(name, artifacts.cuda, artifacts.header, artifacts.metadata_json(), files, args)
    for line in summary_lines(artifacts.analysis):
        print(f"  {line}")
    if resources is not None:
        spill_note = "  <-- SPILLS" if resources.spills else ""
        print(f"  {resources}{spill_note}")
        for entry, other in others:  # the scalar and stream-K kernels, prepare_c
            print(f"  {entry}: {other}{'  <-- SPILLS' if other.spills else ''}")
    return True


def _write(name: str, cuda: str, header: str, metadata_json: str, files: dict[str, bytes],
           args: argparse.Namespace) -> None:
    """NAME.cu and NAME.h (when asked for), NAME.json and nvcc's `files`, all or none."""
    if "cu" in args.emit:
        files[f"{name}.cu"] = cuda.encode()
        files[f"{name}.h"] = header.encode()
    files[f"{name}.json"] = metadata_json.encode()
    written = write_outputs(Path(args.output), files)
    print(f"{name}: wrote {', '.join(str(p) for p in written)}")


def _compile_family(path: str, args: argparse.Namespace, nvcc: str | None, sources: dict[str, str]) -> bool:
    """A family's .cu, .h and .json (and with nvcc its build, reporting each member's vector kernel)."""
    try:
        family = compile_family_path(path, args.arch)
        _claim_name(family.name, parse_family(family.source)[1], family.source, sources)
    except CompileError as err:
        print(err.render(), file=sys.stderr)
        return False
    for member in family.members:
        for warning in member.artifacts.warnings:
            print(warning.render(), file=sys.stderr)
    files: dict[str, bytes] = {}
    log = None
    if nvcc is not None:
        try:
            result = build(family.cuda, family.name, family.spec.target.code, args.emit, nvcc,
                           entry=family.members[0].artifacts.metadata["entry"])
        except BuildError as err:
            print(f"{printable(path)}: error: {err}", file=sys.stderr)
            return False
        log = result.log
        files.update({f"{family.name}.{kind}": data for kind, data in result.outputs.items()})
    _write(family.name, family.cuda, family.header, family.metadata_json(), files, args)
    for member in family.members:
        model = member.model
        line = (f"  member {model.name} ({printable(member.path)}): {'x'.join(map(str, model.tile))} tile, "
                f"{member.artifacts.metadata['bounds']} bounds, {model.blocks_per_sm} blocks per SM")
        if log is not None:
            line += f"; {parse_ptxas(log, member.artifacts.metadata['entry'])}"
        print(line)
    return True


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; with `command` (the subcommand named on it) only that tool's module is
    imported, to read its arguments: the GPU tools import the runtime, which `check` does not need."""
    parser = argparse.ArgumentParser(prog="gemmdsl", description="Compile .gemm tiling specs to CUDA C.")
    parser.add_argument("--version", action="version", version=f"gemmdsl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    compile_cmd = commands.add_parser("compile", help="emit <name>.cu, <name>.h and <name>.json for each spec "
                                                      "and kernel family")
    compile_cmd.add_argument("specs", nargs="+", metavar="SPEC", help=inputs_help("compile", "files to compile"))
    compile_cmd.add_argument("-o", "--output", default=".", metavar="DIR", help="output directory (default: .)")
    compile_cmd.add_argument("--arch", type=parse_arch, metavar="sm_XX", help="override the spec's target (sm_80, ..., sm_90a)")
    compile_cmd.add_argument("--emit", type=parse_emit, default=frozenset({"cu"}), metavar="KINDS",
                             help="comma-separated: cu, ptx, cubin (default: cu)")
    compile_cmd.add_argument("--no-nvcc", action="store_true",
                             help="do not run nvcc (no ptxas figures; what the golden files hold)")
    compile_cmd.set_defaults(handler=compile_main)

    named = command in {name for name, _, _ in TOOLS}
    for name, module_name, help_text in TOOLS:
        sub = commands.add_parser(name, help=help_text)
        if named and name != command:
            continue  # listed, not read: another command runs
        module = importlib.import_module(module_name)
        getattr(module, f"add_{name}_arguments")(sub)
        sub.set_defaults(handler=getattr(module, f"{name}_main"))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if PROFILE_ERROR is not None:
        print(f"error: ${PROFILE_ENV}: {PROFILE_ERROR}", file=sys.stderr)
        return 1
    args = build_parser(next((arg for arg in argv if not arg.startswith("-")), None)).parse_args(argv)
    try:
        return args.handler(args)
    except BrokenPipeError:  # the reader went away (`gemmdsl check ... | head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 141  # 128 + SIGPIPE, what a shell reports for such a pipe


if __name__ == "__main__":
    sys.exit(main())
