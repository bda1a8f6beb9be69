"""Executor fuzzing: random DAGs of registered ops, drawn from the registry with the
samples their plugins serve (``fastop.plugins.op_samples()``: shapes, dtypes, attributes
and values the op is meant for), run by the executor (forward and gradients, twice: the
first run traces shapes, the second uses the arena) agree with the same DAG in eager mode.

A DAG links an op's floating input to an earlier op's output of the same shape and dtype,
else feeds the sample's value. Ops whose output shapes depend on values (``nonzero``) or
that take no inputs are left out: a static program cannot plan their memory."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastop
from fastop import plugins, static
from fastop.ops import registry
from fastop.ops._dispatch import mode_guard
from fastop.testing import Sample

from .conftest import TOL, assert_arena_sound


def _as_call(sample):
    """(inputs, attrs) of a sample given as a list or a Sample."""
    return (list(sample.inputs), dict(sample.attrs)) if isinstance(sample, Sample) \
        else (list(sample), {})


def _floating(inputs):
    """The floating arrays of an op's inputs (variadic lists spread out)."""
    return [v for x in inputs if x is not None for v in (x if isinstance(x, list) else [x])
            if np.asarray(v).dtype.kind == "f"]


def _known_shapes(op, inputs, attrs):
    """Whether the op's outputs have shapes a static program knows before running."""
    metas = op.infer_meta([None if x is None else [(np.shape(v), np.asarray(v).dtype)
                                                   for v in x] if isinstance(x, list)
                           else (np.shape(x), np.asarray(x).dtype) for x in inputs],
                          op.check_attrs(attrs))
    return all(None not in m.shape for m in metas)


def _candidates():
    """(op name, [(inputs, attrs), ...]) for every registered op with samples the fuzz
    can use."""
    found = []
    for name, samples in sorted(plugins.op_samples().items()):
        if name not in registry or not registry.get(name).inputs:
            continue
        op = registry.get(name)
        calls = [_as_call(s) for s in samples]
        calls = [c for c in calls if _known_shapes(op, *c)]
        if calls:
            found.append((name, calls))
    return found


CANDIDATES = _candidates()

steps = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6),
                           st.lists(st.integers(0, 99), min_size=8, max_size=8)),
                 min_size=1, max_size=6)


class Dag:
    """Ops in order, each input an edge to an earlier output or a fed array; built once
    eagerly (the oracle, and what gives every output its shape and dtype)."""

    def __init__(self, spec):
        self.feeds = []     # the arrays fed, in order
        self.nodes = []     # (op name, attrs, args): an arg is ("feed", k) / ("out", n, i)
        outputs = []        # (node, output index, shape, dtype) of the floating outputs
        for op_pick, sample_pick, links in spec:
            made = {(shape, dtype) for _, _, shape, dtype in outputs}
            fitting = [(name, call) for name, calls in CANDIDATES for call in calls
                       if any((np.shape(v), np.asarray(v).dtype) in made
                              for v in _floating(call[0]))]
            if fitting and links[0] % 4:        # mostly an op that can take an output
                name, (inputs, attrs) = fitting[op_pick % len(fitting)]
            else:
                name, calls = CANDIDATES[op_pick % len(CANDIDATES)]
                inputs, attrs = calls[sample_pick % len(calls)]
            choices = iter(links[1:] * 10)

            # only inputs that take gradients take another op's output: the others
            # (an optimizer's beta powers, a label) have a domain the samples respect
            takes_outputs = set(registry.get(name).differentiable_inputs)

            def arg(value, linkable):
                value = np.asarray(value)
                fits = [(n, i) for n, i, shape, dtype in outputs
                        if shape == value.shape and dtype == value.dtype]
                pick = next(choices)
                if linkable and value.dtype.kind == "f" and fits and pick % 3:
                    return ("out", *fits[pick % len(fits)])
                self.feeds.append(value)
                return ("feed", len(self.feeds) - 1)
            args = [None if x is None
                    else [arg(v, spec.name in takes_outputs) for v in x]
                    if isinstance(x, list) else arg(x, spec.name in takes_outputs)
                    for spec, x in zip(registry.get(name).inputs, inputs)]
            self.nodes.append((name, attrs, args))
            for i, value in enumerate(self.eager_values()[-1]):
                if value.dtype.kind == "f":
                    outputs.append((len(self.nodes) - 1, i, value.shape, value.dtype))

    def eager_values(self):
        """Every node's outputs as numpy arrays, computed eagerly."""
        values = []
        with mode_guard("eager"):
            tensors = [fastop.to_tensor(v) for v in self.feeds]
            for n in range(len(self.nodes)):
                values.append(self.call(n, tensors, values))
        return [[o.numpy() for o in outs] for outs in values]

    def call(self, n, feeds, outs):
        """Node n's op applied to the feeds (tensors or variables) and earlier outputs."""
        name, attrs, args = self.nodes[n]

        def value(arg):
            return feeds[arg[1]] if arg[0] == "feed" else outs[arg[1]][arg[2]]
        result = registry.get(name)(*[None if a is None else [value(v) for v in a]
                                      if isinstance(a, list) else value(a) for a in args],
                                    **attrs)
        return list(result) if isinstance(result, (tuple, list)) else [result]

    def build(self, feeds):
        """All outputs and the loss (the sum of every floating output's elements, None
        when there is none), in the current mode."""
        outs = []
        for n in range(len(self.nodes)):
            outs.append(self.call(n, feeds, outs))
        flat = [o for node in outs for o in node]
        total, add = None, registry.get("fastop::add")
        for o in flat:
            if o.dtype.is_floating:
                s = registry.get("fastop::sum")(o)
                total = s if total is None else add(total, s)
        return flat, total

    def static_program(self):
        """The DAG as a static Program with the gradients of its loss with respect to
        the trainable feeds: (program, feed dict, outputs, gradients)."""
        main = static.Program()
        with static.program_guard(main, static.Program()):
            data = []
            for k, v in enumerate(self.feeds):
                var = static.data(f"in{k}", list(v.shape), v.dtype.name)
                var.stop_gradient = not _trainable(v)
                data.append(var)
            nodes, loss = self.build(data)
            trained = [d for d in data if not d.stop_gradient]
            grads = [] if loss is None or not trained else static.gradients([loss], trained)
        return main, {d.name: v for d, v in zip(data, self.feeds)}, nodes, grads


def _trainable(value):
    return value.dtype.kind == "f"


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=steps)
def test_random_dags_of_registered_ops_match_eager(spec):
    assert CANDIDATES, "no registered op has samples the fuzz can use"
    dag = Dag(spec)
    with mode_guard("eager"):
        leaves = [fastop.to_tensor(v, stop_gradient=not _trainable(v)) for v in dag.feeds]
        expected, loss = dag.build(leaves)
        expected = [o.numpy() for o in expected]
        trained = [t for t in leaves if not t.stop_gradient]
        if loss is None or not trained:
            expected_grads = []
        elif loss.stop_gradient:        # only non-differentiable ops reach the loss
            expected_grads = [None] * len(trained)
        else:
            expected_grads = [None if g is None else g.numpy()
                              for g in fastop.grad([loss], trained, allow_unused=True)]
    main, feed, nodes, grads = dag.static_program()
    exe = static.Executor()
    fetch = nodes + [g for g in grads if g is not None]
    for _ in range(2):          # the first run traces shapes, the second uses the arena
        got = exe.run(main, feed=feed, fetch_list=fetch)
        for e, g in zip(expected, got):
            np.testing.assert_allclose(g, e, **TOL.get(e.dtype.name, {}))
        _assert_grads(grads, iter(got[len(nodes):]), expected_grads)
    # fetching only the gradients leaves the other temporaries to the arena
    fetch = [g for g in grads if g is not None]
    if fetch:
        for _ in range(2):
            _assert_grads(grads, iter(exe.run(main, feed=feed, fetch_list=fetch)),
                          expected_grads)
        assert_arena_sound(exe.plan_of(main, feed, fetch))


def _assert_grads(grads, fetched, expected):
    """The static gradients (None: the input does not reach the loss) against eager's."""
    for var, e in zip(grads, expected):
        got = None if var is None else next(fetched)
        if got is None or e is None:
            assert not np.any(got if e is None else e), "a gradient only one mode has"
        else:
            np.testing.assert_allclose(got, e, **TOL.get(e.dtype.name, {}))
