"""static.nn.fc and fastop's nn layers/losses in static mode."""
import numpy as np
import pytest

import fastop
from fastop import nn, static
from fastop.initializer import Constant


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_fc_parameters_attrs_and_flattening(static_env, exe, rng):
    main, startup, scope = static_env
    x = static.data("x", [None, 2, 3], "float64")
    y = static.nn.fc(x, 4, weight_attr=Constant(0.5), bias_attr=False, name="a")
    z = static.nn.fc(y, 5, weight_attr=nn.ParamAttr(name="my_w", initializer=Constant(0.25)),
                     bias_attr=nn.ParamAttr(initializer=Constant(1.0)), activation="softmax")
    assert y.shape == [None, 4] and z.shape == [None, 5]
    assert [p.name for p in main.all_parameters()][:2] == ["a.w_0", "my_w"]
    assert len(main.all_parameters()) == 3
    exe.run(startup)
    xv = rng.standard_normal((3, 2, 3))
    yr, zr = exe.run(main, feed={"x": xv}, fetch_list=[y, z])
    np.testing.assert_allclose(yr, xv.reshape(3, 6) @ np.full((6, 4), 0.5), rtol=1e-12)
    np.testing.assert_allclose(zr, _softmax(yr @ np.full((4, 5), 0.25) + 1.0), rtol=1e-12)


def test_fc_layers_are_named_like_paddle(static_env):
    main, _, _ = static_env
    x = static.data("x", [None, 4], "float32")
    hidden = static.nn.fc(x, 3, activation="softmax")    # fc + a separate softmax op
    hidden = static.nn.fc(hidden, 3)
    start = int(hidden.name.split(".")[0].split("_")[1]) - 1  # counters are process-wide
    names = [p.name for p in main.all_parameters()]
    assert names == [f"fc_{start}.w_0", f"fc_{start}.b_0",
                     f"fc_{start + 1}.w_0", f"fc_{start + 1}.b_0"]
    outputs = [op.outputs[0].name for op in main.current_block().ops]
    assert outputs == [f"fc_{start}.tmp_0", f"fc_{start}.tmp_1", f"fc_{start + 1}.tmp_0"]


def test_fc_keeps_leading_dims_with_num_flatten_dims(static_env, exe, rng):
    main, startup, scope = static_env
    x = static.data("x", [None, 3, 4], "float64")
    y = static.nn.fc(x, 2, num_flatten_dims=2, activation="relu", name="b")
    assert y.shape == [None, 3, 2]
    exe.run(startup)
    xv = rng.standard_normal((2, 3, 4))
    (yr,) = exe.run(main, feed={"x": xv}, fetch_list=[y])
    expected = np.maximum(xv @ scope["b.w_0"] + scope["b.b_0"], 0)
    np.testing.assert_allclose(yr, expected, rtol=1e-12)


def test_fc_errors(static_env):
    x = static.data("x", [None, None], "float32")
    with pytest.raises(ValueError, match=r"feature dims \[None\] of 'x' must be known"):
        static.nn.fc(x, 3)
    y = static.data("y", [None, 3], "float32")
    with pytest.raises(ValueError, match="weight_attr=False"):
        static.nn.fc(y, 3, weight_attr=False)
    with pytest.raises(ValueError, match="num_flatten_dims=2 is invalid"):
        static.nn.fc(y, 3, num_flatten_dims=2)


def test_nn_layers_and_losses_in_static_mode(static_env, exe, rng):
    main, startup, scope = static_env
    fastop.seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    x = static.data("x", [None, 3], "float32")
    label = static.data("label", [None, 1], "float32")
    loss = nn.MSELoss()(model(x), label)
    exe.run(startup)
    xv = rng.standard_normal((5, 3)).astype("float32")
    lv = rng.standard_normal((5, 1)).astype("float32")
    (r,) = exe.run(main, feed={"x": xv, "label": lv}, fetch_list=[loss])
    w1, b1, w2, b2 = (scope[p.name] for p in main.all_parameters())
    pred = np.maximum(xv @ w1 + b1, 0) @ w2 + b2
    np.testing.assert_allclose(r, ((pred - lv) ** 2).mean(), rtol=1e-5)
