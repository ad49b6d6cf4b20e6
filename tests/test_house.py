"""The shape of the package, checked from its source: no import cycle, Typer only in the CLI,
a CLI that loads without torch, DVC stages that run experiments reading the declared numerics
versions instead of the code, and result stages whose deps cover every module their commands run
(and no training code)."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest
import yaml

from posrnn_cli.common.stages.sources import closure, cycles, import_graph, module_files

from conftest import ROOT
TRAINING = ("posrnn_cli/engine", "posrnn_cli/tasks", "posrnn_cli/models", "posrnn_cli/sweep", "posrnn_cli/lm")
#: the torch-free modules of the tasks room that a result may read: each task's floor lines, beside it
TASK_SPECS = ("posrnn_cli/tasks/__init__.py", "posrnn_cli/tasks/baseline.py", "posrnn_cli/tasks/floors.py",
              "posrnn_cli/tasks/mqar_lines.py", "posrnn_cli/tasks/predecessor_lines.py",
              "posrnn_cli/tasks/reverse_lines.py", "posrnn_cli/tasks/sort_lines.py")


def test_no_import_cycle_in_the_package():
    assert cycles() == []


def test_the_cycle_finder_finds_a_cycle(tmp_path):
    pkg = tmp_path / "posrnn_cli"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import g\n")  # a function-level import counts
    import_graph.cache_clear()
    try:
        assert cycles(pkg) == [["posrnn_cli.a", "posrnn_cli.sub.b", "posrnn_cli.a"]]
    finally:
        import_graph.cache_clear()


#: the package's rooms, lowest first (docs/development.md): a room imports only rooms before it
ROOMS = ("common", "lm", "models", "tasks", "engine", "sweep", "measure", "analysis", "profile_status", "cli")


def upward_imports(root: Optional[Path] = None) -> list[str]:
    """Every import (module level or inside a function) of a room's module from a room after it in
    ``ROOMS``; a module outside every room (the package's ``__init__``, ``__main__``) is left out."""
    graph = import_graph(root) if root else import_graph()
    room = lambda m: m.split(".")[1] if m.count(".") else None
    bad = []
    for a, targets in sorted(graph.items()):
        for b in sorted(targets):
            ra, rb = room(a), room(b)
            if ra in ROOMS and rb in ROOMS and ROOMS.index(rb) > ROOMS.index(ra):
                bad.append(f"{a} imports {b}")
    return bad


def test_no_room_imports_a_room_above_it():
    assert upward_imports() == []


def test_the_layer_check_finds_an_upward_import(tmp_path):
    pkg = tmp_path / "posrnn_cli"
    for room in ("measure", "sweep"):
        (pkg / room).mkdir(parents=True)
        (pkg / room / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "measure" / "bench.py").write_text("from ..sweep import local\n")  # downward: allowed
    (pkg / "sweep" / "local.py").write_text("def f():\n    from ..measure.bench import g\n")
    import_graph.cache_clear()
    try:
        assert upward_imports(pkg) == ["posrnn_cli.sweep.local imports posrnn_cli.measure.bench"]
    finally:
        import_graph.cache_clear()


def imported_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_typer_lives_only_in_the_cli():
    outside = [m for m, p in module_files().items() if not m.startswith("posrnn_cli.cli")
               and imported_names(p) & {"typer", "click"}]
    assert outside == []


def test_importing_the_cli_loads_neither_torch_nor_numpy():
    code = "import sys, posrnn_cli.cli; print(sorted(m for m in ('torch', 'numpy', 'matplotlib') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


# ---- DVC deps ------------------------------------------------------------------------------------
def command_modules(subcommand: str) -> set[str]:
    """The library modules a `posrnn SUBCOMMAND` runs: the modules its CLI function imports
    (read from the function's own source), then everything those import."""
    from typer.main import get_command

    from posrnn_cli.cli import app

    fn = get_command(app).commands[subcommand].callback
    fn = inspect.unwrap(fn)
    mod = fn.__module__
    tree = ast.parse(inspect.getsource(fn).lstrip())  # the function alone
    entries = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = mod.split(".")[: -node.level]
            entries.add(".".join(base + ([node.module] if node.module else [])))
    graph = import_graph()
    entries = {e for e in entries if e in graph}
    assert entries, f"posrnn {subcommand} imports no library module"
    mods = set().union(*(closure(e) for e in entries))
    return {m for m in mods if not m.startswith("posrnn_cli.cli")}


def stages() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


#: the stages that make results from runs (no training code): they depend on the modules they run
RESULT_STAGES = ("aggregate", "plot", "scorecard")


@pytest.mark.parametrize("name", [n for n in stages() if n not in RESULT_STAGES])
def test_a_stage_that_runs_experiments_depends_on_declared_versions_not_on_code(name):
    """A refactor or a rename leaves its dvc.lock entry as it was; a bumped version changes it."""
    from posrnn_cli.common.stages.experiments import EXPERIMENTS
    from posrnn_cli.common.numerics import NAMED

    stage = stages()[name]["do"]
    assert not [d for d in stage.get("deps", []) if d.startswith("posrnn_cli")]
    (versions,) = [p["numerics.json"] for p in stage["params"] if isinstance(p, dict)]
    procedures = {p for e in EXPERIMENTS.values() if e.stage == name for p in e.job_kind.numerics}
    assert set(versions) == set(NAMED) | procedures
    table = yaml.safe_load((ROOT / "numerics.json").read_text())
    assert all(k in table for k in versions)


@pytest.mark.parametrize("name", RESULT_STAGES)
def test_each_result_stage_depends_on_every_module_its_command_runs(name):
    stage = stages()[name]["do"]
    sub = re.match(r"posrnn ([\w-]+)", stage["cmd"]).group(1)
    deps = [d for d in stage.get("deps", []) if d.startswith("posrnn_cli")]
    for d in deps:
        assert (ROOT / d).exists(), f"{name}: dep {d} does not exist"
    files = module_files()
    uncovered = []
    for m in command_modules(sub):
        rel = files[m].relative_to(ROOT).as_posix()
        if not any(rel == d or rel.startswith(d.rstrip("/") + "/") for d in deps):
            uncovered.append(rel)
    assert uncovered == [], f"stage {name} runs {uncovered} but does not list them in its deps"
    # the package's data files (e.g. the scorecard's claims) sit in the listed directories too


@pytest.mark.parametrize("name", RESULT_STAGES)
def test_result_stages_depend_on_no_training_code(name):
    """A result stage reads tables, never the training code; of the tasks room only the floor
    lines declared beside the tasks, which import no torch (``test_the_task_specs_import_no_torch``)."""
    deps = stages()[name]["do"]["deps"]
    assert not [d for d in deps if d.startswith(TRAINING) and d not in TASK_SPECS]
    sub = re.match(r"posrnn ([\w-]+)", stages()[name]["do"]["cmd"]).group(1)
    assert not [m for m in command_modules(sub)
                if m.split(".")[1:2] in (["engine"], ["tasks"], ["models"], ["sweep"], ["lm"])
                and module_files()[m].relative_to(ROOT).as_posix() not in TASK_SPECS]


def test_the_task_specs_import_no_torch():
    code = ("import sys; import " + ", ".join(p[:-3].replace("/", ".").removesuffix(".__init__") for p in TASK_SPECS)
            + "; import posrnn_cli.analysis.scorecard; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# ---- one table of config keys ----------------------------------------------------------------------
def test_every_config_key_has_one_row_in_the_key_table_and_every_list_derives_from_it():
    """A config key added to RunConfig and not to ``common.settings.keys`` fails here; so does an option of
    ``posrnn train``, a sweep short name, a table column or an ignored key kept anywhere else."""
    from posrnn_cli.analysis import aggregate
    from posrnn_cli.analysis.scorecard import core
    from posrnn_cli.cli.options import RUN_OPTIONS
    from posrnn_cli.common.settings import config, keys
    from posrnn_cli.common.results import tables
    plan = importlib.import_module("posrnn_cli.sweep.plan")  # the module (the package exports a function of that name)

    rows = [k.config for k in keys.KEYS]
    assert len(rows) == len(set(rows)), "a config key has two rows in common.settings.keys"
    assert set(rows) == set(config.RunConfig().flat()), "common.settings.keys and RunConfig's fields differ"
    assert {name: o.key for name, o in RUN_OPTIONS.items()} == keys.FLAGS
    assert plan.SHORT is keys.SHORT and plan.ABBREV is keys.ABBREV
    assert aggregate.CELL_COLUMNS is keys.CELL_COLUMNS and aggregate.IGNORED is keys.CELL_IGNORED
    assert config.CELL_IGNORED is keys.CELL_IGNORED
    assert tables.KEY_COLUMNS is keys.KEY_COLUMNS and not hasattr(core, "KEY_COLUMNS")
    assert set(keys.SHORT.values()) <= set(rows) and set(keys.ABBREV) <= set(keys.SHORT)
    defaults = config.RunConfig().flat()
    assert {k.config for k in keys.KEYS if k.boolean} == {k for k, v in defaults.items() if isinstance(v, bool)}
    # the wall-clock checkpoint cadence changes nothing a run computes: it never splits a cell
    assert "train.checkpoint_minutes" in keys.CELL_IGNORED
    a, b = config.RunConfig(), config.RunConfig()
    b.train.checkpoint_minutes = 30.0
    assert aggregate.cell_of(a) == aggregate.cell_of(b)


def oversized(root: Path) -> tuple[list[str], list[str]]:
    """The modules under ``root/posrnn_cli`` past 600 lines and the functions past 60 (nested ones
    too), a function counted from its first decorator to its last line."""
    long_modules, long_functions = [], []
    for path in sorted((root / "posrnn_cli").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(root).as_posix()
        if len(text.splitlines()) > 600:
            long_modules.append(f"{rel} ({len(text.splitlines())} lines)")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if node.end_lineno - first + 1 > 60:
                    long_functions.append(f"{rel}:{first} {node.name} ({node.end_lineno - first + 1} lines)")
    return long_modules, long_functions


def test_no_module_over_600_lines_and_no_function_over_60():
    """Rooms that stay readable: a module past 600 lines, or a function past 60, is split."""
    long_modules, long_functions = oversized(ROOT)
    assert not long_modules, long_modules
    assert not long_functions, long_functions


def test_the_length_check_counts_decorators_and_nested_functions(tmp_path):
    lines = lambda n, indent: "".join(f"{indent}x{i} = {i}\n" for i in range(n))
    (tmp_path / "posrnn_cli").mkdir()
    (tmp_path / "posrnn_cli" / "a.py").write_text(
        "def fits():\n" + lines(59, "    ") + "\n\n"  # 60 lines: at the limit
        "@decorated\ndef decorated():\n" + lines(59, "    ") + "\n\n"  # 60 lines below its decorator
        "def outer():\n    def nested():\n" + lines(60, "        ") + "    return nested\n")
    (tmp_path / "posrnn_cli" / "b.py").write_text("x = 1\n" * 601)
    assert oversized(tmp_path) == (["posrnn_cli/b.py (601 lines)"],
                                   ["posrnn_cli/a.py:63 decorated (61 lines)", "posrnn_cli/a.py:126 outer (63 lines)",
                                    "posrnn_cli/a.py:127 nested (61 lines)"])


# ---- one name, one module ------------------------------------------------------------------------
#: the base names two modules may share: none (a run's identity names no module, so a rename leaves
#: every run current)
SHARED_NAMES: dict[str, list[str]] = {}


def shared_base_names(root: Path) -> dict[str, list[str]]:
    """Each base name (``__init__.py`` aside) that more than one module under ``root/posrnn_cli`` has."""
    by: dict[str, list[str]] = {}
    for path in sorted((root / "posrnn_cli").rglob("*.py")):
        if path.name != "__init__.py":
            by.setdefault(path.name, []).append(path.relative_to(root).as_posix())
    return {name: paths for name, paths in by.items() if len(paths) > 1}


def test_module_base_names_are_unique_across_the_package():
    """One name, one module (bench, status, …): a traceback, a grep or an import names which one it
    is."""
    assert shared_base_names(ROOT) == SHARED_NAMES


def test_the_base_name_check_finds_a_shared_name(tmp_path):
    (tmp_path / "posrnn_cli" / "sweep").mkdir(parents=True)
    for rel in ("__init__.py", "sweep/__init__.py", "bench.py", "sweep/bench.py", "sweep/plan.py"):
        (tmp_path / "posrnn_cli" / rel).write_text("")
    assert shared_base_names(tmp_path) == {"bench.py": ["posrnn_cli/bench.py", "posrnn_cli/sweep/bench.py"]}


def _private_imports(root: Path) -> list[str]:
    """Every ``from X import _name`` in the package under ``root`` (relative or absolute, X one of
    its modules): a name with a leading underscore is its module's own."""
    bad = []
    for path in sorted((root / "posrnn_cli").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("posrnn_cli")):
                bad += [f"{path.relative_to(root).as_posix()}:{node.lineno} {a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    return bad


def test_no_module_imports_another_modules_private_name():
    """Interfaces, not cuts: what a module lends another is public (ruff's PLC2701 checks the tests,
    but not imports within one package, so this test checks the package)."""
    assert _private_imports(ROOT) == []


def test_the_private_import_check_finds_one(tmp_path):
    (tmp_path / "posrnn_cli" / "sub").mkdir(parents=True)
    (tmp_path / "posrnn_cli" / "sub" / "a.py").write_text("def _helper():\n    pass\n")
    (tmp_path / "posrnn_cli" / "b.py").write_text("from .sub.a import _helper\nfrom .sub import a\n")
    assert _private_imports(tmp_path) == ["posrnn_cli/b.py:1 _helper"]


def test_no_module_keeps_state_in_a_context_variable():
    """What a scorecard kind reads (its trace, Holm's rejections, forced sides, the budget columns
    its claim varies) is passed as an argument (``scorecard.Reading``), not set aside in a
    ContextVar or any other module-level context."""
    used = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "posrnn_cli").rglob("*.py"))
            if re.search(r"^\s*(import contextvars|from contextvars import)", p.read_text(encoding="utf-8"), re.M)]
    assert used == []
