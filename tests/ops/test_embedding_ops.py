"""fastop::embedding, embedding_grad and one_hot as registry ops: rules against finite
differences (padding rows get no gradient), eager against numpy and static, meta, and
bad ids naming the op in both modes."""
import numpy as np
import pytest

import fastop
from fastop.ops import TensorMeta, registry
from fastop.ops.checking import check_grad_rule
from ..reference import embedding as ref

embedding = registry.get("fastop::embedding")
one_hot = registry.get("fastop::one_hot")
IDS = np.array([[0, 3, 3], [2, 1, 0]])


def test_meta():
    assert embedding.infer_meta([TensorMeta([None, 7], "int64"), TensorMeta([10, 4], "float32")],
                                {"padding_idx": -1}) == [TensorMeta([None, 7, 4], "float32")]
    assert one_hot.infer_meta([TensorMeta([None], "int32")], {"num_classes": 5}) == \
        [TensorMeta([None, 5], "float32")]


@pytest.mark.parametrize("padding_idx", [-1, 3])
def test_rules_match_finite_differences(padding_idx):
    w = np.random.default_rng(1).standard_normal((5, 4))
    grads = check_grad_rule("fastop::embedding", [IDS, w], {"padding_idx": padding_idx},
                            wrt=[1])
    if padding_idx >= 0:
        assert (np.asarray(grads[1])[padding_idx] == 0).all()
    dout = np.random.default_rng(2).standard_normal((2, 3, 4))
    check_grad_rule("fastop::embedding_grad", [IDS, w, dout], {"padding_idx": padding_idx},
                    wrt=[2])


def test_eager_matches_numpy_and_static(run_static):
    w = np.random.default_rng(1).standard_normal((5, 4)).astype("float32")
    eager = embedding(fastop.to_tensor(IDS), fastop.to_tensor(w), padding_idx=0).numpy()
    np.testing.assert_array_equal(eager, ref.embedding(IDS, w, 0))
    np.testing.assert_array_equal(run_static(lambda i, t: embedding(i, t, padding_idx=0),
                                             IDS, w)[0], eager)
    hot = one_hot(fastop.to_tensor(IDS), num_classes=4).numpy()
    np.testing.assert_array_equal(hot, np.eye(4, dtype="float32")[IDS])
    np.testing.assert_array_equal(run_static(lambda i: one_hot(i, num_classes=4), IDS)[0], hot)


def test_bad_ids_name_the_op_in_both_modes(run_static):
    w = np.ones((3, 2))
    with pytest.raises(ValueError, match=r"fastop::embedding: each id must be in \[0, "):
        embedding(fastop.to_tensor([3]), fastop.to_tensor(w))
    with pytest.raises(ValueError, match=r"fastop::embedding: each id must be in"):
        run_static(lambda i, t: embedding(i, t), np.array([5]), w)
    with pytest.raises(ValueError, match=r"fastop::one_hot: each id must be in \[0, 3\)"):
        one_hot(fastop.to_tensor([3]), num_classes=3)
    with pytest.raises(TypeError, match=r"fastop::one_hot: .*int32.*int64"):
        one_hot(fastop.to_tensor([1.0]), num_classes=3)
