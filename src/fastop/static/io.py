"""Saving and loading static programs and their parameters, without pickle.

``save(program, path)`` writes ``path.params.npz`` (the program's persistable values
from the scope) and ``path.program.json`` (variables and operators). Files are written
to a temporary name and renamed, so a crash never leaves a half-written file.

Ops are recorded by reference: a registry op by its namespaced name and the
distribution that provides it; a py_func by its functions' ``module:qualname``;
an initializer by its config. Loading resolves the references (importing the modules),
so a program saved in one process runs in a fresh one; a reference that cannot be
resolved is an error naming it.

An op loaded by :func:`fastop.plugins.load_directory` also records where it came from
(``source``: its directory and module), which loading a program loads again.
"""
from __future__ import annotations

import importlib
import os
from typing import Any, Callable

import numpy as np

from fastop import initializer as _init
from fastop import plugins
from fastop._core.storage import DType, as_dtype
from fastop.ops import TensorMeta, UnknownOpError, registry
from fastop.static.executor import Executor, Scope, global_scope
from fastop.static.framework import Operator, Program
from fastop.static.py_func import PyFuncOp, PyFuncSource

__all__ = ["save", "load", "load_program"]

FORMAT = "fastop.program"
FORMAT_VERSION = 2   # 2: a py_func op records its inputs' metas (it is an OpDef)


def _atomic_write(path: str, write: Callable[[Any], None]) -> None:
    import tempfile    # here, not at import: `import fastop` stays fast
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=os.path.basename(path) + ".",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


# ----------------------------------------------------------------------------- references

def function_ref(func: Callable, what: str) -> str:
    """``module:qualname`` of an importable function; an error naming it otherwise."""
    module, qualname = getattr(func, "__module__", None), getattr(func, "__qualname__", None)
    ref = f"{module}:{qualname}"
    if not module or not qualname or "<" in qualname:
        raise ValueError(f"cannot save {what} {ref}: only functions importable by "
                         f"module and name can be recorded (define it at module level)")
    try:
        found = resolve_ref(ref, what)
    except ValueError:
        found = None
    if found is not func:
        raise ValueError(f"cannot save {what} {ref}: that name does not resolve to "
                         f"this function")
    return ref


def resolve_ref(ref: str, what: str) -> Any:
    module_name, _, qualname = ref.partition(":")
    try:
        obj = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot resolve {what} '{ref}' recorded in the program: "
                         f"{type(exc).__name__}: {exc}") from exc
    return obj


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


def _decode_attr(op: str, name: str, value: Any) -> Any:
    if isinstance(value, list):
        return [_decode_attr(op, name, v) for v in value]
    if isinstance(value, dict):
        if "$dtype" in value:
            return as_dtype(value["$dtype"])
        if "$initializer" in value:
            return _init.from_config(value["$initializer"])
        if "$ref" in value:
            return resolve_ref(value["$ref"], f"attribute '{name}' of op {op}")
    return value


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
        source = plugins.manager.directory_source(opdef.name)
        if source is not None:     # an op from load_directory: where to load it again
            record["source"] = source
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


def _decode_meta(value: list[Any] | None) -> TensorMeta | None:
    return None if value is None else TensorMeta(*value)


def _decode_op(record: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    if "py_func" in record:
        p = record["py_func"]
        what = "py_func backward_func" if p["role"] == "backward" else "py_func func"
        op = PyFuncOp(PyFuncSource(
            resolve_ref(p["func"], what), [_decode_meta(m) for m in p["in_metas"]],
            p["in_names"], [_decode_meta(m) for m in p["out_metas"]], p["out_names"],
            role=p["role"], expected=p["expected"], keep=p["keep"],
            backward_func=None if p["backward_func"] is None else
            resolve_ref(p["backward_func"], "py_func backward_func"),
            skip_positions=p["skip_positions"], optional_from=p["optional_from"]))
        return op, {}
    name = record["op"]
    if name not in registry and record.get("source"):   # an op from load_directory
        # importing its module runs code: only with the caller's allow-list (with
        # load_program's allowed_modules/trust_code: allows=policy.allows); None refuses
        plugins.manager.load_directory_source(name, record["source"], allows=None)
    try:
        opdef = registry.get(name)
    except UnknownOpError as exc:
        provider = record.get("plugin") or "an unknown distribution"
        version = record.get("plugin_version") or ""
        raise ValueError(f"the program needs op '{name}', provided by {provider} "
                         f"{version}".rstrip() + ", which is not installed or not loaded"
                         ) from exc
    attrs = {k: _decode_attr(name, k, v) for k, v in record["attrs"].items()}
    return opdef, opdef.check_attrs(attrs)


def program_from_dict(data: dict[str, Any]) -> Program:
    if data.get("format") != FORMAT or data.get("version") != FORMAT_VERSION:
        raise ValueError(f"not a fastop program file (format {data.get('format')!r}, "
                         f"version {data.get('version')!r})")
    program = Program()
    block = program.global_block()
    for v in data["vars"]:
        constant = v.get("constant")
        block.create_var(v["name"], v["dtype"], v["shape"], persistable=v["persistable"],
                         stop_gradient=v["stop_gradient"], is_data=v["is_data"],
                         is_parameter=v["is_parameter"], trainable=v["trainable"],
                         constant=None if constant is None else
                         np.array(constant, dtype=as_dtype(v["dtype"]).numpy_dtype))

    def var(name: Any) -> Any:
        if isinstance(name, list):
            return [var(n) for n in name]
        return None if name is None else block.var(name)
    for record in data["ops"]:
        opdef, attrs = _decode_op(record)
        block.ops.append(Operator(block, opdef, [var(n) for n in record["inputs"]],
                                  [var(n) for n in record["outputs"]], attrs))
    program._bump()
    return program


# ----------------------------------------------------------------------------- public API

def save(program: Program, model_path: str, scope: Scope | None = None) -> None:
    """Write ``model_path.program.json`` and ``model_path.params.npz`` (every
    persistable variable of `program` that has a value in `scope`)."""
    import json
    scope = global_scope() if scope is None else scope
    text = json.dumps(program_to_dict(program), indent=1)
    values = {v.name: np.asarray(scope.find_var(v.name))
              for v in program.list_vars() if v.persistable and v.name in scope}
    _atomic_write(model_path + ".program.json", lambda f: f.write(text.encode()))
    _atomic_write(model_path + ".params.npz", lambda f: np.savez(f, **values))


def load_program(model_path: str) -> Program:
    """The Program saved by :func:`save` (resolving its op references)."""
    import json
    with open(model_path + ".program.json", encoding="utf-8") as f:
        return program_from_dict(json.load(f))


def load(program: Program, model_path: str, executor: Executor | None = None,
         var_list: list[Any] | None = None, scope: Scope | None = None) -> None:
    """Load the saved persistable values of `program` (or of `var_list`) into `scope`."""
    scope = global_scope() if scope is None else scope
    wanted = var_list if var_list is not None else \
        [v for v in program.list_vars() if v.persistable]
    with np.load(model_path + ".params.npz", allow_pickle=False) as npz:
        missing = [v.name for v in wanted if v.name not in npz.files]
        if missing:
            raise ValueError(f"load: {model_path}.params.npz has no value for {missing}")
        for v in wanted:
            value = npz[v.name]
            if as_dtype(value.dtype) != v.dtype or value.ndim != v.ndim or any(
                    d is not None and d != s for d, s in zip(v.shape, value.shape)):
                raise ValueError(f"load: '{v.name}' is {v.dtype.name}{v.shape} in the "
                                 f"program but {value.dtype}{list(value.shape)} in the file")
            scope.set(v.name, value)
