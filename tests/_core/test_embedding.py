"""Embedding kernels (fastop._core.embedding, on gather's C functions) against their
numpy twins: ids of both int dtypes and any shape, padding rows in the output and the
gradient, repeated ids, layouts, id and argument checks."""
import numpy as np
import pytest

from fastop._core import embedding as K
from ..reference import embedding as ref


def table(rows=10, dim=4, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, dim)).astype(dtype)


@pytest.mark.parametrize("padding_idx", [-1, 0, 3])
@pytest.mark.parametrize("ids_shape", [(), (5,), (2, 3), (2, 2, 2)], ids=str)
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lookup_and_gradient_match_numpy(dtype, id_dtype, ids_shape, padding_idx):
    w = table(dtype=dtype)
    ids = np.random.default_rng(1).integers(0, 10, ids_shape).astype(id_dtype)
    if ids.size:
        ids.flat[0] = 3                       # a padding id, and repeated ids
        ids.flat[-1] = 3
    out = np.asarray(K.embedding(ids, w, padding_idx=padding_idx))
    np.testing.assert_array_equal(out, ref.embedding(ids, w, padding_idx))
    dout = np.random.default_rng(2).standard_normal(ids_shape + (4,)).astype(dtype)
    grad = np.asarray(K.embedding_grad(ids, w, dout, padding_idx=padding_idx))
    np.testing.assert_allclose(grad, ref.embedding_grad(ids, w, dout, padding_idx),
                               rtol=1e-6)
    if padding_idx >= 0:
        assert (grad[padding_idx] == 0).all()


def test_strided_table_and_ids():
    w = np.asfortranarray(table())
    ids = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])[:, ::2]
    np.testing.assert_array_equal(np.asarray(K.embedding(ids, w, padding_idx=5)),
                                  ref.embedding(ids, w, 5))


@pytest.mark.parametrize("call,error,message", [
    (lambda: K.embedding(np.array([10]), table()), ValueError, "[0, num_embeddings)"),
    (lambda: K.embedding(np.array([-1]), table()), ValueError, "[0, num_embeddings)"),
    (lambda: K.embedding(np.array([1.0]), table()), TypeError, "int32 or int64"),
    (lambda: K.embedding(np.array([1]), np.ones(3)), ValueError, "2-D"),
    (lambda: K.embedding(np.array([1]), table(), padding_idx=10), ValueError, "padding_idx"),
    (lambda: K.embedding_grad(np.array([1]), table(), np.ones((2, 4))), ValueError, "2-D"),
])
def test_bad_input_names_the_op(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert "fastop::embedding" in str(info.value) and message in str(info.value)
