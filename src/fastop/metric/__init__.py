"""Evaluation metrics (PaddlePaddle's ``paddle.metric``): the ``accuracy`` function and
the streaming ``Metric`` classes (``Accuracy``, ``Precision``, ``Recall``, ``Auc``).
They compute with numpy: metrics are not differentiated.

``import fastop`` does not import this package; ``fastop.metric`` loads it on first use.
"""
from fastop.metric.metrics import Accuracy, Auc, Metric, Precision, Recall, accuracy

__all__ = ["Metric", "Accuracy", "Precision", "Recall", "Auc", "accuracy"]
