"""Repeated calls (gemmdsl/call_plan.py), on the CPU with the fake GPU of tests/fake_gpu.py: every kind of call
takes its plan the second time (nothing is checked, no tensor map encoded, no member chosen again), and a call on
other addresses launches exactly what a call checked in full launches, argument for argument."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from fake_arrays import FakeDLPack
from fake_gpu import STREAM, FakeGpu, FakeTensor, fake_family, fake_kernel, matrix
from gemmdsl import call_plan, family_kernel, runtime
from gemmdsl.arrays import DL_FLOAT, DTYPE_NAMES, ITEM_SIZES, array_view
from gemmdsl.targets import SECTOR_BYTES

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"


@pytest.fixture
def gpu(monkeypatch):
    return FakeGpu().install(monkeypatch)


class Counts:
    """How often the full way's steps ran: the checks of a call, of its fuse operands and offs, the padded
    launcher's choice of copies and a family's rule; and how many tensor maps were encoded."""

    def __init__(self, monkeypatch, gpu):
        self.gpu = gpu
        self.seen = dict.fromkeys(("check_call", "fuse_views", "check_offs", "padded_copies", "choose"), 0)
        for name in ("check_call", "fuse_views", "check_offs", "padded_copies"):
            monkeypatch.setattr(runtime.kernel, name, self.counting(name, getattr(runtime.kernel, name)))
        monkeypatch.setattr(family_kernel, "choose", self.counting("choose", family_kernel.choose))

    def counting(self, name, function):
        def counted(*args, **kwargs):
            self.seen[name] += 1
            return function(*args, **kwargs)
        return counted

    def snapshot(self) -> dict[str, int]:
        return {**self.seen, "maps": self.gpu.encodes}


@pytest.fixture
def counts(monkeypatch, gpu):
    return Counts(monkeypatch, gpu)


def bf16(rows, cols, layout="row"):
    return matrix(rows, cols, "bfloat16", layout)


def f32(rows, cols, layout="row"):
    return matrix(rows, cols, "float32", layout)


def e4m3(rows, cols, layout="row"):
    return matrix(rows, cols, "float8_e4m3fn", layout)


def vector(length, dtype="float32"):
    return FakeTensor((length,), dtype)


# Each kind of call: (label, file, a function making fresh operands: the call's positional and keyword arguments).
KINDS = [
    ("wgmma spec", "hgemm_h100_bf16c.gemm", lambda: ((bf16(256, 192), bf16(192, 320, "col"), bf16(256, 320)), {})),
    ("fma spec, interior split", "checked_v3.gemm", lambda: ((f32(300, 70), f32(70, 200), f32(300, 200)), {})),
    ("fma stream-K", "sgemm_any.gemm", lambda: ((f32(256, 4096), f32(4096, 256), f32(256, 256)), {})),
    ("wgmma stream-K (workspace)", "sgemm_3xtf32_h100_sk.gemm",
     lambda: ((f32(256, 8192), f32(8192, 256, "col"), f32(256, 256)), {})),
    ("mma.sync spec", "hgemm_mma.gemm", lambda: ((bf16(333, 129), bf16(129, 517), f32(333, 517)), {})),
    ("batched", "batched_v3.gemm",
     lambda: ((matrix(64, 48, "float32", batch=3), matrix(48, 80, "float32", batch=3),
               matrix(64, 80, "float32", batch=3)), {})),
    ("fused bias", "linear_gelu.gemm",
     lambda: ((bf16(256, 192), bf16(192, 320, "col"), bf16(256, 320)), {"bias": vector(320, "bfloat16")})),
    ("fused residual", "hgemm_h100_relu_residual.gemm",
     lambda: ((bf16(256, 192), bf16(192, 320, "col"), bf16(256, 320)), {"residual": bf16(256, 320)})),
    ("fp8 row and column scales", "fp8_rowwise.gemm",
     lambda: ((e4m3(256, 256), e4m3(256, 320, "col"), bf16(256, 320)),
              {"row_scale": vector(256), "col_scale": vector(320)})),
    ("fp8 block scales", "fp8_blockwise.gemm",
     lambda: ((e4m3(256, 384), e4m3(384, 320, "col"), bf16(256, 320)),
              {"a_scale": f32(256, 3), "b_scale": f32(3, 3)})),
    ("grouped offs", "moe_grouped.gemm",
     lambda: ((bf16(512, 192), FakeTensor((4, 320, 192), "bfloat16").mT, bf16(512, 320)),
              {"offs": vector(4, "int32")})),
    ("grouped fp8 with scales", "moe_grouped_fp8.gemm",
     lambda: ((e4m3(512, 256), FakeTensor((4, 320, 256), "float8_e4m3fn").mT, bf16(512, 320)),
              {"offs": vector(4, "int32"), "row_scale": vector(512), "col_scale": f32(4, 320)})),
    ("family dispatch", "hgemm_h100_bf16c_family.gemmf",
     lambda: ((bf16(1024, 1024), bf16(1024, 1024, "col"), bf16(1024, 1024)), {})),
    ("family, padded copies", "hgemm_h100_bf16c_family.gemmf",
     lambda: ((bf16(1000, 1001).columns(1000), bf16(1000, 1000, "col"), bf16(1000, 1000)), {})),
]
C_LEFT_OUT = ["wgmma spec", "fma spec, interior split", "wgmma stream-K (workspace)", "fused bias", "grouped offs",
              "family dispatch", "family, padded copies"]


def load(path):
    return fake_family(path) if str(path).endswith(".gemmf") else fake_kernel(path)


def cases():
    for label, name, make in KINDS:
        yield pytest.param(name, make, False, id=label)
        if label in C_LEFT_OUT:
            yield pytest.param(name, make, True, id=f"{label}, C left out")


CASES = list(cases())


def operands(make, c_left_out):
    """Fresh operands made by `make`: the call's positional arguments (C left out: A and B only) and keywords."""
    args, kwargs = make()
    return (args[:2] if c_left_out else args), kwargs


@pytest.mark.parametrize("name,make,c_left_out", CASES)
def test_a_repeated_call_takes_its_plan(gpu, counts, name, make, c_left_out):
    """The second call of a signature, on other addresses, checks nothing and chooses no member: it only encodes
    the tensor maps of its new addresses; a call on addresses seen before (allocations at the same addresses
    too) does nothing but launch."""
    kernel = load(SPECS / name)
    (args, kwargs), (other_args, other_kwargs) = operands(make, c_left_out), operands(make, c_left_out)
    kernel(*args, **kwargs)
    launches = len(gpu.launched)
    assert launches
    checked = counts.snapshot()
    mark = gpu.mark()
    kernel(*other_args, **other_kwargs)
    planned = counts.snapshot()
    assert {**planned, "maps": 0} == {**checked, "maps": 0}
    gpu.rewind(mark)
    kernel(*other_args, **other_kwargs)
    assert counts.snapshot() == planned
    assert len(gpu.launched) == 3 * launches


@pytest.mark.parametrize("name,make,c_left_out", CASES)
def test_a_planned_call_launches_what_the_full_checks_launch(gpu, name, make, c_left_out):
    """On new addresses (and new allocations), the plan's launches equal those of the same call checked in full
    by a kernel without plans: every argument, and every tensor map's request."""
    kernel = load(SPECS / name)
    first_args, first_kwargs = operands(make, c_left_out)
    kernel(*first_args, **first_kwargs)
    args, kwargs = operands(make, c_left_out)
    mark, count = gpu.mark(), len(gpu.launched)
    planned_c = kernel(*args, **kwargs)
    planned = gpu.launched[count:]
    gpu.rewind(mark)
    count = len(gpu.launched)
    checked_c = load(SPECS / name)(*args, **kwargs)
    assert planned == gpu.launched[count:]
    assert (planned_c.data_ptr(), planned_c.shape, planned_c.stride()) == \
        (checked_c.data_ptr(), checked_c.shape, checked_c.stride())
    assert all(launch.stream == STREAM for launch in planned)


def test_bind_from_a_plan_owns_its_parameters(gpu):
    """A bound call made from a plan keeps its arguments when later calls rewrite the plan's."""
    kernel = fake_kernel(SPECS / "hgemm_h100_bf16c.gemm")
    kernel(bf16(256, 192), bf16(192, 320, "col"), bf16(256, 320))
    a, b, c = bf16(256, 192), bf16(192, 320, "col"), bf16(256, 320)
    bound = kernel.bind(a, b, c)
    kernel(bf16(256, 192), bf16(192, 320, "col"), bf16(256, 320))
    count = len(gpu.launched)
    bound()
    assert gpu.launched[count].args[3] == c.data_ptr()  # C's address, after the maps of A, B and C
    assert gpu.launched[count].args[0].address == a.data_ptr()


def test_a_changed_shape_or_alignment_is_checked_in_full(gpu, counts):
    kernel = fake_kernel(SPECS / "checked_v3.gemm")
    kernel(f32(300, 72), f32(72, 200), f32(300, 200))
    seen = counts.seen["check_call"]
    kernel(f32(300, 72), f32(72, 201), f32(300, 201))  # another N
    assert counts.seen["check_call"] == seen + 1
    kernel(f32(300, 73).columns(72).offset(1), f32(72, 200), f32(300, 200))  # A one element off: the scalar kernel
    assert counts.seen["check_call"] == seen + 2
    assert gpu.launched[-1].entry != kernel.requirements.launch.entries.vector


def test_c_overlapping_a_at_new_addresses_is_refused_as_the_full_checks_refuse_it(gpu):
    kernel = fake_kernel(SPECS / "checked_v3.gemm")
    kernel(f32(64, 64), f32(64, 64), f32(64, 64))
    shared = f32(96, 64)  # A its first 64 rows, C its last 64
    a = FakeTensor((64, 64), "float32", ptr=shared.data_ptr())
    before = len(gpu.launched)
    with pytest.raises(ValueError, match="C overlaps A"):
        kernel(a, f32(64, 64), a.offset(32 * 64))
    assert len(gpu.launched) == before


def test_a_residual_that_is_c_takes_its_own_plan_in_place(gpu, counts):
    """C = relu(A @ B) + C: the residual is C itself (allowed), each call at new addresses."""
    kernel = fake_kernel(SPECS / "hgemm_h100_relu_residual.gemm")
    for _ in range(3):
        a, b, c = bf16(256, 192), bf16(192, 320, "col"), bf16(256, 320)
        kernel(a, b, c, residual=c)
    assert counts.seen["check_call"] == 1
    assert gpu.launched[-1].args[3] == c.data_ptr()
    residual = [arg for arg in gpu.launched[-1].args if arg == c.data_ptr()]
    assert len(residual) == 2  # C, and the residual's pointer: both the new C


def test_every_alignment_a_kernel_asks_divides_the_alignment_class():
    """call_plan's signatures keep an address modulo ALIGNMENT_CLASS_BYTES: every alignment rule of every
    shipped spec (vector widths in bytes, TMA's alignment, the 32-byte sectors) must divide it."""
    alignments = {SECTOR_BYTES, 16}
    for path in (ROOT / "generated").glob("*.json"):
        metadata = json.loads(path.read_text())
        if "family" in metadata:
            continue  # its members' own files say theirs
        if "quant" in metadata:
            continue  # a QuantizedKernel (runtime/quantized.py) checks every call in full: it keeps no call plans
        sizes = {name: ITEM_SIZES[DTYPE_NAMES[dtype]]
                 for name, dtype in metadata.get("dtypes", dict.fromkeys("abc", "f32")).items()}
        alignments |= {elements * sizes[name] for name, elements in metadata["requires"]["vector_elements"].items()}
        alignments |= {narrow["width_bytes"] for narrow in metadata["entries"].get("narrow") or ()}
        alignments.add(metadata.get("alignment_bytes", 1))
    assert all(call_plan.ALIGNMENT_CLASS_BYTES % alignment == 0 for alignment in alignments), sorted(alignments)


def test_operands_without_a_signature_are_checked_every_time(gpu, counts):
    """Arrays of other libraries (here: JAX-like ones, read through DLPack) have no cheap signature."""
    kernel = fake_kernel(SPECS / "checked_v3.gemm")
    a, b, c = (FakeDLPack((64, 64), DL_FLOAT, 32, gpu.memory.allocate(64 * 64 * 4)) for _ in range(3))
    for _ in range(2):
        kernel(a, b, c)
    assert counts.seen["check_call"] == 2


TENSORS = st.builds(FakeTensor, shape=st.sampled_from([(4, 4), (4, 8), (2, 4, 4)]),
                    dtype=st.sampled_from(["float32", "bfloat16"]),
                    strides=st.sampled_from([(4, 1), (1, 4), (8, 1)]),
                    ptr=st.sampled_from([0x7F0000000000, 0x7F0000000040, 0x7F0000010000, 0x7F0000010004]),
                    device=st.integers(0, 1))


@given(TENSORS, TENSORS)
def test_equal_operand_signatures_mean_equal_views_but_for_the_address(first, second):
    """A plan serves every call of its signature: two tensors of one signature must have one view (what every
    check reads) but for the address, and addresses of one alignment class."""
    first_key, first_pointer = call_plan.torch_operand(first)
    second_key, second_pointer = call_plan.torch_operand(second)
    if first_key == second_key:
        assert replace(array_view("A", first), pointer=0) == replace(array_view("A", second), pointer=0)
        assert (first_pointer - second_pointer) % call_plan.ALIGNMENT_CLASS_BYTES == 0


def test_call_signatures_list_the_operands_given_and_which_share_an_address():
    a, b, c = bf16(8, 8), bf16(8, 8), bf16(8, 8)
    apart, shared = call_plan.call_signature((a, b, c, None)), call_plan.call_signature((a, b, c, c))
    assert apart.pointers == (a.data_ptr(), b.data_ptr(), c.data_ptr())
    assert apart.key[3:] == (None, None)  # no fourth operand; no address shared
    assert shared.key[-1] == (0, 1, 2, 2) and apart.key[:3] == shared.key[:3]
    assert call_plan.call_signature((a, b, FakeDLPack((8, 8), DL_FLOAT, 32, 0x7F0000000000))) is None


@pytest.mark.parametrize("name,make,c_left_out", [case for case in CASES if case.id in (
    "wgmma spec", "fma spec, interior split", "family, padded copies, C left out", "grouped fp8 with scales")])
def test_launches_rewritten_for_more_addresses_than_a_plan_keeps_stay_exact(gpu, name, make, c_left_out):
    """More sets of addresses than SETS_KEPT, then the first ones again: the plan rewrites its oldest launches
    in place, and every call launches what a kernel without plans launches."""
    kernel, fresh = load(SPECS / name), load(SPECS / name)
    sets = [operands(make, c_left_out) for _ in range(call_plan.SETS_KEPT + 3)]
    for args, kwargs in [*sets, *sets[:4]]:
        mark, count = gpu.mark(), len(gpu.launched)
        kernel(*args, **kwargs)
        planned = gpu.launched[count:]
        gpu.rewind(mark)
        count = len(gpu.launched)
        forget_plans(fresh)
        fresh(*args, **kwargs)
        assert planned == gpu.launched[count:]
        gpu.rewind(mark)


def forget_plans(kernel):
    """Drop a kernel's plans (a family's routes and its members' plans): its next call is checked in full."""
    for member in getattr(kernel, "kernels", [kernel]):
        member._plans.clear()
    getattr(kernel, "_routes", {}).clear()
