"""The one op registry: every op, built-in or from a plugin, is an :class:`OpDef` here.

An op definition (after OneFlow's user ops) has a namespaced type name
(``"activations::swish"``), named inputs and outputs (``"bias?"`` optional, ``"xs*"``
variadic), typed attributes with defaults, a meta function inferring output shapes and
dtypes (used by static graphs before anything runs; optional: without one, a run of the
kernel tells them, see :meth:`OpDef.infer_by_running`), kernels by dtype (Python
functions on numpy arrays, or a Cython :class:`~fastop._core.kernel.CKernel`), and a
gradient rule.

Eager calls, static Programs, the executor, autograd, the profiler and the CLI all reach
ops through this registry.

Example::

    op = registry.define("activations::swish", inputs=["x"], outputs=["y"],
                         attrs={"beta": 1.0})

    @op.meta
    def _(x, beta):
        return x                      # same shape and dtype as x

    @op.kernel("float32", "float64")
    def _(x, beta):
        return x / (1.0 + np.exp(-beta * x))

    @op.grad_kernel(needs=["x", "y", "dy"])
    def swish_backward(x, y, dy, beta):
        s = 1.0 / (1.0 + np.exp(-beta * x))
        return dy * (y * beta + s * (1.0 - beta * y))

Calling an op (``op(x, beta=2.0)``) is :class:`fastop.ops._dispatch.OpBase`'s C entry:
it computes in eager mode and appends an operator in static mode.
"""
from __future__ import annotations

import functools
import inspect
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import numpy as np

from fastop._core.kernel import CKernel, PythonKernel, add_note
from fastop._core.storage import DType, DenseTensor, as_dtype, as_ndarray
from fastop.ops._dispatch import OpBase, bump_registry_version, invoke
from fastop.ops._namespaces import OpNamespace, make_namespace

__all__ = [
    "ArgSpec", "AttrSpec", "TensorMeta", "OpDef", "GradRule", "Registry", "OpError",
    "UnknownOpError", "DuplicateOpError", "OpDefinitionError", "UntakenGradientError",
    "registry", "add_note",
    "apply_grad_rule",
]

REQUIRED = object()  # marks an attribute without a default


def _takes_keyword(fn: Callable, name: str) -> bool:
    """Whether `fn` declares a parameter `name`. Read from the code object when there is
    one: ``inspect.signature`` costs ~30 µs a call, a third of registering the
    built-in ops at ``import fastop``."""
    code = getattr(fn, "__code__", None)
    if code is not None and not hasattr(fn, "__wrapped__"):
        n = code.co_argcount + code.co_kwonlyargcount
        return name in code.co_varnames[:n]
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):        # a callable without a signature
        return False


class OpError(Exception):
    """Base class of the registry's errors."""


class UnknownOpError(OpError, LookupError, AttributeError):
    """No op or op namespace of that name (a LookupError, and an AttributeError for
    namespace access). ``reason`` is why, when the plugin declaring the namespace failed
    to load (its error is the ``__cause__``); empty otherwise."""

    reason: str = ""


class DuplicateOpError(OpError):
    pass


class OpDefinitionError(OpError, TypeError):
    pass


class UntakenGradientError(OpError, RuntimeError):
    """Backward found a gradient in an op's output its backward kernel does not take."""


@dataclass(frozen=True)
class ArgSpec:
    """A named input or output; optional (``"name?"``) or variadic (``"name*"``)."""

    name: str
    optional: bool = False
    variadic: bool = False

    @classmethod
    def parse(cls, spec: str | ArgSpec) -> ArgSpec:
        if isinstance(spec, ArgSpec):
            return spec
        parsed = _PARSED_SPECS.get(spec) if isinstance(spec, str) else None
        if parsed is None:
            if not isinstance(spec, str) or not spec.rstrip("?*").isidentifier():
                raise OpDefinitionError(f"argument spec must be an identifier with an "
                                        f"optional '?' or '*' suffix, got {spec!r}")
            parsed = _PARSED_SPECS[spec] = cls(spec.rstrip("?*"), spec.endswith("?"),
                                               spec.endswith("*"))
        return parsed

    def __str__(self) -> str:
        return self.name + ("?" if self.optional else "*" if self.variadic else "")


# spec string -> ArgSpec: the built-in ops name "x", "y", "out" ... some 300 times
_PARSED_SPECS: dict[str, ArgSpec] = {}

_ATTR_TYPES = (bool, int, float, str, list, tuple, DType)


@dataclass(frozen=True)
class AttrSpec:
    """A typed attribute; the type is that of the default unless given."""

    name: str
    type: type
    default: Any = REQUIRED

    @classmethod
    def from_default(cls, name: str, default: Any) -> AttrSpec:
        if isinstance(default, AttrSpec):
            return default
        if isinstance(default, type):
            return cls(name, default)
        if default is None:
            return cls(name, object, None)
        kind = next((t for t in _ATTR_TYPES if isinstance(default, t)), None)
        if kind is None:
            raise OpDefinitionError(f"attribute {name!r}: unsupported default "
                                    f"{default!r} of type {type(default).__name__}")
        return cls(name, list if kind is tuple else kind, default)

    def check(self, op: str, value: Any) -> Any:
        t = self.type
        if t is object or isinstance(value, t) and not (t is int and isinstance(value, bool)):
            return value
        if t is float and isinstance(value, (int, np.integer, np.floating)) \
                and not isinstance(value, bool):
            return float(value)
        if t is int and isinstance(value, np.integer):
            return int(value)
        if t is list and isinstance(value, (tuple, list)):
            return list(value)
        if t is DType:
            return as_dtype(value)
        raise TypeError(f"{op}: attribute '{self.name}' expects {t.__name__}, got "
                        f"{type(value).__name__} ({value!r})")


class TensorMeta:
    """Shape (a list; None for an unknown dim) and dtype of a value, for meta functions."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: Sequence[int | None], dtype: Any) -> None:
        self.shape = [None if d is None or d < 0 else int(d) for d in shape]
        self.dtype = as_dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorMeta) and self.shape == other.shape \
            and self.dtype == other.dtype

    def __repr__(self) -> str:
        return f"TensorMeta({self.shape}, {self.dtype.name})"


def _as_meta(value: Any) -> TensorMeta:
    if isinstance(value, TensorMeta):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        return TensorMeta(*value)
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        raise TypeError(f"meta functions return TensorMeta(shape, dtype), got {value!r}")
    return TensorMeta(list(shape), dtype)


def require_callable(op: str, what: str, fn: Any) -> None:
    """Refuse, at definition, a kernel, meta function or rule that cannot be called: a
    call would fail far from the definition that gave it."""
    if not callable(fn):
        raise OpDefinitionError(f"{op}: {what} must be callable, got "
                                f"{type(fn).__name__} ({fn!r:.60})")


def _bare_meta(spec: ArgSpec, result: list | tuple) -> bool:
    """Whether a meta function's list or tuple `result` is the meta of a single output
    `spec` itself rather than a list of one per output: a ``(shape, dtype)`` pair, or the
    list of metas of a variadic output."""
    if spec.variadic:
        return not (len(result) == 1 and isinstance(result[0], (list, tuple)))
    return isinstance(result, tuple) and len(result) == 2 \
        and not isinstance(result[0], (TensorMeta, tuple))


def did_you_mean(name: str, choices: Iterable[str], n: int = 3) -> str:
    """``"; did you mean 'a', 'b'?"`` for the choices closest to `name`, ``""`` when none
    is close: the hint of every unknown-name error (ops, namespaces, variables)."""
    import difflib      # error paths only: import fastop does not pay for it
    close = difflib.get_close_matches(name, list(choices), n=n)
    return f"; did you mean {', '.join(map(repr, close))}?" if close else ""


@dataclass
class GradRule:
    """How to differentiate an op.

    ``fn(*needed, *output_grads, **attrs)`` returns one gradient per input (None where
    there is none). ``needed`` are the forward inputs/outputs named in ``needs``, in that
    order; output grads come in output order. ``fn`` composes registered ops, so it runs
    in eager mode (and is itself differentiable) and in static mode (appending ops).

    An output no gradient flows into gets zeros of its shape, unless
    ``materialize_grads`` is False: then it gets None, and the rule skips that output's
    term (an auxiliary output that is rarely used then costs nothing).

    Eager backward refuses to run a rule whose needed values were modified in place
    after the forward pass. ``reads`` narrows that to the values a gradient really
    reads: per differentiable input, the needed values its gradient reads (not only
    their shapes and dtypes); an input left out reads none (add's gradients only sum a
    broadcast back). Only the gradients of inputs that take one count, as in PyTorch:
    for ``x @ W`` with only W taking a gradient, x may change, not W. None: every
    gradient reads every needed value.
    """

    fn: Callable[..., Any]
    needs: tuple[str, ...]
    materialize_grads: bool = True
    reads: dict[str, tuple[str, ...]] | None = None
    # A *kernel rule* (``OpDef.grad_op``, ``grad_kernel``): the gradients are the outputs
    # of one backward op, whose inputs are taken from the needed values and the output
    # gradients (``backward_args``: per backward input, (0, k) for needs[k] or (1, j) for
    # output j's gradient). Eager backward then runs that op's kernel directly.
    backward_op: "OpDef | None" = None
    backward_args: tuple[tuple[int, int], ...] = ()
    # the outputs whose gradients the backward op takes: the kernel path applies while
    # no other output carries a gradient (else `fn`, the general rule, runs)
    kernel_outputs: tuple[int, ...] = ()
    # the composite rule takes a keyword ``needs_input_grad`` (one bool per input)
    wants_needs_input_grad: bool = False
    # a kernel rule's outputs declared non-differentiable: a gradient into one is dropped
    nondifferentiable: tuple[int, ...] = ()
    # a kernel rule given ``otherwise``: `fn` takes the gradients the backward op does not
    has_otherwise: bool = False
    # a kernel rule whose backward op has variadic or optional outputs: per declared
    # input, ("none", -1) (no gradient), ("one", -1), or ("list" | "maybe", k) with k the
    # needed value giving its entries (a variadic input) or presence (an optional one)
    grad_layout: tuple[tuple[str, int], ...] | None = None

    def screen_output_grads(self, op: "OpDef", grads: list[Any]) -> None:
        """A kernel rule's output gradients (None where none flows) made what it takes:
        the gradient of a declared non-differentiable output dropped; one flowing into
        another output the backward op does not take is an error, unless ``otherwise``
        takes it. Integer outputs carry none (eager and static never send one)."""
        for k, g in enumerate(grads):
            if g is None or k in self.kernel_outputs:
                continue
            if k in self.nondifferentiable:
                grads[k] = None
            elif not self.has_otherwise:
                out = op.outputs[k].name
                taken = [op.outputs[j].name for j in self.kernel_outputs]
                raise UntakenGradientError(
                    f"{op.name}: a gradient flows into output '{out}', but its backward "
                    f"op {self.kernel_op} takes the gradients of {taken} only; take "
                    f"'d{out}' in the backward kernel's needs, or declare the output "
                    f"nondifferentiable=['{out}'] (then no gradient flows back through it)")

    def gradients_by_input(self, outs: Sequence[Any], needed: Sequence[Any]
                           ) -> tuple[Any, ...]:
        """The backward op's output tensors (one per entry of a variadic input's
        gradient, none for an absent optional input) as one gradient per declared input:
        a list for a variadic one, None for one without (`needed`: the rule's needed
        values, which hold the variadic and optional inputs)."""
        result: list[Any] = []
        j = 0
        for kind, k in self.grad_layout:
            if kind == "none" or (kind == "maybe" and needed[k] is None):
                result.append(None)
            elif kind == "list":
                n = len(needed[k])
                result.append(list(outs[j:j + n]))
                j += n
            else:
                result.append(outs[j])
                j += 1
        return tuple(result)

    @property
    def kernel_op(self) -> str | None:
        """The backward op's name, for a kernel rule."""
        return None if self.backward_op is None else self.backward_op.name


@dataclass(eq=False)
class OpDef(OpBase):
    """One op definition. Build with :meth:`Registry.define`; call it to run the op.

    Change a definition through its decorators (they invalidate the call plans that
    cache what its calls need)."""

    name: str
    inputs: tuple[ArgSpec, ...]
    outputs: tuple[ArgSpec, ...]
    attrs: dict[str, AttrSpec]
    doc: str = ""
    meta_fn: Callable[..., Any] | None = None
    kernels: dict[str, Any] = field(default_factory=dict)  # dtype name or "*" -> kernel
    grad_rule: GradRule | None = None
    plugin: str = "fastop"        # the distribution that provides the op
    version: str = ""
    differentiable: tuple[str, ...] | None = None  # inputs that take gradients
    # the inputs that compute in one dtype with Python scalars (None: all; see
    # fastop.ops._dispatch's scalar rule), e.g. where's x and y, not its condition
    promotes: tuple[str, ...] | None = None
    int_to_float: bool = False    # integer/bool inputs compute in float32 (true division)
    # side effects (I/O, a global random stream): the executor runs it on the calling
    # thread, after the ordered ops before it, never beside another
    ordered: bool = False
    # integer outputs take gradients whenever an input does (a dtype conversion: cast)
    integer_grads: bool = False
    # where the op came from, for saving a Program that holds it: py_func's functions
    # (a PyFuncSource), or the module of a load_directory op (ops._sources.DirectorySource)
    source: Any = field(default=None, repr=False)
    registry: "Registry | None" = field(default=None, repr=False, compare=False)
    # every output is one tensor (no "d?"/"ds*" output: only the backward ops grad_kernel
    # makes for optional and variadic inputs have those)
    fixed_outputs: bool = field(default=True, init=False, repr=False, compare=False)
    # an op without a meta function: its outputs' metas by input signature (see
    # infer_by_running), learned by running the kernel, the most recent last
    inferred_metas: dict[tuple, list[TensorMeta]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.fixed_outputs = not any(a.optional or a.variadic for a in self.outputs)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # a subclass's docstring is its class's; its ops still show their own doc=
        super().__init_subclass__(**kwargs)
        cls.__doc__ = _PerOp(cls.__dict__.get("__doc__"), _op_docstring)

    # -- definition (decorators) -----------------------------------------------
    def meta(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Register the meta function: ``fn(*input_metas, **attrs) -> TensorMeta(s)``."""
        require_callable(self.name, "the meta function", fn)
        self.meta_fn = fn
        bump_registry_version()
        return fn

    def kernel(self, *dtypes: Any) -> Callable[[Callable], Callable]:
        """Register a Python kernel for the given dtypes (all dtypes when none given).

        The kernel takes numpy arrays (zero-copy views of the inputs; a list for a
        variadic input, None for an absent optional one) and the attributes as keyword
        arguments, and returns one array per output (a tuple when several).
        """
        names = [as_dtype(d).name for d in dtypes] or ["*"]

        def register(fn: Callable) -> Callable:
            require_callable(self.name, f"the kernel for {', '.join(names)}".replace(
                "for *", "for every dtype"), fn)
            for n in names:
                self.kernels[n] = fn
            self.inferred_metas.clear()      # learned from the kernels it replaces
            bump_registry_version()
            return fn
        return register

    def grad(self, needs: Iterable[str] = (), materialize_grads: bool = True,
             reads: Mapping[str, Iterable[str]] | None = None
             ) -> Callable[[Callable], Callable]:
        """Register a composite gradient rule (see :class:`GradRule`); with
        ``materialize_grads=False`` it receives None for outputs no gradient flows into,
        instead of zeros; ``reads`` maps a differentiable input to the needed values its
        gradient reads (the rest only for shapes and dtypes)."""
        needs = tuple(needs)
        reads = None if reads is None else {k: tuple(v) for k, v in reads.items()}

        def register(fn: Callable) -> Callable:
            require_callable(self.name, "the gradient rule", fn)
            self._check_fixed_outputs()
            self._check_needs(needs, allow_grads=False)
            if reads is not None:
                self._check_reads(needs, reads)
            self.grad_rule = GradRule(fn, needs, materialize_grads=materialize_grads,
                                      reads=reads,
                                      wants_needs_input_grad=_takes_keyword(
                                          fn, "needs_input_grad"))
            bump_registry_version()
            return fn
        return register

    def grad_op(self, backward_op: OpDef, needs: Iterable[str],
                reads: Mapping[str, Iterable[str]] | None = None,
                otherwise: Callable[..., Any] | None = None,
                nondifferentiable: Iterable[str] = ()) -> OpDef:
        """Declare the gradient as one backward op (OneFlow's ``REGISTER_USER_OP_GRAD``
        binding a backward op): its inputs are ``needs`` — forward inputs and outputs by
        name, output gradients as ``"d" + output`` — and its outputs are the gradients of
        the differentiable inputs, in order. It must take this op's attributes.

        A variadic input ``"xs*"`` has a variadic gradient output (``"dxs*"``: one
        tensor per entry), which the backward op makes knowing the input (it must be in
        ``needs``); an optional input ``"b?"`` the backward op takes has an optional one
        (``"db?"``: none when ``b`` is absent), one it does not take a plain one (made
        always, dropped when ``b`` is absent). Needed inputs are declared as in this op.

        Eager backward runs the backward op's kernel directly (no Python rule runs);
        ``create_graph=True`` and static ``append_backward`` call the op, so a backward
        op with a gradient rule of its own makes higher-order gradients work.

        Outputs whose gradients the backward op does not take: an integer or bool output
        never carries a gradient. A floating one carries a gradient when it is used on
        the way to what is differentiated; then ``otherwise`` (a composite rule, with the
        same forward needs, receiving None for outputs no gradient flows into) runs
        instead, or, without it, backward raises an error naming the op and the output.
        ``nondifferentiable`` declares floating outputs no gradient flows back through
        (statistics, masks): used later, they count as constants."""
        needs = tuple(needs)
        nondiff = tuple(nondifferentiable)
        self._check_fixed_outputs()
        self._check_needs(needs, allow_grads=True)
        if otherwise is not None:
            require_callable(self.name, "the gradient rule (otherwise=)", otherwise)
        outputs = [a.name for a in self.outputs]
        grad_names = {"d" + o for o in outputs} - {a.name for a in self.inputs} - set(outputs)
        forward_needs = tuple(n for n in needs if n not in grad_names)
        args = tuple((1, outputs.index(n[1:])) if n in grad_names else
                     (0, forward_needs.index(n)) for n in needs)
        diff = self.differentiable_inputs
        if len(backward_op.inputs) != len(needs) or len(backward_op.outputs) != len(diff):
            raise OpDefinitionError(
                f"{self.name}: backward op {backward_op.name} takes {len(backward_op.inputs)} "
                f"inputs and makes {len(backward_op.outputs)} outputs; the gradient needs "
                f"{len(needs)} inputs ({', '.join(needs)}) and {len(diff)} outputs (one "
                f"per differentiable input: {', '.join(diff)})")
        if set(backward_op.attrs) != set(self.attrs):
            raise OpDefinitionError(f"{self.name}: backward op {backward_op.name} must take "
                                    f"this op's attributes {sorted(self.attrs)}, it takes "
                                    f"{sorted(backward_op.attrs)}")
        self._check_backward_specs(backward_op, needs)
        reads = None if reads is None else {k: tuple(v) for k, v in reads.items()}
        if reads is not None:
            self._check_reads(forward_needs, reads)
        taken = tuple(sorted({k for src, k in args if src == 1}))
        bad = [n for n in nondiff if n not in outputs or outputs.index(n) in taken]
        if bad:
            left_out = [o for k, o in enumerate(outputs) if k not in taken]
            raise OpDefinitionError(
                f"{self.name}: nondifferentiable={list(nondiff)}: {bad} "
                f"{'is' if len(bad) == 1 else 'are'} not among the outputs whose gradients "
                f"the backward op leaves out ({left_out})")
        input_order = [a.name for a in self.inputs]
        gradient_specs = dict(zip(diff, backward_op.outputs))
        layout = None if backward_op.fixed_outputs else tuple(
            ("none", -1) if spec.name not in diff else
            ("list", forward_needs.index(spec.name)) if gradient_specs[spec.name].variadic
            else ("maybe", forward_needs.index(spec.name))
            if gradient_specs[spec.name].optional else ("one", -1)
            for spec in self.inputs)
        rule = GradRule(otherwise, forward_needs, reads=reads,
                        materialize_grads=otherwise is None, backward_op=backward_op,
                        backward_args=args, kernel_outputs=taken,
                        nondifferentiable=tuple(outputs.index(n) for n in nondiff),
                        has_otherwise=otherwise is not None, grad_layout=layout)

        def kernel_rule(*values: Any, **attrs: Any) -> tuple[Any, ...]:
            """The backward op on the needed values and output gradients."""
            grads = values[len(forward_needs):]
            result = backward_op(*[values[k] if src == 0 else grads[k] for src, k in args],
                                 **attrs)
            outs = result if isinstance(result, tuple) else (result,)
            if layout is not None:
                return rule.gradients_by_input(outs, values)
            by_input = dict(zip(diff, outs))
            return tuple(by_input.get(n) for n in input_order)

        kernel_rule.__name__ = kernel_rule.__qualname__ = f"{self.short_name}_grad_rule"
        if otherwise is None:
            rule.fn = kernel_rule
        self.grad_rule = rule
        bump_registry_version()
        return backward_op

    def _check_backward_specs(self, backward_op: OpDef, needs: tuple[str, ...]) -> None:
        """The backward op declares a needed variadic or optional input as the forward op
        does, and each gradient as :meth:`_gradient_spec` says."""
        specs = {a.name: a for a in self.inputs}
        for name, spec in zip(needs, backward_op.inputs):
            want = specs.get(name)
            if want is not None and (want.variadic, want.optional) != (spec.variadic,
                                                                     spec.optional):
                raise OpDefinitionError(
                    f"{self.name}: backward op {backward_op.name} declares input "
                    f"'{spec}' for '{want}'; declare it "
                    f"'{spec.name}{str(want)[len(want.name):]}' as this op does")
        self._check_variadic_needs(needs)
        for name, out in zip(self.differentiable_inputs, backward_op.outputs):
            want = ArgSpec.parse(self._gradient_spec(name, needs))
            if (want.variadic, want.optional) != (out.variadic, out.optional):
                raise OpDefinitionError(
                    f"{self.name}: backward op {backward_op.name} declares output '{out}' "
                    f"for the gradient of '{specs[name]}'; declare it "
                    f"'{out.name}{str(want)[len(want.name):]}'")

    def _gradient_spec(self, name: str, needs: tuple[str, ...]) -> str:
        """The backward op's output for the gradient of input `name`: ``"dxs*"`` for a
        variadic input (one tensor per entry), ``"db?"`` for an optional one the
        backward op takes (none when it is absent), else ``"d<name>"`` (an optional input
        it does not take: the gradient is made always, and dropped when it is absent)."""
        spec = next(a for a in self.inputs if a.name == name)
        suffix = "*" if spec.variadic else "?" if spec.optional and name in needs else ""
        return "d" + name + suffix

    def _check_fixed_outputs(self) -> None:
        """Gradient rules take one gradient per output: an op whose outputs vary per
        call (a backward op's variadic or optional gradients) has none."""
        if not self.fixed_outputs:
            varying = [str(o) for o in self.outputs if o.optional or o.variadic]
            raise OpDefinitionError(f"{self.name}: an op with variadic or optional outputs "
                                    f"({', '.join(varying)}) cannot have a gradient rule")

    def _check_variadic_needs(self, needs: tuple[str, ...]) -> None:
        """The backward op takes each differentiable variadic input: its gradient has one
        tensor per entry."""
        for spec in self.inputs:
            if spec.variadic and spec.name in self.differentiable_inputs \
                    and spec.name not in needs:
                raise OpDefinitionError(
                    f"{self.name}: the backward kernel must take variadic input "
                    f"'{spec.name}' (add it to needs): it returns one gradient per entry")

    def grad_kernel(self, needs: Iterable[str], meta: Callable[..., Any] | None = None,
                    nondifferentiable: Iterable[str] = ()) -> Callable[[Callable], Callable]:
        """Register a Python backward kernel (OneFlow's ``backward`` + ``InputGradBind``).

        ``needs`` names what the kernel takes, in order: forward inputs and outputs by
        name, output grads as ``"d" + output``. The kernel returns one gradient per
        differentiable input: a list of them for a variadic input ``"xs*"`` (one per
        entry; it must be in ``needs``), None for an optional input ``"b?"`` it takes
        and gets as None (absent); for an optional input it does not take it returns a
        gradient always, dropped when the input is absent. It becomes the op
        ``<name>_grad`` in the
        registry; its meta gives ``d<x>`` the meta of ``x`` when ``x`` is needed, else of
        the single output grad, unless ``meta`` is given (returning a list of metas for a
        variadic input's gradient, None for an absent optional one). When neither
        tells, the backward op has no meta function and its outputs' metas are inferred
        by running it (see ``meta`` in :meth:`Registry.define`).

        The kernel takes the gradients of the outputs it names; an integer or bool output
        never carries one. ``nondifferentiable`` declares floating outputs it leaves out
        and that no gradient flows back through; a gradient flowing into another left-out
        floating output is an error naming the op and the output (see :meth:`grad_op`).
        """
        needs = tuple(needs)
        nondiff = tuple(nondifferentiable)

        def register(fn: Callable) -> Callable:
            require_callable(self.name, "the backward kernel", fn)
            self._check_fixed_outputs()
            if meta is not None:
                require_callable(self.name, "the backward kernel's meta function", meta)
            self._check_needs(needs, allow_grads=True)
            self._define_grad_op(needs, fn, meta, nondiff)
            return fn
        return register

    def _define_grad_op(self, needs: tuple[str, ...], fn: Callable,
                        meta: Callable[..., Any] | None, nondiff: tuple[str, ...]) -> None:
        if self.registry is None:
            raise OpDefinitionError(f"{self.name}: define the op through a Registry first")
        self._check_variadic_needs(needs)
        out_names = {a.name for a in self.outputs}
        specs = {a.name: a for a in self.inputs}
        grad_names = tuple(n for n in needs if n[1:] in out_names and n.startswith("d")
                           and n not in set(specs) | out_names)
        diff = self.differentiable_inputs
        grad_outputs = tuple(self._gradient_spec(n, needs) for n in diff)
        if meta is None:
            meta = _default_grad_meta(self.name, needs, grad_names, diff,
                                      all(o.isidentifier() for o in grad_outputs))
        kernel = fn if all(o.isidentifier() for o in grad_outputs) \
            else _structured_backward_kernel(self.name, fn, needs, diff, grad_outputs)
        gop = self.registry.define(self.name + "_grad",
                                   inputs=tuple(str(specs.get(n, n)) for n in needs),
                                   outputs=grad_outputs, attrs=dict(self.attrs), meta=meta,
                                   doc=f"Backward kernel of {self.name}.")
        gop.kernel()(kernel)
        try:
            self.grad_op(gop, needs, nondifferentiable=nondiff)
        except OpDefinitionError:
            self.registry.remove(gop.name)      # a refused definition leaves nothing
            raise

    @property
    def differentiable_inputs(self) -> tuple[str, ...]:
        """Inputs that take gradients (all, unless the definition says otherwise)."""
        if self.differentiable is not None:
            return self.differentiable
        return tuple(a.name for a in self.inputs)

    def _check_needs(self, needs: tuple[str, ...], allow_grads: bool) -> None:
        known = {a.name for a in self.inputs} | {a.name for a in self.outputs}
        if allow_grads:
            known |= {"d" + a.name for a in self.outputs}
        bad = [n for n in needs if n not in known]
        if bad:
            raise OpDefinitionError(f"{self.name}: gradient needs unknown value(s) {bad}; "
                                    f"choose from {sorted(known)}")

    def _check_reads(self, needs: tuple[str, ...], reads: dict[str, tuple[str, ...]]) -> None:
        diff = self.differentiable_inputs
        bad = [k for k in reads if k not in diff]
        if bad:
            raise OpDefinitionError(f"{self.name}: gradient reads declared for {bad}, "
                                    f"which take no gradient; choose from {list(diff)}")
        bad = sorted({n for names in reads.values() for n in names if n not in needs})
        if bad:
            raise OpDefinitionError(f"{self.name}: a gradient reads {bad}, which the rule "
                                    f"does not need; it needs {list(needs)}")

    # -- introspection -------------------------------------------------------------
    @property
    def namespace(self) -> str:
        return self.name.split("::", 1)[0]

    @property
    def short_name(self) -> str:
        return self.name.split("::", 1)[1]

    @property
    def dtypes(self) -> list[str]:
        out: list[str] = []
        for key, k in self.kernels.items():
            out.extend(k.dtypes if isinstance(k, CKernel) else [key])
        return out

    def signature(self) -> str:
        ins = ", ".join(map(str, self.inputs))
        attrs = "".join(f", {a.name}={a.default!r}" if a.default is not REQUIRED
                        else f", {a.name}" for a in self.attrs.values())
        return f"{self.name}({ins}{attrs}) -> ({', '.join(map(str, self.outputs))})"

    def __repr__(self) -> str:
        return f"<OpDef {self.signature()} from {self.plugin}>"

    # -- binding and inference -----------------------------------------------------
    def bind(self, args: tuple, kwargs: dict) -> tuple[list[Any], dict[str, Any]]:
        """Split a call's arguments into inputs (in declared order) and checked attrs."""
        inputs: list[Any] = []
        kwargs = dict(kwargs)
        kwargs.pop("name", None)  # PaddlePaddle-style `name=` is accepted and ignored
        args = list(args)
        for spec in self.inputs:
            if args:
                inputs.append(args.pop(0))
            elif spec.name in kwargs:
                inputs.append(kwargs.pop(spec.name))
            elif spec.optional:
                inputs.append(None)
            else:
                raise TypeError(f"{self.name}: missing input '{spec.name}'")
            if spec.variadic and not isinstance(inputs[-1], (list, tuple)):
                raise TypeError(f"{self.name}: variadic input '{spec.name}' expects a "
                                f"list of tensors, got {type(inputs[-1]).__name__}")
        attr_names = list(self.attrs)
        for value, attr in zip(args, attr_names):
            if attr in kwargs:
                raise TypeError(f"{self.name}: attribute '{attr}' given twice")
            kwargs[attr] = value
        if len(args) > len(attr_names):
            raise TypeError(f"{self.name}: takes {len(self.inputs)} inputs and "
                            f"{len(attr_names)} attributes, got {len(args) + len(inputs)} "
                            f"positional arguments")
        return inputs, self.check_attrs(kwargs)

    def check_attrs(self, given: dict[str, Any]) -> dict[str, Any]:
        unknown = set(given) - set(self.attrs)
        if unknown:
            import difflib      # error paths only: import fastop does not pay for it
            close = {u: difflib.get_close_matches(u, list(self.attrs), 1) for u in unknown}
            hint = "; ".join(f"did you mean '{c[0]}' for '{u}'?" for u, c in close.items() if c)
            raise TypeError(f"{self.name}: unknown attribute(s) {sorted(unknown)}"
                            + (f" ({hint})" if hint else f"; expected {list(self.attrs)}"))
        out: dict[str, Any] = {}
        for name, spec in self.attrs.items():
            if name in given:
                out[name] = spec.check(self.name, given[name])
            elif spec.default is REQUIRED:
                raise TypeError(f"{self.name}: missing attribute '{name}'")
            else:
                out[name] = spec.default
        return out

    def infer_meta(self, metas: Sequence[Any], attrs: dict[str, Any]) -> list[TensorMeta]:
        """Output metas from input metas (shape/dtype pairs; None dims unknown): one per
        output tensor (a variadic output's list expanded, an absent optional one left
        out). From the meta function, or, for an op without one, by running its kernel
        on zeros (:meth:`infer_by_running`)."""
        return self.infer_meta_named(metas, attrs)[0]

    def infer_meta_named(self, metas: Sequence[Any], attrs: dict[str, Any]
                         ) -> tuple[list[TensorMeta], list[str] | None]:
        """:meth:`infer_meta`, with the name of each output tensor (``"dxs[1]"`` for an
        entry of a variadic output) for the errors about them; None when they are the
        declared outputs."""
        args = []
        for spec, m in zip(self.inputs, metas):
            if m is None:
                args.append(None)
            elif spec.variadic:
                args.append([_as_meta(x) for x in m])
            else:
                args.append(_as_meta(m))
        if self.meta_fn is None:
            return self.infer_by_running(args, attrs), None
        result = self.meta_fn(*args, **attrs)
        results = list(result) if isinstance(result, (list, tuple)) and not (
            len(self.outputs) == 1 and _bare_meta(self.outputs[0], result)) else [result]
        if len(results) != len(self.outputs):
            raise OpDefinitionError(
                f"{self.name}: meta function returned {len(results)} outputs, expected "
                f"{len(self.outputs)} ({', '.join(map(str, self.outputs))})")
        if self.fixed_outputs:
            try:
                return [_as_meta(r) for r in results], None
            except (TypeError, ValueError):     # say which output, what came
                for spec, r in zip(self.outputs, results):
                    self._output_meta(spec.name, r)
                raise
        out, names = [], []
        for spec, r in zip(self.outputs, results):
            if spec.variadic:
                if not isinstance(r, (list, tuple)):
                    raise TypeError(f"{self.name}: the meta function returned {r!r:.80} for "
                                    f"variadic output '{spec.name}', expected a list of "
                                    f"TensorMeta")
                for j, m in enumerate(r):
                    out.append(self._output_meta(f"{spec.name}[{j}]", m))
                    names.append(f"{spec.name}[{j}]")
            elif r is not None or not spec.optional:
                out.append(self._output_meta(spec.name, r))
                names.append(spec.name)
        return out, names

    def _output_meta(self, output: str, value: Any) -> TensorMeta:
        """What the meta function returned for `output`, as a TensorMeta."""
        try:
            return _as_meta(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{self.name}: the meta function returned {value!r:.80} for "
                            f"output '{output}', expected TensorMeta(shape, dtype) "
                            f"({exc})") from None

    # -- kernels ------------------------------------------------------------------
    def kernel_for(self, dtype: Any) -> Any:
        """The kernel calls of this dtype run: a CKernel or a Python function."""
        dtype = as_dtype(dtype)
        kernel = self.plan.kernels[dtype.code]
        if kernel is None:
            raise TypeError(self.no_kernel_message(dtype.name))
        return kernel

    def no_kernel_message(self, dtype: str, input_name: str | None = None) -> str:
        """The error of a call in a dtype the op has no kernel for: the op, the dtype, the
        dtypes it has kernels for and, when known, the input whose dtype it is."""
        whose = f" (the dtype of input '{input_name}')" if input_name else ""
        return (f"{self.name}: no kernel for dtype {dtype}; kernels exist for "
                f"{self.dtypes or 'no dtype'}{whose}")

    def invoke(self, inputs: Sequence[Any], attrs: dict[str, Any]) -> tuple[DenseTensor, ...]:
        """Run the op's kernel on DenseTensors (per input a tensor, a list for a variadic
        one, None for an absent optional one), without autograd and whatever the mode:
        the same kernel call and result check as an eager call. `attrs` as
        :meth:`check_attrs` returns them."""
        return invoke(self, inputs, attrs)

    def python_kernel(self, fn: Callable[..., Any], inputs: Sequence[Any],
                      attrs: dict[str, Any]) -> PythonKernel | None:
        """`fn` bound to `attrs`, checking its results against the meta function's
        answer for `inputs` (DenseTensors, lists of them, or None). An exception from
        the meta function gets a note naming the op, as one from a kernel does.

        An op without a meta function checks them against the metas inferred for this
        input signature; None when there are none yet: then the call runs the kernel
        and learns them (:meth:`first_call`)."""
        metas = _input_metas(inputs)
        if self.meta_fn is None:
            out = self.inferred_metas.get(_signature(metas, attrs))
            if out is None:
                return None
            names = None
        else:
            try:
                out, names = self.infer_meta_named(metas, attrs)
            except Exception as exc:
                add_note(exc, f"raised inside the meta function of op '{self.name}'")
                raise
        explain = functools.partial(self.explain_results, out) if names is None \
            else functools.partial(self.explain_results, out, names=names)
        return PythonKernel(self.name, fn, attrs, [(m.shape, m.dtype.code) for m in out],
                            explain, tuple(inputs))

    # -- a meta inferred by running the kernel ----------------------------------------
    def first_call(self, fn: Callable[..., Any], inputs: Sequence[Any],
                   attrs: dict[str, Any]) -> tuple[PythonKernel, Any]:
        """The first eager call of an op without a meta function on an input signature
        (`inputs`: DenseTensors, lists of them, or None): runs the kernel `fn` once on
        the real inputs, records its outputs' shapes and dtypes as this signature's
        metas, and returns the bound kernel checking later calls against them with the
        kernel's result (which the caller wraps: the kernel does not run twice)."""
        self._check_inferable()
        arrays = [None if x is None else [as_ndarray(t) for t in x]
                  if isinstance(x, (list, tuple)) else as_ndarray(x) for x in inputs]
        try:
            result = fn(*arrays, **attrs)
        except Exception as exc:
            add_note(exc, f"raised inside the Python kernel of op '{self.name}'")
            raise
        out = self._result_metas(result)
        self._remember(_signature(_input_metas(inputs), attrs), out)
        return PythonKernel(self.name, fn, attrs, [(m.shape, m.dtype.code) for m in out],
                            functools.partial(self.explain_results, out),
                            tuple(inputs)), result

    def infer_by_running(self, metas: Sequence[Any], attrs: dict[str, Any]
                         ) -> list[TensorMeta]:
        """The output metas of an op without a meta function for input `metas`
        (TensorMetas, lists of them, or None): those recorded for this input signature,
        else found by a dry run of the kernel on zeros of the input metas. A dim unknown
        until run time (None) is given a probe size; then the kernel runs once per probe
        size in :data:`PROBE_SIZES`, and an output dim that differs between the runs
        (one that follows the unknown dims, as the batch) is unknown too."""
        key = _signature(metas, attrs)
        out = self.inferred_metas.get(key)
        if out is not None:
            return out
        self._check_inferable()
        kernel = self.plan.choose(metas)[0]
        unknown = any(d is None for m in _flat_metas(metas) for d in m.shape)
        runs = [self._zeros_run(kernel, metas, attrs, size)
                for size in (PROBE_SIZES if unknown else PROBE_SIZES[:1])]
        out = [self._merged_runs(k, [run[k] for run in runs]) for k in range(len(runs[0]))]
        self._remember(key, out)
        return out

    def _check_inferable(self) -> None:
        """A meta is inferred only for ops whose outputs are one tensor each: with
        variadic or optional outputs the meta function says how many a call makes."""
        if not self.fixed_outputs:
            raise OpDefinitionError(
                f"{self.name}: has no meta function, and its outputs "
                f"({', '.join(map(str, self.outputs))}) vary in number per call, which a "
                f"run of the kernel cannot tell: give it meta=")

    def _zeros_run(self, kernel: Callable[..., Any], metas: Sequence[Any],
                   attrs: dict[str, Any], size: int) -> list[TensorMeta]:
        """The output metas of one run of `kernel` on zeros of `metas`, unknown dims
        `size`."""
        def zeros(m: TensorMeta) -> np.ndarray:
            return np.zeros([size if d is None else d for d in m.shape], m.dtype.numpy_dtype)
        arrays = [None if m is None else [zeros(e) for e in m] if isinstance(m, list)
                  else zeros(m) for m in metas]
        try:
            with np.errstate(all="ignore"):     # zeros: log(0), 0/0 are expected
                result = kernel(*arrays, **attrs)
        except Exception as exc:
            add_note(exc, f"raised inside the Python kernel of op '{self.name}', run on "
                          f"zeros of shapes {_describe_metas(metas, size)} to infer its "
                          f"outputs' shapes and dtypes (it has no meta function): give "
                          f"the op meta= if its kernel cannot run on zeros")
            raise
        return self._result_metas(result)

    def _merged_runs(self, k: int, metas: list[TensorMeta]) -> TensorMeta:
        """Output `k`'s meta from the dry runs of the probe sizes: a dim that differs
        between them is unknown (None); its rank and dtype must not differ."""
        first = metas[0]
        for other in metas[1:]:
            if other.dtype != first.dtype or other.ndim != first.ndim:
                raise OpDefinitionError(
                    f"{self.name}: output '{self.outputs[k].name}' is "
                    f"{first.dtype.name}{first.shape} in a dry run and "
                    f"{other.dtype.name}{other.shape} in another with other sizes for the "
                    f"unknown input dims: its rank or dtype depends on them; give the op "
                    f"meta=")
        return TensorMeta([a if all(m.shape[i] == a for m in metas) else None
                           for i, a in enumerate(first.shape)], first.dtype)

    def _result_metas(self, result: Any) -> list[TensorMeta]:
        """The shape and dtype of each output a kernel returned (one value per output, a
        tuple when several; anything numpy reads as an array)."""
        names = [o.name for o in self.outputs]
        results = self._one_per_output(result, len(names), names)
        out = []
        for name, value in zip(names, results):
            if not isinstance(value, (np.ndarray, DenseTensor)):
                try:
                    value = np.asarray(value)
                except Exception:
                    raise TypeError(f"{self.name}: output '{name}' must be an array, the "
                                    f"kernel returned {type(value).__name__}") from None
            try:
                out.append(TensorMeta(list(value.shape), value.dtype))
            except TypeError as exc:
                raise TypeError(f"{self.name}: output '{name}' is a {value.dtype} array, "
                                f"which fastop has no dtype for ({exc})") from None
        return out

    def _one_per_output(self, result: Any, count: int,
                        names: Sequence[str]) -> Sequence[Any]:
        """A Python kernel's `result` as its `count` output values (`names`: the
        outputs', for the error), or the error saying how many it returned."""
        results = result if isinstance(result, (tuple, list)) else (result,)
        if len(results) != count:
            raise ValueError(f"{self.name}: the Python kernel returned {len(results)} "
                             f"value(s), expected {count} ({', '.join(names)}): "
                             f"{_describe(result)}")
        return results

    def _remember(self, key: tuple, metas: list[TensorMeta]) -> None:
        """Record the inferred `metas` of an input signature, keeping the most recent
        :data:`INFERRED_SIGNATURES`."""
        if len(self.inferred_metas) >= INFERRED_SIGNATURES:   # (another thread may too)
            self.inferred_metas.pop(next(iter(self.inferred_metas), None), None)
        self.inferred_metas[key] = metas

    def explain_results(self, metas: Sequence[TensorMeta], result: Any,
                        names: Sequence[str] | None = None) -> list[Any]:
        """A Python kernel's result that the C check refused (`metas`: one per output
        tensor; `names` theirs, when they are not the declared outputs): the error naming
        the output and what was expected — or, for values that are right but not arrays
        (a numpy scalar), the values to take."""
        if names is None:
            names = [o.name for o in self.outputs]
        results = self._one_per_output(result, len(metas), names)
        values = []
        for name, value, meta in zip(names, results, metas):
            if not isinstance(value, DenseTensor):
                try:
                    value = np.asarray(value)
                except Exception:
                    raise TypeError(f"{self.name}: output '{name}' must be an array, "
                                    f"the kernel returned {type(value).__name__}") from None
            have = value.dtype.name if isinstance(value, DenseTensor) else value.dtype
            if have != meta.dtype.name:
                raise TypeError(f"{self.name}: output '{name}' should have dtype "
                                f"{meta.dtype.name}, the kernel returned {have}"
                                + self._inferred_hint())
            if not _fits(value.shape, meta.shape):
                raise ValueError(f"{self.name}: output '{name}' should have shape "
                                 f"{meta.shape}, the kernel returned {list(value.shape)}"
                                 + self._inferred_hint())
            values.append(value)
        return values

    def _inferred_hint(self) -> str:
        """What a result error of an op without a meta function adds: where the expected
        meta came from, and the fix."""
        if self.meta_fn is not None:
            return ""
        return ("; the op has no meta function, so its outputs' metas were inferred by "
                "running the kernel (on the first eager call with these input shapes, "
                "dtypes and attributes, or on zeros when a Program was built): an op whose "
                "output shapes depend on the input values needs meta=")


# the sizes a dry run gives a dim unknown until run time (see OpDef.infer_by_running)
PROBE_SIZES = (5, 7)
# the input signatures whose inferred metas an op keeps
INFERRED_SIGNATURES = 64


def _input_metas(inputs: Sequence[Any]) -> list[Any]:
    """The metas of a call's inputs (DenseTensors, lists of them, or None)."""
    return [None if x is None else [TensorMeta(t.shape, t.dtype) for t in x]
            if isinstance(x, (list, tuple)) else TensorMeta(x.shape, x.dtype)
            for x in inputs]


def _flat_metas(metas: Sequence[Any]) -> list[TensorMeta]:
    """Every TensorMeta of input metas (variadic lists spread out, None left out)."""
    return [e for m in metas if m is not None for e in (m if isinstance(m, list) else [m])]


def _signature(metas: Sequence[Any], attrs: dict[str, Any]) -> tuple:
    """The key of a call's inferred metas: its inputs' shapes and dtypes (None dims
    unknown), and its attributes."""
    def one(m: TensorMeta) -> tuple:
        return tuple(m.shape), m.dtype.code
    return (tuple(None if m is None else tuple(map(one, m)) if isinstance(m, list)
                  else one(m) for m in metas),
            tuple((k, type(v).__name__, _frozen(v)) for k, v in attrs.items()))


def _frozen(value: Any) -> Any:
    """An attribute value as a hashable key (lists as tuples)."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _describe_metas(metas: Sequence[Any], size: int) -> str:
    """Input metas as the shapes a dry run gives them: ``[5, 4] float32, None``."""
    def one(m: TensorMeta) -> str:
        return f"{[size if d is None else d for d in m.shape]} {m.dtype.name}"
    return ", ".join("None" if m is None else "[" + ", ".join(map(one, m)) + "]"
                     if isinstance(m, list) else one(m) for m in metas)


def _fits(shape: Sequence[int], declared: list[int | None]) -> bool:
    """Whether `shape` has the declared rank and every known declared dim."""
    if len(shape) != len(declared):
        return False
    for have, want in zip(shape, declared):
        if want is not None and have != want:
            return False
    return True


def _default_grad_meta(op: str, needs: tuple[str, ...], grad_names: tuple[str, ...],
                       diff: tuple[str, ...], fixed_outputs: bool
                       ) -> Callable[..., Any] | None:
    """The meta of a backward kernel op: ``d<x>`` as ``x`` when the kernel takes ``x``
    (a list for a variadic input, None for an absent optional one), else as the single
    output gradient it takes. None when neither tells (a run of the kernel infers it),
    unless the backward op's outputs vary in number (`fixed_outputs` False: no run
    tells how many)."""
    sources = []
    for x in diff:
        if x in needs:
            sources.append(needs.index(x))
        elif len(grad_names) == 1:
            sources.append(needs.index(grad_names[0]))
        elif fixed_outputs:
            return None
        else:
            raise OpDefinitionError(
                f"{op}: cannot infer the shape of gradient 'd{x}': the backward kernel "
                f"does not take '{x}' and has several output grads; pass meta=")

    def meta(*metas: TensorMeta, **attrs: Any) -> list[Any]:
        return [metas[i] for i in sources]
    meta.__qualname__ = f"{op}_grad meta"
    return meta


def _structured_backward_kernel(op: str, fn: Callable, needs: tuple[str, ...],
                                diff: tuple[str, ...], grad_outputs: tuple[str, ...]
                                ) -> Callable[..., Any]:
    """The kernel of the backward op of `op`, whose differentiable inputs include
    variadic or optional ones: `fn` (the user's backward kernel) returns a list of
    gradients for a variadic input and None for an absent optional one; the backward
    op's outputs are those gradients one tensor each. Checks what `fn` returned against
    that, naming `op` and `fn`."""
    who = f"{op}: the backward kernel {getattr(fn, '__qualname__', fn)!s}"
    specs = [ArgSpec.parse(g) for g in grad_outputs]
    where = [needs.index(x) if spec.variadic or spec.optional else -1
             for x, spec in zip(diff, specs)]

    def backward_kernel(*values: Any, **attrs: Any) -> tuple[Any, ...]:
        result = fn(*values, **attrs)
        if len(diff) == 1 and not (isinstance(result, tuple) and len(result) == 1):
            result = (result,)
        if not isinstance(result, (tuple, list)) or len(result) != len(diff):
            raise TypeError(f"{who} returned {_describe(result)}; expected one gradient "
                            f"per differentiable input ({', '.join(diff)})")
        flat: list[Any] = []
        for x, spec, k, g in zip(diff, specs, where, result):
            if spec.variadic:
                n = len(values[k])
                if not isinstance(g, (list, tuple)) or len(g) != n:
                    raise TypeError(f"{who} returned {_describe(g)} for the gradient of "
                                    f"variadic input '{x}', expected a list of {n} arrays "
                                    f"(one per entry)")
                flat.extend(g)
            elif spec.optional and values[k] is None:
                if g is not None:
                    raise TypeError(f"{who} returned {_describe(g)} for the gradient of "
                                    f"optional input '{x}', which is absent: return None")
            elif g is None or isinstance(g, (list, tuple)):
                raise TypeError(f"{who} returned {_describe(g)} for the gradient of input "
                                f"'{x}', expected an array")
            else:
                flat.append(g)
        return tuple(flat)
    backward_kernel.__qualname__ = getattr(fn, "__qualname__", backward_kernel.__qualname__)
    return backward_kernel


def _describe(value: Any) -> str:
    """A kernel's result, briefly, for errors: ``a list of 2 float64 arrays``."""
    if isinstance(value, (list, tuple)):
        kinds = sorted({_describe(v) for v in value})
        return f"a {type(value).__name__} of {len(value)} ({', '.join(kinds)})" \
            if value else f"an empty {type(value).__name__}"
    if value is None:
        return "None"
    dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
    if dtype is not None and shape is not None:
        return f"a {dtype} array of shape {list(shape)}"
    return f"{type(value).__name__} {value!r:.40}"


class _PerOp:
    """A class attribute that is the class's own on the class and computed per op on an
    op: ``OpDef.__doc__`` (``help(op)``, ``op.__doc__`` show the op's ``doc=``, not
    OpDef's docstring) and ``OpDef.__signature__`` (``inspect.signature(op)``)."""

    def __init__(self, on_class: Any, per_op: Callable[[OpDef], Any]) -> None:
        self.on_class, self.per_op = on_class, per_op

    def __get__(self, op: OpDef | None, owner: type | None = None) -> Any:
        return self.on_class if op is None else self.per_op(op)


def _op_docstring(op: OpDef) -> str:
    """An op's help text: its call signature, its ``doc=``, where it comes from."""
    origin = f"{op.plugin} {op.version}".strip()
    return (f"{op.short_name}{op.signature()[len(op.name):]}\n\n"
            f"{inspect.cleandoc(op.doc) if op.doc else '(this op has no doc=)'}\n\n"
            f"Op {op.name!r} from {origin}.")


def _op_signature(op: OpDef) -> inspect.Signature | None:
    """Inputs (an optional one defaults to None), then attributes with their defaults;
    from a required attribute after a defaulted argument on, keyword-only. None (no
    signature) when a name is no Python parameter name (``in``)."""
    P = inspect.Parameter
    params: list[inspect.Parameter] = []
    kind = P.POSITIONAL_OR_KEYWORD
    for name, default in [(a.name, None if a.optional else P.empty) for a in op.inputs] + \
            [(a.name, P.empty if a.default is REQUIRED else a.default)
             for a in op.attrs.values()]:
        if default is P.empty and params and params[-1].default is not P.empty:
            kind = P.KEYWORD_ONLY
        try:
            params.append(P(name, kind, default=default))
        except ValueError:
            return None
    return inspect.Signature(params)


OpDef.__doc__ = _PerOp(OpDef.__doc__, _op_docstring)
OpDef.__signature__ = _PerOp(None, _op_signature)


def apply_grad_rule(op: OpDef, needed: Sequence[Any], grads: Sequence[Any],
                    attrs: dict[str, Any], needs_input_grad: Sequence[bool] | None = None
                    ) -> tuple[Any, ...]:
    """Apply `op`'s gradient rule — the one function eager backward, static
    ``append_backward`` and the gradient checker share: the needed values and the output
    gradients in (tensors in eager mode, Variables in static mode: the rule's ops compute
    or append), one gradient per declared input out (None for none; a list for a
    variadic input). A rule of a single-input op may return a bare gradient."""
    rule = op.grad_rule
    if rule.wants_needs_input_grad:
        result = rule.fn(*needed, *grads, needs_input_grad=needs_input_grad, **attrs)
    else:
        result = rule.fn(*needed, *grads, **attrs)
    n = len(op.inputs)
    if n == 1 and not (isinstance(result, tuple) and len(result) == 1):
        if not isinstance(result, (tuple, list)) or op.inputs[0].variadic:
            result = (result,)
    if not isinstance(result, (tuple, list)) or len(result) != n:
        count = len(result) if isinstance(result, (tuple, list)) else 1
        raise TypeError(f"{op.name}: the gradient rule returned {count} gradient(s), "
                        f"expected {n} (one per input: "
                        f"{', '.join(a.name for a in op.inputs)}; None for none)")
    return tuple(result)


def _calling_module() -> str:
    """``__name__`` of the module that called into the registry (skipping its own
    frames: grad_kernel defines its backward op from here)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    return "" if frame is None else frame.f_globals.get("__name__", "")


class PluginLoader(Protocol):
    """What the registry asks when a name is not defined (yet): the plugin manager,
    which imports installed plugins when their namespace is first used."""

    def load_pending(self, namespace: str) -> bool:
        """Import the plugins found at ``import fastop`` whose entry point declares
        `namespace` and that are not imported yet; whether there were any."""

    def load_for_lookup(self, namespace: str, on_demand: bool = True) -> bool:
        """A lookup in `namespace` missed: import what may define it (`on_demand`: with
        autoload off too); whether anything was imported."""

    def load_all(self) -> bool:
        """Import every plugin found and not imported yet (a listing needs them all)."""

    def failure(self, namespace: str) -> tuple[str, BaseException] | None:
        """Why the plugin declaring `namespace` failed to load, and its error."""

    def declares(self, namespace: str) -> bool:
        """Whether a plugin not imported yet declares `namespace`."""


class Registry:
    """All op definitions, by namespaced name. ``fastop.ops.registry`` is the one.

    Plugins found at ``import fastop`` are imported when a name of their namespace is
    first looked up (:meth:`get`, ``in``, :meth:`namespace`, a definition in it) and all
    of them when the registry is listed (iterating, :meth:`ops`, :meth:`namespaces`):
    see :class:`PluginLoader` and :mod:`fastop.plugins`."""

    def __init__(self) -> None:
        self._ops: dict[str, OpDef] = {}
        self._providing: _Providing | None = None   # None: outside a plugin
        self._version = 0   # bumped on every change; caches key on it
        self._loader: PluginLoader | None = None

    def attach_loader(self, loader: PluginLoader) -> None:
        """Let `loader` import plugins when a lookup misses (the plugin manager does)."""
        self._loader = loader

    def _changed(self) -> None:
        self._version += 1
        bump_registry_version()

    # -- defining ---------------------------------------------------------------
    def define(self, name: str, inputs: Sequence[str | ArgSpec] = (),
               outputs: Sequence[str | ArgSpec] = ("out",),
               attrs: dict[str, Any] | None = None, *, meta: Callable | None = None,
               kernels: dict[Any, Any] | None = None, doc: str = "",
               differentiable: Sequence[str] | None = None,
               promotes: Sequence[str] | None = None, int_to_float: bool = False,
               ordered: bool = False, integer_grads: bool = False) -> OpDef:
        """Define and register an op; returns the OpDef, whose decorators add the rest.

        Parameters:

        - ``name``: ``"namespace::op"``, two identifiers, unique across every plugin
          (a name another plugin defines is an error naming both). The op appears as
          ``fastop.ops.<namespace>.<op>`` and in ``python -m fastop ops``; its namespace
          may be any identifier, fastop's own module names (``checking``, ``builtin``)
          included — only ``fastop.ops``' API names (``registry``, ``get``, ...) stay
          reachable as ``fastop.ops.registry.namespace(name)`` alone.
        - ``inputs``: input names in call order. ``"bias?"`` is optional (the kernel gets
          None when absent); ``"xs*"`` is variadic (the kernel gets a list of arrays).
        - ``outputs``: output names; a kernel returns one array per output (a tuple when
          several), the meta function one ``TensorMeta`` per output.
        - ``attrs``: ``{name: default}``, typed by the default (``{"beta": 1.0}`` is a
          float attribute defaulting to 1.0; a tuple default makes a list attribute;
          ``None`` accepts anything), or ``{name: type}`` for a required attribute
          without default (``{"k": int}``). Calls pass attributes by keyword; values are
          checked and converted (an int for a float attribute), an unknown or missing one
          is a TypeError naming the op. Kernels, meta functions and gradient rules get
          every attribute as a keyword argument.
        - ``meta``: ``fn(*input_metas, **attrs)`` returning each output's
          ``TensorMeta(shape, dtype)`` (or a ``(shape, dtype)`` pair) from the inputs'
          (``.shape`` lists, None for a dim unknown until run time, as the batch of a
          static ``data``); static Programs use it before anything runs, and every
          Python kernel's results are checked against it. Or decorate with ``@op.meta``.
          Optional: without one, fastop *runs the kernel* to learn each output's shape
          and dtype, once per input signature (input shapes, dtypes and attributes) —
          in eager mode the first call's own run (its results are the call's), in a
          static Program a dry run at build time on zeros of the input metas (an
          unknown dim given the sizes :data:`PROBE_SIZES` in turn; an output dim that
          follows them is unknown too). Later calls are checked against what was
          learned. Write a meta function when an output's shape depends on the input
          values (not only their shapes), when the kernel has side effects or is
          expensive (the dry run executes it), or when it cannot run on zeros.
        - ``kernels``: ``{dtype or "*": fn}`` — Python functions on numpy arrays, as
          ``@op.kernel("float32", "float64")`` registers them (no dtype: every dtype).
          The first input given selects the kernel by its dtype.
        - ``doc``: its first line is shown by ``python -m fastop ops``.
        - ``differentiable``: the inputs that take gradients (default: all). Leave out
          integer inputs such as labels or indices: they get no gradient (their
          gradient rule returns None for them).
        - ``promotes``: the inputs that compute in one dtype with Python scalars and
          with each other (default: all), by the scalar rule of
          :mod:`fastop.ops._dispatch` (``x * 2.5`` on an int32 tensor computes in
          float32); leave out inputs of their own kind (a condition, an index). The
          inputs named here also compute float32 and float64 tensors together in
          float64 (the float32 one is cast, so gradients flow back in its dtype); with
          the default, tensors of different dtypes reach the meta function as they are
          (it may refuse them: a conv of float32 x and float64 weight).
        - ``int_to_float``: integer and bool inputs compute in float32 (true division).
        - ``ordered``: the op has side effects beyond its outputs (writes a file, prints,
          draws from a global random stream): the static executor, which otherwise runs
          independent ops at once, runs it on the calling thread in program order with
          the other ordered ops (as JAX's ``io_callback(ordered=True)``).
        - ``integer_grads``: its integer outputs take gradients whenever an input does,
          and the rule gets their gradients (a dtype conversion: PaddlePaddle's ``cast``
          of a float tensor to int32 passes the gradient back cast to float).

        Gradients: ``@op.grad(needs=(...))`` registers a composite rule written with
        registered ops, ``fn(*needed, *output_grads, **attrs)`` — ``needed`` are the
        forward inputs and outputs named in ``needs``, in that order. For an op with one
        input it may return the gradient itself or a 1-tuple; otherwise one entry per
        declared input, in order, None where there is none (an input not in
        ``differentiable``, or no dependence), and a list for a variadic input. Such a
        rule is differentiable again (double backward). ``@op.grad_kernel(needs=[...])``
        registers a numpy backward kernel instead (it becomes the op ``<name>_grad``),
        returning one gradient per differentiable input: a list for a variadic input
        (which it then takes), None for an optional input it takes and gets as None.
        ``reads={"x": ("y",)}`` declares which needed values each input's gradient reads
        beyond their shapes and dtypes (``fastop.testing.opcheck`` checks it).

        An output is non-differentiable when its dtype is not floating (indices, masks:
        no gradient flows into them; a backward kernel leaves them out of ``needs``),
        unless an input of its dtype takes gradients (``x * 2`` of an int64 x that
        takes gradients, as PaddlePaddle) or the op has ``integer_grads``. A
        floating output whose gradient the rule ignores (an auxiliary result) is
        declared: ``@op.grad(..., materialize_grads=False)`` gives the rule None for it
        unless a gradient really flows into it (and then the rule must use it);
        ``@op.grad_kernel(..., nondifferentiable=["stat"])`` lets no gradient flow back
        through it (used later, it counts as a constant). A gradient flowing into a
        floating output a backward kernel leaves out without that declaration is an
        :class:`UntakenGradientError` naming the op and the output.

        Ops defined inside a plugin's ``fastop_register_ops`` are attributed to the
        plugin's distribution and version; ops defined anywhere else to the calling
        module (its ``__name__``), so ``python -m fastop ops`` tells where each came
        from. Check a new op with ``fastop.testing.opcheck`` (docs/plugins.md).
        """
        if not isinstance(name, str) or name.count("::") != 1 or not all(
                part.isidentifier() for part in name.split("::")):
            raise OpDefinitionError(f"op names are 'namespace::name' identifiers, "
                                    f"got {name!r}")
        providing = self._providing
        plugin, version = (providing.plugin, providing.version) if providing is not None \
            else (_calling_module(), "")
        if self._loader is not None:       # a plugin declaring the namespace comes first
            self._loader.load_pending(name.partition("::")[0])
        if name in self._ops:
            other = self._ops[name]
            raise DuplicateOpError(
                f"op '{name}' is defined twice: by {other.plugin} {other.version} and by "
                f"{plugin} {version}".replace("  ", " "))
        in_specs = tuple(ArgSpec.parse(s) for s in inputs)
        out_specs = tuple(ArgSpec.parse(s) for s in outputs)
        names = [a.name for a in in_specs + out_specs]
        if len(set(names)) != len(names):
            raise OpDefinitionError(f"{name}: input/output names must be unique, got {names}")
        if not out_specs:
            raise OpDefinitionError(f"{name}: an op needs at least one output")
        if meta is not None:
            require_callable(name, "the meta function (meta=)", meta)
        op = OpDef(name, in_specs, out_specs,
                   {k: AttrSpec.from_default(k, v) for k, v in (attrs or {}).items()},
                   doc=doc, meta_fn=meta, plugin=plugin, version=version,
                   differentiable=tuple(differentiable) if differentiable is not None else None,
                   promotes=tuple(promotes) if promotes is not None else None,
                   int_to_float=int_to_float, ordered=ordered,
                   integer_grads=integer_grads, registry=self)
        for dtype, fn in (kernels or {}).items():
            op.kernel(*(() if dtype == "*" else (dtype,)))(fn)
        self._ops[name] = op
        if providing is not None:
            providing.defined.append(name)
        self._changed()
        return op

    def define_ckernel(self, name: str, kernel: CKernel, attrs: dict[str, Any] | None = None,
                       doc: str = "", differentiable: Sequence[str] | None = None,
                       promotes: Sequence[str] | None = None,
                       int_to_float: bool = False, ordered: bool = False,
                       integer_grads: bool = False) -> OpDef:
        """Define an op whose kernel and meta come from a Cython CKernel."""
        op = self.define(name, kernel.input_names, kernel.output_names, attrs,
                         doc=doc, differentiable=differentiable, promotes=promotes,
                         int_to_float=int_to_float, ordered=ordered,
                         integer_grads=integer_grads)

        def meta(*metas: TensorMeta, **attrs: Any) -> list[TensorMeta]:
            return [TensorMeta(s, d) for s, d in kernel.meta(
                *[None if m is None else (m.shape, m.dtype) for m in metas], **attrs)]
        op.meta_fn = meta
        op.kernels["*"] = kernel
        kernel._set_op_name(name)
        self._changed()
        return op

    def remove(self, name: str) -> None:
        del self._ops[name]
        self._changed()

    # -- looking up ---------------------------------------------------------------
    def get(self, name: str) -> OpDef:
        """The op named ``"namespace::op"``; a miss first imports the plugin that
        declares the namespace (see the class docstring)."""
        try:
            return self._ops[name]
        except KeyError:
            pass
        namespace = name.partition("::")[0] if isinstance(name, str) else ""
        if namespace and self._loader is not None:
            self._loader.load_for_lookup(namespace)   # (or waits for another thread's)
            found = self._ops.get(name)
            if found is not None:
                return found
        failed = self._plugin_failure(namespace, f"unknown op '{name}'")
        if failed is not None:
            raise failed[0] from failed[1]
        same_short = [n for n in self._ops if n.endswith("::" + name)][:3] \
            if "::" not in name else []
        hint = f"; did you mean {', '.join(map(repr, same_short))}?" if same_short \
            else did_you_mean(name, self._ops)
        raise UnknownOpError(f"unknown op '{name}'{hint}")

    def _plugin_failure(self, namespace: str,
                        start: str) -> tuple[UnknownOpError, BaseException] | None:
        """When the plugin declaring `namespace` failed to load: the UnknownOpError
        saying so (its message begins with `start`), and the plugin's error."""
        failed = self._loader.failure(namespace) if self._loader is not None else None
        if failed is None:
            return None
        reason, exc = failed
        error = UnknownOpError(f"{start}: {reason}")
        error.reason = reason
        return error, exc

    def _import_namespace(self, namespace: str) -> None:
        """Import the plugins declaring `namespace`; if it is still not defined, what
        a lookup miss imports (see :meth:`PluginLoader.load_for_lookup`)."""
        if self._loader is not None:
            self._loader.load_pending(namespace)
            if namespace not in self._namespace_names():
                self._loader.load_for_lookup(namespace)

    def __contains__(self, name: str) -> bool:
        """Whether op `name` is defined, its recorded plugin imported first; with
        autoload off, whether it is loaded (a use, :meth:`get`, imports it)."""
        if name in self._ops:
            return True
        if type(name) is not str or self._loader is None:
            return False
        self._loader.load_for_lookup(name.partition("::")[0], on_demand=False)
        return name in self._ops

    def _load_all(self) -> None:
        if self._loader is not None:
            self._loader.load_all()

    def __len__(self) -> int:
        self._load_all()
        return len(self._ops)

    def __iter__(self):
        self._load_all()
        return iter(sorted(self._ops.values(), key=lambda op: op.name))

    def ops(self, namespace: str | None = None) -> list[OpDef]:
        """Every op, or those of one namespace (importing the plugins they need)."""
        if namespace is None:
            return list(self)
        self._import_namespace(namespace)
        return sorted((op for op in self._ops.values() if op.namespace == namespace),
                      key=lambda op: op.name)

    def namespaces(self) -> list[str]:
        """The namespaces with at least one op, sorted (every plugin imported first)."""
        self._load_all()
        return list(self._namespace_names())

    def _namespace_names(self) -> tuple[str, ...]:
        """The namespaces defined now (computed once per version)."""
        cached = getattr(self, "_namespace_cache", None)
        if cached is None or cached[0] != self._version:
            cached = self._namespace_cache = (
                self._version, tuple(sorted({op.namespace for op in self._ops.values()})))
        return cached[1]

    def declares(self, name: str) -> bool:
        """Whether op namespace `name` is defined or declared by a plugin not imported
        yet (nothing is imported to tell)."""
        return name in self._namespace_names() or \
            (self._loader is not None and self._loader.declares(name))

    def namespace(self, name: str) -> OpNamespace:
        """The namespace object of ``fastop.ops.<name>`` (one per name, kept); its
        plugin is imported on first use. An unknown name is an :class:`UnknownOpError`
        (an AttributeError)."""
        objects = self.__dict__.setdefault("_namespace_objects", {})
        found = objects.get(name)
        if found is None:
            self._import_namespace(name)
            if name not in self._namespace_names():
                failed = self._plugin_failure(name, f"no op namespace '{name}'")
                if failed is not None:
                    raise failed[0] from failed[1]
                raise UnknownOpError(f"no op namespace '{name}'"
                                     f"{did_you_mean(name, self._namespace_names())}")
            found = objects[name] = make_namespace(self, name)
        return found

    @property
    def version(self) -> int:
        return self._version

    # -- plugin bookkeeping -------------------------------------------------------
    def providing(self, plugin: str, version: str) -> "_Providing":
        """Context manager: ops defined inside are attributed to this distribution (and
        listed by its :meth:`_Providing.ops`)."""
        return _Providing(self, plugin, version)


class _Providing:
    """One plugin's definitions: nested ones (a plugin whose hook uses another
    plugin's namespace, imported right then) are their own."""

    def __init__(self, registry: Registry, plugin: str, version: str) -> None:
        self.registry, self.plugin, self.version = registry, plugin, version
        self.defined: list[str] = []

    def __enter__(self) -> Registry:
        self.saved = self.registry._providing
        self.registry._providing = self
        return self.registry

    def __exit__(self, *exc: object) -> None:
        self.registry._providing = self.saved

    def ops(self) -> list[str]:
        """The ops defined inside that are still defined."""
        return [name for name in self.defined if name in self.registry._ops]


registry = Registry()
