"""Metrics against hand-computed values, and bad input."""
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import fastop
from fastop.metric import Accuracy, Auc, Metric, Precision, Recall, accuracy

SCORES = np.array([[0.2, 0.1, 0.4, 0.1, 0.1],
                   [0.2, 0.3, 0.1, 0.15, 0.25],
                   [0.5, 0.1, 0.1, 0.2, 0.1]], "float32")
LABELS = np.array([[2], [0], [3]])


@pytest.mark.parametrize("k, expected", [(1, 1 / 3), (2, 2 / 3), (3, 1.0), (5, 1.0)])
def test_accuracy_by_hand(k, expected):
    # The labels rank 1st (row 0), 3rd (row 1: 0.3 and 0.25 beat 0.2) and 2nd (row 2).
    out = accuracy(fastop.to_tensor(SCORES), fastop.to_tensor(LABELS), k=k)
    assert isinstance(out, fastop.Tensor) and out.shape == [] and out.dtype == fastop.float32
    assert float(out) == pytest.approx(expected)


def test_accuracy_ties_go_to_the_lower_class_index_and_dtype_follows_input():
    scores = np.array([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]])
    labels = np.array([0, 1])
    out = accuracy(scores, labels, k=1)
    assert float(out) == 0.5 and out.dtype == fastop.float64


def test_accuracy_writes_correct_and_total_when_given():
    correct = fastop.to_tensor(np.zeros(1, "int32"))
    total = fastop.to_tensor(np.zeros(1, "int32"))
    accuracy(SCORES, LABELS, k=2, correct=correct, total=total)
    assert correct.numpy().tolist() == [2] and total.numpy().tolist() == [3]


@given(hnp.arrays(np.float64, st.tuples(st.integers(1, 20), st.integers(1, 8)),
                  elements=st.floats(-5, 5)), st.data())
def test_accuracy_matches_a_per_row_reference(scores, data):
    n, classes = scores.shape
    labels = np.array(data.draw(st.lists(st.integers(0, classes - 1), min_size=n,
                                         max_size=n)))
    k = data.draw(st.integers(1, classes))
    hits = 0
    for row, label in zip(scores, labels):
        # rank of the label: classes scoring higher, plus ties at a lower index
        better = sum(1 for j, s in enumerate(row) if s > row[label] or
                     (s == row[label] and j < label))
        hits += better < k
    assert float(accuracy(scores, labels, k=k)) == pytest.approx(hits / n)


@pytest.mark.parametrize("args, error, message", [
    ((SCORES[0], LABELS[:1]), ValueError, "input must have shape"),
    ((SCORES, LABELS[:2]), ValueError, r"label must have shape \[3, 1\] or \[3\]"),
    ((SCORES, LABELS.astype("float32")), TypeError, "label must hold integers"),
    ((SCORES, LABELS, 6), ValueError, r"k must be an integer in \[1, class_dim=5\]"),
    ((SCORES, LABELS, 0), ValueError, "k must be"),
    (("scores", LABELS), TypeError, "input must be a Tensor or a numpy array"),
])
def test_accuracy_rejects_bad_input(args, error, message):
    with pytest.raises(error, match=f"accuracy: {message}"):
        accuracy(*args)


def test_accuracy_metric_streams_over_batches():
    m = Accuracy(topk=(1, 2))
    assert m.name() == ["acc_top1", "acc_top2"]
    batch1 = m.update(m.compute(fastop.to_tensor(SCORES), fastop.to_tensor(LABELS)))
    assert batch1 == pytest.approx([1 / 3, 2 / 3])
    batch2 = m.update(m.compute(SCORES[:1], np.array([2])))
    assert batch2 == [1.0, 1.0]
    assert m.accumulate() == pytest.approx([2 / 4, 3 / 4])
    m.reset()
    assert m.accumulate() == [0.0, 0.0]


def test_accuracy_compute_gives_the_hit_mask_and_reads_one_hot_labels():
    m = Accuracy(topk=(1, 3), name="a")
    mask = m.compute(SCORES, LABELS)
    assert isinstance(mask, fastop.Tensor) and mask.dtype == fastop.float32
    np.testing.assert_array_equal(mask.numpy(), [[1, 0, 0], [0, 0, 1], [0, 1, 0]])
    one_hot = np.eye(5)[LABELS.ravel()]
    np.testing.assert_array_equal(m.compute(SCORES, one_hot).numpy(), mask.numpy())
    assert Accuracy().name() == ["acc"] and Accuracy(name="x").name() == ["x"]


def test_accuracy_single_k_returns_floats_and_accepts_an_int():
    m = Accuracy(topk=2)
    assert m.update(m.compute(SCORES, LABELS)) == pytest.approx(2 / 3)
    assert m.accumulate() == pytest.approx(2 / 3)


def test_accuracy_metric_rejects_bad_input():
    with pytest.raises(ValueError, match="topk must be a positive integer"):
        Accuracy(topk=(0,))
    with pytest.raises(ValueError, match="needs at least maxk=6 classes"):
        Accuracy(topk=6).compute(SCORES, LABELS)
    with pytest.raises(ValueError, match="must have maxk=2 columns"):
        Accuracy(topk=2).update(np.ones((3, 1)))
    with pytest.raises(ValueError, match="one class per row"):
        Accuracy().compute(SCORES, np.array([[1], [2]]))


def test_precision_and_recall_by_hand():
    preds = np.array([0.1, 0.5, 0.6, 0.7, 0.9])
    labels = np.array([1, 0, 1, 1, 0])
    p = Precision()
    p.update(preds, labels)      # positives: 0.5 (floor(1.0)=1), 0.6, 0.7, 0.9 -> tp 2, fp 2
    assert p.accumulate() == 0.5 and p.name() == "precision"
    r = Recall()
    r.update(fastop.to_tensor(preds), fastop.to_tensor(labels))
    # relevant: 0.1 (miss), 0.6 (hit), 0.7 (hit); rint(0.5) = 0 would not matter here
    assert r.accumulate() == pytest.approx(2 / 3) and r.name() == "recall"
    p.reset(), r.reset()
    assert p.accumulate() == 0.0 == r.accumulate()
    with pytest.raises(ValueError, match="one value per sample, got 2 predictions and 3"):
        Precision().update(np.zeros(2), np.zeros(3))


def test_auc_by_hand():
    m = Auc(num_thresholds=10)
    # positives score 0.9 and 0.6, negatives 0.7 and 0.2: pairs ordered right 3 of 4
    probs = np.array([0.9, 0.6, 0.7, 0.2])
    m.update(np.stack([1 - probs, probs], axis=1), np.array([1, 1, 0, 0]))
    assert m.accumulate() == pytest.approx(0.75)
    m.reset()
    assert m.accumulate() == 0.0
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        m.update(np.array([[0.0, 1.5]]), np.array([1]))
    with pytest.raises(ValueError, match="only curve='ROC'"):
        Auc(curve="PR")


def test_metric_is_abstract_and_compute_passes_through():
    with pytest.raises(TypeError):
        Metric()

    class Count(Metric):
        def reset(self): self.n = 0
        def update(self, *args): self.n += len(args)
        def accumulate(self): return self.n
        def name(self): return "count"
    assert Count().compute(1, 2) == (1, 2)
