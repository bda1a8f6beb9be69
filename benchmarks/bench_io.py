"""Data loading: one shuffled epoch of ``fastop.io.DataLoader`` over a ``TensorDataset``.

scikit-learn's digits (1797 x 64 float32 images, int64 labels; random data of the same
shape when scikit-learn is not installed), batches of 64, shuffled. Against:

* numpy: the same work written by hand, a permutation and ``X[idx]``, ``y[idx]`` per batch;
* torch: ``torch.utils.data.DataLoader(TensorDataset(...), batch_size=64, shuffle=True,
  num_workers=0)``.
"""
import numpy as np

from fastop.io import DataLoader, TensorDataset

BATCH = 64


def _digits():
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        rng = np.random.default_rng(0)
        return (rng.random((1797, 64), dtype=np.float32),
                rng.integers(0, 10, 1797).astype(np.int64))
    digits = load_digits()
    return digits.data.astype(np.float32), digits.target.astype(np.int64)


def _epoch(loader):
    for _ in loader:
        pass


def _torch_epoch(torch, x, y):
    """One epoch of torch's DataLoader over the same tensors (None without torch)."""
    if torch is None:
        return None
    from torch.utils.data import DataLoader as TorchLoader
    from torch.utils.data import TensorDataset as TorchTensorDataset
    loader = TorchLoader(TorchTensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                         batch_size=BATCH, shuffle=True, num_workers=0)
    return lambda: _epoch(loader)


def register(suite):
    x, y = _digits()
    n = len(x)
    loader = DataLoader(TensorDataset([x, y]), batch_size=BATCH, shuffle=True)
    rng = np.random.default_rng(0)

    def numpy_epoch():
        order = rng.permutation(n)
        for start in range(0, n, BATCH):
            idx = order[start:start + BATCH]
            x[idx], y[idx]

    suite.add("io", f"DataLoader epoch digits {n}x64 f32 batch {BATCH} shuffle",
              fastop=lambda: _epoch(loader), numpy=numpy_epoch,
              torch=_torch_epoch(suite.torch, x, y),
              target="≤ 1.5× numpy time; ≥ 10× faster than torch's DataLoader "
                     "(num_workers=0)")
