"""fastop.save / fastop.load: round trips, atomic writes, clear errors, no pickle."""
import os
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest

import fastop
from fastop.serialization import LoadError

def state():
    rng = np.random.default_rng(0)
    return {"fc1.weight": rng.standard_normal((4, 3)).astype("float32"),
            "fc1.bias": np.zeros(3, "float64"),
            "steps": np.array(7, "int64"),
            "mask": np.array([True, False])}


def test_round_trip_numpy(tmp_path):
    path = tmp_path / "model.pdparams"
    fastop.save(state(), path)
    loaded = fastop.load(path, return_numpy=True)
    assert list(loaded) == list(state())
    for key, value in state().items():
        assert loaded[key].dtype == value.dtype
        np.testing.assert_array_equal(loaded[key], value)


def test_nested_dicts_and_numbers_round_trip(tmp_path):
    path = tmp_path / "ckpt.npz"
    fastop.save({"model": {"w": np.ones(2, "float32")}, "opt": {"lr": 0.1, "t": 3}}, path)
    loaded = fastop.load(path, return_numpy=True)
    assert set(loaded) == {"model", "opt"}
    np.testing.assert_array_equal(loaded["model"]["w"], np.ones(2, "float32"))
    assert loaded["opt"]["lr"] == 0.1 and loaded["opt"]["t"].dtype == np.int64


def test_saves_noncontiguous_values(tmp_path):
    a = np.arange(12, dtype="float64").reshape(3, 4)
    fastop.save({"t": a.T}, tmp_path / "t.npz")
    np.testing.assert_array_equal(fastop.load(tmp_path / "t.npz", return_numpy=True)["t"], a.T)


def test_load_returns_tensors(tmp_path):
    fastop.save({"w": np.arange(6, dtype="float32").reshape(2, 3)}, tmp_path / "w.npz")
    w = fastop.load(tmp_path / "w.npz")["w"]
    assert isinstance(w, fastop.Tensor) and w.shape == [2, 3] and w.dtype == fastop.float32
    np.testing.assert_array_equal(w.numpy(), np.arange(6, dtype="float32").reshape(2, 3))


def test_saves_tensors(tmp_path):
    t = fastop.to_tensor(np.full((2, 2), 3.0, "float32"))
    fastop.save({"t": t}, tmp_path / "t.npz")
    np.testing.assert_array_equal(fastop.load(tmp_path / "t.npz", return_numpy=True)["t"],
                                  np.full((2, 2), 3.0, "float32"))


def test_creates_parent_directories_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "a" / "b" / "m.npz"
    fastop.save(state(), path)
    fastop.save(state(), path)
    assert os.listdir(path.parent) == ["m.npz"]


# -- atomicity ---------------------------------------------------------------------

def test_failed_write_keeps_old_file_and_cleans_up(tmp_path, monkeypatch):
    path = tmp_path / "m.npz"
    fastop.save({"w": np.zeros(3, "float32")}, path)
    before = path.read_bytes()

    def explode(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(np, "savez", explode)
    with pytest.raises(OSError, match="disk full"):
        fastop.save({"w": np.ones(3, "float32")}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["m.npz"]


def test_crash_mid_write_leaves_old_file(tmp_path):
    """A process killed while writing (after part of the archive hit the disk)."""
    path = tmp_path / "m.npz"
    fastop.save({"w": np.zeros(1000, "float32")}, path)
    script = textwrap.dedent(f"""
        import os, numpy as np, fastop
        real = np.lib.format.write_array
        calls = []
        def write_then_die(fp, array, *args, **kwargs):
            real(fp, array, *args, **kwargs)
            calls.append(1)
            if len(calls) == 2:
                fp.flush()
                os._exit(3)
        np.lib.format.write_array = write_then_die
        fastop.save({{"a": np.ones(1000, "float32"), "b": np.ones(1000, "float32"),
                     "c": np.ones(1000, "float32")}}, {str(path)!r})
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", script], env=env)
    assert proc.returncode == 3
    loaded = fastop.load(path, return_numpy=True)
    assert list(loaded) == ["w"]
    np.testing.assert_array_equal(loaded["w"], np.zeros(1000, "float32"))
    leftovers = [n for n in os.listdir(tmp_path) if n != "m.npz"]
    assert leftovers and all(n.startswith(".m.npz.") for n in leftovers)


# -- bad files -----------------------------------------------------------------------

@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9])
def test_truncated_file_raises_naming_path(tmp_path, keep):
    path = tmp_path / "m.npz"
    fastop.save(state(), path)
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])
    with pytest.raises(LoadError, match=r"cannot read '.*m\.npz'.*truncated"):
        fastop.load(path)


def test_corrupted_member_raises(tmp_path):
    path = tmp_path / "m.npz"
    fastop.save({"w": np.zeros(4096, "float32")}, path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(LoadError, match="corrupted"):
        fastop.load(path, return_numpy=True)


def test_foreign_npz_raises(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, w=np.zeros(3))
    with pytest.raises(LoadError, match=r"'.*other\.npz' is not a fastop state-dict file"):
        fastop.load(path)


@pytest.mark.parametrize("content", [b"", b"hello, not a checkpoint\n",
                                     b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00K\x01."],
                         ids=["empty", "text", "pickle"])
def test_foreign_bytes_raise(tmp_path, content):
    path = tmp_path / "model.pdparams"
    path.write_bytes(content)
    with pytest.raises(LoadError, match="model.pdparams"):
        fastop.load(path)


def test_plain_npy_raises(tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, np.zeros(3))
    with pytest.raises(LoadError, match="not a fastop state-dict file"):
        fastop.load(path)


def test_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        fastop.load(tmp_path / "nope.npz")


# -- no pickle -----------------------------------------------------------------------

def test_object_array_is_refused_on_save(tmp_path):
    with pytest.raises(TypeError, match=r"'w' has dtype object.*no pickled objects"):
        fastop.save({"w": np.array([1, "a"], dtype=object)}, tmp_path / "m.npz")
    assert not os.listdir(tmp_path)


def test_object_array_in_archive_is_refused_on_load(tmp_path):
    path = tmp_path / "evil.npz"
    fastop.save({"w": np.zeros(2)}, path)
    with zipfile.ZipFile(path, "a") as z:
        with z.open("evil.npy", "w") as f:
            np.lib.format.write_array(f, np.array([{"x": 1}], dtype=object))
    with pytest.raises(LoadError, match="Object arrays cannot be loaded"):
        fastop.load(path, return_numpy=True)


@pytest.mark.parametrize("bad,match", [
    ({"a/b": np.zeros(1)}, "keys must be non-empty strings"),
    ({"": np.zeros(1)}, "keys must be non-empty strings"),
    ({1: np.zeros(1)}, "keys must be non-empty strings"),
    ({"a": {}}, "'a' is an empty dict"),
    ({"a": "text"}, "'a' must be a tensor, array or number, got str"),
    ({"a": np.zeros(2, "uint8")}, "'a' has dtype uint8"),
])
def test_bad_state_dicts_raise(tmp_path, bad, match):
    with pytest.raises((TypeError, ValueError), match=match):
        fastop.save(bad, tmp_path / "m.npz")


def test_non_dict_raises(tmp_path):
    with pytest.raises(TypeError, match="expected a state dict"):
        fastop.save([np.zeros(1)], tmp_path / "m.npz")
