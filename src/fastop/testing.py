"""Testing ops: :func:`opcheck`, :func:`assert_close` and the gradient checks.

This is how a plugin author tests an op (``docs/plugins.md``): give ``opcheck`` the op
and a few sample inputs, and it checks everything the op's definition promises::

    import numpy as np
    from fastop.testing import opcheck, Sample

    opcheck("activations::swish", [[np.linspace(-3, 3, 7)],
                                   Sample(np.ones((2, 3), "float32"), beta=2.0)])

Also here: :func:`assert_close` (numpy-style, tolerances by dtype), the gradient rule
check :func:`check_grad_rule`, and the autograd checks :func:`gradcheck` /
:func:`gradgradcheck` for any eager function.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from fastop._core.storage import DTYPE_NAMES, as_dtype, from_numpy
from fastop.autograd.gradcheck import GradcheckError, gradcheck, gradgradcheck
from fastop.ops import OpDef, registry
from fastop.ops._dispatch import kernel_dtype, mode_guard
from fastop.ops.checking import Sample, _each, assert_close, check_grad_rule, run_grad_rule

__all__ = ["opcheck", "Sample", "INFERRED", "assert_close", "check_grad_rule", "gradcheck",
           "gradgradcheck", "GradcheckError"]

CHECKS = ("meta", "gradient", "reads", "double_grad", "eager_static")
# the meta check's outcome for an op without a meta function
INFERRED = ("ok (inferred: the op has no meta function; fastop runs the kernel to learn "
            "its outputs' shapes and dtypes, per input signature)")
_GRAD_TOL = (1e-5, 1e-6)          # (rtol, atol) against finite differences in float64
_DOUBLE_GRAD_TOL = (1e-3, 1e-5)


def opcheck(op: OpDef | str, sample_inputs: Sequence[Any], attrs: dict[str, Any] | None = None,
            *, atol: float | None = None, rtol: float | None = None) -> dict[str, str]:
    """Check an op's definition on each sample; returns ``{check: "ok" or "skipped: why"}``
    (``"ok (inferred: ...)"`` for the meta of an op without a meta function).

    ``op`` is an OpDef or its name. ``sample_inputs`` is either **one call's inputs** or
    **a list of samples**, told apart by its items alone:

    - when no item is a list, tuple or :class:`Sample` (each is an array, a Tensor, a
      scalar or None), it is one call: ``opcheck(op, [x])`` checks the op on input ``x``,
      ``opcheck(op, [x, w])`` on inputs ``x`` and ``w`` (as ``torch.library.opcheck(op,
      args)`` does);
    - otherwise each item is one sample: a list of the op's inputs, or a
      :class:`Sample` carrying its own attributes, which update ``attrs``:
      ``opcheck(op, [[x], [x2]])``, ``opcheck(op, [[x, w], Sample(x, w, k=2)])``.

    A variadic input is always a list (``[a, b]``), so an op with one takes a list of
    samples: ``opcheck(concat, [[[a, b]]])`` or ``opcheck(concat, [Sample([a, b])])``.
    An absent optional input is None or left off the end. The checks, in order:

    - ``meta``: for every dtype of the sample's kind the op has a kernel for (a float32
      sample checks the float32 and float64 kernels; integer kernels need integer
      samples; an any-dtype kernel runs in the sample's dtype), the kernel's results
      have the count, dtypes and shapes the meta function predicts, and are finite
      (no NaN or Inf) when the inputs are. For an op without a meta function the
      outcome says ``"ok (inferred: ...)"``, and the check compares the kernel's
      results with the meta inferred for the sample's shapes (by a dry run on zeros,
      unless an earlier call learned it), so an output whose shape depends on the
      input values fails: such an op needs a meta function;
    - ``gradient``: the gradient rule against central finite differences of the forward
      kernel, in float64, for every differentiable floating input (needs a float64
      kernel); a NaN or Inf gradient from finite inputs fails;
    - ``reads``: a rule declaring ``reads=`` gives the same gradient when a needed value
      it does not declare for that gradient is replaced by other numbers of the same
      shape and dtype (the rule must not use values it did not declare);
    - ``double_grad``: when the gradient is itself differentiable (a composite rule, or a
      backward kernel op with its own rule), second derivatives against finite
      differences of the first, in eager mode; skipped, naming the op, when the rule
      calls an op that has no gradient rule (the gradient is not recorded);
    - ``eager_static``: the op and its backward (``fastop.grad``) in eager mode against the
      same in a one-op static Program (``static.gradients``) run by an Executor.

    ``atol``/``rtol`` override the comparison tolerances of every check (defaults: by
    dtype, as :func:`assert_close`; 1e-6/1e-5 against finite differences). A failure is
    an AssertionError starting ``opcheck <op> sample <i> [<check>]:`` and naming the input
    or output and the largest error; an exception raised inside a check fails that check
    the same way. The caller's mode (eager, static, a ``mode_guard``) is left as it was.
    """
    opdef = op if isinstance(op, OpDef) else registry.get(op)
    samples = _samples(sample_inputs)
    if not samples:
        raise ValueError(f"opcheck {opdef.name}: no sample inputs given")
    report: dict[str, str] = {}
    for index, sample in enumerate(samples):
        checker = _Checker(opdef, index, sample, attrs or {}, atol, rtol)
        for check in CHECKS:
            outcome = checker.run(check)
            # a failure raises; "ok" from any sample stands over another's "skipped: "
            if report.get(check, "skipped: ").startswith("skipped: "):
                report[check] = outcome
    return report


def _samples(sample_inputs: Sequence[Any]) -> list[Any]:
    """The samples of opcheck's argument: itself as the one sample when no item is a
    list, tuple or Sample (one call's inputs), else its items."""
    given = list(sample_inputs)
    if given and not any(isinstance(x, (list, tuple, Sample)) for x in given):
        return [given]
    return given


def _nonfinite(value: np.ndarray) -> str | None:
    """Where a floating array holds NaN or Inf ("nan at index (0, 1)"), or None."""
    if value.dtype.kind not in "fc" or np.isfinite(value).all():
        return None
    where = np.argwhere(~np.isfinite(value))[0]
    return f"{value[tuple(where)].item()!r} at index {tuple(int(i) for i in where)}"


def _finite(inputs: Sequence[Any]) -> bool:
    """Every floating array of an op's inputs is finite."""
    return all(_nonfinite(np.asarray(v)) is None for v in _flat(inputs))


_RULE = ("opcheck takes one call's inputs ([x, w]: no item a list) or a list of samples "
         "([[x, w], Sample(x, w, k=2)]); a variadic input is a list ([[[a, b]]])")


def _array(value: Any) -> np.ndarray:
    """A sample value as a numpy array (a Tensor's values)."""
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def _is_float(value: Any) -> bool:
    return np.asarray(value).dtype.kind == "f"


def _flat(inputs: Sequence[Any]) -> list[Any]:
    """Every array of an op's inputs, in order (variadic lists spread out)."""
    return [v for x in inputs if x is not None for v in (x if isinstance(x, list) else [x])]


def _regroup(flat: Sequence[Any], like: Sequence[Any]) -> list[Any]:
    """``flat`` values put back in the nesting of ``like`` (lists for variadic inputs)."""
    out, i = [], 0
    for x in like:
        if x is None:
            out.append(None)
        elif isinstance(x, list):
            out.append(list(flat[i:i + len(x)]))
            i += len(x)
        else:
            out.append(flat[i])
            i += 1
    return out


def _as_tuple(result: Any) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


class _Checker:
    """The checks of one sample (one method per check; each returns "ok" or a skip)."""

    def __init__(self, op: OpDef, index: int, sample: Any, attrs: dict[str, Any],
                 atol: float | None, rtol: float | None) -> None:
        self.op, self.atol, self.rtol = op, atol, rtol
        self.label = f"opcheck {op.name} sample {index}"
        given = dict(attrs)
        if isinstance(sample, Sample):
            given.update(sample.attrs)
            sample = sample.inputs
        self.attrs = op.check_attrs(given)
        self.inputs = self._inputs(list(sample))
        diff = set(op.differentiable_inputs)
        self.wrt = [i for i, (spec, x) in enumerate(zip(op.inputs, self.inputs))
                    if spec.name in diff and x is not None
                    and all(_is_float(v) for v in _flat([x]))]

    def _inputs(self, sample: list[Any]) -> list[Any]:
        specs = self.op.inputs
        required = sum(1 for s in specs if not s.optional)
        if not required <= len(sample) <= len(specs):
            raise ValueError(f"{self.label}: {len(sample)} input(s) given, the op takes "
                             f"{'' if required == len(specs) else f'{required} to '}"
                             f"{len(specs)} ({', '.join(map(str, specs))}); {_RULE}")
        sample = sample + [None] * (len(specs) - len(sample))
        for spec, x in zip(specs, sample):
            if spec.variadic and x is not None and not isinstance(x, (list, tuple)):
                raise ValueError(f"{self.label}: the variadic input '{spec.name}' takes a "
                                 f"list of arrays, got {type(x).__name__}; {_RULE}")
        return [None if x is None else [_array(v) for v in x] if spec.variadic
                else _array(x) for spec, x in zip(specs, sample)]

    def run(self, check: str) -> str:
        """Run one check: "ok" or "skipped: why"; a failure is an AssertionError naming
        the check, also when the op or its rule raised."""
        try:
            with mode_guard("eager"):      # the caller's mode, even static, is kept
                return getattr(self, check)()
        except AssertionError:
            raise
        except Exception as exc:
            raise self.fail(check, f"{type(exc).__name__}: {exc}") from exc

    def fail(self, check: str, detail: str) -> AssertionError:
        return AssertionError(f"{self.label} [{check}]: {detail}")

    def _tol(self, default: tuple[float | None, float | None]) -> dict[str, float | None]:
        """assert_close's tolerances: the caller's, else the check's default."""
        return {"rtol": default[0] if self.rtol is None else self.rtol,
                "atol": default[1] if self.atol is None else self.atol}

    def _float64(self) -> list[Any]:
        """The sample with every floating array in float64."""
        return _each(lambda v: v.astype(np.float64) if v.dtype.kind == "f" else v,
                     self.inputs)

    def _douts(self, outputs: Sequence[Any]) -> list[np.ndarray | None]:
        """Fixed random output gradients (None for a non-floating output)."""
        rng = np.random.default_rng(1)
        return [rng.standard_normal(np.shape(o)).astype(np.asarray(o).dtype)
                if _is_float(o) else None for o in outputs]

    # -- meta ------------------------------------------------------------------------
    def meta(self) -> str:
        op = self.op
        inferred = op.meta_fn is None
        source = "the meta inferred by running the kernel (no meta function)" \
            if inferred else "the meta function"
        hint = ("; its output shapes depend on the input values: give the op a meta "
                "function (meta=)") if inferred else ""
        sample_dtype = DTYPE_NAMES[kernel_dtype(op.plan, tuple(self.inputs))]
        kind = np.dtype(sample_dtype).kind    # the sample's values mean something in
        for dtype in dict.fromkeys(           # its own kind only: floats, or integers
                sample_dtype if d == "*" else d for d in op.dtypes
                if d == "*" or np.dtype(d).kind == kind):
            inputs = self._cast(sample_dtype, dtype)
            where = f"dtype {dtype}"
            try:
                results = self._run_kernel(inputs)
            except Exception as exc:
                raise self.fail("meta", f"the kernel for {where} raised "
                                        f"{type(exc).__name__}: {exc}") from exc
            try:
                metas = op.infer_meta(_each(lambda v: (v.shape, v.dtype), inputs),
                                      self.attrs)
            except Exception as exc:
                raise self.fail("meta", f"{source} raised {type(exc).__name__}: "
                                        f"{exc} ({where})") from exc
            finite_in = _finite(inputs)
            if len(results) != len(metas):
                raise self.fail("meta", f"the kernel for {where} returned {len(results)} "
                                        f"value(s), the op has {len(metas)} output(s)")
            for spec, value, meta in zip(op.outputs, results, metas):
                value = np.asarray(value)
                shape_ok = value.ndim == meta.ndim and all(
                    m is None or m == s for m, s in zip(meta.shape, value.shape))
                if value.dtype != meta.dtype.numpy_dtype or not shape_ok:
                    raise self.fail("meta", f"output '{spec.name}' ({where}): {source} "
                                            f"says {meta.dtype.name}{meta.shape}, "
                                            f"the kernel returned "
                                            f"{value.dtype}{list(value.shape)}{hint}")
                bad = _nonfinite(value) if finite_in else None
                if bad:
                    raise self.fail("meta", f"output '{spec.name}' ({where}) is not finite "
                                            f"from finite inputs: {bad}")
        return INFERRED if inferred else "ok"

    def _cast(self, source: str, dtype: str) -> list[Any]:
        """The sample with the arrays of the dispatch dtype cast to ``dtype``."""
        target = as_dtype(dtype).numpy_dtype
        return _each(lambda v: v.astype(target) if v.dtype == source else v, self.inputs)

    def _run_kernel(self, inputs: list[Any]) -> tuple:
        """The kernel's own results (before the registry checks them against the meta)."""
        from fastop._core.kernel import CKernel
        kernel = self.op.plan.choose(inputs)[0]
        if isinstance(kernel, CKernel):
            return self.op.invoke(_each(from_numpy, inputs), self.attrs)
        return _as_tuple(kernel(*inputs, **self.attrs))

    # -- gradients ---------------------------------------------------------------------
    def _no_gradient(self) -> str | None:
        if self.op.grad_rule is None:
            return "skipped: no gradient rule"
        if not self.wrt:
            return "skipped: no differentiable floating input"
        return None

    def gradient(self) -> str:
        skip = self._no_gradient()
        if skip:
            return skip
        try:
            self.op.kernel_for("float64")
        except TypeError:
            raise self.fail("gradient", "needs a float64 kernel to compare the gradient "
                                        "rule with finite differences (add float64 to "
                                        "@op.kernel)") from None
        tol = self._tol(_GRAD_TOL)
        inputs = self._float64()
        try:
            grads = check_grad_rule(self.op, inputs, self.attrs, wrt=self.wrt,
                                    eps=1e-6, tol=tol["atol"], rtol=tol["rtol"])
        except AssertionError as exc:
            raise self.fail("gradient", str(exc)) from None
        if _finite(inputs):
            for i in self.wrt:
                for k, g in enumerate(_flat([grads[i]])):
                    bad = _nonfinite(np.asarray(g))
                    if bad:
                        where = self.op.inputs[i].name + \
                            (f"[{k}]" if isinstance(grads[i], list) else "")
                        raise self.fail("gradient", f"the gradient of input '{where}' is "
                                                    f"not finite from finite inputs: {bad}")
        return "ok"

    def reads(self) -> str:
        skip = self._no_gradient()
        if skip:
            return skip
        rule = self.op.grad_rule
        if rule.kernel_op is not None:
            return "skipped: a backward kernel is given only the values it needs"
        if rule.reads is None:
            return "skipped: the gradient rule declares no reads="
        inputs = self._float64()
        outputs = [np.asarray(o) for o in self.op.invoke(_each(from_numpy, inputs),
                                                          self.attrs)]
        douts = self._douts(outputs)
        base = run_grad_rule(self.op, inputs, outputs, douts, self.attrs)
        names_in = [a.name for a in self.op.inputs]
        names_out = [a.name for a in self.op.outputs]
        for i in self.wrt:
            x = names_in[i]
            for needed in rule.needs:
                if needed in rule.reads.get(x, ()):
                    continue
                ins, outs = list(inputs), list(outputs)
                values, k = (ins, names_in.index(needed)) if needed in names_in \
                    else (outs, names_out.index(needed))
                if values[k] is None:          # an absent optional input: nothing to read
                    continue
                values[k] = _other_numbers(values[k])
                declared = list(rule.reads.get(x, ()))
                why = (f"the gradient of input '{x}' depends on the contents of "
                       f"'{needed}', which reads= does not declare for it (declared: "
                       f"{declared}); declare it, or use only its shape and dtype")
                try:
                    changed = run_grad_rule(self.op, ins, outs, douts, self.attrs)
                except Exception as exc:
                    raise self.fail("reads", f"{why}: replacing it made the rule raise "
                                             f"{type(exc).__name__}: {exc}") from exc
                try:
                    for got, want in zip(_flat([changed[i]]), _flat([base[i]])):
                        assert_close(got, want)
                except AssertionError as exc:
                    raise self.fail("reads", f"{why}: {exc}") from None
        return "ok"

    def double_grad(self) -> str:
        skip = self._no_gradient()
        if skip:
            return skip
        rule = self.op.grad_rule
        if rule.kernel_op is not None and \
                self.op.registry.get(rule.kernel_op).grad_rule is None:
            return (f"skipped: the gradient is the backward kernel {rule.kernel_op}, "
                    f"which has no gradient rule")
        inputs = self._float64()
        call = self._eager_call(inputs)
        frozen = self._gradients_not_recorded(call, inputs)
        if frozen:
            users = self._rule_ops_without_gradient()
            why = (f"the rule calls {', '.join(users)}, which "
                   f"{'has' if len(users) == 1 else 'have'} no gradient rule") if users \
                else "the rule computes it outside autograd"
            return (f"skipped: the gradient of {', '.join(frozen)} is not differentiable "
                    f"again ({why})")
        try:
            with mode_guard("eager"):
                gradgradcheck(call, self._tensors(inputs), eps=1e-6,
                              **self._tol(_DOUBLE_GRAD_TOL))
        except GradcheckError as exc:
            raise self.fail("double_grad", str(exc).split("\n")[0]) from None
        return "ok"

    def _gradients_not_recorded(self, call: Callable[..., Any],
                                inputs: Sequence[Any]) -> list[str]:
        """The inputs whose first-order gradient (eager, ``create_graph=True``, as a
        function of the inputs and the output gradients, as gradgradcheck takes it)
        autograd did not record: a composite rule calling an op without a gradient rule."""
        from fastop.tensor import grad, to_tensor
        tensors = self._tensors(inputs)
        with mode_guard("eager"):
            outs = [o for o in _as_tuple(call(*tensors)) if o.dtype.is_floating]
            douts = [to_tensor(d, stop_gradient=False)
                     for d in self._douts([o.numpy() for o in outs])]
            grads = grad(outs, [t for t in tensors if not t.stop_gradient], douts,
                         create_graph=True, allow_unused=True)
        leaves = [self.op.inputs[i].name for i in self.wrt for _ in _flat([inputs[i]])]
        return list(dict.fromkeys(f"input '{name}'" for name, g in zip(leaves, grads)
                                  if g is not None and g.stop_gradient))

    def _rule_ops_without_gradient(self) -> list[str]:
        """The ops the gradient rule calls that take differentiable inputs but have no
        gradient rule of their own (read off the rule applied in a static Program)."""
        outputs = self.op.invoke(_each(from_numpy, self.inputs), self.attrs)
        main, *_ = self._static_program(self._douts([np.asarray(o) for o in outputs]))
        ops = main.global_block().ops[1:]           # after the op itself: its gradient
        return list(dict.fromkeys(op.opdef.name for op in ops if op.opdef.grad_rule is None
                                  and op.opdef.differentiable_inputs))

    def _tensors(self, inputs: Sequence[Any]) -> list[Any]:
        """Eager tensors of the inputs, flat; those checked take gradients."""
        from fastop.tensor import to_tensor
        return [to_tensor(v, stop_gradient=i not in self.wrt)
                for i, x in enumerate(inputs) for v in _flat([x])]

    def _eager_call(self, like: Sequence[Any]) -> Callable[..., Any]:
        op, attrs = self.op, self.attrs

        def call(*tensors: Any) -> Any:
            return op(*_regroup(tensors, like), **attrs)
        call.__name__ = op.name
        return call

    # -- eager against static ---------------------------------------------------------
    def eager_static(self) -> str:
        eager_outs, douts, eager_grads = self._eager()
        static_outs, static_grads = self._static(douts)
        names = [a.name for a in self.op.outputs]
        tol = self._tol((None, None))
        for name, e, s in zip(names, eager_outs, static_outs):
            try:
                assert_close(s, e, **tol)
            except AssertionError as exc:
                raise self.fail("eager_static", f"output '{name}', static against eager: "
                                                f"{exc}") from None
        leaves = [(i, k if isinstance(self.inputs[i], list) else None) for i in self.wrt
                  for k in range(len(_flat([self.inputs[i]])))]
        for (i, k), e, s in zip(leaves, eager_grads, static_grads):
            where = f"input '{self.op.inputs[i].name}'" + ("" if k is None else f"[{k}]")
            if (e is None) != (s is None):
                raise self.fail("eager_static", f"gradient of {where}: "
                                                f"{'none' if e is None else 'one'} in eager "
                                                f"mode, {'none' if s is None else 'one'} "
                                                f"in static mode")
            if e is not None:
                try:
                    assert_close(s, e, **tol)
                except AssertionError as exc:
                    raise self.fail("eager_static", f"gradient of {where}, static against "
                                                    f"eager: {exc}") from None
        return "ok"

    def _backward_wanted(self) -> bool:
        return self.op.grad_rule is not None and bool(self.wrt)

    def _eager(self) -> tuple[list[np.ndarray], list[Any], list[np.ndarray | None]]:
        """Outputs, the output gradients used (None: not floating) and input gradients."""
        from fastop.tensor import grad, to_tensor
        flat = self._tensors(self.inputs)
        with mode_guard("eager"):
            outs = _as_tuple(self._eager_call(self.inputs)(*flat))
            arrays = [o.numpy() for o in outs]
            douts = self._douts(arrays)
            if not self._backward_wanted():
                return arrays, douts, []
            pairs = [(o, d) for o, d in zip(outs, douts) if d is not None]
            sources = [t for t in flat if not t.stop_gradient]
            grads = grad([o for o, _ in pairs], sources, [to_tensor(d) for _, d in pairs],
                         allow_unused=True)
        return arrays, douts, [None if g is None else g.numpy() for g in grads]

    def _static(self, douts: Sequence[Any]) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
        from fastop import static
        main, scope, feed, outs, grads = self._static_program(douts)
        fetched = static.Executor(static.CPUPlace()).run(
            main, feed=feed, fetch_list=[*outs, *[g for g in grads if g is not None]],
            scope=scope)
        results = iter(fetched[len(outs):])
        return list(fetched[:len(outs)]), [None if g is None else next(results) for g in grads]

    def _static_program(self, douts: Sequence[Any]) -> tuple[Any, Any, dict[str, np.ndarray],
                                                              tuple, list[Any]]:
        """A one-op Program on data variables, with its gradient appended when there is
        one: (program, scope, feed, outputs, input gradients)."""
        from fastop import static
        main, startup, scope = static.Program(), static.Program(), static.Scope()
        feed: dict[str, np.ndarray] = {}

        def data(value: np.ndarray, trainable: bool) -> Any:
            var = static.data(f"opcheck_in{len(feed)}", list(value.shape), value.dtype.name)
            var.stop_gradient = not trainable
            feed[var.name] = value
            return var
        with static.program_guard(main, startup), static.scope_guard(scope), \
                mode_guard("static"):
            variables = [_each(lambda v: data(v, i in self.wrt), [x])[0]
                         for i, x in enumerate(self.inputs)]
            outs = _as_tuple(self.op(*variables, **self.attrs))
            grads: list[Any] = []
            if self._backward_wanted():
                pairs = [(o, data(d, False)) for o, d in zip(outs, douts) if d is not None]
                sources = _flat([variables[i] for i in self.wrt])
                grads = static.gradients([o for o, _ in pairs], sources,
                                         [d for _, d in pairs])
        return main, scope, feed, outs, grads


def _other_numbers(value: Any) -> Any:
    """Different values of the same shape and dtype (a list: each entry)."""
    if isinstance(value, list):
        return [_other_numbers(v) for v in value]
    value = np.asarray(value)
    rng = np.random.default_rng(2)
    if value.dtype.kind == "f":
        return (rng.standard_normal(value.shape) * 2 + 3).astype(value.dtype)
    if value.dtype.kind == "b":
        return ~value
    low, high = (int(value.min()), int(value.max())) if value.size else (0, 0)
    return rng.integers(low, high + 1, value.shape).astype(value.dtype)
