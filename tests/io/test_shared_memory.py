"""Shared-memory transport: large arrays travel as files that the receiver maps and
unlinks; small ones inline; leftovers are removed."""
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import fastop
from fastop.io import _shared_memory as shm


@pytest.fixture
def prefix(tmp_path):
    return f"{tmp_path}/{shm.new_prefix()}"


def test_large_arrays_travel_as_files_and_come_back_as_zero_copy_tensors(prefix, tmp_path):
    big = np.arange(shm.MIN_SHARED_BYTES // 4, dtype="float32").reshape(-1, 8)
    small = np.arange(3, dtype="int64")
    sent = pickle.loads(pickle.dumps(shm.share_batch(
        {"big": big, "parts": (small, "label", fastop.to_tensor(big))}, prefix)))
    assert isinstance(sent["big"], shm.SharedArray)
    assert isinstance(sent["parts"][2], shm.SharedArray)          # a Tensor, as an array
    assert isinstance(sent["parts"][0], np.ndarray)               # small: inline
    assert len(os.listdir(tmp_path)) == 2
    got = shm.receive_batch(sent)
    assert os.listdir(tmp_path) == []                             # unlinked on receipt
    np.testing.assert_array_equal(got["big"].numpy(), big)
    np.testing.assert_array_equal(got["parts"][2].numpy(), big)
    np.testing.assert_array_equal(got["parts"][0].numpy(), small)
    assert got["parts"][1] == "label" and got["big"].dtype == fastop.float32
    got["big"].set_value(np.zeros_like(big))                      # writable, own memory
    assert float(got["big"].sum()) == 0.0


def test_without_a_prefix_everything_travels_inline(prefix):
    big = np.ones(shm.MIN_SHARED_BYTES, "uint8")
    assert shm.share_batch([big], None)[0] is big


def test_release_deletes_the_files_of_an_undelivered_batch(prefix, tmp_path):
    sent = shm.share_batch([np.ones(shm.MIN_SHARED_BYTES, "uint8")], prefix)
    shm.release_batch(sent)
    shm.release_batch(sent)                                       # twice is harmless
    assert os.listdir(tmp_path) == []


def test_remove_files_deletes_only_the_pools_files(prefix, tmp_path):
    shm.share_batch([np.ones(shm.MIN_SHARED_BYTES, "uint8")] * 3, prefix)
    other = tmp_path / "someone-else"
    other.write_text("keep")
    shm.remove_files(prefix)
    assert os.listdir(tmp_path) == ["someone-else"]


def test_stale_files_of_dead_processes_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    stale = tmp_path / f"fastop-io-{dead.stdout.strip()}-abcd1234-0-ff"
    mine = tmp_path / f"{shm.new_prefix()}0-ff"
    stale.write_bytes(b"x")
    mine.write_bytes(b"x")
    shm.remove_stale_files(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == [mine.name]


def test_the_directory_is_memory_backed_where_there_is_one():
    expected = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) \
        else None
    if expected:
        assert shm.shm_directory() == expected
    assert os.path.isdir(shm.shm_directory())
