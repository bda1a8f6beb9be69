"""fastop.ops.<namespace>.<op>: cached namespace objects whose ops follow the registry,
and namespaces named like fastop's own submodules (checking, builtin) that work."""
import importlib
import sys

import numpy as np
import pytest

import fastop
from fastop.ops import Registry, registry
from fastop.ops._namespaces import OpNamespace


def define(reg, name, factor=1.0):
    op = reg.define(name, inputs=["x"], outputs=["y"], meta=lambda x: x)
    op.kernel()(lambda x: (x * factor).astype(x.dtype))
    return op


@pytest.fixture
def global_ops():
    """Define ops in fastop's registry; removed again afterwards."""
    names = []

    def add(name, factor=1.0):
        names.append(name)
        return define(registry, name, factor)
    yield add
    for name in names:
        if name in registry:
            registry.remove(name)


def test_a_namespace_is_one_cached_object_with_its_ops_as_attributes(global_ops):
    op = global_ops("nstest::double", 2.0)
    ns = fastop.ops.nstest
    assert isinstance(ns, OpNamespace) and ns is fastop.ops.nstest is registry.namespace("nstest")
    assert "nstest" in vars(fastop.ops)        # a plain module attribute from now on
    assert ns.double is op and dir(ns) == ["double"]
    assert repr(ns) == "<fastop ops namespace 'nstest': 1 ops>"


def test_cached_ops_follow_registry_changes(global_ops):
    first = global_ops("nstest2::op", 2.0)
    ns = fastop.ops.nstest2
    assert ns.op is first
    registry.remove("nstest2::op")
    with pytest.raises(AttributeError, match="unknown op 'nstest2::op'"):
        ns.op
    second = global_ops("nstest2::op", 3.0)
    assert ns.op is second and ns.op is not first


def test_a_namespace_is_read_only():
    with pytest.raises(AttributeError, match="ops are defined with registry.define"):
        fastop.ops.fastop.tanh = None


@pytest.mark.parametrize("name", ["checking", "builtin"])
def test_namespaces_named_like_fastop_submodules(global_ops, name):
    op = global_ops(f"{name}::ident")
    importlib.import_module(f"fastop.ops.{name}")      # imported before and after: no matter
    assert getattr(fastop.ops, name).ident is op
    from fastop.ops.checking import check_grad_rule     # submodules by their full names
    from fastop.ops.builtin import register_all
    assert callable(check_grad_rule) and callable(register_all)
    x = fastop.to_tensor(np.ones(2, "float32"))
    np.testing.assert_array_equal(getattr(fastop.ops, name).ident(x).numpy(), [1, 1])


def test_submodules_are_not_attributes_but_still_reachable_without_a_namespace():
    assert "_registry" not in vars(fastop.ops) and "_dispatch" not in vars(fastop.ops)
    assert fastop.ops._registry is sys.modules["fastop.ops._registry"]


def test_unknown_names_suggest_namespaces():
    with pytest.raises(AttributeError, match="no op namespace or attribute 'fastpo'; did you "
                                             "mean 'fastop'"):
        fastop.ops.fastpo


def test_dir_lists_the_api_and_the_namespaces():
    names = dir(fastop.ops)
    assert {"registry", "get", "fastop", "activations"} <= set(names)


def test_another_registry_has_its_own_namespace_objects():
    other = Registry()
    define(other, "fastop::mine")
    assert other.namespace("fastop") is not registry.namespace("fastop")
    assert dir(other.namespace("fastop")) == ["mine"]
