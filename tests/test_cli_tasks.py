"""Every task, core and PE form trains and evaluates from the CLI on a tiny CPU config; the
help lists them; bad combinations are one line; docs/experiments.md's commands are valid."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from posrnn_cli.cli import app, run
from posrnn_cli.common.settings.config import RunConfig
from posrnn_cli.common import catalog
from posrnn_cli.models import CORES, PE_FORMS, check_model_config
from posrnn_cli.tasks import TASKS, build_task

runner = CliRunner()
from conftest import ROOT
BASE = {"--model": "gru", "--vocab-size": "8", "--length": "5", "--hidden-size": "16", "--iterations": "12",
        "--batch-size": "8", "--warmup": "2", "--device": "cpu", "--checkpoint-every": "12"}


def argv(*extra: str) -> list[str]:
    """BASE, with any option that ``extra`` names (or --vocab-size for continuous) left out."""
    drop = set(extra) | ({"--vocab-size"} if "continuous" in extra else set())
    base = [x for k, v in BASE.items() if k not in drop for x in (k, v)]
    return ["train", *base, "--set", "task.n_test=64", *extra]


def train_and_eval(tmp_path, *extra: str) -> dict:
    out = str(tmp_path / "run")
    r = runner.invoke(app, [*argv(*extra), "--out", out, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["finished"]
    r = runner.invoke(app, ["eval", out, "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["step"] == 12 and json.loads((tmp_path / "run" / "eval.json").read_text()) == res
    return res


# (CLI options, the report keys eval must add)
CASES = {
    "reverse": ([], []),
    "sort": (["--task", "sort"], ["non_decreasing_share"]),
    "delayed-add": (["--task", "delayed-add"], []),
    "predecessor": (["--task", "predecessor"], []),
    "copy": (["--task", "copy", "--delay", "3"], []),
    "variable-length": (["--min-length", "3", "--max-length", "5"], ["accuracy_by_length"]),
    "dual-frequency": (["--rarity", "0.125", "--vocab-size", "16"], ["dual_frequency", "dual_frequency_by_position"]),
    "continuous": (["--task", "continuous", "--dim", "8"],
                   ["cosine", "cosine_quartiles", "cosine_q10", "cosine_q50", "cosine_q90"]),
    "autoregressive-reverse": (["--autoregressive", "--pe", "phase"],
                               ["self_feedback_token_accuracy", "truth_feedback_token_accuracy",
                                "truth_feedback_token_accuracy_ci"]),
    "autoregressive-sort": (["--task", "sort", "--autoregressive", "--pe", "none"],
                            ["non_decreasing_share", "self_feedback_token_accuracy", "truth_feedback_token_accuracy"]),
}


@pytest.mark.parametrize("case", CASES)
def test_every_task_trains_and_evaluates(case, tmp_path):
    extra, keys = CASES[case]
    res = train_and_eval(tmp_path, *extra)
    for key in keys:
        assert key in res, key
    if case == "continuous":
        q = res["cosine_quartiles"]
        assert -1 <= q["min"] <= q["q25"] <= q["median"] <= q["q75"] <= q["max"] <= 1
        return
    assert 0 <= res["token_accuracy"] <= 1 and res["damerau_levenshtein"] >= 0
    if case == "variable-length":
        assert sorted(res["accuracy_by_length"]) == ["3", "4", "5"] and res["n_test"] == 3 * 64
    if case == "dual-frequency":
        assert sorted(res["dual_frequency"]) == ["F/F", "F/R", "R/F", "R/R"]
        assert all(len(v) == 5 for v in res["dual_frequency_by_position"].values())


MODELS = {
    "elman": ["--model", "elman"],
    "lstm-add": ["--model", "lstm", "--pe-mode", "add"],
    "s4d-pe": ["--model", "s4d", "--pe", "sinusoidal", "--set", "model.state_size=4"],
    "s4d-vanilla": ["--model", "s4d", "--pe", "none", "--set", "model.state_size=4"],
    "s4d-add": ["--model", "s4d", "--pe-mode", "add", "--set", "model.state_size=4"],
    "transformer-1-vanilla": ["--model", "transformer", "--layers", "1", "--heads", "2", "--pe", "none"],
    "transformer-2-pe": ["--model", "transformer", "--layers", "2", "--heads", "2", "--pe", "sinusoidal"],
    "random": ["--pe", "random"],
    "learnable": ["--pe", "learnable"],
    "dummy": ["--pe", "dummy"],
}


@pytest.mark.parametrize("case", MODELS)
def test_every_core_and_pe_form_trains_and_evaluates(case, tmp_path):
    res = train_and_eval(tmp_path, *MODELS[case])
    opts = MODELS[case]

    def given(flag, default):
        return opts[opts.index(flag) + 1] if flag in opts else default

    assert (res["model"], res["pe"]) == (given("--model", "gru"), given("--pe", "sinusoidal"))
    per_seq = np.load(tmp_path / "run" / "eval_sequences.npz")  # what aggregation pools
    assert len(per_seq["token_accuracy"]) == res["n_test"] == 64
    assert res["token_accuracy"] == pytest.approx(per_seq["token_accuracy"].mean())
    lo, hi = res["token_accuracy_ci"]
    assert lo <= res["token_accuracy"] <= hi and hi - lo > 0


def test_train_help_lists_every_task_model_and_pe_form_one_line_each():
    r = runner.invoke(app, ["train", "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert r.exit_code == 0
    lines = r.output.splitlines()
    for registry, behaviour in ((catalog.TASKS, TASKS), (catalog.CORES, CORES), (catalog.PE_FORMS, PE_FORMS)):
        assert set(registry) == set(behaviour)  # every name the help lists is implemented
        for name, entry in registry.items():
            line = [ln for ln in lines if re.match(rf"\s*{re.escape(name)}:\s", ln)]
            assert len(line) == 1, name
            assert entry.description in line[0], name


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--task", "copy", "--autoregressive"], "--autoregressive is not defined for task 'copy'"),
        (["--task", "delayed-add", "--autoregressive"], "--autoregressive is not defined"),
        (["--task", "continuous", "--vocab-size", "16"], "the continuous task has no vocabulary"),
        (["--task", "continuous", "--dim", "1"], "task.dim must be at least 2"),
        (["--task", "sort", "--rarity", "0.1"], "--rarity (dual frequency) is not defined for task 'sort'"),
        (["--task", "predecessor", "--min-length", "3"], "variable length (--min-length) is not defined"),
        (["--min-length", "3", "--rarity", "0.2"], "variable length does not combine with --rarity"),
        (["--min-length", "3", "--autoregressive"], "--autoregressive is not defined for task 'reverse'"),
        (["--min-length", "3", "--pe", "phase"], "--pe phase needs a fixed output-phase start"),
        (["--length", "5", "--max-length", "6"], "name the same setting"),
        (["--rarity", "0.2", "--vocab-size", "15"], "even --vocab-size"),
        (["--task", "predecessor", "--vocab-size", "4"], "must not exceed --vocab-size"),
        (["--task", "copy", "--delay", "-1"], "task.delay must be at least 0"),
        (["--pe", "dummy", "--pe-mode", "add"], "use --pe-mode concat"),
        (["--model", "transformer", "--heads", "3"], "must divide --hidden-size"),
        (["--model", "s4d", "--set", "model.state_size=5"], "must be even"),
    ],
)
def test_bad_combinations_are_refused_with_one_line(extra, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        run([*argv(*extra), "--out", "x"])
    captured = capsys.readouterr()
    err, out = captured.err, captured.out
    assert e.value.code == 1
    assert err.startswith("error: ") and words in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err + out
    assert not (tmp_path / "x").exists()


# ---- docs/experiments.md: every command in it, at every grid point, is a valid paper-scale run --
DOC = ROOT / "docs" / "experiments.md"
SEEDS = ("111", "222", "333", "444", "555")


def _values(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def parse_grid(cell: str) -> list[dict[str, str]]:
    """A row's grid cell -> every binding of its $NAMEs (the cartesian product of its parts).
    Parts: `$A` ∈ {1, 2} and `($A, $B)` ∈ {(x, 1), (y, 2)}."""
    bindings: list[dict[str, str]] = [{}]
    for part in re.findall(r"`([^`]+)` ∈ \{(.*?)\}(?=;|$)", cell.strip()):
        names, values = part
        names = [n.strip().lstrip("$") for n in names.strip("()").split(",")]
        if len(names) == 1:
            options = [{names[0]: v} for v in _values(values)]
        else:
            tuples = re.findall(r"\(([^)]*)\)", values)
            assert tuples, f"no tuples in {cell!r}"
            options = []
            for t in tuples:
                vs = _values(t)
                assert len(vs) == len(names), f"{t!r} does not match {names}"
                options.append(dict(zip(names, vs)))
        bindings = [{**b, **o} for b in bindings for o in options]
    return bindings


def doc_rows() -> list[tuple[list[dict[str, str]], list[str]]]:
    """(bindings, commands) for every row of the experiments table."""
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) != 3 or cells[0] in ("paper experiment", "---"):
            continue
        cmds = [c for c in re.findall(r"`(posrnn [^`]+)`", cells[2]) if "..." not in c and "…" not in c]
        rows.append((parse_grid(cells[1]), cmds))
    return rows


def substitute(cmd: str, binding: dict[str, str]) -> list[str]:
    """shlex words of ``cmd`` after the program name, every $NAME replaced; none may be left."""
    out = re.sub(r"\$(\w+)", lambda m: binding.get(m.group(1), m.group(0)), cmd)
    assert "$" not in out, f"unbound placeholder in {out!r} (binding {binding})"
    return shlex.split(out)[1:]


def test_parse_grid_is_a_cartesian_product():
    grid = parse_grid("`($M, $V)` ∈ {(gru, 64), (lstm, 1024)}; `$PE` ∈ {none, sinusoidal}")
    assert grid == [{"M": "gru", "V": "64", "PE": "none"}, {"M": "gru", "V": "64", "PE": "sinusoidal"},
                    {"M": "lstm", "V": "1024", "PE": "none"}, {"M": "lstm", "V": "1024", "PE": "sinusoidal"}]
    with pytest.raises(AssertionError, match="unbound"):
        substitute("posrnn train --vocab-size $V --seed $SEED", {"V": "8"})


def test_docs_experiments_commands_are_valid_configs(monkeypatch, tmp_path):
    """Every `posrnn train` command of docs/experiments.md, at every point of its row's grid,
    parses and passes every task and model check (the run itself is replaced by a stub) and
    is at paper scale; other commands name only options that exist."""
    import posrnn_cli.engine.train as train_mod

    seen: list[RunConfig] = []
    checked: dict[tuple, object] = {}

    def fake_train(cfg, out, **kw):
        key = (cfg.task.name, cfg.task.vocab_size, cfg.task.length, cfg.task.min_length, cfg.task.delay,
               cfg.task.rarity, cfg.task.dim, cfg.task.autoregressive)
        if key not in checked:  # the task's own checks (space size, combinations): once per task shape
            checked[key] = build_task(cfg.task).output_start
        check_model_config(cfg.model, checked[key])
        seen.append(cfg)
        return {"finished": True, "step": 0, "iterations": cfg.train.iterations, "seconds": 0.0, "it_per_s": 0.0,
                "n_parameters": 0, "last": None}

    monkeypatch.setattr(train_mod, "train", fake_train)
    monkeypatch.chdir(tmp_path)
    rows = doc_rows()
    assert len(rows) >= 18 and sum(len(g) for g, _ in rows) >= 200
    n_train = 0
    for grid, cmds in rows:
        assert cmds, f"a row without a command: {grid}"
        outs: set[str] = set()
        for binding in grid:
            b = {"SEED": SEEDS[0], **binding}  # seeds never change validity: one suffices
            for cmd in cmds:
                words = substitute(cmd, b)
                if words[0] == "train":
                    r = runner.invoke(app, [*words, "--json"])
                    assert r.exit_code == 0, f"{cmd} {b}\n{r.output}"
                    cfg = seen[-1]
                    budget = "runs/budget/" in cmd  # the vanilla control: twice the iterations or the batch
                    assert (cfg.train.batch_size in ((512, 1024) if budget else (512,))
                            and cfg.model.hidden_size == 512), (cmd, b)
                    iterations = {"delayed-add": 600_000}.get(cfg.task.name,
                                                              20_000 if cfg.model.name == "transformer" else 300_000)
                    assert cfg.train.iterations in ((iterations, 600_000) if budget else (iterations,)), (cmd, b)
                    out = words[words.index("--out") + 1]
                    assert out not in outs, f"two grid points of one row write {out}"
                    outs.add(out)
                    n_train += 1
                else:
                    sub = [w for w in words if not w.startswith("-")][:2 if words[0] == "lm" else 1]
                    helptext = runner.invoke(app, [*sub, "--help"],
                                             env={"COLUMNS": "300", "TERMINAL_WIDTH": "300"}).output
                    for opt in (w for w in words if w.startswith("--")):
                        assert opt in helptext, f"{cmd}: {opt}"
    assert n_train >= 200
    # the commands' runs are exactly the paper profile's training runs (every seed of both)
    docs = {_run_key(c) for c in seen}
    profile = paper_profile_runs()
    assert not docs - profile, f"in docs/experiments.md, not in the paper profile: {sorted(docs - profile)[:5]}"
    assert not profile - docs, f"in the paper profile, not in docs/experiments.md: {sorted(profile - docs)[:5]}"


def _run_key(cfg: RunConfig) -> tuple:
    """What makes a training run, its seed aside (the commands above ran with one seed)."""
    t, m, tr = cfg.task, cfg.model, cfg.train
    return (t.name, m.name, m.pe, t.vocab_size if t.name != "continuous" else None, t.length, t.min_length,
            t.delay if t.name == "copy" else None, t.dim if t.name == "continuous" else None, t.autoregressive,
            t.rarity, m.layers if m.name == "transformer" else None, m.hidden_size, tr.iterations, tr.batch_size)


def paper_profile_runs() -> set:
    """The run keys of the paper profile's training experiments (``posrnn sweep --dry-run``'s
    runs): the extension and the language model are not ``posrnn train`` commands."""
    from posrnn_cli.common.stages.experiments import EXPERIMENTS
    from posrnn_cli.sweep.plan import plan

    exps = [e.name for e in EXPERIMENTS.values() if e.kind in ("train", "irie")]
    jobs = plan(ROOT / "params.yaml", "paper", exps, Path("/nonexistent/runs"))
    return {_run_key(j.run_config()) for j in jobs}
