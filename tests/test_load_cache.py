"""Loading from the cache (gemmdsl/load_cache.py, runtime.BinaryCache, build.nvcc_release): a warm load compiles
nothing, analyses nothing, runs no nvcc and imports none of the compiler; what it loads launches as what a
compile loads; an edited spec, member file or compiler, and a damaged entry, are compiled again."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from fake_gpu import FakeGpu, FakeTensor, matrix
from gemmdsl import analysis, build, compiler, family, load_cache, runtime
from gemmdsl.family_kernel import load_family
from gemmdsl.source import CompileError, SourceFile

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("GEMMDSL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def gpu(monkeypatch):
    return FakeGpu().install(monkeypatch)


def refuse_compiling(monkeypatch):
    """From here on, compiling or analysing a spec or a family fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("a warm load compiled or analysed")
    for module, name in ((compiler, "compile_source"), (family, "compile_family"), (analysis, "analyze")):
        monkeypatch.setattr(module, name, refuse)


def launches_of(gpu, kernel):
    """What one fused call launches (entries, grids, shared memory, arguments but addresses)."""
    a, b, c = matrix(256, 192, "bfloat16"), matrix(192, 320, "bfloat16", "col"), matrix(256, 320, "bfloat16")
    count = len(gpu.launched)
    kernel(a, b, c, bias=FakeTensor((320,), "bfloat16"))
    return [(launch.entry, launch.grid, launch.block, launch.shared_mem, len(launch.args))
            for launch in gpu.launched[count:]]


def test_a_warm_spec_load_compiles_nothing_and_launches_as_the_cold_one(cache, gpu, monkeypatch):
    cold = runtime.load(SPECS / "linear_gelu.gemm")
    refuse_compiling(monkeypatch)
    warm = runtime.load(SPECS / "linear_gelu.gemm")
    assert (warm.metadata, warm.source) == (cold.metadata, cold.source)
    assert launches_of(gpu, warm) == launches_of(gpu, cold)
    with pytest.raises(AssertionError, match="compiled or analysed"):
        warm.spec  # noqa: B018 - the IR is compiled when asked for, and only then


def test_a_spec_loaded_by_text_is_cached_by_its_text_and_name(cache, gpu, monkeypatch):
    text = (SPECS / "checked_v3.gemm").read_text()
    runtime.load("mine.gemm", text=text)
    refuse_compiling(monkeypatch)
    assert runtime.load("mine.gemm", text=text).name == "checked_v3"
    with pytest.raises(AssertionError):  # another name: the .cu quotes it, so it is compiled
        runtime.load("other.gemm", text=text)


def test_a_warm_family_load_compiles_nothing_and_dispatches_as_the_cold_one(cache, gpu, monkeypatch):
    path = SPECS / "hgemm_h100_bf16c_family.gemmf"
    cold = load_family(path)
    refuse_compiling(monkeypatch)
    warm = load_family(path)
    assert warm.models == cold.models and [k.metadata for k in warm.kernels] == [k.metadata for k in cold.kernels]
    for shape in ((1, 8192, 8192), (1000, 1000, 1000), (4096, 4096, 4096), (333, 517, 129)):
        assert warm.member_for(*shape).name == cold.member_for(*shape).name


def copy_family(tmp_path) -> Path:
    """specs/sgemm_family.gemmf and the member files it uses, in a directory of their own."""
    directory = tmp_path / "family"
    directory.mkdir()
    text = (SPECS / "sgemm_family.gemmf").read_text()
    for spec in SPECS.glob("*.gemm"):
        if f"use {spec.name};" in text:
            (directory / spec.name).write_text(spec.read_text())
    (directory / "sgemm_family.gemmf").write_text(text)
    return directory / "sgemm_family.gemmf"


def test_an_edited_member_file_makes_the_family_compile_again(cache, tmp_path, monkeypatch):
    path = copy_family(tmp_path)
    load_cache.compiled_family(path)
    member = path.with_name("checked_64x64.gemm")
    member.write_text(member.read_text() + "\n// edited\n")
    compiled = []
    compile_family = family.compile_family
    monkeypatch.setattr(family, "compile_family", lambda source: compiled.append(source.path) or compile_family(source))
    load_cache.compiled_family(path)
    load_cache.compiled_family(path)  # and then the new entry serves
    assert compiled == [str(path)]


def test_edited_specs_and_damaged_entries_compile_again_and_errors_are_not_cached(cache, tmp_path, monkeypatch):
    spec = tmp_path / "mine.gemm"
    spec.write_text((SPECS / "checked_v3.gemm").read_text())
    compiled = []
    compile_source = compiler.compile_source
    monkeypatch.setattr(compiler, "compile_source", lambda source: compiled.append(source.text) or
                        compile_source(source))
    load_cache.compiled_spec(SourceFile.read(spec))
    load_cache.compiled_spec(SourceFile.read(spec))
    assert len(compiled) == 1
    spec.write_text(spec.read_text().replace("checked_v3", "mine"))
    assert load_cache.compiled_spec(SourceFile.read(spec)).name == "mine"
    entry = load_cache.entry_path("spec", SourceFile.read(spec))
    entry.write_text(entry.read_text()[:100])  # cut short
    assert load_cache.compiled_spec(SourceFile.read(spec)).name == "mine"
    assert len(compiled) == 3
    spec.write_text("gemm broken {")
    for _ in range(2):
        with pytest.raises(CompileError):
            load_cache.compiled_spec(SourceFile.read(spec))
    assert len(compiled) == 5


def test_the_key_changes_with_any_file_of_the_package(tmp_path, monkeypatch):
    package = tmp_path / "gemmdsl"
    (package / "emit").mkdir(parents=True)
    (package / "emit" / "kernel.py").write_text("x = 1\n")
    monkeypatch.setattr(load_cache, "PACKAGE", package)
    before = load_cache.package_fingerprint.__wrapped__()
    (package / "emit" / "kernel.py").write_text("x = 2\n")
    assert load_cache.package_fingerprint.__wrapped__() != before


def test_the_warm_path_imports_none_of_the_compiler(cache):
    """A new process reading a spec and a family back imports the runtime, but not the front end, the analysis
    or the emitter, nor lark or networkx."""
    load_cache.compiled_spec(SourceFile.read(SPECS / "hgemm_h100_bf16c.gemm"))
    load_cache.compiled_family(SPECS / "hgemm_h100_bf16c_family.gemmf")
    script = textwrap.dedent(f"""
        import sys
        from gemmdsl import family_kernel, load_cache, runtime, source
        load_cache.compiled_spec(source.SourceFile.read({str(SPECS / 'hgemm_h100_bf16c.gemm')!r}))
        load_cache.compiled_family({str(SPECS / 'hgemm_h100_bf16c_family.gemmf')!r})
        print(sorted(name for name in sys.modules if name.split(".")[0] in ("lark", "networkx") or name in
                     ("gemmdsl.compiler", "gemmdsl.parser", "gemmdsl.analysis", "gemmdsl.emit", "gemmdsl.family",
                      "gemmdsl.passes", "gemmdsl.plan")))
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "GEMMDSL_CACHE": str(cache)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_nvcc_is_asked_its_release_once_per_toolkit(cache, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    runs = tmp_path / "runs"
    nvcc = bin_dir / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho run >> {runs}\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert build.nvcc_release() == build.nvcc_release() == "13.0.88"
    assert runs.read_text().count("run") == 1
    os.utime(nvcc, ns=(0, 10**18))  # another toolkit at the same path
    assert build.nvcc_release() == "13.0.88"
    assert runs.read_text().count("run") == 2


def test_a_cached_cubin_is_loaded_without_a_compiler(cache, monkeypatch):
    """Kernel._load_on builds the cubin on a miss only (CuPy stood in for by what _load_on asks of it)."""
    built = []
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy())
    monkeypatch.setattr(runtime.kernel, "compile_cubin", lambda source, target: built.append(target) or b"cubin")
    monkeypatch.setattr(runtime.binaries, "compiler_version", lambda compiler: "13.0.88")
    monkeypatch.setattr(runtime.kernel, "current_device", lambda: 0)
    monkeypatch.setattr(runtime.kernel, "require_gpu", lambda: None)
    artifacts = runtime.compile_spec(SPECS / "hgemm_h100_bf16c.gemm")
    runtime.Kernel(artifacts)
    runtime.Kernel(runtime.compile_spec(SPECS / "hgemm_h100_bf16c.gemm"))
    assert built == ["sm_90a"]


def fake_cupy():
    """What Kernel._load_on asks of CuPy: the device's compute capability and SMs, a module from a cubin file,
    its functions' handles and registers."""
    function = SimpleNamespace(kernel=SimpleNamespace(ptr=1), num_regs=168, max_dynamic_shared_size_bytes=0)

    class Device:
        compute_capability = "90"
        attributes = {"MultiProcessorCount": 132}

        def __init__(self, device=0):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    module = SimpleNamespace(get_function=lambda name: function)
    return SimpleNamespace(__version__="13.6.0", cuda=SimpleNamespace(Device=Device),
                           RawModule=lambda path: module)


def test_importing_gemmdsl_imports_none_of_its_modules_until_one_is_named():
    script = textwrap.dedent("""
        import sys
        import gemmdsl
        print(sorted(name for name in sys.modules if name.startswith("gemmdsl")))
        assert gemmdsl.Kernel is gemmdsl.runtime.Kernel and gemmdsl.FamilyKernel.__name__ == "FamilyKernel"
        try:
            gemmdsl.no_such_module
        except AttributeError as err:
            print(err)
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['gemmdsl', 'gemmdsl.errors', 'gemmdsl.version']",
                                        "module 'gemmdsl' has no attribute 'no_such_module'"]
