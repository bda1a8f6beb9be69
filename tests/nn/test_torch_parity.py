"""The new layers, functionals and tensor functions against PyTorch (CPU) where it is
installed: values and gradients in float32 and float64. Differences between the two
frameworks' conventions are spelled out where they matter (PaddlePaddle's momentum is
1 - torch's; torch keeps an unbiased running variance, PaddlePaddle a biased one)."""
import numpy as np
import pytest

import fastop
import fastop.nn.functional as F
from fastop import nn

torch = pytest.importorskip("torch")

TOL = {"float32": dict(rtol=1e-5, atol=1e-5), "float64": dict(rtol=1e-10, atol=1e-12)}
DTYPES = ["float32", "float64"]


def pair(array, grad=True):
    """The same values as a fastop tensor and a torch tensor."""
    return (fastop.to_tensor(array, stop_gradient=not grad),
            torch.tensor(array, requires_grad=grad))


def close(ours, theirs, dtype):
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), **TOL[dtype])


def data(*shape, dtype="float32", seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm(dtype):
    x, tx = pair(data(4, 3, 8, dtype=dtype))
    w, tw = pair(data(24, dtype=dtype, seed=1))
    b, tb = pair(data(24, dtype=dtype, seed=2))
    dy = data(4, 3, 8, dtype=dtype, seed=3)
    out = F.layer_norm(x, [3, 8], w, b)
    tout = torch.nn.functional.layer_norm(tx, [3, 8], tw.reshape(3, 8), tb.reshape(3, 8))
    close(out, tout, dtype)
    out.backward(fastop.to_tensor(dy))
    tout.backward(torch.tensor(dy))
    for ours, theirs in ((x, tx), (w, tw), (b, tb)):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy().reshape(-1)
                                   if theirs.dim() == 1 else theirs.grad.numpy(), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_1d(dtype):
    ours = nn.BatchNorm1D(4, momentum=0.9)
    ours.to(dtype=dtype)
    theirs = torch.nn.BatchNorm1d(4, momentum=0.1).to(getattr(torch, dtype))
    for step in range(3):
        x, tx = pair(data(16, 4, 5, dtype=dtype, seed=step, scale=2.0))
        out, tout = ours(x), theirs(tx)
        close(out, tout, dtype)
        out.sum().backward()
        (tout * 1).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(ours._mean.numpy(), theirs.running_mean.numpy(), **TOL[dtype])
        # torch stores the unbiased variance: n / (n - 1) times the biased one
    ours.eval()
    theirs.eval()
    theirs.running_var.copy_(torch.tensor(ours._variance.numpy()))
    x, tx = pair(data(2, 4, 5, dtype=dtype, seed=9), grad=False)
    close(ours(x), theirs(tx), dtype)


@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding(padding_idx):
    ours = nn.Embedding(6, 3, padding_idx=padding_idx)
    theirs = torch.nn.Embedding(6, 3, padding_idx=padding_idx)
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(ours.weight.numpy()))
    ids = np.array([[0, 2, 5], [2, 2, 1]])
    out, tout = ours(fastop.to_tensor(ids)), theirs(torch.tensor(ids))
    if padding_idx is None:
        close(out, tout, "float32")
    else:
        # PaddlePaddle outputs zeros at padding ids; torch outputs the (untrained) row
        np.testing.assert_array_equal(out.numpy()[ids == 2], 0)
        np.testing.assert_array_equal(out.numpy()[ids != 2], tout.detach().numpy()[ids != 2])
    dy = data(2, 3, 3, seed=4)
    out.backward(fastop.to_tensor(dy))
    tout.backward(torch.tensor(dy))
    close(ours.weight.grad, theirs.weight.grad, "float32")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["gelu", "gelu_tanh", "silu", "leaky_relu", "softplus"])
def test_activations(name, dtype):
    x, tx = pair(data(6, 9, dtype=dtype, scale=4.0))
    ours = {"gelu": lambda v: F.gelu(v), "gelu_tanh": lambda v: F.gelu(v, approximate=True),
            "silu": F.silu, "leaky_relu": lambda v: F.leaky_relu(v, 0.1),
            "softplus": lambda v: F.softplus(v, 2.0, 5.0)}[name]
    TF = torch.nn.functional
    theirs = {"gelu": TF.gelu, "gelu_tanh": lambda v: TF.gelu(v, approximate="tanh"),
              "silu": TF.silu, "leaky_relu": lambda v: TF.leaky_relu(v, 0.1),
              "softplus": lambda v: TF.softplus(v, 2.0, 5.0)}[name]
    out, tout = ours(x), theirs(tx)
    close(out, tout, dtype)
    dy = data(6, 9, dtype=dtype, seed=1)
    out.backward(fastop.to_tensor(dy))
    tout.backward(torch.tensor(dy))
    close(x.grad, tx.grad, dtype)


def test_dropout_eval_and_scaling():
    x, tx = pair(data(300, 300), grad=False)
    assert F.dropout(x, 0.3, training=False) is x
    torch.testing.assert_close(torch.nn.functional.dropout(tx, 0.3, training=False), tx)
    out = F.dropout(x, 0.3).numpy()
    tout = torch.nn.functional.dropout(tx, 0.3).numpy()
    for o in (out, tout):      # both scale the kept elements by 1 / (1 - p)
        kept = o != 0
        np.testing.assert_allclose(o[kept], x.numpy()[kept] / 0.7, rtol=1e-6)
    assert abs((out != 0).mean() - (tout != 0).mean()) < 0.01


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_functions(dtype):
    a = data(4, 6, dtype=dtype, seed=5)
    x, tx = pair(a)
    checks = [
        (fastop.argmax(x, axis=1), torch.argmax(tx, dim=1)),
        (fastop.argmin(x, axis=0, keepdim=True), torch.argmin(tx, dim=0, keepdim=True)),
        (fastop.min(x, axis=1), torch.amin(tx, dim=1)),
        (fastop.prod(x, axis=0), torch.prod(tx, dim=0)),
        (fastop.cumsum(x, axis=1), torch.cumsum(tx, dim=1)),
        (fastop.clip(x, -0.5, 0.7), torch.clamp(tx, -0.5, 0.7)),
        (fastop.where(x > 0, x, -x), torch.where(tx > 0, tx, -tx)),
        (fastop.stack([x, x * 2], axis=1), torch.stack([tx, tx * 2], dim=1)),
        (fastop.maximum(x, x.T.T * 0.5), torch.maximum(tx, tx * 0.5)),
        (fastop.topk(x, 3, axis=1)[0], torch.topk(tx, 3, dim=1)[0]),
        (fastop.topk(x, 2, axis=0, largest=False)[1], torch.topk(tx, 2, dim=0, largest=False)[1]),
        (fastop.flatten(x.unsqueeze(0)), torch.flatten(tx.unsqueeze(0))),
        (fastop.logical_xor(x > 0, x < 0.5), torch.logical_xor(tx > 0, tx < 0.5)),
        (fastop.isfinite(x / x), torch.isfinite(tx / tx)),
        (fastop.any(x > 1.5, axis=0), torch.any(tx > 1.5, dim=0)),
    ]
    for ours, theirs in checks:
        np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), **TOL[dtype])
    for ours, theirs in zip(fastop.split(x, [1, 5], axis=1), torch.split(tx, [1, 5], dim=1)):
        close(ours, theirs, dtype)
    for ours, theirs in zip(fastop.chunk(x, 2, axis=0), torch.chunk(tx, 2, dim=0)):
        close(ours, theirs, dtype)
    # gradients through the differentiable ones
    loss = (fastop.prod(x, axis=1) + fastop.cumsum(x, axis=0).sum(axis=1)
            + fastop.clip(x, -0.5, 0.7).sum(axis=1) + fastop.topk(x, 2)[0].sum(axis=1)
            + fastop.min(x, axis=1)).sum()
    tloss = (torch.prod(tx, 1) + torch.cumsum(tx, 0).sum(1) + torch.clamp(tx, -0.5, 0.7).sum(1)
             + torch.topk(tx, 2)[0].sum(1) + torch.amin(tx, 1)).sum()
    loss.backward()
    tloss.backward()
    close(x.grad, tx.grad, dtype)
