"""The README's guided tour runs as written after `make demo`: the demo's commands (from the
Makefile) then every `posrnn` command of the tour (from README.md), at micro size, in one scratch
directory. Both are read from their files, so neither can drift from what this test runs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posrnn_cli.cli import app

ROOT = Path(__file__).resolve().parents[1]
#: the tour's sections of single runs (the pipeline's and the sweep's run whole profiles, language
#: modelling needs WikiText)
SECTIONS = ("One run", "Gradient stability", "Vocabulary extension")
#: option → its micro value: iteration counts divided by 200, sizes made tiny
MICRO = {"--iterations": lambda n: n // 200, "--warmup": lambda n: n // 200, "--checkpoint-every": lambda n: n // 200,
         "--hidden-size": lambda n: 8, "--batch-size": lambda n: 8, "--triplets": lambda n: 4}


def _joined(text: str) -> list[str]:
    return text.replace("\\\n", " ").splitlines()


def demo_commands() -> list[list[str]]:
    """The `posrnn train` commands of the Makefile's demo target, its variables expanded."""
    lines = _joined((ROOT / "Makefile").read_text())
    var = {m.group(1): m.group(2).strip() for ln in lines if (m := re.match(r"^(\w+)\s*\?=\s*(.*)$", ln))}
    start = lines.index(next(ln for ln in lines if ln.startswith("demo:")))
    recipe = []
    for ln in lines[start + 1:]:
        if not ln.startswith("\t"):
            break
        recipe.append(ln)
    found = re.findall(r"\$\(BIN\)/posrnn (train [^;&>]*)", " ".join(recipe))
    assert found, "the demo target runs no `posrnn train`"
    return [shlex.split(re.sub(r"\$\((\w+)\)", lambda m: var[m.group(1)], cmd)) for cmd in found]


def tour_commands() -> list[list[str]]:
    """Every `posrnn` command in the bash blocks of the guided tour's ``SECTIONS`` (README.md),
    in order, comments dropped."""
    readme = (ROOT / "README.md").read_text()
    tour = readme[readme.index("## A guided tour"):]
    tour = tour[:tour.index("\n## ")]
    sections = [s for s in tour.split("\n### ")[1:] if s.startswith(SECTIONS)]
    assert len(sections) == len(SECTIONS), "a section of the guided tour was renamed; update SECTIONS"
    cmds = []
    for block in re.findall(r"```bash\n(.*?)```", "\n".join(sections), flags=re.S):
        for ln in _joined(block):
            words = shlex.split(ln, comments=True)
            if words[:1] == ["posrnn"]:
                cmds.append(words[1:])
    return cmds


def micro(argv: list[str]) -> list[str]:
    out = list(argv)
    for i, word in enumerate(out[:-1]):
        if word in MICRO:
            out[i + 1] = str(MICRO[word](int(out[i + 1])))
    return out + (["--set", "task.n_test=64"] if out[0] == "train" and "--resume" not in out else [])


def test_the_tour_reads_the_makefile_and_the_readme():
    demo, tour = demo_commands(), tour_commands()
    assert len(demo) == 2 and all("--out" in c for c in demo)
    assert [c[0] for c in tour[:5]] == ["train", "train", "eval", "compare", "train"]
    assert {"stability", "extend-vocab"} <= {c[0] for c in tour}


def test_the_guided_tour_runs_as_written_after_the_demo(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for argv in [*demo_commands(), *tour_commands()]:
        r = runner.invoke(app, micro(argv))
        assert r.exit_code == 0, f"`posrnn {shlex.join(argv)}` failed at micro size:\n{r.output}"
    assert (tmp_path / "runs" / "demo" / "pe" / "config.yaml").is_file()


def test_a_different_run_in_out_is_refused_naming_what_differs(tmp_path):
    """The message names each differing key with both values and the two ways out."""
    runner = CliRunner()
    base = ["train", "--task", "reverse", "--model", "gru", "--vocab-size", "6", "--length", "4", "--hidden-size", "8",
            "--iterations", "4", "--batch-size", "8", "--device", "cpu", "--set", "task.n_test=32", "--out", str(tmp_path / "r")]
    assert runner.invoke(app, [*base, "--seed", "0", "--json"]).exit_code == 0
    before = sorted(p.name for p in (tmp_path / "r" / "checkpoints").iterdir())
    r = runner.invoke(app, [*base, "--seed", "5", "--warmup", "1"])
    assert r.exit_code == 1
    assert "train.seed: there 0 vs asked 5" in r.output and "train.warmup: there None vs asked 1" in r.output
    assert "--force" in r.output and "another --out" in r.output
    assert sorted(p.name for p in (tmp_path / "r" / "checkpoints").iterdir()) == before


@pytest.mark.parametrize("where", ["file", "under a file"])
def test_a_file_given_as_out_is_named_a_file(tmp_path, where):
    f = tmp_path / "f"
    f.write_text("mine")
    out = f if where == "file" else f / "run"
    r = CliRunner().invoke(app, ["train", "--iterations", "2", "--device", "cpu", "--out", str(out)])
    assert r.exit_code == 1 and "is a file, not a directory" in r.output and "permission" not in r.output, r.output
    assert f.read_text() == "mine"
