"""Executor fuzzing: random DAGs of elementwise, matmul and reduction ops, run by the
executor (forward and gradients), agree with a numpy interpreter of the same DAG."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastop import static
from fastop.ops import registry

from .conftest import TOL, assert_arena_sound

UNARY = {
    "tanh": (np.tanh, lambda x, y, g: g * (1 - y * y)),
    "neg": (np.negative, lambda x, y, g: -g),
    "square": (np.square, lambda x, y, g: 2 * x * g),
}
BINARY = {
    "add": (np.add, lambda a, b, g: (g, g)),
    "subtract": (np.subtract, lambda a, b, g: (g, -g)),
    "multiply": (np.multiply, lambda a, b, g: (g * b, g * a)),
}
REDUCE = ("sum", "mean")
KINDS = [*UNARY, *BINARY, "matmul", *REDUCE]

step = st.tuples(st.sampled_from(KINDS), st.integers(0, 99), st.integers(0, 99),
                 st.integers(1, 4), st.integers(0, 1))
dags = st.tuples(st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)), min_size=1,
                          max_size=3),
                 st.lists(step, min_size=1, max_size=12))


class Dag:
    """A DAG spelled as nodes: ("input", shape) or (kind, args, attrs)."""

    def __init__(self, input_shapes, steps):
        self.nodes = [("input", (), {"shape": s}) for s in input_shapes]
        for kind, i, j, m, axis in steps:
            a = i % len(self.nodes)
            sa = self.shape(a)
            if kind in UNARY:
                self.nodes.append((kind, (a,), {}))
            elif kind in BINARY:
                same = [k for k in range(len(self.nodes))
                        if self.shape(k) == sa and k != a] or [a]
                self.nodes.append((kind, (a, same[j % len(same)]), {}))
            elif kind == "matmul":
                fits = [k for k in range(len(self.nodes)) if self.shape(k)[0] == sa[1]]
                if not fits or j % 3 == 0:
                    self.nodes.append(("input", (), {"shape": (sa[1], m)}))
                    fits = [len(self.nodes) - 1]
                self.nodes.append(("matmul", (a, fits[j % len(fits)]), {}))
            else:
                self.nodes.append((kind, (a,), {"axis": axis, "keepdim": True}))

    def shape(self, k):
        kind, args, attrs = self.nodes[k]
        if kind == "input":
            return attrs["shape"]
        if kind == "matmul":
            return (self.shape(args[0])[0], self.shape(args[1])[1])
        if kind in REDUCE:
            s = list(self.shape(args[0]))
            s[attrs["axis"]] = 1
            return tuple(s)
        return self.shape(args[0])

    def inputs(self):
        return [k for k, node in enumerate(self.nodes) if node[0] == "input"]

    def numpy(self, values):
        """Forward values of every node and the gradient of the loss (the sum of every
        computed node's elements) with respect to every input."""
        vals = []
        for kind, args, attrs in self.nodes:
            xs = [vals[a] for a in args]
            if kind == "input":
                vals.append(values[len(vals)])
            elif kind in UNARY:
                vals.append(UNARY[kind][0](xs[0]))
            elif kind in BINARY:
                vals.append(BINARY[kind][0](*xs))
            elif kind == "matmul":
                vals.append(xs[0] @ xs[1])
            else:
                f = np.sum if kind == "sum" else np.mean
                vals.append(f(xs[0], axis=attrs["axis"], keepdims=True))
        grads = [np.zeros_like(v) if node[0] == "input" else np.ones_like(v)
                 for v, node in zip(vals, self.nodes)]
        for k in range(len(self.nodes) - 1, -1, -1):
            kind, args, attrs = self.nodes[k]
            g, xs = grads[k], [vals[a] for a in args]
            if kind == "input":
                continue
            if kind in UNARY:
                parts = [UNARY[kind][1](xs[0], vals[k], g)]
            elif kind in BINARY:
                parts = BINARY[kind][1](*xs, g)
            elif kind == "matmul":
                parts = [g @ xs[1].T, xs[0].T @ g]
            else:
                n = xs[0].shape[attrs["axis"]] if kind == "mean" else 1
                parts = [np.broadcast_to(g / n, xs[0].shape)]
            for a, p in zip(args, parts):
                grads[a] = grads[a] + p
        return vals, [grads[k] for k in self.inputs()]

    def build(self):
        """Append the DAG to the current program; the node variables and the loss."""
        out = []
        for k, (kind, args, attrs) in enumerate(self.nodes):
            if kind == "input":
                out.append(static.data(f"in{k}", list(attrs["shape"]), "float64"))
            else:
                out.append(registry.get("fastop::" + kind)(*[out[a] for a in args], **attrs))
        computed = [v for v, node in zip(out, self.nodes) if node[0] != "input"]
        loss = computed[0].sum()
        for v in computed[1:]:
            loss = loss + v.sum()
        return out, loss


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(dag_spec=dags, seed=st.integers(0, 2**16))
def test_random_dags_match_numpy(dag_spec, seed):
    dag = Dag(*dag_spec)
    main = static.Program()
    with static.program_guard(main, static.Program()):
        nodes, loss = dag.build()
        inputs = [nodes[k] for k in dag.inputs()]
        grads = static.gradients([loss], inputs)
    rng = np.random.default_rng(seed)
    values = {k: rng.uniform(-1, 1, dag.shape(k)) for k in dag.inputs()}
    expected, expected_grads = dag.numpy(values)
    feed = {nodes[k].name: v for k, v in values.items()}
    exe = static.Executor()
    fetch = nodes + [g for g in grads if g is not None]
    for _ in range(2):          # the first run traces shapes, the second uses the arena
        got = exe.run(main, feed=feed, fetch_list=fetch)
        for e, g in zip(expected, got):
            np.testing.assert_allclose(g, e, **TOL["float64"])
        got_grads = iter(got[len(nodes):])
        for var, e in zip(grads, expected_grads):
            if var is None:     # the input does not reach the loss
                assert not e.any()
            else:
                np.testing.assert_allclose(next(got_grads), e, **TOL["float64"])
    # fetching only the gradients leaves the other temporaries to the arena
    fetch = [g for g in grads if g is not None]
    for _ in range(2):
        got = exe.run(main, feed=feed, fetch_list=fetch)
        for g, e in zip(got, [e for var, e in zip(grads, expected_grads) if var is not None]):
            np.testing.assert_allclose(g, e, **TOL["float64"])
    assert_arena_sound(exe.plan_of(main, feed, fetch))
