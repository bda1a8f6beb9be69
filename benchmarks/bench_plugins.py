"""Plugin authoring: what ``fastop.testing.opcheck`` costs a plugin's test suite.

``opcheck`` on ``activations::user_relu_forward`` (seed 003's op from the
fastop-activations plugin: numpy kernels, a separate backward op) over three samples —
every check it makes: meta against kernels per dtype, gradient against finite
differences, double gradient, eager against static, the backward kernel's declared
needs. No numpy or torch twin: the target is absolute (under 0.5 s), so that checking
every op of a plugin keeps its test suite quick. The plugin must be installed
(``make install``).
"""
import numpy as np

from fastop.testing import opcheck


def register(suite):
    x = np.random.default_rng(0).standard_normal((3, 4))
    samples = [[x], [x.astype("float32")], [np.array([0.3, -1.2])]]
    suite.add("plugins", "opcheck activations::user_relu_forward, 3 samples",
              fastop=lambda: opcheck("activations::user_relu_forward", samples),
              target="< 0.5 s")
