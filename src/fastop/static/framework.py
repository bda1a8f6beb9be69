"""The static-graph IR: :class:`Program` → :class:`Block` → :class:`Variable` /
:class:`Operator`, and the static dispatcher that makes any registry op append an
operator when called on Variables.

Every operator is a registry op (or a py_func record with the same interface): its meta
function fills in output shapes and dtypes while the program is built (None for dims
unknown until a feed, such as the batch). Example::

    import fastop
    fastop.enable_static()
    x = fastop.static.data("x", [None, 3], "float32")
    y = fastop.tanh(x) * 2.0          # appends fastop::tanh and fastop::multiply
    print(fastop.static.default_main_program())
"""
from __future__ import annotations

import contextlib
import functools
import itertools
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from fastop._core.storage import DTYPE_NAMES, DenseTensor, DType, as_dtype
from fastop.ops import OpDef, TensorMeta, registry
from fastop.ops import _indexing
from fastop.ops._dispatch import InputMode, convert_inputs, mode_guard, set_static_dispatcher
from fastop.ops._registry import add_note, did_you_mean
from fastop.ops.builtin._table import B

__all__ = ["Variable", "Operator", "Block", "Program", "default_main_program",
           "default_startup_program", "program_guard", "data", "unique_name",
           "layer_name_guard", "static_mode_guard", "add_variable_methods"]

_name_counters: dict[str, Iterator[int]] = {}


def unique_name(prefix: str) -> str:
    """``prefix_0``, ``prefix_1``, ... (process-wide, like PaddlePaddle's unique_name)."""
    counter = _name_counters.setdefault(prefix, itertools.count())
    return f"{prefix}_{next(counter)}"


_layer_name: str | None = None


@contextlib.contextmanager
def layer_name_guard(name: str) -> Iterator[None]:
    """Name the outputs of ops appended inside ``name.tmp_0``, ``name.tmp_1``, ... as
    PaddlePaddle's LayerHelper does, so that a layer's temporaries neither take names
    from the layer counter (``fc_0``, ``fc_1``, ... stay consecutive) nor hide which
    layer made them."""
    global _layer_name
    outer, _layer_name = _layer_name, name
    try:
        yield
    finally:
        _layer_name = outer


def _norm_shape(shape: Any) -> list[int | None]:
    if isinstance(shape, (int, np.integer)):
        shape = [shape]
    out: list[int | None] = []
    for d in shape:
        if d is None or int(d) == -1:
            out.append(None)
        elif int(d) < 0:
            raise ValueError(f"invalid shape {list(shape)}: dims are >= 0, or None/-1 "
                             f"for unknown")
        else:
            out.append(int(d))
    return out


def _shape_str(shape: Sequence[int | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


class Variable:
    """A named value of a Program: shape (None for unknown dims), dtype and flags.

    Arithmetic operators, fastop functions on Variables and the methods eager Tensors
    have as tensor functions (``v.argmax(axis=1)``, ``v.clip(0, 1)``, ``v.astype(...)``:
    see :func:`add_variable_methods`) append operators.
    """

    __array_ufunc__ = None  # numpy arrays and scalars defer to our reflected operators

    def __init__(self, block: Block, name: str, shape: Any, dtype: Any, *,
                 persistable: bool = False, stop_gradient: bool = False,
                 is_data: bool = False, is_parameter: bool = False,
                 trainable: bool = True, constant: np.ndarray | None = None) -> None:
        self.block = block
        self.name = name
        self._shape = _norm_shape(shape)
        self.dtype: DType = as_dtype(dtype)
        self.persistable = persistable
        self.stop_gradient = stop_gradient
        self.is_data = is_data
        self.is_parameter = is_parameter
        self.trainable = trainable
        self.constant = constant

    @property
    def shape(self) -> list[int | None]:
        return list(self._shape)

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def program(self) -> Program:
        return self.block.program

    def describe(self) -> str:
        kind = ("parameter" if self.is_parameter else "data" if self.is_data
                else "constant" if self.constant is not None
                else "persistable" if self.persistable else "")
        return f"{self.name}: {self.dtype.name}{_shape_str(self._shape)}" + \
            (f" {kind}" if kind else "")

    def __repr__(self) -> str:
        return f"Variable({self.describe()})"

    __str__ = __repr__

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        raise TypeError(f"the truth value of Variable '{self.name}' is unknown while the "
                        f"program is built (its value exists only when an Executor runs "
                        f"it); compare Variables by identity ('is'), or fetch the value")

    # -- operators (each appends an op) ---------------------------------------------------
    def _binary(self, name: str, other: Any, reverse: bool = False) -> Any:
        if other is None or isinstance(other, (str, bytes, dict, set)):
            return NotImplemented     # `v == None`, `v in names`: identity, no op
        op = getattr(B, name)
        with mode_guard("static"):
            return op(other, self) if reverse else op(self, other)

    def __add__(self, o): return self._binary("add", o)
    def __radd__(self, o): return self._binary("add", o, True)
    def __sub__(self, o): return self._binary("subtract", o)
    def __rsub__(self, o): return self._binary("subtract", o, True)
    def __mul__(self, o): return self._binary("multiply", o)
    def __rmul__(self, o): return self._binary("multiply", o, True)
    def __truediv__(self, o): return self._binary("divide", o)
    def __rtruediv__(self, o): return self._binary("divide", o, True)
    def __pow__(self, o): return self._binary("pow", o)
    def __rpow__(self, o): return self._binary("pow", o, True)
    def __mod__(self, o): return self._binary("remainder", o)
    def __rmod__(self, o): return self._binary("remainder", o, True)
    def __matmul__(self, o): return self._binary("matmul", o)
    def __rmatmul__(self, o): return self._binary("matmul", o, True)
    def __lt__(self, o): return self._binary("less_than", o)
    def __le__(self, o): return self._binary("less_equal", o)
    def __gt__(self, o): return self._binary("greater_than", o)
    def __ge__(self, o): return self._binary("greater_equal", o)
    def __eq__(self, o): return self._binary("equal", o)   # type: ignore[override]
    def __ne__(self, o): return self._binary("not_equal", o)   # type: ignore[override]

    def _unary(self, name: str, **attrs: Any) -> Variable:
        with mode_guard("static"):
            return getattr(B, name)(self, **attrs)

    def __neg__(self): return self._unary("neg")
    def __abs__(self): return self._unary("abs")

    def __getitem__(self, key: Any) -> Variable:
        """Indexing appends slice/unsqueeze/gather ops, as an eager Tensor's runs them."""
        with mode_guard("static"):
            return _indexing.getitem(self, key)


def _static_method(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` (a tensor function) as a Variable method that appends its ops whatever the
    thread's mode (a Program can be built under program_guard in eager mode)."""
    @functools.wraps(fn)
    def method(self: Variable, *args: Any, **kwargs: Any) -> Any:
        with mode_guard("static"):
            return fn(self, *args, **kwargs)
    return method


def add_variable_methods(methods: dict[str, Callable[..., Any]]) -> None:
    """Make tensor functions Variable methods, as they are eager Tensor methods
    (``v.argmax(1)`` is ``fastop.argmax(v, 1)``): the functions dispatch by mode, so
    the method is the function run in static mode."""
    for name, fn in methods.items():
        if not callable(fn):
            raise TypeError(f"add_variable_methods: {name} is not callable")
        setattr(Variable, name, _static_method(fn))


class Operator:
    """One op call in a Block: the op definition, its inputs (per declared input: a
    Variable, None, or a list for a variadic one), output Variables and attributes."""

    __slots__ = ("block", "opdef", "inputs", "outputs", "attrs")

    def __init__(self, block: Block, opdef: Any, inputs: list[Any],
                 outputs: list[Variable], attrs: dict[str, Any]) -> None:
        self.block = block
        self.opdef = opdef
        self.inputs = inputs
        self.outputs = outputs
        self.attrs = attrs

    @property
    def type(self) -> str:
        return self.opdef.name

    def input_vars(self) -> list[Variable]:
        """Inputs flattened (variadic lists expanded, absent optional ones dropped)."""
        flat: list[Variable] = []
        for x in self.inputs:
            if isinstance(x, list):
                flat.extend(v for v in x if v is not None)
            elif x is not None:
                flat.append(x)
        return flat

    def input(self, name: str) -> Any:
        """The input declared as `name` (a Variable, list or None)."""
        names = [a.name for a in self.opdef.inputs]
        return self.inputs[names.index(name)]

    def output(self, name: str) -> Variable:
        names = [a.name for a in self.opdef.outputs]
        return self.outputs[names.index(name)]

    def __str__(self) -> str:
        def fmt(x: Any) -> str:
            if isinstance(x, list):
                return "[" + ", ".join(fmt(v) for v in x) + "]"
            return "None" if x is None else x.name
        args = [fmt(x) for x in self.inputs]
        args += [f"{k}={v!r}" for k, v in self.attrs.items()]
        label = getattr(self.opdef, "label", self.type)
        outs = ", ".join(v.name for v in self.outputs) or "()"
        return f"{outs} = {label}({', '.join(args)})"

    __repr__ = __str__


class Block:
    """A list of operators and the variables they use (a Program has one)."""

    def __init__(self, program: Program, idx: int = 0) -> None:
        self.program = program
        self.idx = idx
        self.vars: dict[str, Variable] = {}
        self.ops: list[Operator] = []

    # -- variables --------------------------------------------------------------------
    def create_var(self, name: str | None = None, dtype: Any = "float32",
                   shape: Any = (), persistable: bool = False,
                   stop_gradient: bool = False, **flags: Any) -> Variable:
        """Create (or return the existing compatible) variable `name`."""
        name = name or unique_name("_generated_var")
        existing = self.vars.get(name)
        if existing is not None:
            if existing.dtype != as_dtype(dtype) or existing.shape != _norm_shape(shape):
                raise ValueError(
                    f"create_var: variable '{name}' already exists as "
                    f"{existing.describe()}, not {as_dtype(dtype).name}"
                    f"{_shape_str(_norm_shape(shape))}")
            return existing
        var = Variable(self, name, shape, dtype, persistable=persistable,
                       stop_gradient=stop_gradient, **flags)
        self.vars[name] = var
        self.program._bump()
        return var

    def var(self, name: str) -> Variable:
        try:
            return self.vars[name]
        except KeyError:
            hint = did_you_mean(name, self.vars)
            raise KeyError(f"the program has no variable '{name}'{hint}") from None

    def has_var(self, name: str) -> bool:
        return name in self.vars

    def all_parameters(self) -> list[Variable]:
        return [v for v in self.vars.values() if v.is_parameter]

    def _constant(self, value: Any, dtype: Any) -> Variable:
        """A constant of the program holding a copy of `value` (which fits it) as
        `dtype`."""
        array = np.array(value, dtype=as_dtype(dtype).numpy_dtype)
        return self.create_var(unique_name("constant"), array.dtype, array.shape,
                               stop_gradient=True, constant=array)

    # -- operators --------------------------------------------------------------------
    def append_op(self, op: Any, inputs: Sequence[Any], attrs: dict[str, Any] | None = None,
                  outputs: Any = None) -> Any:
        """Append `op` (an OpDef or its name) on `inputs` (one per declared input).

        Output variables are created with the shapes and dtypes the op's meta function
        infers, unless `outputs` names existing variables (an update in place, like
        ``sgd_update(param, ..., out=param)``). Returns the output(s).
        """
        if isinstance(op, str):
            op = registry.get(op)
        attrs = op.check_attrs(dict(attrs or {}))
        inputs = list(inputs)
        if len(inputs) != len(op.inputs):
            raise TypeError(f"{op.name}: expected {len(op.inputs)} inputs, got {len(inputs)}")
        ins = list(convert_inputs(op.plan, tuple(inputs), _StaticInputs(self)))
        metas = [_meta(x) for x in ins]
        try:
            out_metas = op.infer_meta(metas, attrs)
            op.plan.choose(ins)             # no kernel for these dtypes: refused now
        except Exception as exc:
            add_note(exc, f"while appending op {op.name} to the program "
                          f"(inputs: {_describe_inputs(ins)})")
            raise
        outs = self._outputs(op, out_metas, outputs)
        self.ops.append(Operator(self, op, ins, outs, attrs))
        self.program._bump()
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _outputs(self, op: Any, metas: list[TensorMeta], given: Any) -> list[Variable]:
        if given is None:
            if _layer_name is not None:
                return [self.create_var(unique_name(f"{_layer_name}.tmp"), m.dtype, m.shape)
                        for m in metas]
            prefix = unique_name(op.name.split("::")[-1])
            return [self.create_var(f"{prefix}.tmp_{i}", m.dtype, m.shape)
                    for i, m in enumerate(metas)]
        given = list(given) if isinstance(given, (list, tuple)) else [given]
        if len(given) != len(metas):
            raise TypeError(f"{op.name}: out= needs {len(metas)} variables, got {len(given)}")
        for var, meta, spec in zip(given, metas, op.outputs):
            self._check_own(op, var)
            if var.dtype != meta.dtype or var.ndim != meta.ndim or any(
                    a is not None and b is not None and a != b
                    for a, b in zip(var.shape, meta.shape)):
                raise ValueError(f"{op.name}: out '{spec.name}' is {var.describe()}, the "
                                 f"op produces {meta.dtype.name}{_shape_str(meta.shape)}")
        return given

    def _check_own(self, op: Any, var: Variable) -> None:
        if var.block is not self:
            raise ValueError(f"{op.name}: variable '{var.name}' belongs to another "
                             f"program; build ops with program_guard on one program")

def _meta(x: Any) -> Any:
    if isinstance(x, list):
        return [_meta(v) for v in x]
    return None if x is None else TensorMeta(x.shape, x.dtype)


class _StaticInputs(InputMode):
    """Static values for the one input rule (fastop.ops._dispatch.convert_inputs, shared
    with eager mode): Variables of `block`; a value that is not a Variable becomes a
    constant of the program, a cast an appended op."""

    def __init__(self, block: Block) -> None:
        self.block = block

    def own(self, op: Any, value: Any) -> Variable | None:
        if isinstance(value, Variable):
            self.block._check_own(op, value)
            return value
        return None

    def wrap(self, value: DenseTensor) -> Variable:
        array = np.asarray(value)
        return self.block._constant(array, array.dtype)

    def scalar(self, value: Any, dtype: int) -> Variable:
        return self.block._constant(value, DTYPE_NAMES[dtype])

    def cast(self, value: Variable, dtype: int) -> Variable:
        with mode_guard("static"):
            return B.cast(value, dtype=DTYPE_NAMES[dtype])


def _describe_inputs(ins: Sequence[Any]) -> str:
    parts = []
    for x in ins:
        if isinstance(x, list):
            parts.append("[" + ", ".join("None" if v is None else v.describe()
                                         for v in x) + "]")
        else:
            parts.append("None" if x is None else x.describe())
    return ", ".join(parts)


class Program:
    """A static graph: a global block of variables and operators in execution order.

    ``str(program)`` lists variables and ops; ``program.version`` changes with every
    edit (the executor recompiles when it does).
    """

    def __init__(self) -> None:
        self.blocks = [Block(self, 0)]
        self._version = 0
        self.random_seed = 0
        # called with the scope before each Executor.run of this program (an
        # optimizer's LRScheduler writing the learning-rate variable)
        self._run_hooks: list[Callable[[Any], None]] = []

    def _bump(self) -> None:
        self._version += 1

    @property
    def version(self) -> int:
        return self._version

    def global_block(self) -> Block:
        return self.blocks[0]

    def current_block(self) -> Block:
        return self.blocks[0]

    def block(self, index: int) -> Block:
        return self.blocks[index]

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    def list_vars(self) -> list[Variable]:
        return list(self.global_block().vars.values())

    def all_parameters(self) -> list[Variable]:
        return self.global_block().all_parameters()

    def clone(self, for_test: bool = False) -> Program:
        """A copy with its own variables and operators (sharing op definitions and
        constant values). `for_test` is PaddlePaddle's flag; fastop has no ops that
        behave differently in tests, so both copies are the same. Clone before
        ``append_backward``/``minimize`` to get a forward-only program."""
        copy = Program()
        block, src = copy.global_block(), self.global_block()
        for v in src.vars.values():
            block.vars[v.name] = Variable(
                block, v.name, v.shape, v.dtype, persistable=v.persistable,
                stop_gradient=v.stop_gradient, is_data=v.is_data,
                is_parameter=v.is_parameter, trainable=v.trainable, constant=v.constant)

        def same(x: Any) -> Any:
            if isinstance(x, list):
                return [same(v) for v in x]
            return None if x is None else block.vars[x.name]
        block.ops = [Operator(block, op.opdef, same(op.inputs), same(op.outputs),
                              dict(op.attrs)) for op in src.ops]
        copy._run_hooks = list(self._run_hooks)
        copy._bump()
        return copy

    def to_string(self) -> str:
        block = self.global_block()
        lines = [f"Program ({len(block.vars)} vars, {len(block.ops)} ops)", "  vars:"]
        lines += [f"    {v.describe()}" for v in block.vars.values()]
        lines.append("  ops:")
        width = len(str(len(block.ops)))
        lines += [f"    {i:>{width}}  {op}" for i, op in enumerate(block.ops)]
        return "\n".join(lines)

    __str__ = to_string

    def __repr__(self) -> str:
        block = self.global_block()
        return f"<Program {len(block.vars)} vars, {len(block.ops)} ops>"


_main_program = Program()
_startup_program = Program()


def default_main_program() -> Program:
    """The program ops are appended to (see :func:`program_guard`)."""
    return _main_program


def default_startup_program() -> Program:
    """The program that initializes parameters (run it once with an Executor)."""
    return _startup_program


@contextlib.contextmanager
def program_guard(main_program: Program,
                  startup_program: Program | None = None) -> Iterator[None]:
    """Build into `main_program` (and `startup_program`) inside the block."""
    global _main_program, _startup_program
    if not isinstance(main_program, Program) or not (
            startup_program is None or isinstance(startup_program, Program)):
        raise TypeError("program_guard expects Program objects")
    saved = _main_program, _startup_program
    _main_program = main_program
    if startup_program is not None:
        _startup_program = startup_program
    try:
        yield
    finally:
        _main_program, _startup_program = saved


def static_mode_guard() -> mode_guard:
    """Dispatch this thread's op calls to the static dispatcher inside the block."""
    return mode_guard("static")


def data(name: str, shape: Sequence[int | None], dtype: Any = "float32",
         lod_level: int = 0) -> Variable:
    """A variable to feed: `shape` may use None or -1 for any size (the batch).
    `lod_level` is accepted for PaddlePaddle compatibility (fastop has no LoD).
    Declaring a data variable again with the same shape and dtype returns it (as
    PaddlePaddle); another shape or dtype, or a name that is not data, is a ValueError."""
    block = default_main_program().global_block()
    existing = block.vars.get(name)
    if existing is not None and not existing.is_data:
        raise ValueError(f"static.data: variable '{name}' already exists as "
                         f"{existing.describe()}, not a data variable")
    return block.create_var(name, dtype, shape, stop_gradient=True, is_data=True)


def _static_dispatch(op: OpDef, args: tuple, kwargs: dict) -> Any:
    """Append an operator for an op call (the static-mode dispatcher)."""
    kwargs = dict(kwargs)
    out = kwargs.pop("out", None)
    inputs, attrs = op.bind(args, kwargs)
    return default_main_program().current_block().append_op(op, inputs, attrs, out)


set_static_dispatcher(_static_dispatch)
