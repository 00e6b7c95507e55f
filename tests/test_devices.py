"""Which GPU a call runs on and which stream it takes (gemmdsl.devices), with fake arrays and streams:
no GPU needed. The GPU side of the same rules is tests/test_gpu_devices.py."""
import ctypes
from types import SimpleNamespace

import numpy
import pytest
from hypothesis import given, strategies as st

from gemmdsl.arrays import ArrayView
from gemmdsl.devices import (DEFAULT_STREAM_HANDLES, DeviceMismatch, ParameterBlock, check_stream_device,
                             operands_device, stream_device, stream_handle)


def view(device, pointer=0x7F0000000000):
    return ArrayView("torch", (4, 4), (4, 1), "float32", 4, pointer, device)


def no_driver(*_):
    raise AssertionError("the driver was asked though the operands said where they are")


def test_operands_on_one_gpu_run_there():
    assert operands_device({"A": view(1), "B": view(1), "C": view(1)}, no_driver) == 1


def test_operands_on_two_gpus_are_refused_naming_both():
    with pytest.raises(DeviceMismatch, match="A is on GPU 0 but C is on GPU 1"):
        operands_device({"A": view(0), "B": view(0), "C": view(1)}, no_driver)


def test_a_view_without_a_device_is_placed_by_the_driver():
    asked = []

    def driver(name, array):
        asked.append(name)
        return 3

    assert operands_device({"A": view(None), "B": view(3)}, driver) == 3
    assert asked == ["A"]
    with pytest.raises(DeviceMismatch, match="A is on GPU 3 but B is on GPU 2"):
        operands_device({"A": view(None), "B": view(2)}, driver)


@given(st.lists(st.integers(0, 7), min_size=2, max_size=5))
def test_a_call_runs_on_its_operands_gpu_or_is_refused(devices):
    views = {name: view(device) for name, device in zip("ABCDE", devices)}
    if len(set(devices)) == 1:
        assert operands_device(views, no_driver) == devices[0]
    else:
        with pytest.raises(DeviceMismatch):
            operands_device(views, no_driver)


def test_streams_say_their_gpu_or_the_driver_does():
    torch_stream = SimpleNamespace(cuda_stream=0x5678, device_index=1)
    cupy_stream = SimpleNamespace(ptr=0x1234, device_id=2)
    assert stream_device(torch_stream, no_driver) == 1
    assert stream_device(cupy_stream, no_driver) == 2
    assert stream_device(0x9ABC, lambda handle: 5 if handle == 0x9ABC else None) == 5
    protocol = SimpleNamespace(__cuda_stream__=lambda: (0, 0x9ABC))
    assert stream_device(protocol, lambda handle: 6) == 6


@pytest.mark.parametrize("handle", DEFAULT_STREAM_HANDLES)
def test_default_stream_handles_follow_the_call(handle):
    assert stream_device(handle, no_driver) is None
    check_stream_device(handle, 4, no_driver)  # any GPU: nothing raised


def test_a_stream_of_another_gpu_is_refused():
    with pytest.raises(DeviceMismatch, match="the stream is on GPU 1 but the operands are on GPU 0"):
        check_stream_device(SimpleNamespace(cuda_stream=0x5678, device_index=1), 0, no_driver)
    check_stream_device(SimpleNamespace(cuda_stream=0x5678, device_index=0), 0, no_driver)
    check_stream_device(0x9ABC, 0, lambda handle: None)  # a driver that cannot say refuses nothing


def test_stream_handles_from_each_library():
    assert stream_handle(0) == 0
    assert stream_handle(SimpleNamespace(ptr=0x1234)) == 0x1234  # CuPy
    assert stream_handle(SimpleNamespace(cuda_stream=0x5678)) == 0x5678  # PyTorch
    assert stream_handle(SimpleNamespace(__cuda_stream__=lambda: (0, 0x9ABC))) == 0x9ABC  # the protocol
    with pytest.raises(TypeError, match="stream must be"):
        stream_handle("default")


def arguments_at(block, args):
    """Each argument's bytes as the driver would copy them from the block's pointers."""
    pointers = (ctypes.c_void_p * len(args)).from_address(block.address)
    return [ctypes.string_at(pointer, numpy.asarray(arg).nbytes) for pointer, arg in zip(pointers, args)]


def test_parameter_blocks_point_at_each_arguments_bytes():
    tensor_map = numpy.zeros((), dtype=[("opaque", "<u8", (16,))])
    tensor_map["opaque"] = numpy.arange(16, dtype="<u8")
    args = (numpy.uint64(0xDEADBEEF00), numpy.int32(-7), numpy.float32(2.5), numpy.int64(1 << 40), tensor_map[()])
    block = ParameterBlock(args)
    assert arguments_at(block, args) == [numpy.asarray(arg).tobytes() for arg in args]
    pointers = (ctypes.c_void_p * len(args)).from_address(block.address)
    assert pointers[4] % 64 == 0  # a tensor map at CUtensorMap's alignment


def test_a_parameter_block_rewrites_addresses_and_maps_in_place_and_nothing_else():
    args = (numpy.uint64(0x1000), numpy.int32(-7), numpy.uint64(0x2000), numpy.zeros((), dtype="V128")[()])
    block = ParameterBlock(args)
    address = block.address
    block.write_address(2, 0x7F0000001234)
    block.write_bytes(3, bytes(range(128)))
    assert block.address == address
    assert arguments_at(block, args) == [numpy.uint64(0x1000).tobytes(), numpy.int32(-7).tobytes(),
                                         numpy.uint64(0x7F0000001234).tobytes(), bytes(range(128))]


def test_python_numbers_are_refused_as_kernel_arguments():
    with pytest.raises(TypeError, match="NumPy scalars"):
        ParameterBlock((1, numpy.int32(2)))
