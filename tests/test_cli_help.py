"""The first hour: every command's help reads well at 80 columns (no option cut, defaults and
choices shown, no Python type names), `python -m posrnn_cli` works, completion installs, the
default warm-up fits a 40-iteration run, and `posrnn bench` without options is sized to a CPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from posrnn_cli.cli import app

runner = CliRunner()


def commands():
    out = []

    def walk(cmd, path):
        out.append((path, cmd))
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            walk(sub, [*path, name])

    walk(get_command(app), [])
    return out


@pytest.mark.parametrize("path, cmd", commands(), ids=lambda x: " ".join(x) if isinstance(x, list) else "")
def test_help_fits_80_columns_and_names_every_option_whole(path, cmd):
    r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"}, terminal_width=80)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert max(len(line) for line in lines) <= 80, [line for line in lines if len(line) > 80]
    for param in cmd.params:
        if getattr(param, "hidden", False):  # kept out of the help on purpose (a script's own flag)
            continue
        for opt in param.opts + param.secondary_opts:
            if opt.startswith("-"):
                assert re.search(rf"(^|[\s,/]){re.escape(opt)}($|[\s,=])", r.output, re.M), f"{opt} cut or missing"
    for leak in ("<int>", "<float>", "<str>", "<bool>", "<path>", "list[", "Optional["):
        assert leak not in r.output, leak


def test_the_command_list_is_one_line_per_command():
    r = runner.invoke(app, ["--help"], env={"COLUMNS": "80"}, terminal_width=80)
    listing = r.output.split("Commands:")[1].strip().splitlines()
    names = sorted(get_command(app).commands)
    assert sorted(line.split()[0] for line in listing) == names
    assert not any(line.rstrip().endswith("...") for line in listing)


def help_text(*argv: str) -> str:
    r = runner.invoke(app, [*argv, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    return " ".join(r.output.split())


@pytest.mark.parametrize("command", [["train"], ["lm", "train"], ["bench"]])
def test_shared_options_show_the_config_defaults(command):
    """train, lm train and bench build their shared options from one table; each shown default
    is RunConfig's (a changed default changes the help with it)."""
    from posrnn_cli.cli.options import RUN_OPTIONS, default_text
    from posrnn_cli.common.settings.config import RunConfig

    flat, text = RunConfig().flat(), help_text(*command)
    cmd = get_command(app)
    for part in command:
        cmd = cmd.commands[part]
    names = [p.name for p in cmd.params if p.name in RUN_OPTIONS]
    assert {"pe", "hidden_size", "device"} <= set(names)
    for name in names:
        opt = RUN_OPTIONS[name]
        shown = default_text(opt.key)
        if command == ["bench"] and name in ("model", "vocab_size", "length", "hidden_size", "batch_size"):
            shown = "sized to the device"
        assert f"{' '.join(opt.help.split())} [default: {shown}]" in text, name
    assert default_text("train.iterations") == f"{flat['train.iterations']:,}" and default_text("train.lr") == "0.001"
    assert default_text("train.warmup") == "1% of the run, at most 1,000"  # what None means for this field


def test_choices_and_the_set_metavar_are_shown():
    flat = help_text("train")
    for words in ("--hidden-size N Hidden size H. [default: 512]", "<none|sinusoidal|random|learnable|dummy|phase>",
                  "--set KEY=VALUE", "reverse:", "gru:", "sinusoidal:"):
        assert words in flat, words
    assert "<none|sinusoidal|" in help_text("lm", "train")  # a list of choices, not a free string
    assert all(name in help_text("lm") for name in ("prepare", "tokenizer", "encode", "train", "eval"))


def test_python_dash_m_and_completion(tmp_path):
    r = subprocess.run([sys.executable, "-m", "posrnn_cli", "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("posrnn ")
    env = {**os.environ, "HOME": str(tmp_path), "SHELL": "/bin/bash",
           # CI runs under sh; name the shell instead of detecting it from the parent process
           "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    r = subprocess.run([sys.executable, "-m", "posrnn_cli", "--install-completion", "bash"], capture_output=True,
                       text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "completion" in (tmp_path / ".bashrc").read_text()
    scripts = list((tmp_path / ".bash_completions").glob("*.sh"))
    assert scripts and "complete" in scripts[0].read_text()


def test_a_short_run_works_with_the_default_warm_up(tmp_path):
    r = runner.invoke(app, ["train", "--model", "gru", "--vocab-size", "6", "--length", "4", "--hidden-size", "8",
                            "--batch-size", "8", "--iterations", "40", "--device", "cpu", "--set", "task.n_test=32",
                            "--out", str(tmp_path / "run"), "--json"])
    assert r.exit_code == 0, r.output
    from posrnn_cli.common.settings.config import RunConfig

    assert RunConfig().train.warmup is None
    for its, warm in ((40, 0), (4000, 40), (300_000, 1000), (2_000_000, 1000)):
        cfg = RunConfig()
        cfg.train.iterations = its
        assert cfg.train.warmup_steps == warm


def test_bench_without_options_is_sized_to_the_cpu(monkeypatch):
    """Without options on a CPU, bench times the small GRU (under a minute); --paper is one option away."""
    import posrnn_cli.measure.bench as bench

    seen = {}

    def fake(cfg, **kw):
        seen["cfg"] = cfg
        raise SystemExit(0)

    monkeypatch.setattr(bench, "bench", fake)
    runner.invoke(app, ["bench", "--device", "cpu"])
    c = seen["cfg"]
    assert (c.model.name, c.task.vocab_size, c.task.length, c.model.hidden_size, c.train.batch_size) == ("gru", 32, 8,
                                                                                                         64, 128)
    runner.invoke(app, ["bench", "--device", "cpu", "--paper"])
    c = seen["cfg"]
    assert (c.model.name, c.task.vocab_size, c.task.length, c.model.hidden_size, c.train.batch_size) == ("lstm", 16384,
                                                                                                         64, 512, 512)


def callbacks(typer_app, path=()):
    """(command path, callback) of every command Typer builds from ``typer_app``."""
    for info in typer_app.registered_commands:
        yield (*path, info.name or info.callback.__name__), info.callback
    for group in typer_app.registered_groups:
        yield from callbacks(group.typer_instance, (*path, group.name))


def test_every_option_spells_out_a_flag_its_metavar_could_take_over():
    """Typer 0.27 makes an option whose metavar equals its name (device/DEVICE) into an
    upper-case flag (--DEVICE), so `--device` is then unknown: such an option names its flag."""
    import inspect
    import typing

    from typer.models import OptionInfo

    bad = []
    for path, fn in callbacks(app):
        for name, p in inspect.signature(fn).parameters.items():
            infos = [m for m in getattr(p.annotation, "__metadata__", ()) if isinstance(m, OptionInfo)]
            if typing.get_origin(p.annotation) is not typing.Annotated and isinstance(p.default, OptionInfo):
                infos.append(p.default)
            for info in infos:
                same = info.metavar and info.metavar.replace("_", "-").lower() == name.replace("_", "-").lower()
                # inside Annotated, Typer reads a first positional "--flag" as the declaration
                spelled = info.param_decls or (isinstance(info.default, str) and info.default.startswith("-"))
                if same and not spelled:
                    bad.append(f"{' '.join(path)} {name} (metavar {info.metavar})")
    assert not bad, bad
    assert any(n == "device" for _, fn in callbacks(app) for n in inspect.signature(fn).parameters)
