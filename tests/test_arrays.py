"""gemmdsl.arrays: reading operands of any GPU library through __cuda_array_interface__ and DLPack,
on the CPU with stand-ins (tests/fake_arrays.py); the real libraries are in tests/test_gpu_interop.py."""
from types import SimpleNamespace

import numpy
import pytest
from hypothesis import given, strategies as st

from fake_arrays import FakeDLPack, cuda_array
from gemmdsl import arrays
from gemmdsl.arrays import ArrayView, array_view, contiguous_strides, library_of, signature
from gemmdsl.fuse_operands import FUSE_OPERANDS

PTR = 0x7F0000000000


def test_array_interface_without_strides_is_c_contiguous():
    view = array_view("A", cuda_array((3, 4, 5), ptr=PTR))
    assert view == ArrayView(library="types", shape=(3, 4, 5), strides=(20, 5, 1), dtype="float32", itemsize=4,
                             pointer=PTR, device=None)


def test_array_interface_strides_are_bytes():
    transposed = array_view("A", cuda_array((4, 6), "<f2", strides=(2, 16), ptr=PTR, readonly=True))
    assert (transposed.strides, transposed.dtype, transposed.itemsize, transposed.readonly) == ((1, 8), "float16", 2,
                                                                                                 True)


def test_strides_between_elements_are_refused():
    with pytest.raises(ValueError, match=r"B has strides \(6, 4\) bytes, which are not whole float32 elements"):
        array_view("B", cuda_array((2, 2), strides=(6, 4), ptr=PTR))


def test_dlpack_capsule_is_read_without_consuming_it():
    array = FakeDLPack((2, 8, 16), arrays.DL_BFLOAT, 16, PTR, strides=(256, 1, 8), device=(arrays.DL_CUDA, 1),
                       byte_offset=64)
    view = array_view("A", array)
    assert view == ArrayView(library="fake_arrays", shape=(2, 8, 16), strides=(256, 1, 8), dtype="bfloat16",
                             itemsize=2, pointer=PTR + 64, device=1)
    assert array_view("A", array) == view  # a fresh capsule each time; the first one was left as it was


def test_dlpack_without_strides_is_c_contiguous_and_names_other_dtypes():
    view = array_view("C", FakeDLPack((3, 5), arrays.DL_FLOAT, 64, PTR))
    assert (view.strides, view.dtype, view.itemsize) == ((5, 1), "float64", 8)
    assert array_view("C", FakeDLPack((3, 5), arrays.DL_INT, 32, PTR)).dtype == "int32"


@pytest.mark.parametrize("device_type", [arrays.DL_CPU, arrays.DL_CUDA_HOST])
def test_dlpack_arrays_in_host_memory_are_refused(device_type):
    with pytest.raises(TypeError, match="A must be in GPU memory, got a fake_arrays.FakeDLPack in host memory"):
        array_view("A", FakeDLPack((2, 2), arrays.DL_FLOAT, 32, PTR, device=(device_type, 0)))


def test_numpy_arrays_and_other_objects_are_refused_by_name():
    with pytest.raises(TypeError, match="B must be in GPU memory, got a numpy.ndarray in host memory"):
        array_view("B", numpy.zeros((2, 2), dtype=numpy.float32))
    with pytest.raises(TypeError, match="A must be a GPU array .*PyTorch, CuPy, JAX or Numba.*got builtins.list"):
        array_view("A", [[1.0]])


class RefusesInterface(FakeDLPack):
    """Like a bfloat16 PyTorch tensor: the array interface raises, DLPack describes it."""

    @property
    def __cuda_array_interface__(self):
        raise TypeError("dtype torch.bfloat16 is not supported by __cuda_array_interface__")


class OpaqueInterface(FakeDLPack):
    """Like a bfloat16 PyTorch tensor of recent versions: the array interface says only '<V2'."""

    @property
    def __cuda_array_interface__(self):
        return {"shape": (4, 4), "typestr": "<V2", "strides": None, "data": (PTR, False), "version": 3}


def test_an_array_interface_that_raises_or_names_no_type_falls_back_to_dlpack():
    assert array_view("A", RefusesInterface((4, 4), arrays.DL_BFLOAT, 16, PTR)).dtype == "bfloat16"
    assert array_view("A", OpaqueInterface((4, 4), arrays.DL_BFLOAT, 16, PTR)).dtype == "bfloat16"


def test_an_array_interface_that_raises_without_dlpack_says_why():
    class NeedsDetach:
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")

    with pytest.raises(TypeError, match="C: Can't get __cuda_array_interface__ on Variable that requires grad"):
        array_view("C", NeedsDetach())


def test_library_is_the_top_level_package_of_the_type():
    jax_array = type("ArrayImpl", (), {"__module__": "jaxlib.xla_extension"})()
    numba_array = type("DeviceNDArray", (), {"__module__": "numba_cuda.numba.cuda.cudadrv.devicearray"})()
    torch_tensor = type("Tensor", (), {"__module__": "torch"})()
    assert [library_of(x) for x in (jax_array, numba_array, torch_tensor)] == ["jax", "numba", "torch"]


def test_contiguous_strides():
    assert contiguous_strides((2, 3, 4)) == (12, 4, 1)
    assert contiguous_strides((0, 3)) == (3, 1)


BFLOAT16 = type("dtype", (), {"__str__": lambda self: "torch.bfloat16"})()


class FakeTorchTensor:
    """The attributes of a PyTorch tensor that view_of_torch_tensor reads, and the protocols as a
    bfloat16 tensor has them (for the cases it leaves to them)."""

    __module__ = "torch"

    def __init__(self, shape, strides, is_cuda=True, requires_grad=False, conjugated=False, ptr=PTR, device=1):
        self.shape, self._strides, self._ptr = shape, strides, ptr
        self.is_cuda, self.requires_grad, self._conjugated = is_cuda, requires_grad, conjugated
        self.dtype = BFLOAT16
        self.device = type("device", (), {"index": device})()

    def stride(self):
        return self._strides

    def element_size(self):
        return 2

    def data_ptr(self):
        return self._ptr

    def get_device(self):
        return self.device.index if self.is_cuda else -1

    def is_conj(self):
        return self._conjugated

    def is_neg(self):
        return False

    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")


def test_torch_tensors_are_read_from_their_attributes():
    view = array_view("B", FakeTorchTensor((3, 64, 32), (2048, 1, 64)))
    assert view == ArrayView(library="torch", shape=(3, 64, 32), strides=(2048, 1, 64), dtype="bfloat16",
                             itemsize=2, pointer=PTR, device=1)


def test_a_tensor_that_requires_grad_is_read_as_its_data():
    view = array_view("B", FakeTorchTensor((4, 4), (4, 1), requires_grad=True))
    assert view == array_view("B", FakeTorchTensor((4, 4), (4, 1)))


@pytest.mark.parametrize("odd", [dict(is_cuda=False), dict(conjugated=True)])
def test_torch_tensors_the_attributes_cannot_vouch_for_go_to_the_protocols(odd):
    with pytest.raises(TypeError, match="A: Can't get __cuda_array_interface__ on Variable that requires grad"):
        array_view("A", FakeTorchTensor((4, 4), (4, 1), **odd))


class FakeCupyArray:
    """The attributes of a cupy.ndarray that view_of_cupy_array reads, and its array interface."""

    __module__ = "cupy"

    def __init__(self, shape, byte_strides, dtype="float32"):
        self.shape, self.strides, self.dtype = shape, byte_strides, numpy.dtype(dtype)
        self.data = SimpleNamespace(ptr=PTR, device_id=1)
        self.__cuda_array_interface__ = {"shape": shape, "typestr": self.dtype.str, "strides": byte_strides,
                                         "data": (PTR, False), "version": 3}


FakeCupyArray.__name__ = FakeCupyArray.__qualname__ = "ndarray"


def test_cupy_arrays_are_read_from_their_attributes_with_their_device():
    array = FakeCupyArray((3, 64, 32), (8192, 4, 256))
    view = array_view("A", array)
    assert view == ArrayView(library="cupy", shape=(3, 64, 32), strides=(2048, 1, 64), dtype="float32",
                             itemsize=4, pointer=PTR, device=1)
    # the interface alone names no device: the runtime would ask the driver, per operand and call
    assert array_view("A", cuda_array(**{"shape": (3, 64, 32), "strides": (8192, 4, 256), "ptr": PTR})) == \
        ArrayView(library="types", shape=(3, 64, 32), strides=(2048, 1, 64), dtype="float32", itemsize=4,
                  pointer=PTR, device=None)


def test_cupy_arrays_the_attributes_cannot_vouch_for_go_to_the_protocols():
    with pytest.raises(ValueError, match="not whole float32 elements"):
        array_view("B", FakeCupyArray((4, 4), (16, 6)))
    structured = array_view("B", FakeCupyArray((4, 4), (64, 16), dtype="V16"))
    assert structured.device is None and structured.dtype == "void128"


TENSORS = st.builds(FakeTorchTensor, shape=st.sampled_from([(4, 4), (4, 8), (2, 4, 4)]),
                    strides=st.sampled_from([(4, 1), (1, 4), (8, 1)]), ptr=st.sampled_from([PTR, PTR + 64]),
                    device=st.integers(0, 1))


@given(TENSORS, TENSORS)
def test_equal_signatures_mean_equal_views(first, second):
    """The repeated-call check compares signatures instead of views: it must never call two different
    views the same."""
    if signature(first) == signature(second):
        assert array_view("A", first) == array_view("A", second)


def test_libraries_without_a_signature_are_checked_in_full():
    assert signature(cuda_array((4, 4), ptr=PTR)) is None
    assert signature(FakeDLPack((2, 2), arrays.DL_FLOAT, 32, PTR)) is None
    assert signature(FakeTorchTensor((4, 4), (4, 1))) != signature(FakeTorchTensor((4, 4), (4, 1), device=0))


@pytest.mark.parametrize("code, name", [(10, "float8_e4m3fn"), (12, "float8_e5m2")])
def test_dlpack_float8_codes_read_as_pytorchs_names(code, name):
    view = array_view("A", RefusesInterface((4, 16), code, 8, PTR))
    assert (view.dtype, view.itemsize, view.strides) == (name, 1, (16, 1))
    assert arrays.ITEM_SIZES[name] == 1 and name in arrays.DTYPE_NAMES.values()


def test_other_float8_codes_keep_a_code_name_no_kernel_takes():
    view = array_view("A", RefusesInterface((4, 16), 11, 8, PTR))  # kDLFloat8_e4m3fnuz: other values
    assert view.dtype == "dlpack-code-11-8" and view.dtype not in arrays.ITEM_SIZES


# --- views a kernel cannot address: refused for every kind of operand, with the reason ----------------

# Every operand a launch reads or writes: the matrices, the fuse chain's (fuse_operands.FUSE_OPERANDS) and offs.
OPERAND_NAMES = ("A", "B", "C", *FUSE_OPERANDS, "offs")


@pytest.mark.parametrize("name", OPERAND_NAMES)
def test_a_null_pointer_on_a_non_empty_array_is_refused(name):
    with pytest.raises(ValueError, match=rf"^{name} has a null data pointer but 6 elements"):
        array_view(name, cuda_array((2, 3), ptr=0))
    with pytest.raises(ValueError, match=rf"^{name} has a null data pointer"):
        array_view(name, FakeDLPack((6,), arrays.DL_FLOAT, 32, 0))
    assert array_view(name, cuda_array((0, 3), ptr=0)).pointer == 0  # an empty array addresses nothing


@pytest.mark.parametrize("name", OPERAND_NAMES)
def test_a_pointer_off_its_elements_alignment_is_refused(name):
    with pytest.raises(ValueError, match=rf"^{name}'s data pointer {PTR + 2:#x} is not 4-byte aligned for its "
                                         r"float32 elements"):
        array_view(name, cuda_array((2, 3), ptr=PTR + 2))
    with pytest.raises(ValueError, match=rf"^{name}'s data pointer .* is not 2-byte aligned"):
        array_view(name, FakeDLPack((4,), arrays.DL_BFLOAT, 16, PTR, byte_offset=1))
    assert array_view(name, cuda_array((2, 3), "<f2", ptr=PTR + 2)).pointer == PTR + 2  # 2-byte elements: fine


@pytest.mark.parametrize("name", OPERAND_NAMES)
def test_a_byte_swapped_array_is_refused(name):
    with pytest.raises(TypeError, match=rf"^{name} is big-endian \('>f4'\): the kernels read little-endian float32"):
        array_view(name, cuda_array((2, 3), ">f4", ptr=PTR))


@pytest.mark.parametrize("name", OPERAND_NAMES)
@pytest.mark.parametrize("shape, strides", [((2.5, 3), None), ((2, 3), (12.0, 4)), ((True, 3), None),
                                            (("2", 3), None)])
def test_a_non_integer_shape_or_stride_is_refused(name, shape, strides):
    with pytest.raises(TypeError, match=rf"^{name} has a non-integer (shape|stride)"):
        array_view(name, cuda_array(shape, strides=strides, ptr=PTR))


def test_numpy_integers_are_integers():
    view = array_view("A", cuda_array((numpy.int64(2), numpy.int32(3)), strides=(numpy.int64(12), 4), ptr=PTR))
    assert (view.shape, view.strides) == ((2, 3), (3, 1))
    assert all(type(extent) is int for extent in view.shape + view.strides)


def test_torch_and_cupy_attribute_readers_are_checked_too():
    with pytest.raises(ValueError, match="A has a null data pointer"):
        array_view("A", FakeTorchTensor((4, 8), (8, 1), ptr=0))
    with pytest.raises(ValueError, match="A's data pointer .* is not 2-byte aligned"):
        array_view("A", FakeTorchTensor((4, 8), (8, 1), ptr=PTR + 1))
