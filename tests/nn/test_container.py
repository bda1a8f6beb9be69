"""LayerList, LayerDict, ParameterList: registration (parameters, state_dict names),
list/dict behaviour, renumbering, train()/eval() reaching their items, errors."""
import numpy as np
import pytest

import fastop
from fastop import nn


def test_layer_list_registers_and_renumbers():
    layers = [nn.Linear(2, 2) for _ in range(4)]
    ll = nn.LayerList(layers[:2])
    ll.append(layers[2]).extend([layers[3]])
    assert len(ll) == 4 and list(ll) == layers and ll[-1] is layers[3]
    assert [n for n, _ in ll.named_parameters()][:4] == ["0.weight", "0.bias", "1.weight",
                                                          "1.bias"]
    del ll[1]
    assert list(ll) == [layers[0], layers[2], layers[3]]
    assert "1.weight" in ll.state_dict() and "3.weight" not in ll.state_dict()
    ll.insert(0, layers[1])
    assert list(ll) == [layers[1], layers[0], layers[2], layers[3]]
    ll.insert(100, nn.ReLU())                      # clamps like list.insert
    assert isinstance(ll[4], nn.ReLU)
    ll[0] = nn.Tanh()
    assert isinstance(ll[0], nn.Tanh) and len(ll) == 5
    sub = ll[1:3]
    assert isinstance(sub, nn.LayerList) and list(sub) == [layers[0], layers[2]]
    del ll[::2]
    assert list(ll) == [layers[0], layers[3]]


def test_layer_list_in_a_model_trains_and_switches_mode():
    class Model(nn.Layer):
        def __init__(self):
            super().__init__()
            self.blocks = nn.LayerList([nn.Linear(3, 3), nn.Dropout(0.5), nn.Linear(3, 1)])

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    model = Model()
    assert len(model.parameters()) == 4
    model.eval()
    assert all(not layer.training for layer in model.sublayers())
    x = fastop.randn([4, 3])
    np.testing.assert_array_equal(model(x).numpy(), model(x).numpy())   # dropout is off
    model.train()
    assert all(layer.training for layer in model.sublayers(include_self=True))
    model(x).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_layer_dict():
    d = nn.LayerDict({"a": nn.Linear(2, 2), "b": nn.ReLU()})
    d.update([("c", nn.Tanh())])
    assert list(d) == ["a", "b", "c"] and "b" in d and len(d) == 3
    assert [k for k, _ in d.items()] == list(d.keys()) and len(list(d.values())) == 3
    assert [n for n, _ in d.named_parameters()] == ["a.weight", "a.bias"]
    popped = d.pop("a")
    assert isinstance(popped, nn.Linear) and d.parameters() == [] and "a" not in d
    d["z"] = nn.Linear(1, 1)
    del d["b"]
    assert list(d) == ["c", "z"]
    d.clear()
    assert len(d) == 0
    with pytest.raises(KeyError, match=r"LayerDict has no sublayer 'q'; it has \[\]"):
        d["q"]
    # PaddlePaddle's types: an item that is not a pair is a ValueError, a sublayers
    # argument that is not iterable an AssertionError (here also a TypeError)
    with pytest.raises(ValueError, match="item 0 must be a"):
        d.update([nn.ReLU()])
    with pytest.raises(ValueError, match=r"item 1 must be a \(name, layer\) pair"):
        d.update([("a", nn.ReLU()), ("b", nn.ReLU(), "b")])
    for error in (AssertionError, TypeError):
        with pytest.raises(error, match="sublayers must be a mapping or an iterable"):
            d.update(1)


def test_parameter_list():
    params = [fastop.to_tensor(np.ones(2), stop_gradient=False) for _ in range(3)]
    pl = nn.ParameterList(params[:2])
    pl.append(params[2])
    assert len(pl) == 3 and list(pl) == params and pl[-1] is params[2]
    assert [n for n, _ in pl.named_parameters()] == ["0", "1", "2"]
    replacement = fastop.to_tensor(np.zeros(2), stop_gradient=False)
    pl[1] = replacement
    assert pl[1] is replacement and pl.parameters()[1] is replacement
    with pytest.raises(IndexError, match="index 3 is out of range for 3 items"):
        pl[3]
    with pytest.raises(TypeError, match="expected a parameter"):
        pl.append("weight")
