"""compat_dir: a directory op module (loaded with ``fastop.plugins.load_directory``), as
docs/plugins.md section 1 writes one: the kernels in a module next to it, a backward op
of its own, and a composite gradient rule calling that backward op; and an op without a
meta function (docs/python-ops.md: fastop runs its kernel to learn the output's shape)."""
import numpy as np

import compat_dir_kernels as kernels   # load_directory puts the directory on sys.path
import fastop

__version__ = "0.1"


@fastop.hookimpl
def fastop_register_ops(registry):
    backward = registry.define(
        "compat_dir::softsign_backward", inputs=["x", "dy"], outputs=["dx"],
        meta=lambda x, dy: dy, differentiable=["dy"])
    backward.kernel("float32", "float64")(kernels.softsign_backward)

    forward = registry.define(
        "compat_dir::softsign", inputs=["x"], outputs=["y"], meta=lambda x: x,
        doc="y = x / (1 + |x|)")
    forward.kernel("float32", "float64")(kernels.softsign_forward)

    @forward.grad(needs=["x"])
    def softsign_grad(x, dy):
        return backward(x, dy)

    # no meta function: fastop runs the kernel to learn the output's shape and dtype
    pairsum = registry.define(
        "compat_dir::pairsum", inputs=["x"], outputs=["y"],
        doc="y[..., i] = x[..., 2i] + x[..., 2i+1] (the last axis halved)")
    pairsum.kernel("float32", "float64")(kernels.pairsum_forward)
    pairsum.grad_kernel(needs=["x", "dy"])(kernels.pairsum_backward)


@fastop.hookimpl
def fastop_op_samples():
    rng = np.random.default_rng(3)

    def away(*shape):
        """Values with |v| in [0.5, 1.5]: away from the kink of |x| at 0."""
        return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 1.5, shape)

    return {"compat_dir::softsign": [[away(3, 4)], [away(5).astype("float32")]],
            "compat_dir::softsign_backward": [[away(3, 4), rng.standard_normal((3, 4))]],
            "compat_dir::pairsum": [[rng.standard_normal((3, 4))],
                                    [rng.standard_normal((2, 6)).astype("float32")]]}
