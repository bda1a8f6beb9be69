"""Layer: parameters and sublayers by attribute, names, state_dict round trip,
train/eval, buffers, dtype casting, Sequential."""
import numpy as np
import pytest

import fastop
from fastop import nn
from fastop.nn.initializer import Constant, Normal


class MLP(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def test_named_parameters_follow_attribute_order():
    model = MLP()
    assert [n for n, _ in model.named_parameters()] == \
        ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    shapes = [p.shape for p in model.parameters()]
    assert shapes == [[4, 8], [8], [8, 3], [3]]
    assert all(not p.stop_gradient for p in model.parameters())


def test_named_sublayers_and_children():
    model = MLP()
    assert [n for n, _ in model.named_sublayers()] == ["fc1", "act", "fc2"]
    assert [type(c).__name__ for c in model.children()] == ["Linear", "Tanh", "Linear"]
    assert model.sublayers(include_self=True)[0] is model
    assert model.parameters(include_sublayers=False) == []


def test_nested_and_shared_parameters_are_listed_once():
    outer = nn.Layer()
    outer.block = MLP()
    outer.again = outer.block.fc1           # shared sublayer
    names = [n for n, _ in outer.named_parameters()]
    assert names == ["block.fc1.weight", "block.fc1.bias", "block.fc2.weight",
                     "block.fc2.bias"]
    # state_dict keeps every path, like PaddlePaddle
    assert "again.weight" in outer.state_dict()


def test_parameter_names_are_unique_and_paddle_like():
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    assert a.weight.name.endswith(".w_0") and a.bias.name.endswith(".b_0")
    assert a.weight.name != b.weight.name
    assert a.full_name().startswith("linear_")


def test_linear_default_init_is_xavier_uniform_and_zero_bias():
    fastop.seed(0)
    layer = nn.Linear(300, 200)
    w = layer.weight.numpy()
    limit = np.sqrt(6 / 500)
    assert np.abs(w).max() <= limit and np.abs(w).max() > 0.95 * limit
    assert (layer.bias.numpy() == 0).all()


def test_seed_makes_layers_identical():
    fastop.seed(5)
    a = MLP()
    fastop.seed(5)
    b = MLP()
    for p, q in zip(a.parameters(), b.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_weight_and_bias_attrs():
    layer = nn.Linear(3, 2, weight_attr=nn.ParamAttr(name="w", initializer=Constant(0.5)),
                      bias_attr=False)
    assert layer.bias is None
    assert [n for n, _ in layer.named_parameters()] == ["weight"]
    assert layer.weight.name == "w" and (layer.weight.numpy() == 0.5).all()
    frozen = nn.Linear(3, 2, weight_attr=nn.ParamAttr(trainable=False),
                       bias_attr=Normal(1.0, 0.0))
    assert frozen.weight.stop_gradient and not frozen.bias.stop_gradient
    assert (frozen.bias.numpy() == 1.0).all()


def test_bad_param_attr_raises():
    with pytest.raises(TypeError, match="expected a ParamAttr"):
        nn.Linear(2, 2, weight_attr=3)


def test_assigning_non_parameter_to_parameter_name_raises():
    layer = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="cannot assign a ndarray to parameter 'weight'"):
        layer.weight = np.zeros((2, 2))
    layer.bias = None
    assert layer.bias is None and [n for n, _ in layer.named_parameters()] == ["weight"]


def test_plain_tensor_attribute_is_not_a_parameter():
    layer = nn.Layer()
    layer.cache = fastop.to_tensor(np.ones(2, "float32"), stop_gradient=False)
    assert layer.parameters() == []


def test_add_parameter_registers_a_tensor():
    layer = nn.Layer()
    t = fastop.to_tensor(np.ones(2, "float32"), stop_gradient=False)
    layer.add_parameter("scale", t)
    assert layer.parameters() == [t] and layer.scale is t


def test_missing_super_init_raises():
    class Broken(nn.Layer):
        def __init__(self):
            self.fc = nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match=r"call super\(\).__init__\(\)"):
        Broken()


def test_delattr_unregisters():
    model = MLP()
    del model.fc2
    assert [n for n, _ in model.named_parameters()] == ["fc1.weight", "fc1.bias"]


def test_train_eval_propagate():
    model = MLP()
    assert model.training and model.fc1.training
    model.eval()
    assert not model.training and not model.fc1.training and not model.act.training
    model.train()
    assert model.fc2.training


def test_apply_visits_children_first():
    model = MLP()
    seen = []
    model.apply(lambda layer: seen.append(type(layer).__name__))
    assert seen == ["Linear", "Tanh", "Linear", "MLP"]


def test_buffers_in_state_dict_when_persistable():
    layer = nn.Linear(2, 2)
    layer.register_buffer("running", fastop.to_tensor(np.zeros(2, "float32")))
    layer.register_buffer("scratch", fastop.to_tensor(np.zeros(2, "float32")),
                          persistable=False)
    assert list(layer.state_dict()) == ["weight", "bias", "running"]
    assert [n for n, _ in layer.named_buffers()] == ["running", "scratch"]


def test_a_buffer_set_to_none_then_to_a_tensor_stays_a_buffer():
    """None is not a parameter: assigning it to a buffer keeps the name a buffer (it
    was moved to the parameters, and the next Tensor assignment refused)."""
    layer = nn.Layer()
    t = fastop.zeros([1])
    layer.register_buffer("b", t, persistable=False)
    layer.b = None
    assert layer.buffers() == [] and not nn.layer.is_parameter(None)
    layer.b = t
    assert layer.buffers() == [t] and layer.parameters() == []
    assert len(layer.state_dict()) == 0


@pytest.mark.parametrize("call,error,match", [
    (lambda l, t: l.register_buffer(12, t), TypeError,
     "the name of buffer should be a string, but received int"),
    (lambda l, t: l.register_buffer("a.b", t), KeyError, "name of buffer can not contain"),
    (lambda l, t: l.register_buffer("", t), KeyError, "name of buffer can not be empty"),
    (lambda l, t: l.register_buffer("plain", t), KeyError, "attribute 'plain' already "),
    (lambda l, t: l.register_buffer("w", np.ones(1)), TypeError,
     "registered buffer should be a Paddle.Tensor .*got ndarray"),
    (lambda l, t: l.register_buffer("w", l.create_parameter([1])), TypeError,
     "registered buffer should be a Paddle.Tensor \\(not a parameter\\)"),
    (lambda l, t: l.add_parameter(10, l.create_parameter([1])), TypeError,
     "the name of parameter should be a string"),
    (lambda l, t: l.add_parameter("plain", l.create_parameter([1])), KeyError,
     "attribute 'plain' already exists"),
    (lambda l, t: l.add_parameter("p", 10), TypeError,
     "the parameter to add must be a parameter \\(Tensor\\), got int"),
])
def test_member_name_and_type_errors_are_paddles(call, error, match):
    layer = nn.Layer()
    layer.plain = 10
    with pytest.raises(error, match=match):
        call(layer, fastop.zeros([1]))


def test_a_tensor_attribute_is_a_non_persistable_buffer():
    """PaddlePaddle's Layer.__setattr__: ``self.t = tensor`` registers a buffer, out of
    state_dict unless register_buffer made the name persistable."""
    layer = nn.Linear(2, 2)
    layer.mask = fastop.ones([2])
    layer.register_buffer("running", fastop.zeros([2]))
    assert [n for n, _ in layer.named_buffers()] == ["mask", "running"]
    assert list(layer.state_dict()) == ["weight", "bias", "running"]
    new = fastop.full([2], 3.0)
    layer.running = new                       # reassigned: stays a persistable buffer
    assert layer.state_dict()["running"] is new and layer.running is new
    layer.to(dtype="float64")
    assert layer.mask.dtype == fastop.float64        # buffers follow the layer's dtype
    layer.running = None
    assert "running" not in layer.state_dict() and layer.running is None
    with pytest.raises(TypeError, match="Linear: assignment to buffer 'mask' should be a "
                                        "Tensor or None, got ndarray"):
        layer.mask = np.ones(2)
    layer.note = np.ones(2)                   # not a Tensor: a plain attribute
    assert "note" not in dict(layer.named_buffers())
    parent = MLP()
    parent.fc1.scale = fastop.ones([1])
    assert [n for n, _ in parent.named_buffers()] == ["fc1.scale"]


def test_state_dict_holds_the_parameters_themselves():
    model = MLP()
    sd = model.state_dict()
    assert list(sd) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert sd["fc1.weight"] is model.fc1.weight


def test_set_state_dict_round_trip_from_arrays():
    src, dst = MLP(), MLP()
    missing, unexpected = dst.set_state_dict(
        {k: v.numpy().copy() for k, v in src.state_dict().items()})
    assert missing == [] and unexpected == []
    for p, q in zip(src.parameters(), dst.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_set_state_dict_reports_missing_and_unexpected():
    model = MLP()
    missing, unexpected = model.set_state_dict({"fc1.bias": np.ones(8), "extra": np.ones(1)})
    assert missing == ["fc1.weight", "fc2.weight", "fc2.bias"] and unexpected == ["extra"]
    np.testing.assert_array_equal(model.fc1.bias.numpy(), np.ones(8, "float32"))
    assert model.fc1.bias.dtype == fastop.float32


def test_set_state_dict_shape_mismatch_raises_and_writes_nothing():
    model = MLP()
    before = model.fc1.bias.numpy().copy()
    with pytest.raises(ValueError, match=r"'fc2.weight' has shape \[8, 3\].*gives \[3, 8\]"):
        model.set_state_dict({"fc1.bias": np.ones(8), "fc2.weight": np.ones((3, 8))})
    np.testing.assert_array_equal(model.fc1.bias.numpy(), before)


def test_set_state_dict_by_parameter_name():
    src, dst = nn.Linear(2, 3), nn.Linear(2, 3)
    values = [p.numpy() for p in src.parameters()]
    by_name = {p.name: value for p, value in zip(dst.parameters(), values)}
    assert dst.set_state_dict(by_name, use_structured_name=False) == ([], [])
    np.testing.assert_array_equal(dst.weight.numpy(), src.weight.numpy())


def test_save_load_round_trip(tmp_path):
    src, dst = MLP(), MLP()
    fastop.save(src.state_dict(), tmp_path / "mlp.pdparams")
    dst.set_state_dict(fastop.load(tmp_path / "mlp.pdparams"))
    for p, q in zip(src.parameters(), dst.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_to_float64_casts_parameters():
    model = MLP().to(dtype="float64")
    assert all(p.dtype == fastop.float64 for p in model.parameters())
    assert all(not p.stop_gradient for p in model.parameters())
    assert model.fc1.weight.name.endswith(".w_0")


def test_to_other_device_raises():
    with pytest.raises(ValueError, match="CPU only"):
        MLP().to(device="gpu:0")


def test_sequential():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert len(seq) == 3 and isinstance(seq[1], nn.ReLU) and isinstance(seq[-1], nn.Linear)
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias", "2.weight",
                                                     "2.bias"]
    assert len(seq[:2]) == 2
    named = nn.Sequential(("fc", nn.Linear(2, 2)), ("act", nn.Tanh()))
    assert isinstance(named["act"], nn.Tanh) and list(named.state_dict()) == \
        ["fc.weight", "fc.bias"]


def test_repr_shows_structure():
    text = repr(MLP())
    assert text.startswith("MLP(\n  (fc1): Linear(in_features=4, out_features=8")
    assert "(act): Tanh()" in text


def test_base_forward_raises():
    with pytest.raises(NotImplementedError, match="Layer must implement forward"):
        nn.Layer()(1)


def test_layer_in_static_mode_creates_program_parameters():
    from fastop import static
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            model = MLP()
            x = static.data("x", [None, 4], "float32")
            y = model(x)
            with pytest.raises(RuntimeError, match="set_state_dict works in eager mode"):
                model.set_state_dict({})
            model.scale = static.create_parameter([3], "float32", name="scale")
    finally:
        fastop.disable_static()
    assert model.parameters(include_sublayers=False) == [model.scale]
    params = model.parameters()[1:]
    assert all(isinstance(p, static.Variable) and p.is_parameter and p.persistable
               for p in params)
    assert [p.name for p in params] == [p.name for p in main.all_parameters()][:4]
    assert y.shape == [None, 3]
    scope = static.Scope()
    exe = static.Executor(fastop.CPUPlace())
    exe.run(startup, scope=scope)
    xv = np.ones((2, 4), "float32")
    (out,) = exe.run(main, feed={"x": xv}, fetch_list=[y], scope=scope)
    w1, b1, w2, b2 = (scope[p.name] for p in params)
    np.testing.assert_allclose(out, np.tanh(xv @ w1 + b1) @ w2 + b2, rtol=1e-5)


@pytest.mark.parametrize("set_to_zero", [True, False])
def test_clear_gradients_resets_the_trained_parameters_of_every_sublayer(set_to_zero):
    net = MLP()
    net.fc2.bias.stop_gradient = True                  # not trained: left alone
    net.fc2.bias.grad = fastop.ones([3])
    net(fastop.ones([2, 4])).sum().backward()
    net.clear_gradients(set_to_zero=set_to_zero)
    for name, p in net.named_parameters():
        if name == "fc2.bias":
            np.testing.assert_array_equal(p.grad.numpy(), np.ones(3))
        elif set_to_zero:
            np.testing.assert_array_equal(p.grad.numpy(), np.zeros(p.shape))
        else:
            assert p.grad is None
