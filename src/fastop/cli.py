"""fastop's command line: ``python -m fastop`` (or the ``fastop`` script).

Commands:
  ``bench``  run the benchmarks in ``benchmarks/bench_*.py`` against numpy and PyTorch
             (see :mod:`fastop.benchmark`);
  ``ops``    list every registered op: its plugin (distribution) and version, inputs,
             outputs, attributes with defaults, dtypes, and its gradient rule.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import fastop
from fastop._core.kernel import CKernel
from fastop.ops import OpDef, registry
from fastop.ops._registry import REQUIRED
from fastop.plugins import loaded_plugins

__all__ = ["main", "op_info"]


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    name = getattr(value, "name", None)   # DType
    return name if isinstance(name, str) else repr(value)


def op_info(op: OpDef) -> dict[str, Any]:
    """Everything ``fastop ops`` shows about one op, as JSON-able data."""
    attrs = []
    for spec in op.attrs.values():
        entry = {"name": spec.name, "type": spec.type.__name__}
        if spec.default is not REQUIRED:
            entry["default"] = _jsonable(spec.default)
        attrs.append(entry)
    if op.grad_rule is None:
        gradient = None
    elif op.grad_rule.kernel_op:
        gradient = f"kernel {op.grad_rule.kernel_op}"
    else:
        gradient = "composite"
    kinds = {"cython" if isinstance(k, CKernel) else "python" for k in op.kernels.values()}
    return {"name": op.name, "plugin": op.plugin, "version": op.version,
            "inputs": [str(a) for a in op.inputs], "outputs": [str(a) for a in op.outputs],
            "attrs": attrs, "dtypes": op.dtypes, "kernels": sorted(kinds),
            "gradient": gradient, "doc": op.doc.strip().split("\n")[0] if op.doc else ""}


def _attr_text(attr: dict[str, Any]) -> str:
    return f"{attr['name']}={attr['default']!r}" if "default" in attr else attr["name"]


def _ops_table(infos: list[dict[str, Any]]) -> list[str]:
    header = ["op", "inputs", "outputs", "attrs", "dtypes", "kernel", "gradient"]
    rows = [[i["name"], ", ".join(i["inputs"]), ", ".join(i["outputs"]),
             ", ".join(map(_attr_text, i["attrs"])), " ".join(i["dtypes"]) or "—",
             "/".join(i["kernels"]) or "—", i["gradient"] or "—"] for i in infos]
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
            for row in [header, *rows]]


def cmd_ops(args: argparse.Namespace) -> int:
    """``fastop ops``: the op listing, grouped by the plugin that provides each op."""
    if args.namespace:
        try:
            registry.namespace(args.namespace)
        except AttributeError as exc:
            print(f"fastop ops: error: {exc}", file=sys.stderr)
            return 2
    infos = [op_info(op) for op in registry.ops(args.namespace)]
    plugins = [{"name": p.name, "version": p.version, "module": p.module,
                "ops": list(p.ops)} for p in loaded_plugins()]
    if args.json:
        print(json.dumps({"fastop": fastop.__version__, "plugins": plugins, "ops": infos},
                         indent=2))
        return 0
    # built-in plugin first, then in load order; ops of no loaded plugin last
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {
        (p["name"], p["version"]): [] for p in plugins}
    for info in infos:
        groups.setdefault((info["plugin"], info["version"]), []).append(info)
    modules = {(p["name"], p["version"]): p["module"] for p in plugins}
    lines = []
    groups = {key: members for key, members in groups.items() if members}
    for (plugin, version), members in groups.items():
        module = modules.get((plugin, version))
        lines.append(f"{plugin} {version}".strip() + f": {len(members)} ops"
                     + (f" (plugin module {module})" if module else ""))
        lines += ["  " + line for line in _ops_table(members)]
        lines.append("")
    lines.append(f"{len(infos)} ops from {len(groups)} plugin(s)"
                 + (f" in namespace {args.namespace!r}" if args.namespace else ""))
    print("\n".join(lines))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from fastop import benchmark
    return benchmark.run_command(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastop", description="fastop: a small, fast deep-learning framework.")
    parser.add_argument("--version", action="version",
                        version=f"fastop {fastop.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    from fastop.benchmark import add_arguments
    bench = commands.add_parser("bench", help="benchmark fastop against numpy and PyTorch")
    add_arguments(bench)
    bench.set_defaults(handler=cmd_bench)

    ops = commands.add_parser("ops", help="list every registered op")
    ops.add_argument("--namespace", metavar="NS", help="only ops of this namespace")
    ops.add_argument("--json", action="store_true", help="machine-readable output")
    ops.set_defaults(handler=cmd_ops)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m fastop`` and the ``fastop`` script; the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv[1:]
    return args.handler(args)
