"""fastop._core.blas: lazy loading, thread settings, the gemm wrappers against numpy."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fastop._core import blas

TOL = {"float32": dict(rtol=1e-5, atol=1e-5), "float64": dict(rtol=1e-12, atol=1e-12)}

BLAS_MAPPED = """
def blas_mapped():
    with open("/proc/self/maps") as maps:
        return any("scipy_openblas32" in line for line in maps)
"""


def run_fresh(code: str, **env: str) -> str:
    """Run `code` in a new interpreter (fastop importable as in this one); its stdout.
    The code can call ``blas_mapped()``: whether the BLAS library is in the process."""
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **env}
    source = BLAS_MAPPED + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", source], env=full_env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
def test_import_fastop_does_not_load_blas_until_the_first_matmul():
    out = run_fresh("""
        import sys
        import numpy as np
        import fastop
        from fastop._core import blas
        print(blas_mapped(), blas.library_path() is None, "scipy_openblas32" in sys.modules)
        fastop.ops.fastop.matmul(np.ones((2, 3), "float32"), np.ones((3, 2), "float32"))
        print(blas_mapped(), blas.library_path() is not None, "scipy_openblas32" in sys.modules)
    """)
    assert out.split() == ["False", "True", "False", "True", "True", "False"]


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
def test_shape_inference_and_integer_products_do_not_load_the_library():
    out = run_fresh("""
        import numpy as np
        from fastop._core import linalg
        print(linalg.fc.meta(([2, 3], "float32"), ([3, 4], "float32"))[0][0] == [2, 4])
        print(np.asarray(linalg.matmul(np.ones((2, 3), "int32"), np.ones(3, "int32"))))
        print(blas_mapped())
        linalg.fc(np.ones((2, 3)), np.ones((3, 4)))
        print(blas_mapped())
    """)
    assert out.split() == ["True", "[3", "3]", "False", "True"]


def test_thread_count_is_fastops_own_and_needs_no_library():
    out = run_fresh("""
        from fastop._core import blas
        blas.set_num_threads(1)
        print(blas.get_num_threads(), blas_mapped())
    """)
    assert out.split() == ["1", "False"]


def test_fastop_num_threads_comes_first():
    out = run_fresh("""
        from fastop._core import blas
        print(blas.get_num_threads())
    """, FASTOP_NUM_THREADS="1", OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2")
    assert out.split() == ["1"]


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
def test_openblas_starts_no_thread_pool_of_its_own():
    out = run_fresh("""
        import os
        import numpy
        from fastop._core import blas

        def threads():
            with open("/proc/self/status") as status:
                return next(int(l.split()[1]) for l in status if l.startswith("Threads:"))
        before = threads()
        blas.load()
        print(threads() - before, os.environ["OPENBLAS_NUM_THREADS"])
    """, OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2", FASTOP_NUM_THREADS="1")
    # No new thread (fastop's own pool stays idle with one thread); the environment is
    # restored.
    assert out.split() == ["0", "2"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs mincore and /proc")
def test_load_maps_the_packing_buffer_pages_past_the_small_panels():
    """load() runs a warm-up product so that OpenBLAS's packing buffer exists and has
    the pages after its small panels mapped: its sgemm kernel prefetches past a panel,
    and ran 2-3x slower while those pages were untouched (blas.fault_in_buffers).
    Without the warm-up, load() maps no buffer at all."""
    out = run_fresh("""
        import ctypes, mmap
        from fastop._core import blas

        def big_anonymous():
            found = set()
            with open("/proc/self/maps") as maps:
                for line in maps:
                    fields = line.split()
                    lo, hi = (int(x, 16) for x in fields[0].split("-"))
                    if len(fields) < 6 and hi - lo >= 16 << 20:
                        found.add((lo, hi))
            return found

        def resident_kib(lo, hi):
            pages = (hi - lo) // mmap.PAGESIZE
            vec = (ctypes.c_ubyte * pages)()
            ctypes.CDLL(None).mincore(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), vec)
            return sum(v & 1 for v in vec) * mmap.PAGESIZE // 1024

        before = big_anonymous()
        blas.load()
        print(max(resident_kib(lo, hi) for lo, hi in big_anonymous() - before))
    """, FASTOP_NUM_THREADS="1")
    assert int(out) >= 192


def test_set_num_threads_validates():
    before = blas.get_num_threads()
    try:
        blas.set_num_threads(1)
        assert blas.get_num_threads() == 1
        blas.set_num_threads(10_000)
        assert 1 <= blas.get_num_threads() <= (os.cpu_count() or 1)
    finally:
        blas.set_num_threads(before)
    with pytest.raises(ValueError, match="expected n >= 1"):
        blas.set_num_threads(0)


def test_load_is_idempotent_and_reports_the_scipy_openblas32_library():
    path = blas.load()
    assert blas.load() == path == blas.library_path()
    assert "scipy_openblas32" in path and os.path.basename(path).startswith("libscipy_openblas")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("trans_a", [False, True], ids=["a", "aT"])
@pytest.mark.parametrize("trans_b", [False, True], ids=["b", "bT"])
@pytest.mark.parametrize("mnk", [(5, 7, 3), (1, 9, 4), (6, 1, 1), (4, 4, 0), (0, 3, 2)],
                         ids=lambda s: "m{}n{}k{}".format(*s))
def test_gemm_matches_numpy(dtype, trans_a, trans_b, mnk):
    m, n, k = mnk
    rng = np.random.default_rng(0)
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
    c = rng.standard_normal((m, n)).astype(dtype)
    expected = 0.5 * (a.T if trans_a else a) @ (b.T if trans_b else b) + 2.0 * c
    got = c[None].copy()
    blas._gemm(a[None], b[None], got, alpha=0.5, beta=2.0, trans_a=trans_a, trans_b=trans_b)
    np.testing.assert_allclose(got[0], expected, **TOL[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("a_batch", [1, 4], ids=["a-broadcast", "a-batched"])
def test_gemm_batch_strided_matches_numpy(dtype, a_batch):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((a_batch, 3, 5)).astype(dtype)
    b = rng.standard_normal((4, 5, 2)).astype(dtype)
    c = np.zeros((4, 3, 2), dtype)
    blas._gemm_batch_strided(a, b, c)
    np.testing.assert_allclose(c, a @ b, **TOL[dtype])


def test_gemm_shim_checks_shapes():
    a = np.zeros((1, 2, 3))
    with pytest.raises(ValueError, match="do not match"):
        blas._gemm(a, np.zeros((1, 4, 2)), np.zeros((1, 2, 2)))


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request):
    before = blas.get_num_threads()
    blas.set_num_threads(request.param)
    yield request.param
    blas.set_num_threads(before)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("trans_a", [False, True], ids=["a", "aT"])
@pytest.mark.parametrize("trans_b", [False, True], ids=["b", "bT"])
@pytest.mark.parametrize("mnk", [(300, 80, 100), (80, 300, 100), (197, 35, 331)],
                         ids=["split-rows", "split-columns", "uneven"])
def test_gemm_split_across_threads_matches_numpy(threads, dtype, trans_a, trans_b, mnk):
    m, n, k = mnk
    rng = np.random.default_rng(2)
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
    c = np.ones((1, m, n), dtype)
    blas._gemm(a[None], b[None], c, beta=1.0, trans_a=trans_a, trans_b=trans_b)
    expected = (a.T if trans_a else a) @ (b.T if trans_b else b) + 1
    np.testing.assert_allclose(c[0], expected, rtol=1e-4 if dtype == "float32" else 1e-12,
                               atol=1e-4 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("batch", [2, 3, 9], ids=["even", "odd-small", "large"])
def test_gemm_batch_split_across_threads_matches_numpy(threads, batch):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((batch, 128, 130))      # 2.2 M multiply-adds per product
    b = rng.standard_normal((1, 130, 132))
    c = np.zeros((batch, 128, 132))
    blas._gemm_batch_strided(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)
