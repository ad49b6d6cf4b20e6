"""posrnn's own source code as data: the import graph of the package, read from the AST (every
``import`` anywhere in a module, function-level ones included). The tests use it to prove there
is no import cycle, that the rooms stay layered and that each result stage of DVC lists the code
it runs. What a run's numbers depend on is declared, not read from here (``common.numerics``).
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the package directory


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """``{"posrnn_cli.tasks.base": path, …}`` for every module of the package."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@lru_cache(maxsize=None)
def import_graph(root: Path = ROOT) -> dict[str, frozenset[str]]:
    """module → the package modules it imports (at top level or inside functions)."""
    files = module_files(root)
    graph = {}
    for mod, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_pkg = path.name == "__init__.py"
        deps: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(mod, is_pkg, node)
                names = [target] + [f"{target}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                # the longest prefix that is a module of the package (``from .x import f`` → x)
                parts = name.split(".")
                while parts and ".".join(parts) not in files:
                    parts.pop()
                if parts and ".".join(parts) != mod:
                    deps.add(".".join(parts))
        graph[mod] = frozenset(deps)
    return graph


def with_parents(modules: set[str]) -> set[str]:
    """Importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first."""
    out = set(modules)
    for m in modules:
        parts = m.split(".")
        out |= {".".join(parts[:i]) for i in range(1, len(parts))}
    return out


def closure(module: str, root: Path = ROOT) -> set[str]:
    """Every package module that importing ``module`` (and calling into it) can run."""
    graph = import_graph(root)
    seen: set[str] = set()
    todo = [module]
    while todo:
        m = todo.pop()
        for n in with_parents({m}):
            if n not in seen and n in graph:
                seen.add(n)
                todo.extend(graph[n])
    return seen


def cycles(root: Path = ROOT) -> list[list[str]]:
    """Import cycles (each a list of modules), found by depth-first search."""
    graph = import_graph(root)
    found, state = [], {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                found.append(path[path.index(n):] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found
