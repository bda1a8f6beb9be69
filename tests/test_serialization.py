"""fastop.save / fastop.load: round trips, atomic writes, clear errors, no pickle."""
import io
import os
import re
import signal
import subprocess
import time
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
    with pytest.raises(LoadError, match=r"evil.npz.*member 'evil' has dtype object"):
        fastop.load(path, return_numpy=True)


@pytest.mark.parametrize("bad,match", [
    ({"a/b": np.zeros(1)}, "keys must be non-empty strings"),
    ({"": np.zeros(1)}, "keys must be non-empty strings"),
    ({1: np.zeros(1)}, "keys must be non-empty strings"),
    ({"a": {}}, "'a' is an empty dict"),
    ({"a": "text"}, "'a' must be a tensor, array or number, got str"),
    ({"a": np.zeros(2, "uint16")}, "'a' has dtype uint16"),
])
def test_bad_state_dicts_raise(tmp_path, bad, match):
    with pytest.raises((TypeError, ValueError), match=match):
        fastop.save(bad, tmp_path / "m.npz")


def test_non_dict_raises(tmp_path):
    with pytest.raises(TypeError, match="expected a state dict"):
        fastop.save([np.zeros(1)], tmp_path / "m.npz")


# -- crafted and damaged files: LoadError, and nothing allocated beyond the file ----------

def _npy_header(shape, descr="<f4", fortran=False):
    """The bytes of a version-1.0 .npy header claiming `shape` and `descr`."""
    header = {"descr": descr, "fortran_order": fortran, "shape": tuple(shape)}
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue()


def _archive(path, members, marker=True):
    """A stored zip of raw members {name: bytes}, plus fastop's marker."""
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
        if marker:
            out = io.BytesIO()
            np.lib.format.write_array(out, np.array(1, "int64"))
            z.writestr("__fastop_state_dict__.npy", out.getvalue())


@pytest.mark.parametrize("members,match", [
    ({"w.npy": _npy_header([2**40, 2**21])}, r"member 'w' claims float32\[1099511627776, "
                                             r"2097152\] .*but holds 0 bytes"),
    ({"w.npy": _npy_header([4]) + b"\0" * 8}, r"member 'w' claims float32\[4\] \(16 bytes\) "
                                              r"but holds 8 bytes"),
    ({"a.npy": _npy_header([1]) + b"\0" * 4, "a/b.npy": _npy_header([1]) + b"\0" * 4},
     r"'a' is both a value and a dict \(of 'a/b'\)"),
    ({"w.npy": _npy_header([2], "<c8") + b"\0" * 16}, r"member 'w' has dtype complex64"),
    ({"w.npy": _npy_header([2], "<u2") + b"\0" * 4}, r"member 'w' has dtype uint16"),
    ({"w.npy": b"\x93NUMPY\x09\x00" + b"\0" * 20}, r"member 'w' is not a \.npy array"),
    ({"w.npy": b"not an array at all"}, r"member 'w' is not a \.npy array"),
    ({"w.txt": b"hello"}, r"member 'w.txt' is not a \.npy array"),
    ({"a//b.npy": _npy_header([1]) + b"\0" * 4}, r"'a//b' is not a valid name"),
])
def test_crafted_archives_raise_load_error(tmp_path, members, match):
    path = tmp_path / "crafted.npz"
    _archive(path, members)
    with pytest.raises(LoadError, match=r"crafted\.npz.*" + match):
        fastop.load(path, return_numpy=True)


def test_members_sharing_their_bytes_are_refused(tmp_path):
    """Two directory entries pointing at the same stored bytes (a zip bomb's trick)
    would make the arrays bigger than the file."""
    path = tmp_path / "bomb.npz"
    fastop.save({"w": np.zeros(1000, "float32")}, path)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("w.npy")
    end = data.rindex(b"PK\x05\x06")
    start = int.from_bytes(data[end + 16:end + 20], "little")
    entry = data[start:data.index(b"PK\x01\x02", start + 4)]
    twin = entry.replace(b"w.npy", b"v.npy")            # same offset, another name
    count = int.from_bytes(data[end + 10:end + 12], "little") + 1
    size = int.from_bytes(data[end + 12:end + 16], "little") + len(twin)
    tail = data[end:]
    tail[8:10] = tail[10:12] = count.to_bytes(2, "little")
    tail[12:16] = size.to_bytes(4, "little")
    path.write_bytes(bytes(data[:start] + entry + twin + data[start + len(entry):end] + tail))
    assert info.compress_size > 0
    with pytest.raises(LoadError, match=r"bomb\.npz.*(overlap|more bytes than the file)"):
        fastop.load(path, return_numpy=True)


def test_big_endian_and_fortran_members_load_as_native_values(tmp_path):
    path = tmp_path / "be.npz"
    a = np.arange(6, dtype=">f8").reshape(2, 3)
    members = {"be.npy": _npy_header([2, 3], ">f8") + a.tobytes(),
               "f.npy": _npy_header([2, 3], "<i4", fortran=True)
               + np.asfortranarray(a.astype("<i4")).tobytes(order="F")}
    _archive(path, members)
    loaded = fastop.load(path, return_numpy=True)
    assert loaded["be"].dtype == np.float64 and loaded["be"].dtype.isnative
    np.testing.assert_array_equal(loaded["be"], a)
    np.testing.assert_array_equal(loaded["f"], a.astype("int32"))
    assert fastop.load(path)["be"].numpy().tolist() == a.tolist()


def _fuzz_cases(data, rng, flips):
    """(label, bytes): `flips` files with one random bit flipped, truncations at every
    1/20th, and the file with a run of random bytes pasted over its directory."""
    for k in range(flips):
        damaged = bytearray(data)
        position = int(rng.integers(len(data)))
        damaged[position] ^= 1 << int(rng.integers(8))
        yield f"flip {k} at byte {position}", bytes(damaged)
    for k in range(20):
        yield f"truncated to {k}/20", data[:len(data) * k // 20]
    pasted = bytearray(data)
    at = len(data) - 60
    pasted[at:at + 40] = rng.integers(0, 256, 40, dtype=np.uint8).tobytes()
    yield "random directory bytes", bytes(pasted)


def test_fuzzed_files_raise_load_error_or_load_the_same_values(tmp_path):
    """Bit flips and truncations of a saved state dict: each load either raises
    LoadError naming the file or returns exactly what was saved (a flip in a field
    nothing reads)."""
    path = tmp_path / "fuzz.pdparams"
    saved = state()
    fastop.save(saved, path)
    data = path.read_bytes()
    outcomes = {"error": 0, "same": 0}
    for label, damaged in _fuzz_cases(data, np.random.default_rng(0), 300):
        path.write_bytes(damaged)
        try:
            loaded = fastop.load(path, return_numpy=True)
        except LoadError as exc:
            assert "fuzz.pdparams" in str(exc), (label, exc)
            outcomes["error"] += 1
            continue
        except Exception as exc:      # anything else is a bug: name the case
            raise AssertionError(f"{label}: {type(exc).__name__}: {exc}") from exc
        assert list(loaded) == list(saved), label
        for key, value in saved.items():
            assert loaded[key].dtype == value.dtype, label
            np.testing.assert_array_equal(loaded[key], value, err_msg=label)
        outcomes["same"] += 1
    assert outcomes["error"] > 200


# -- a save killed mid-write --------------------------------------------------------------

def test_a_save_killed_mid_write_leaves_its_temporary_which_the_next_save_removes(tmp_path):
    """SIGKILL during a big save: the previous file is intact, only the killed save's
    temporary is left, and the next save of the path removes it (a live process's
    temporary, here a fake one of this process, is left alone)."""
    path = tmp_path / "big.pdparams"
    fastop.save({"w": np.zeros(3, "float32")}, path)
    script = textwrap.dedent(f"""
        import time, numpy as np, fastop
        big = {{f"layer{{i}}": np.full(1 << 18, i, "float32") for i in range(64)}}  # 64 MiB
        print("saving", flush=True)
        fastop.save(big, {str(path)!r})     # killed once 1 of its 64 MiB is written
        time.sleep(120)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"saving"
        deadline = time.monotonic() + 60
        while not [n for n in os.listdir(tmp_path)
                   if n.endswith(".fastop-tmp") and (tmp_path / n).stat().st_size > 1 << 20]:
            assert time.monotonic() < deadline, "the child never started writing"
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    left = sorted(n for n in os.listdir(tmp_path) if n != "big.pdparams")
    assert left and all(n.startswith(f".big.pdparams.{proc.pid}.") and n.endswith(".fastop-tmp")
                        for n in left)
    loaded = fastop.load(path, return_numpy=True)      # the file before the killed save
    assert list(loaded) == ["w"]
    alive = tmp_path / f".big.pdparams.{os.getpid()}.0123abcd.fastop-tmp"
    alive.write_bytes(b"a save in progress in this process")
    other = tmp_path / f".other.pdparams.{proc.pid}.0123abcd.fastop-tmp"
    other.write_bytes(b"another path's temporary")
    fastop.save({"w": np.ones(3, "float32")}, path)
    assert sorted(os.listdir(tmp_path)) == sorted(["big.pdparams", alive.name, other.name])
    np.testing.assert_array_equal(fastop.load(path, return_numpy=True)["w"], np.ones(3))


def test_saved_files_get_the_usual_permissions(tmp_path):
    """The temporary is created like any new file (mode 0o666 minus the umask), not
    0o600 as mkstemp makes it: the saved file is readable as a plain write's would be."""
    umask = os.umask(0o022)
    os.umask(umask)
    fastop.save({"w": np.zeros(1)}, tmp_path / "m.npz")
    assert (tmp_path / "m.npz").stat().st_mode & 0o777 == 0o666 & ~umask


# -- every storage dtype; files that are not regular files -------------------------------

def test_float16_and_uint8_tensors_save_and_load(tmp_path):
    """What Layer.to(dtype='float16') and fastop.uint8 make is saved and read back."""
    layer = fastop.nn.Linear(2, 3)
    layer.to(dtype="float16")
    image = fastop.to_tensor(np.arange(6, dtype="uint8").reshape(2, 3))
    fastop.save({"model": layer.state_dict(), "image": image}, tmp_path / "m.pdparams")
    loaded = fastop.load(tmp_path / "m.pdparams")
    assert loaded["image"].dtype == fastop.uint8
    np.testing.assert_array_equal(loaded["image"].numpy(), image.numpy())
    weight = loaded["model"]["weight"]
    assert weight.dtype == fastop.float16
    np.testing.assert_array_equal(weight.numpy(), layer.weight.numpy())


def test_a_member_whose_header_length_lies_is_a_load_error(tmp_path):
    out = io.BytesIO()
    np.lib.format.write_array(out, np.ones(3, "float32"))
    data = bytearray(out.getvalue())
    data[8:10] = (20).to_bytes(2, "little")     # the header ends mid-dict
    _archive(tmp_path / "lying.npz", {"w.npy": bytes(data)})
    with pytest.raises(LoadError, match=r"lying\.npz.*member 'w' is not a \.npy array"):
        fastop.load(tmp_path / "lying.npz")


def run_loader(script, timeout=60):
    """Run `script` in a fresh process (a loader that blocks fails this test only)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_loading_a_fifo_is_a_load_error_not_a_hang(tmp_path):
    fifo = tmp_path / "m.pdparams"
    os.mkfifo(fifo)
    proc = run_loader(f"""
        import fastop
        try:
            fastop.load({str(fifo)!r})
        except fastop.serialization.LoadError as exc:
            print(exc)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (f"fastop.load: cannot read {str(fifo)!r}: it is a FIFO "
                                   f"(named pipe), not a regular file")


def test_loading_a_device_or_a_directory_names_it(tmp_path):
    with pytest.raises(LoadError, match=r"'/dev/zero': it is a character device"):
        fastop.load("/dev/zero")
    with pytest.raises(IsADirectoryError, match=re.escape(str(tmp_path))):
        fastop.load(tmp_path)
    with pytest.raises(FileNotFoundError):
        fastop.load(tmp_path / "missing")


def test_a_sparse_terabyte_file_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "huge.pdparams"
    with open(path, "wb") as f:
        f.truncate(1 << 40)                     # 1 TiB of holes
    proc = run_loader(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        import fastop
        try:
            fastop.load({str(path)!r})
        except fastop.serialization.LoadError as exc:
            print(exc)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"fastop.load: cannot read {str(path)!r}: the file is "
                                  f"truncated, corrupted or not a fastop state-dict file")
