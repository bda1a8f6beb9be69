"""PaddlePaddle's device API answered as a CPU-only build: set_device, get_device,
is_compiled_with_cuda, and disable_static(place)."""
import pytest

import fastop


def test_cpu_is_the_device_and_cuda_is_absent():
    assert fastop.is_compiled_with_cuda() is False
    assert fastop.device.is_compiled_with_rocm() is False
    assert fastop.get_device() == "cpu"
    assert isinstance(fastop.set_device("cpu"), fastop.CPUPlace)
    assert isinstance(fastop.device.set_device("CPU"), fastop.CPUPlace)
    assert isinstance(fastop.set_device(fastop.CPUPlace()), fastop.CPUPlace)
    assert fastop.get_device() == "cpu"


@pytest.mark.parametrize("device", ["gpu", "gpu:0", "xpu:1"])
def test_an_accelerator_is_a_clear_value_error(device):
    with pytest.raises(ValueError, match=f"set_device: the device should not be "
                                         f"'{device}', since fastop is not compiled with "
                                         f"CUDA"):
        fastop.set_device(device)


def test_an_unknown_device_or_a_non_string_is_refused():
    with pytest.raises(ValueError, match=r"like 'cpu', 'gpu' or 'gpu:x'; got 'tpu'"):
        fastop.set_device("tpu")
    with pytest.raises(TypeError, match=r"set_device: the device must be a string .*got int"):
        fastop.set_device(0)


@pytest.mark.parametrize("place", [None, "cpu", fastop.CPUPlace()])
def test_disable_static_takes_a_cpu_place(place):
    fastop.enable_static()
    fastop.disable_static(place)
    assert fastop.in_dynamic_mode()


def test_disable_static_refuses_a_gpu_place_and_stays_static():
    fastop.enable_static()
    try:
        with pytest.raises(ValueError, match="disable_static: the device should not be 'gpu'"):
            fastop.disable_static("gpu")
        assert not fastop.in_dynamic_mode()
    finally:
        fastop.disable_static()
