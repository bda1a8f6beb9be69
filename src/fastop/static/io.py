"""Saving and loading static programs and their parameters, without pickle.

``save(program, path)`` writes ``path.params.npz`` (the program's persistable values
from the scope) and ``path.program.json`` (variables and operators), each atomically
(:func:`fastop._files.atomic_write`).

Ops are recorded by reference: a registry op by its namespaced name and the
distribution that provides it; a py_func by its functions' ``module:qualname``; an
initializer by its config.

Loading executes no code the caller did not allow (SPEC §3). A registry op is looked
up in the registry (installed plugins and built-ins, already registered: nothing is
imported). A Python function (a py_func's ``func``/``backward_func``, a callable
attribute) is a reference to code: importing its module runs that module, so
:func:`load_program` refuses it unless the caller allows the module —
``allowed_modules=["mypkg"]`` (a module allows its submodules: ``"mypkg"`` allows
``mypkg.ops``, not ``mypkg_extra``) or ``trust_code=True`` (any module), as
``torch.load(weights_only=True)`` and ``trust_remote_code`` do. Every reference in the
file is checked before any is imported, and an allowed module gives only the functions
it defines (not what it imported, nor dunder attributes). Saving a program that refers
to Python functions warns, naming them and the ``allowed_modules`` that loads it back.

An op loaded by :func:`fastop.plugins.load_directory` also records where it came from
(``source``: its directory and module). Loading the program imports that module only
when it is allowed as a function's module would be (or the op is already registered,
e.g. by ``load_directory`` in the loading process); otherwise
:class:`fastop.plugins.UntrustedOpModuleError` (an ``UntrustedCodeError``) names it.

Every malformed, truncated, crafted or foreign file is a
:class:`~fastop.serialization.LoadError` naming the file and the problem; a loaded
program has the structure a built one has (each op's inputs and outputs as its
definition declares them, and output variables as its meta function infers them).
"""
from __future__ import annotations

import importlib
import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from fastop import initializer as _init
from fastop._core.storage import DType, as_dtype
from fastop._files import LoadError, UntrustedCodeError, atomic_write, read_bounded, read_npz
from fastop.ops import TensorMeta, UnknownOpError, registry
from fastop.ops._sources import DirectorySource, directory_loader
from fastop.static.executor import Executor, Scope, global_scope
from fastop.static.framework import Operator, Program
from fastop.static.py_func import PyFuncOp, PyFuncSource

__all__ = ["save", "load", "load_program"]

FORMAT = "fastop.program"
FORMAT_VERSION = 2   # 2: a py_func op records its inputs' metas (it is an OpDef)

# The largest program file read (bytes): a program of 100k ops is about 30 MiB of JSON.
# Checked before reading, so /dev/zero or a sparse 1 TiB file is refused, not read whole.
MAX_PROGRAM_BYTES = 1 << 28

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_REF = re.compile(rf"(?P<module>{_IDENT}(?:\.{_IDENT})*):(?P<qualname>{_IDENT}(?:\.{_IDENT})*)")
_VAR_FLAGS = ("persistable", "stop_gradient", "is_data", "is_parameter", "trainable")


# ----------------------------------------------------------------------------- references

def _split_ref(ref: Any) -> tuple[str, str] | None:
    """``(module, qualname)`` of a well-formed reference (no dunder parts), else None."""
    match = _REF.fullmatch(ref) if isinstance(ref, str) else None
    if match is None or any(p.startswith("__") and p.endswith("__")
                            for p in match["qualname"].split(".")):
        return None
    return match["module"], match["qualname"]


def _lookup(module: str, qualname: str) -> Any:
    """Import `module` and follow `qualname`'s attributes (runs the module's code)."""
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def function_ref(func: Callable, what: str) -> str:
    """``module:qualname`` of an importable function; an error naming it otherwise."""
    module, qualname = getattr(func, "__module__", None), getattr(func, "__qualname__", None)
    ref = f"{module}:{qualname}"
    if _split_ref(ref) is None:
        raise ValueError(f"cannot save {what} {ref}: only functions importable by "
                         f"module and name can be recorded (define it at module level)")
    try:
        found = _lookup(module, qualname)       # type: ignore[arg-type]
    except (ImportError, AttributeError):
        found = None
    if found is not func:
        raise ValueError(f"cannot save {what} {ref}: that name does not resolve to "
                         f"this function")
    return ref


@dataclass(frozen=True)
class CodePolicy:
    """Which Python code a loaded file may name: modules (and their submodules) in
    `allowed_modules`, or any with `trust_code`. `source` is the file, `caller` the
    loading function (both for messages)."""

    allowed_modules: tuple[str, ...] = ()
    trust_code: bool = False
    source: str = "<memory>"
    caller: str = "static.load_program"

    @classmethod
    def of(cls, allowed_modules: Any, trust_code: Any, source: str, caller: str) -> CodePolicy:
        """The policy of a loader's arguments, checked."""
        if not isinstance(trust_code, bool):
            raise TypeError(f"{caller}: trust_code must be True or False, got {trust_code!r}")
        given = allowed_modules
        try:
            modules = () if given is None else tuple(given)
        except TypeError:
            modules = None
        if isinstance(given, str) or modules is None or not all(
                isinstance(m, str) and re.fullmatch(rf"{_IDENT}(\.{_IDENT})*", m)
                for m in modules):
            raise TypeError(f"{caller}: allowed_modules must be a list of module names "
                            f"(like ['mypkg', 'numpy']), got {given!r}")
        return cls(modules, trust_code, source, caller)

    def error(self, problem: str, cls: type[LoadError] = LoadError) -> LoadError:
        return cls(f"{self.caller}: cannot read {self.source!r}: {problem}")

    def allows(self, module: str) -> bool:
        return self.trust_code or any(module == m or module.startswith(m + ".")
                                      for m in self.allowed_modules)

    def check(self, ref: Any, what: str, where: str) -> tuple[str, str]:
        """``(module, qualname)`` of `ref` if it is well formed and allowed: nothing is
        imported. Raises LoadError (malformed) or UntrustedCodeError (not allowed)."""
        parts = _split_ref(ref)
        if parts is None:
            raise self.error(f"{where}: {what} {ref!r:.80} is not a valid reference "
                             f"(expected 'module:function')")
        module = parts[0]
        if not self.allows(module):
            raise self.error(
                f"{where}: {what} '{ref}' is Python code: loading it would import module "
                f"'{module}', which runs its code. If you trust it, pass "
                f"allowed_modules=['{module}'] (a module allows its submodules), or "
                f"trust_code=True to allow any module", UntrustedCodeError)
        return parts

    def resolve(self, ref: Any, what: str, where: str) -> Callable:
        """The function `ref` names, imported only once :meth:`check` passes; it must
        be a function defined in that module (its ``__module__`` and ``__qualname__``
        are the reference's), not something the module imported."""
        module, qualname = self.check(ref, what, where)
        try:
            obj = _lookup(module, qualname)
        except (ImportError, AttributeError) as exc:
            raise self.error(f"{where}: cannot resolve {what} '{ref}': looked for "
                             f"function '{qualname}' in module '{module}' "
                             f"({type(exc).__name__}: {exc}). " + _missing_advice(module, qualname)
                             ) from exc
        if not callable(obj) or getattr(obj, "__module__", None) != module \
                or getattr(obj, "__qualname__", None) != qualname:
            raise self.error(f"{where}: {what} '{ref}' is not a function defined in module "
                             f"'{module}' (it names {type(obj).__name__} "
                             f"{getattr(obj, '__module__', '?')}:"
                             f"{getattr(obj, '__qualname__', '?')})")
        return obj


def _missing_advice(module: str, qualname: str) -> str:
    """What to do when a saved function cannot be found again."""
    if module == "__main__":
        script = getattr(importlib.import_module("__main__"), "__file__", None)
        running = f"the script running now ({script})" if script else "this session"
        return (f"The program was saved by a script that defined '{qualname}' itself "
                f"(module '__main__'), and {running} does not define it: a script's "
                f"functions are found only when that same script loads the program. Move "
                f"'{qualname}' into a module (e.g. my_ops.py), import it from there in the "
                f"script that builds and saves the program, save again, and load with "
                f"allowed_modules=['my_ops']")
    return (f"Make module '{module}' importable here (installed, or on sys.path) with "
            f"'{qualname}' defined in it, as when the program was saved")


def _code_refs(data: dict[str, Any]) -> Iterator[tuple[Any, str, str]]:
    """``(reference, what, where)`` of every Python function a program dict names."""
    for i, record in enumerate(data.get("ops", ())):
        if not isinstance(record, dict):
            continue
        p = record.get("py_func")
        if isinstance(p, dict):
            yield p.get("func"), f"py_func {_py_func_role(p)}", f"op #{i}"
            if p.get("backward_func") is not None:
                yield p["backward_func"], "py_func backward_func", f"op #{i}"
        attrs = record.get("attrs")
        if isinstance(attrs, dict):
            for name, value in attrs.items():
                for ref in _attr_refs(value):
                    yield ref, f"attribute '{name}'", f"op #{i} ({record.get('op')})"


def _attr_refs(value: Any) -> Iterator[Any]:
    if isinstance(value, list):
        for v in value:
            yield from _attr_refs(v)
    elif isinstance(value, dict) and "$ref" in value:
        yield value["$ref"]


def _py_func_role(p: dict[str, Any]) -> str:
    return "backward_func" if p.get("role") == "backward" else "func"


# ----------------------------------------------------------------------------- attributes

def _encode_attr(op: str, name: str, value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_encode_attr(op, name, v) for v in value]
    if isinstance(value, DType):
        return {"$dtype": value.name}
    if isinstance(value, _init.Initializer):
        return {"$initializer": value.config()}
    if callable(value):
        return {"$ref": function_ref(value, f"attribute '{name}' of op {op}")}
    raise TypeError(f"cannot save attribute '{name}' of op {op}: unsupported value "
                    f"{value!r} of type {type(value).__name__}")


def _decode_attr(policy: CodePolicy, where: str, name: str, value: Any) -> Any:
    if isinstance(value, list):
        return [_decode_attr(policy, where, name, v) for v in value]
    if not isinstance(value, dict):
        return value
    if "$dtype" in value:
        try:
            return as_dtype(value["$dtype"])
        except (TypeError, ValueError) as exc:
            raise policy.error(f"{where}: attribute '{name}': {exc}") from exc
    if "$initializer" in value:
        config = value["$initializer"]
        try:
            if not isinstance(config, dict):
                raise TypeError(f"expected an object, got {type(config).__name__}")
            return _init.from_config(config)
        except (TypeError, ValueError) as exc:
            raise policy.error(f"{where}: attribute '{name}': not an initializer "
                               f"config ({exc})") from exc
    if "$ref" in value:
        return policy.resolve(value["$ref"], f"attribute '{name}'", where)
    raise policy.error(f"{where}: attribute '{name}' is an object with none of the keys "
                       f"'$dtype', '$initializer', '$ref'")


# ----------------------------------------------------------------------------- program

def _names(x: Any) -> Any:
    if isinstance(x, list):
        return [_names(v) for v in x]
    return None if x is None else x.name


def _encode_op(op: Operator) -> dict[str, Any]:
    record: dict[str, Any] = {"inputs": _names(op.inputs), "outputs": _names(op.outputs)}
    opdef = op.opdef
    source = opdef.source
    if isinstance(source, PyFuncSource):
        what = "py_func backward_func" if source.role == "backward" else "py_func func"
        record["py_func"] = {
            "role": source.role, "func": function_ref(source.func, what),
            "backward_func": None if source.backward_func is None else
            function_ref(source.backward_func, "py_func backward_func"),
            "in_metas": [_encode_meta(m) for m in source.in_metas],
            "in_names": source.in_names,
            "out_metas": [_encode_meta(m) for m in source.out_metas],
            "out_names": source.out_names, "expected": source.expected,
            "keep": source.keep, "skip_positions": source.skip_positions,
            "optional_from": source.optional_from}
    else:
        record.update(op=opdef.name, plugin=opdef.plugin, plugin_version=opdef.version,
                      attrs={k: _encode_attr(opdef.name, k, v) for k, v in op.attrs.items()})
        if isinstance(source, DirectorySource):   # from load_directory: load it again
            record["source"] = source.as_record()
    return record


def program_to_dict(program: Program) -> dict[str, Any]:
    block = program.global_block()
    variables = []
    for v in block.vars.values():
        entry = {"name": v.name, "shape": v.shape, "dtype": v.dtype.name,
                 "persistable": v.persistable, "stop_gradient": v.stop_gradient,
                 "is_data": v.is_data, "is_parameter": v.is_parameter,
                 "trainable": v.trainable}
        if v.constant is not None:
            entry["constant"] = v.constant.tolist()
        variables.append(entry)
    return {"format": FORMAT, "version": FORMAT_VERSION, "vars": variables,
            "ops": [_encode_op(op) for op in block.ops]}


def _encode_meta(meta: TensorMeta | None) -> list[Any] | None:
    return None if meta is None else [meta.shape, meta.dtype.name]


def _field(policy: CodePolicy, record: dict[str, Any], key: str, kind: type, where: str,
           expected: str) -> Any:
    """``record[key]``, which must be a `kind` (an int is never a bool)."""
    if key not in record:
        raise policy.error(f"{where}: missing '{key}'")
    value = record[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise policy.error(f"{where}: '{key}' must be {expected}, got {value!r:.60}")
    return value


def _is_dim(d: Any) -> bool:
    return d is None or (type(d) is int and d >= 0)


def _shape(policy: CodePolicy, value: Any, where: str) -> list[int | None]:
    if not isinstance(value, list) or not all(map(_is_dim, value)):
        raise policy.error(f"{where}: shape must be a list of sizes >= 0 or null, got "
                           f"{value!r:.60}")
    return value


def _dtype(policy: CodePolicy, value: Any, where: str) -> DType:
    try:
        if not isinstance(value, str):
            raise TypeError("not a string")
        return as_dtype(value)
    except (TypeError, ValueError) as exc:
        raise policy.error(f"{where}: unknown dtype {value!r:.40}") from exc


def _decode_var(policy: CodePolicy, block: Any, i: int, v: Any) -> None:
    where = f"variable #{i}"
    if not isinstance(v, dict):
        raise policy.error(f"{where}: must be an object, got {type(v).__name__}")
    name = _field(policy, v, "name", str, where, "a string")
    where = f"variable #{i} ('{name}')"
    if not name or name in block.vars:
        raise policy.error(f"{where}: the name is empty or declared twice")
    dtype = _dtype(policy, v.get("dtype"), where)
    shape = _shape(policy, v.get("shape"), where)
    flags = {k: _field(policy, v, k, bool, where, "true or false") for k in _VAR_FLAGS}
    constant = None
    if v.get("constant") is not None:
        try:
            constant = np.array(v["constant"], dtype=dtype.numpy_dtype)
        except (TypeError, ValueError, OverflowError) as exc:
            raise policy.error(f"{where}: the constant is not a {dtype.name} array "
                               f"({exc})") from exc
        if list(constant.shape) != shape:
            raise policy.error(f"{where}: the constant has shape {list(constant.shape)}, "
                               f"the variable {shape}")
    block.create_var(name, dtype, shape, constant=constant, **flags)


def _op_io(policy: CodePolicy, block: Any, opdef: Any, record: dict[str, Any], where: str,
           n_outputs: int | None) -> tuple[list[Any], list[Any]]:
    """The op's inputs (per declared input: a Variable, None or a list) and outputs
    (`n_outputs` of them; None: any number), shaped as its definition declares them."""
    def var(name: Any, spec: str) -> Any:
        if not isinstance(name, str) or name not in block.vars:
            raise policy.error(f"{where}: {spec} names no variable {name!r:.60} of the "
                               f"program")
        return block.vars[name]
    inputs = _field(policy, record, "inputs", list, where, "a list")
    outputs = _field(policy, record, "outputs", list, where, "a list")
    specs = list(opdef.inputs)
    if len(inputs) != len(specs):
        raise policy.error(f"{where}: the op takes {len(specs)} inputs "
                           f"({', '.join(map(str, specs))}), got {len(inputs)}")
    ins: list[Any] = []
    for spec, x in zip(specs, inputs):
        what = f"input '{spec.name}'"
        if spec.variadic:
            if not isinstance(x, list):
                raise policy.error(f"{where}: {what} is variadic: expected a list of names, "
                                   f"got {x!r:.60}")
            ins.append([var(n, what) for n in x])
        elif x is None and spec.optional:
            ins.append(None)
        else:
            ins.append(var(x, what))
    if n_outputs is not None and len(outputs) != n_outputs:
        raise policy.error(f"{where}: the op has {n_outputs} output"
                           f"{'s' * (n_outputs != 1)}, got {len(outputs)}")
    return ins, [var(n, "an output") for n in outputs]


def _meta(x: Any) -> Any:
    """What a meta function gets for an input: a TensorMeta, a list of them, or None."""
    if isinstance(x, list):
        return [_meta(v) for v in x]
    return None if x is None else TensorMeta(x.shape, x.dtype)


def _check_outputs(policy: CodePolicy, where: str, outs: Sequence[Any],
                   metas: Sequence[TensorMeta]) -> None:
    """The output variables agree with what the op produces (as append_op checks)."""
    for var, meta in zip(outs, metas):
        if var.dtype != meta.dtype or var.ndim != len(meta.shape) or any(
                a is not None and b is not None and a != b
                for a, b in zip(var.shape, meta.shape)):
            shape = "[" + ", ".join("?" if d is None else str(d) for d in meta.shape) + "]"
            raise policy.error(f"{where}: output '{var.name}' is declared "
                               f"{var.dtype.name}{var.shape}, but the op produces "
                               f"{meta.dtype.name}{shape}")


def _meta_record(policy: CodePolicy, m: Any, where: str, what: str) -> TensorMeta | None:
    """A ``[shape, dtype]`` record (null: an absent optional input) as a TensorMeta."""
    if m is None:
        return None
    if not isinstance(m, list) or len(m) != 2:
        raise policy.error(f"{where}: each of {what} is [shape, dtype] or null, got "
                           f"{m!r:.60}")
    return TensorMeta(_shape(policy, m[0], where), _dtype(policy, m[1], where))


def _decode_py_func(policy: CodePolicy, block: Any, record: dict[str, Any],
                    at: str) -> Operator:
    where = f"{at} (py_func)"
    p = _field(policy, record, "py_func", dict, where, "an object")
    role = p.get("role")
    if role not in ("forward", "backward"):
        raise policy.error(f"{where}: role must be 'forward' or 'backward', got "
                           f"{role!r:.40}")
    in_metas = [_meta_record(policy, m, where, "in_metas")
                for m in _field(policy, p, "in_metas", list, where, "a list")]
    out_metas = [_meta_record(policy, m, where, "out_metas")
                 for m in _field(policy, p, "out_metas", list, where, "a list")]
    in_names = _field(policy, p, "in_names", list, where, "a list of names")
    out_names = _field(policy, p, "out_names", list, where, "a list of names")
    skip = _field(policy, p, "skip_positions", list, where, "a list of positions")
    expected, keep, optional_from = p.get("expected"), p.get("keep"), p.get("optional_from")
    n_in, n_out = len(in_metas), len(out_metas)

    def count(v: Any, top: int) -> bool:
        return type(v) is int and 0 <= v <= top

    if not (len(in_names) == n_in and len(out_names) == n_out and None not in out_metas
            and all(isinstance(n, str) for n in in_names + out_names)
            and all(count(k, n_in + n_out - 1) for k in skip)
            and (expected is None or count(expected, 1 << 16))
            and (keep is None or (isinstance(keep, list) and len(keep) == n_out
                                  and len(set(keep)) == n_out and expected is not None
                                  and all(count(k, expected - 1) for k in keep)))
            and (optional_from is None or count(optional_from, n_in))):
        raise policy.error(f"{where}: in_names, in_metas, out_names, out_metas, keep, "
                           f"expected, skip_positions and optional_from do not agree "
                           f"with each other")
    backward = p.get("backward_func")
    op = PyFuncOp(PyFuncSource(
        policy.resolve(p.get("func"), f"py_func {_py_func_role(p)}", at), in_metas,
        in_names, out_metas, out_names, role=role, expected=expected, keep=keep,
        backward_func=None if backward is None else
        policy.resolve(backward, "py_func backward_func", at),
        skip_positions=skip, optional_from=optional_from))
    ins, outs = _op_io(policy, block, op, record, where, n_out)
    _check_outputs(policy, where, outs, out_metas)
    return Operator(block, op, ins, outs, {})


def _decode_op(policy: CodePolicy, block: Any, i: int, record: Any) -> Operator:
    where = f"op #{i}"
    if not isinstance(record, dict):
        raise policy.error(f"{where}: must be an object, got {type(record).__name__}")
    if "py_func" in record:
        return _decode_py_func(policy, block, record, where)
    name = _field(policy, record, "op", str, where, "an op name")
    if name not in registry and record.get("source") is not None:
        _load_directory_op(policy, name, record["source"], where)
    try:
        opdef = registry.get(name)
    except UnknownOpError as exc:
        provider = record.get("plugin") or "an unknown distribution"
        version = record.get("plugin_version") or ""
        why = f": {exc.reason}" if exc.reason else ", which is not installed or not loaded"
        raise policy.error(f"{where}: the program needs op '{name}', provided by "
                           f"{provider} {version}".rstrip() + why) from exc
    where = f"op #{i} ({name})"
    attrs_in = _field(policy, record, "attrs", dict, where, "an object")
    attrs = {k: _decode_attr(policy, where, k, v) for k, v in attrs_in.items()}
    # an op with variadic or optional outputs makes as many as its meta function says
    ins, outs = _op_io(policy, block, opdef, record, where,
                       len(opdef.outputs) if opdef.fixed_outputs else None)
    try:
        attrs = opdef.check_attrs(attrs)
        metas = opdef.infer_meta([_meta(x) for x in ins], attrs)
    except Exception as exc:      # the op's own checks and meta function refuse it
        raise policy.error(f"{where}: the op refuses its recorded inputs and attributes "
                           f"({type(exc).__name__}: {exc})") from exc
    if len(outs) != len(metas):
        raise policy.error(f"{where}: the op makes {len(metas)} outputs for its recorded "
                           f"inputs, got {len(outs)}")
    _check_outputs(policy, where, outs, metas)
    return Operator(block, opdef, ins, outs, attrs)


def _check_directory_op(policy: CodePolicy, name: str, source: Any, where: str) -> None:
    """A load_directory op's recorded ``source``: well formed, its module there and
    allowed by `policy` — checked without importing anything."""
    if not isinstance(source, dict) or not isinstance(source.get("directory"), str) \
            or not isinstance(source.get("module"), str) or \
            not re.fullmatch(_IDENT, source["module"]):
        raise policy.error(f"{where}: 'source' must be {{\"directory\": ..., \"module\": "
                           f"...}}, got {source!r:.80}")
    try:
        directory_loader().check_directory_source(name, source, policy.allows)
    except UntrustedCodeError as exc:
        raise type(exc)(f"{policy.caller}: cannot read {policy.source!r}: {where}: "
                        f"{exc}") from None
    except ValueError as exc:
        raise policy.error(f"{where}: {exc}") from exc


def _load_directory_op(policy: CodePolicy, name: str, source: Any, where: str) -> None:
    _check_directory_op(policy, name, source, where)
    try:
        directory_loader().load_directory_source(name, source, policy.allows)
    except ValueError as exc:
        raise policy.error(f"{where}: {exc}") from exc


def program_from_dict(data: Any, policy: CodePolicy | None = None) -> Program:
    """The Program a dict made by :func:`program_to_dict` describes, checked as a file
    from elsewhere is; Python functions it names are resolved under `policy` (default:
    none allowed)."""
    policy = CodePolicy() if policy is None else policy
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise policy.error(f"not a fastop program file (format {found!r:.40})")
    if data.get("version") != FORMAT_VERSION:
        raise policy.error(f"format version {data.get('version')!r:.20}; this fastop reads "
                           f"version {FORMAT_VERSION}")
    for key in ("vars", "ops"):
        _field(policy, data, key, list, "the file", "a list")
    for ref, what, where in _code_refs(data):  # every reference, before any import
        policy.check(ref, what, where)
    for i, record in enumerate(data["ops"]):
        if isinstance(record, dict) and record.get("source") is not None \
                and isinstance(record.get("op"), str) \
                and record.get("op") not in registry:
            _check_directory_op(policy, record["op"], record["source"], f"op #{i}")
    program = Program()
    block = program.global_block()
    for i, v in enumerate(data["vars"]):
        _decode_var(policy, block, i, v)
    block.ops.extend(_decode_op(policy, block, i, record)
                     for i, record in enumerate(data["ops"]))
    program._bump()
    return program


# ----------------------------------------------------------------------------- public API

def save(program: Program, model_path: str, scope: Scope | None = None) -> None:
    """Write ``model_path.program.json`` and ``model_path.params.npz`` (every
    persistable variable of `program` that has a value in `scope`).

    A program that calls Python functions (py_func) warns: loading it back needs their
    modules allowed (``load_program(path, allowed_modules=[...])``)."""
    import json
    scope = global_scope() if scope is None else scope
    data = program_to_dict(program)
    text = json.dumps(data, indent=1)
    values = {v.name: np.asarray(scope.find_var(v.name))
              for v in program.list_vars() if v.persistable and v.name in scope}
    atomic_write(model_path + ".program.json", lambda f: f.write(text.encode()))
    atomic_write(model_path + ".params.npz", lambda f: np.savez(f, **values))
    refs = list(dict.fromkeys(ref for ref, _, _ in _code_refs(data)))
    refs += list(dict.fromkeys(f"{r['source']['module']} (from {r['source']['directory']})"
                               for r in data["ops"] if r.get("source")))
    if refs:
        modules = list(dict.fromkeys(ref.partition(":")[0].partition(" ")[0]
                                     for ref in refs))
        in_main = [r.partition(":")[2] for r in refs if r.startswith("__main__:")]
        script = ("; functions of the script itself (module '__main__': "
                  f"{', '.join(in_main)}) can be loaded back only by this same script: "
                  f"to load the program anywhere else, move them into a module (e.g. "
                  f"my_ops.py), import them from it, and save again") if in_main else ""
        warnings.warn(f"static.save: the program calls Python functions "
                      f"{', '.join(map(repr, refs))}; loading it imports their modules, "
                      f"which load_program does only when allowed: "
                      f"static.load_program(path, allowed_modules={modules!r}){script}",
                      UserWarning, stacklevel=2)


def load_program(model_path: str, *, allowed_modules: Sequence[str] | None = None,
                 trust_code: bool = False) -> Program:
    """The Program saved by :func:`save`.

    Registry ops are looked up in the registry. Python functions the program names
    (py_func) are imported only from `allowed_modules` (module names; a module allows
    its submodules) or, with ``trust_code=True``, from any module; otherwise loading
    raises :class:`~fastop.serialization.UntrustedCodeError` naming the function and
    the argument that allows it. A malformed file, one that is not a regular file (a
    FIFO, a device) or one over ``MAX_PROGRAM_BYTES`` raises
    :class:`~fastop.serialization.LoadError`."""
    import json
    path = model_path + ".program.json"
    policy = CodePolicy.of(allowed_modules, trust_code, path, "static.load_program")
    raw = read_bounded(path, "static.load_program", MAX_PROGRAM_BYTES)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:     # JSON and UTF-8 errors are ValueErrors
        raise policy.error(f"not a JSON program file ({type(exc).__name__}: "
                           f"{str(exc)[:200]})") from None
    return program_from_dict(data, policy)


def load(program: Program, model_path: str, executor: Executor | None = None,
         var_list: list[Any] | None = None, scope: Scope | None = None) -> None:
    """Load the saved persistable values of `program` (or of `var_list`) into `scope`.

    A damaged or foreign file, or one lacking (or disagreeing with) a wanted variable,
    raises :class:`~fastop.serialization.LoadError`; the scope is then unchanged."""
    scope = global_scope() if scope is None else scope
    path = model_path + ".params.npz"
    wanted = var_list if var_list is not None else \
        [v for v in program.list_vars() if v.persistable]
    values = read_npz(path, "static.load", "a fastop parameter file")
    missing = [v.name for v in wanted if v.name not in values]
    if missing:
        raise LoadError(f"static.load: {path} has no value for {missing}")
    for v in wanted:
        value = values[v.name]
        if as_dtype(value.dtype) != v.dtype or value.ndim != v.ndim or any(
                d is not None and d != s for d, s in zip(v.shape, value.shape)):
            raise LoadError(f"static.load: '{v.name}' is {v.dtype.name}{v.shape} in the "
                            f"program but {value.dtype}{list(value.shape)} in the file {path}")
    for v in wanted:
        scope.set(v.name, values[v.name])
