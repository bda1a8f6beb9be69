"""Optimizer steps with weight decay and gradient clipping over the parameters of the
784-256-256-10 MLP (269,322 float32 values, gradients already present): fastop's
fused kernels against torch's optimizers (``foreach``, the default) and hand-written
numpy with scratch buffers.

* AdamW (decoupled decay 0.01): fastop's one ``adamw_update`` pass per parameter.
* AdamW after clipping by the global norm: fastop's ``squared_l2_norm`` per gradient and
  the factor passed to the update as ``grad_scale``; torch's ``clip_grad_norm_``
  rescales the gradients first.
* Momentum with L2 weight decay 1e-4 (fused into the momentum update).
"""
import numpy as np

import fastop
from fastop import nn, optimizer

from bench_training import LR, mlp_data, numpy_adam

WEIGHT_DECAY = 0.01
CLIP_NORM = 1.0


def numpy_adamw(params, grads):
    """AdamW in place: the decoupled decay, then numpy_adam's step."""
    adam = numpy_adam(params, grads)
    keep = 1 - LR * WEIGHT_DECAY

    def step():
        for p in params:
            p *= keep
        adam()
    return step


def numpy_clipped(params, grads, step):
    """Clip the gradients by their global norm (into scratch copies), then `step`."""
    clipped = [np.empty_like(g) for g in grads]
    inner = step(params, clipped)

    def run():
        norm = np.sqrt(sum(float(np.dot(g.ravel(), g.ravel())) for g in grads))
        scale = CLIP_NORM / max(norm, CLIP_NORM)
        for g, c in zip(grads, clipped):
            np.multiply(g, scale, out=c)
        inner()
    return run


def numpy_momentum(params, grads, mu=0.9, wd=1e-4):
    velocity = [np.zeros_like(p) for p in params]
    tmp = [np.empty_like(p) for p in params]

    def step():
        for p, g, v, t in zip(params, grads, velocity, tmp):
            np.multiply(p, wd, out=t)
            t += g
            v *= mu
            v += t
            np.multiply(v, LR, out=t)
            p -= t
    return step


def register(suite):
    _, _, weights, biases = mlp_data()
    arrays = [a.copy() for a in weights + biases]
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal(a.shape).astype(np.float32) for a in arrays]
    n = sum(a.size for a in arrays)

    def fastop_params():
        params = [fastop.to_tensor(a.copy(), stop_gradient=False) for a in arrays]
        for p, g in zip(params, grads):
            p.grad = fastop.to_tensor(g)
        return params

    torch = suite.torch

    def torch_params():
        params = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in arrays]
        for p, g in zip(params, grads):
            p.grad = torch.from_numpy(g.copy())
        return params

    def numpy_params():
        return [a.copy() for a in arrays]

    adamw = optimizer.AdamW(LR, parameters=fastop_params(), weight_decay=WEIGHT_DECAY)
    suite.add("optimizer", f"AdamW step {n} params f32", fastop=adamw.step,
              numpy=numpy_adamw(numpy_params(), grads),
              torch=torch.optim.AdamW(torch_params(), lr=LR,
                                      weight_decay=WEIGHT_DECAY).step if torch else None,
              target="≥ 1.5× torch")

    clipped = optimizer.AdamW(LR, parameters=fastop_params(), weight_decay=WEIGHT_DECAY,
                              grad_clip=nn.ClipGradByGlobalNorm(CLIP_NORM))
    torch_clipped = None
    if torch:
        tparams = torch_params()
        topt = torch.optim.AdamW(tparams, lr=LR, weight_decay=WEIGHT_DECAY)

        def torch_clipped():
            torch.nn.utils.clip_grad_norm_(tparams, CLIP_NORM)
            topt.step()
    suite.add("optimizer", f"AdamW + global-norm clip step {n} params f32",
              fastop=clipped.step, numpy=numpy_clipped(numpy_params(), grads, numpy_adamw),
              torch=torch_clipped, target="≥ 1.5× torch")

    momentum = optimizer.Momentum(LR, momentum=0.9, parameters=fastop_params(),
                                  weight_decay=1e-4)
    suite.add("optimizer", f"Momentum + L2 decay step {n} params f32", fastop=momentum.step,
              numpy=numpy_momentum(numpy_params(), grads),
              torch=torch.optim.SGD(torch_params(), lr=LR, momentum=0.9,
                                    weight_decay=1e-4).step if torch else None,
              target="≥ 1.0× torch")
