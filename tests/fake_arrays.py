"""Stand-ins for GPU arrays of other libraries, for the CPU tests of gemmdsl.arrays and the runtime:
objects carrying a __cuda_array_interface__ dict (CuPy, PyTorch, Numba), and ones exporting a real
DLPack capsule over a DLTensor made here (JAX; PyTorch's bfloat16). Nothing is ever dereferenced."""
import ctypes
from types import SimpleNamespace

from gemmdsl import arrays

CAPSULE_NAME = b"dltensor"  # PyCapsule keeps the pointer, not a copy: a module constant outlives every capsule
capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))


def cuda_array(shape, typestr="<f4", strides=None, ptr=0, readonly=False):
    """An object carrying a __cuda_array_interface__ (byte strides; None: C-contiguous)."""
    return SimpleNamespace(__cuda_array_interface__={"shape": shape, "typestr": typestr, "strides": strides,
                                                     "data": (ptr, readonly), "version": 3})


class FakeDLPack:
    """A JAX-like array: __dlpack_device__, and __dlpack__ returning an unconsumed "dltensor" capsule
    (element strides; None: C-contiguous)."""

    def __init__(self, shape, code, bits, ptr, strides=None, device=(arrays.DL_CUDA, 0), byte_offset=0):
        self.device = device
        self._shape = (ctypes.c_int64 * len(shape))(*shape)  # the DLTensor points into these
        self._strides = None if strides is None else (ctypes.c_int64 * len(strides))(*strides)
        int64_pointer = ctypes.POINTER(ctypes.c_int64)
        self.tensor = arrays.DLTensor(
            data=ptr, device=arrays.DLDevice(*device), ndim=len(shape), dtype=arrays.DLDataType(code, bits, 1),
            shape=ctypes.cast(self._shape, int64_pointer),
            strides=ctypes.cast(self._strides, int64_pointer) if strides is not None else None,
            byte_offset=byte_offset)

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self):
        return capsule_new(ctypes.addressof(self.tensor), CAPSULE_NAME, None)
