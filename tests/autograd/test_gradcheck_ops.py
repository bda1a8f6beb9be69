"""Every differentiable built-in op (namespace ``fastop`` with a gradient rule) checked
against finite differences in float64, once and twice (double backward).

The list comes from the registry, so ops appear here as their families register them;
an op without an input generator below fails, asking for one.
"""
from __future__ import annotations

import numpy as np
import pytest

import fastop
from fastop.autograd import GradcheckError, gradcheck, gradgradcheck
from fastop import plugins
from fastop.ops import registry
from fastop.testing import Sample


def _rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def var(*shape, kind="any"):
    """A float64 leaf: any values, 'pos' (> 0.2) or 'away' from 0 (|x| > 0.2)."""
    a = _rng().uniform(0.2, 1.5, shape) if kind != "any" else _rng().standard_normal(shape)
    if kind == "away":
        a *= np.where(np.arange(a.size).reshape(shape) % 2, 1.0, -1.0)
    return fastop.to_tensor(a, stop_gradient=False)


def const(values, dtype):
    return fastop.to_tensor(np.asarray(values), dtype=dtype)


SAME = lambda: ([var(2, 3)], {})               # noqa: E731
POSITIVE = lambda: ([var(2, 3, kind="pos")], {})   # noqa: E731
AWAY = lambda: ([var(2, 3, kind="away")], {})      # noqa: E731
Y_DY = lambda: ([var(2, 3), var(2, 3)], {})        # noqa: E731
SLICE = {"axes": [0, 1], "starts": [0, 1], "ends": [2, 3]}
# numpy's advanced indexing with two arrays and a repeated position (the gradient sums)
INDEX = {"key": (np.array([0, 2, 0]), np.array([1, 3, 1]))}

# name -> () -> (inputs, attrs). Broadcasting shapes where an op broadcasts.
GENERATORS = {
    "neg": SAME, "exp": SAME, "tanh": SAME, "sigmoid": SAME, "square": SAME,
    "squared_l2_norm": SAME,
    "abs": AWAY, "sign": AWAY, "relu": AWAY, "log": POSITIVE, "sqrt": POSITIVE,
    "tanh_grad": Y_DY, "sigmoid_grad": Y_DY,
    "relu_grad": lambda: ([var(2, 3, kind="away"), var(2, 3)], {}),
    "sqrt_grad": lambda: ([var(2, 3, kind="pos"), var(2, 3)], {}),
    "add": lambda: ([var(2, 3), var(3)], {}),
    "subtract": lambda: ([var(2, 1), var(3)], {}),
    "multiply": lambda: ([var(2, 3), var(1, 3)], {}),
    "divide": lambda: ([var(2, 3), var(3, kind="away")], {}),
    "pow": lambda: ([var(2, 3, kind="pos"), var(3)], {}),
    "maximum": lambda: ([var(2, 3), var(3, kind="away")], {}),
    "minimum": lambda: ([var(2, 3), var(3, kind="away")], {}),
    "where": lambda: ([const([[True, False, True], [False, True, True]], "bool"),
                       var(2, 3), var(3)], {}),
    "cast": lambda: ([var(2, 3)], {"dtype": "float64"}),
    "full_like": lambda: ([var(2, 3)], {"fill_value": 2.0}),
    "sum": lambda: ([var(2, 3)], {"axis": 1}),
    "mean": lambda: ([var(2, 3)], {"axis": [0, 1], "keepdim": True}),
    "max": lambda: ([var(2, 3)], {"axis": 0}),
    "sum_to_shape": lambda: ([var(2, 3)], {"shape": [1, 3]}),
    "broadcast_to": lambda: ([var(1, 3)], {"shape": [2, 3]}),
    "expand_as": lambda: ([var(1, 3), var(2, 3)], {}),
    "softmax": lambda: ([var(2, 3)], {"axis": -1}),
    "log_softmax": lambda: ([var(2, 3)], {"axis": 0}),
    "softmax_grad": Y_DY, "log_softmax_grad": Y_DY,
    "softmax_cross_entropy": lambda: ([var(3, 3), const([2, 0, -100], "int64")], {}),
    "softmax_cross_entropy_grad": lambda: ([const([2, 0, -100], "int64"),
                                            var(3, 3, kind="pos"), var(3, 1)], {}),
    "reshape": lambda: ([var(2, 3)], {"shape": [3, 2]}),
    "transpose": lambda: ([var(2, 3)], {"perm": [1, 0]}),
    "concat": lambda: ([[var(2, 3), var(1, 3)]], {"axis": 0}),
    "slice": lambda: ([var(3, 4)], SLICE),
    "slice_grad": lambda: ([var(3, 4), var(2, 2)], SLICE),
    "index": lambda: ([var(3, 4)], INDEX),
    "index_grad": lambda: ([var(3, 4), var(3)], INDEX),
    "gather": lambda: ([var(4, 3), const([0, 2, 2], "int64")], {"axis": 0}),
    "gather_grad": lambda: ([var(4, 3), const([0, 2, 2], "int64"), var(3, 3)], {"axis": 0}),
    "squeeze": lambda: ([var(2, 1, 3)], {"axis": [1]}),
    "unsqueeze": lambda: ([var(2, 3)], {"axis": [1]}),
    "matmul": lambda: ([var(3, 2), var(4, 3)], {"transpose_x": True, "transpose_y": True}),
    "fc": lambda: ([var(2, 3), var(3, 4), var(4)], {"activation": "tanh"}),
    # normalization, dropout, lookup, activations
    "layer_norm": lambda: ([var(2, 3, 2), var(6), var(3, 2)], {"begin_norm_axis": 1}),
    "layer_norm_grad": lambda: ([var(2, 3), var(2, 1), var(2, 1, kind="pos"), var(2, 3),
                                 var(3)], {}),
    "dropout": lambda: ([var(3, 4)], {"p": 0.4, "seed": 11}),
    "dropout_grad": lambda: ([const([[True, False], [True, True]], "bool"), var(2, 2)],
                             {"p": 0.25}),
    "embedding": lambda: ([const([[0, 3], [3, 1]], "int64"), var(4, 3)], {"padding_idx": 1}),
    "embedding_grad": lambda: ([const([[0, 3], [3, 1]], "int64"), var(4, 3), var(2, 2, 3)],
                               {"padding_idx": 1}),
    "gelu": AWAY, "silu": SAME, "leaky_relu": AWAY,
    "softplus": lambda: ([var(2, 3)], {"beta": 1.5}),
    "gelu_grad": Y_DY, "silu_grad": Y_DY,
    "leaky_relu_grad": lambda: ([var(2, 3, kind="away"), var(2, 3)], {}),
    "softplus_grad": lambda: ([var(2, 3), var(2, 3)], {"beta": 1.5}),
    # numpy-kernel math and search
    "min": lambda: ([var(2, 3)], {"axis": 1}),
    "prod": lambda: ([var(2, 3, kind="away")], {"axis": 0}),
    "cumsum": lambda: ([var(2, 3)], {"axis": 1, "reverse": True}),
    "clip": lambda: ([var(2, 3, kind="away")], {"min": -0.8, "max": 0.8}),
    "topk": lambda: ([var(2, 4)], {"k": 2, "axis": 1}),
    "take_along_axis": lambda: ([var(3, 2), const([[2, 0], [1, 1]], "int64")], {"axis": 0}),
    "take_along_axis_grad": lambda: ([var(3, 2), const([[2, 0], [1, 1]], "int64"),
                                      var(2, 2)], {"axis": 0}),
}

DIFFERENTIABLE = sorted(op.short_name for op in registry.ops("fastop")
                        if op.grad_rule is not None)


def _call(name):
    inputs, attrs = GENERATORS[name]()
    op = registry.get(f"fastop::{name}")
    flat = [t for x in inputs for t in (x if isinstance(x, list) else [x])]
    n = [len(x) if isinstance(x, list) else -1 for x in inputs]

    def fn(*tensors):
        args, i = [], 0
        for count in n:            # regroup a variadic input's tensors into its list
            args.append(list(tensors[i:i + count]) if count >= 0 else tensors[i])
            i += max(count, 1)
        out = op(*args, **attrs)
        return out
    return fn, flat


def test_every_differentiable_builtin_has_an_input_generator():
    missing = [n for n in DIFFERENTIABLE if n not in GENERATORS]
    assert not missing, f"add input generators for: {missing}"


def _check(name, check, **tolerances):
    if name not in GENERATORS:
        pytest.fail(f"no input generator for fastop::{name}")
    fn, inputs = _call(name)
    assert check(fn, inputs, eps=1e-6, **tolerances)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_gradient_matches_finite_differences(name):
    _check(name, gradcheck, atol=1e-6, rtol=1e-4)


# Ops documented as differentiable once: their gradient is a Python backward kernel that
# has no gradient rule of its own, so its result is not recorded for a second backward.
FIRST_ORDER_ONLY = {
    "prod": "fastop::prod's gradient is the backward kernel fastop::prod_grad, which has no "
            "gradient rule (first order only, as fastop.ops.builtin.math documents)",
}


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_double_backward_matches_finite_differences(name):
    try:
        _check(name, gradgradcheck, atol=1e-5, rtol=1e-3)
    except GradcheckError as exc:
        if name in FIRST_ORDER_ONLY and "was not recorded" in str(exc):
            pytest.skip(FIRST_ORDER_ONLY[name])
        raise


def _installed_plugin_ops() -> list[str]:
    """The differentiable ops of the installed plugin distributions (not their backward
    kernel ops, which are checked through their forward ops)."""
    backward_kernels = {op.grad_rule.kernel_op for op in registry
                        if op.grad_rule is not None and op.grad_rule.kernel_op}
    return sorted(name for p in plugins.list() if p.entry_point is not None
                  for name in p.ops if name not in backward_kernels
                  and registry.get(name).grad_rule is not None)


PLUGIN_OPS = _installed_plugin_ops()


def _eager_call(op, sample):
    """``(fn, flat_inputs)`` for gradcheck from one of the op's own samples (a list of
    inputs or a Sample): its float inputs in float64, the differentiable ones leaves
    wanting gradients,
    a variadic input's list flattened into the arguments; `fn` returns the op's floating
    outputs."""
    inputs, attrs = (sample.inputs, sample.attrs) if isinstance(sample, Sample) \
        else (list(sample), {})
    diff = set(op.differentiable_inputs)
    flat, counts = [], []
    for spec, x in zip(op.inputs, inputs):
        group = x if spec.variadic else [x]
        counts.append(len(group) if spec.variadic else -1)
        for a in group:
            if a is None:
                flat.append(None)
                continue
            a = np.asarray(a)
            floating = a.dtype.kind == "f"
            flat.append(fastop.to_tensor(a.astype(np.float64) if floating else a,
                                         stop_gradient=not (floating and spec.name in diff)))

    def fn(*args):
        args, grouped = list(args), []
        for n in counts:
            grouped.append(args.pop(0) if n < 0 else [args.pop(0) for _ in range(n)])
        out = op(*grouped, **attrs)
        outs = out if isinstance(out, tuple) else (out,)
        return [o for o in outs if o.dtype in (fastop.float32, fastop.float64)]
    return fn, flat


@pytest.mark.parametrize("name", PLUGIN_OPS)
def test_installed_plugin_ops_are_differentiable_in_eager_mode(name):
    # Python-kernel ops from plugins run through the eager dispatcher and record nodes
    # like built-ins; each is called with the samples its plugin declares (whatever its
    # inputs and outputs), in float64.
    op = registry.get(name)
    samples = plugins.op_samples().get(name)
    assert samples, f"{name} ({op.plugin}) declares no samples (fastop_op_samples hook)"
    checked = 0
    for sample in samples:
        fn, flat = _eager_call(op, sample)
        if not any(x is not None and not x.stop_gradient for x in flat):
            continue                      # a sample without a float input to differentiate
        outs = fn(*flat)
        assert outs and not any(o.stop_gradient for o in outs), (name, sample)
        assert gradcheck(fn, flat, atol=1e-6, rtol=1e-4)
        checked += 1
    assert checked, f"{name}: no sample has a floating differentiable input"
