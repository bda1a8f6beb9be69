"""Gradient clipping classes (fastop.nn.ClipGradBy*): called on (param, grad) pairs
against numpy re-implementations of PaddlePaddle's formulas, in float32 and float64,
eager and static; parameters left out with need_clip=False; against torch's
clip_grad_norm_/clip_grad_value_ where torch is installed; bad arguments."""
from types import SimpleNamespace

import numpy as np
import pytest

import fastop
from fastop import nn

TOL = {"float32": dict(rtol=1e-5, atol=1e-7), "float64": dict(rtol=1e-12, atol=1e-15)}
SHAPES = [(4, 3), (3,), (2, 2, 2)]


def grads(dtype, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return [(scale * rng.standard_normal(s)).astype(dtype) for s in SHAPES]


def numpy_clip(kind, gs, bound, need_clip=None):
    """PaddlePaddle's clipping of the gradients `gs` (float64 math)."""
    need_clip = need_clip or [True] * len(gs)
    g64 = [g.astype("float64") for g in gs]
    if kind == "value":
        return [np.clip(g, -bound, bound) if c else g for g, c in zip(g64, need_clip)]
    if kind == "norm":
        return [g * bound / max(np.linalg.norm(g), bound) if c else g
                for g, c in zip(g64, need_clip)]
    total = np.sqrt(sum(np.sum(g * g) for g, c in zip(g64, need_clip) if c))
    return [g * bound / max(total, bound) if c else g for g, c in zip(g64, need_clip)]


CLIPS = {"value": nn.ClipGradByValue, "norm": nn.ClipGradByNorm,
         "global": nn.ClipGradByGlobalNorm}


def params(n):
    return [SimpleNamespace(name=f"p{i}") for i in range(n)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("scale", [0.1, 10.0], ids=["within", "beyond"])
@pytest.mark.parametrize("kind", list(CLIPS))
def test_eager_clip_matches_numpy(kind, scale, dtype):
    gs = grads(dtype, scale)
    bound = 1.0
    clipped = CLIPS[kind](bound)(list(zip(params(len(gs)), map(fastop.to_tensor, gs))))
    for (_, got), want, g in zip(clipped, numpy_clip(kind, gs, bound), gs):
        assert got.dtype.name == dtype and got.shape == list(g.shape)
        np.testing.assert_allclose(got.numpy(), want, **TOL[dtype])


@pytest.mark.parametrize("kind", list(CLIPS))
def test_static_clip_matches_eager(kind, run_static):
    gs = grads("float64", 5.0)
    clip = CLIPS[kind](1.5)
    eager = [g.numpy() for _, g in clip(list(zip(params(3), map(fastop.to_tensor, gs))))]
    static = run_static(lambda *vs: [g for _, g in clip(list(zip(params(3), vs)))], *gs)
    for e, s in zip(eager, static):
        np.testing.assert_array_equal(e, s)


@pytest.mark.parametrize("kind", list(CLIPS))
def test_need_clip_false_leaves_a_gradient_out(kind):
    gs = grads("float64", 5.0)
    ps = params(3)
    ps[1].need_clip = False
    clipped = CLIPS[kind](1.0)(list(zip(ps, map(fastop.to_tensor, gs))))
    np.testing.assert_array_equal(clipped[1][1].numpy(), gs[1])
    for (_, got), want in zip(clipped, numpy_clip(kind, gs, 1.0, [True, False, True])):
        np.testing.assert_allclose(got.numpy(), want, **TOL["float64"])


def test_pairs_without_gradient_are_dropped():
    g = fastop.to_tensor(np.ones(3))
    p = params(2)
    for clip in (nn.ClipGradByValue(1.0), nn.ClipGradByNorm(1.0), nn.ClipGradByGlobalNorm(1.0)):
        assert [q for q, _ in clip([(p[0], None), (p[1], g)])] == [p[1]]


def test_global_norm_of_mixed_dtypes_sums_in_float64():
    g32, g64 = np.full(4, 3.0, "float32"), np.full(2, 4.0)
    out = nn.ClipGradByGlobalNorm(1.0)([(p, fastop.to_tensor(g))
                                        for p, g in zip(params(2), (g32, g64))])
    norm = np.sqrt(4 * 9 + 2 * 16)
    assert out[0][1].dtype.name == "float32" and out[1][1].dtype.name == "float64"
    np.testing.assert_allclose(out[0][1].numpy(), g32 / norm, rtol=1e-6)
    np.testing.assert_allclose(out[1][1].numpy(), g64 / norm, rtol=1e-12)


def test_value_clip_with_explicit_min():
    g = fastop.to_tensor(np.array([-3.0, -0.5, 0.2, 4.0]))
    ((_, out),) = nn.ClipGradByValue(max=1.0, min=-0.25)([(params(1)[0], g)])
    np.testing.assert_array_equal(out.numpy(), [-0.25, -0.25, 0.2, 1.0])


def test_auto_skip_clip_gives_the_same_gradients():
    gs = [fastop.to_tensor(g) for g in grads("float64", 0.1)]
    pairs = list(zip(params(3), gs))
    for a, b in zip(nn.ClipGradByGlobalNorm(1.0)(pairs),
                    nn.ClipGradByGlobalNorm(1.0, auto_skip_clip=True)(pairs)):
        np.testing.assert_array_equal(a[1].numpy(), b[1].numpy())


@pytest.mark.parametrize("make,error,match", [
    (lambda: nn.ClipGradByValue(-1.0), ValueError, "max must be positive when min is not"),
    (lambda: nn.ClipGradByValue(1.0, min=2.0), ValueError, r"min \(2.0\) must not exceed"),
    (lambda: nn.ClipGradByValue("1"), TypeError, "ClipGradByValue: max must be a float"),
    (lambda: nn.ClipGradByNorm(0.0), ValueError, "ClipGradByNorm: clip_norm must be a "
                                                 "finite positive float, got 0.0"),
    (lambda: nn.ClipGradByGlobalNorm(float("inf")), ValueError, "clip_norm must be a finite"),
    (lambda: nn.ClipGradByGlobalNorm(1.0, auto_skip_clip=1), TypeError, "auto_skip_clip"),
])
def test_bad_arguments(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_str_is_paddles():
    assert str(nn.ClipGradByGlobalNorm(1.0)) == "Gradient Clip By GlobalNorm, global_norm=1.000000"
    assert str(nn.ClipGradByNorm(2.0)) == "Gradient Clip By Norm, clip_norm=2.000000"
    assert str(nn.ClipGradByValue(1.0)) == "Clip Gradient By Value, min = -1.000000, max=1.000000"


# -- against torch -------------------------------------------------------------------------

@pytest.mark.parametrize("kind", list(CLIPS))
def test_matches_torch(kind):
    torch = pytest.importorskip("torch")
    gs = grads("float64", 3.0)
    got = CLIPS[kind](2.0)(list(zip(params(3), map(fastop.to_tensor, gs))))
    tparams = [torch.nn.Parameter(torch.zeros(g.shape, dtype=torch.float64)) for g in gs]
    for p, g in zip(tparams, gs):
        p.grad = torch.from_numpy(g.copy())
    if kind == "value":
        torch.nn.utils.clip_grad_value_(tparams, 2.0)
    elif kind == "norm":
        for p in tparams:
            torch.nn.utils.clip_grad_norm_([p], 2.0)
    else:
        torch.nn.utils.clip_grad_norm_(tparams, 2.0)
    for (_, g), p in zip(got, tparams):
        # torch divides by norm + 1e-6 where Paddle divides by the norm
        np.testing.assert_allclose(g.numpy(), p.grad.numpy(), rtol=1e-6, atol=1e-12)
