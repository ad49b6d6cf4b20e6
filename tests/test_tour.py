"""The guided tour runs as written after `make demo`: the demo's commands (from the Makefile) then
every `posrnn` command of the tour (its first steps in README.md, the rest in docs/tour.md), at
micro size, in one scratch directory. All are read from their files, so none can drift from what
this test runs."""

from __future__ import annotations

import re
import shlex

import pytest
from typer.testing import CliRunner

from posrnn_cli.cli import app

from conftest import ROOT
#: the tour's sections of single runs, (file, heading), in the order they run (the pipeline's and the
#: sweep's run whole profiles, language modelling needs WikiText)
SECTIONS = (("README.md", "One run"), ("docs/tour.md", "Gradient stability"), ("docs/tour.md", "Vocabulary extension"))
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


def section(path: str, title: str) -> str:
    """The text of the section of ``path`` whose heading starts with ``title``, up to the next heading
    of its level or above (a ``#`` line inside a code block is no heading)."""
    lines = (ROOT / path).read_text().splitlines()
    start = next((i for i, ln in enumerate(lines) if re.match(rf"#+ {re.escape(title)}", ln)), None)
    assert start is not None, f"{path} has no section '{title}': a section of the tour was renamed; update SECTIONS"
    level, out, fenced = len(lines[start].split()[0]), [], False
    for ln in lines[start + 1:]:
        fenced ^= ln.startswith("```")
        if not fenced and (m := re.match(r"(#+) ", ln)) and len(m.group(1)) <= level:
            break
        out.append(ln)
    return "\n".join(out) + "\n"


def tour_commands() -> list[list[str]]:
    """Every `posrnn` command in the bash blocks of the guided tour's ``SECTIONS``, in order,
    comments dropped."""
    cmds = []
    for path, title in SECTIONS:
        for block in re.findall(r"```bash\n(.*?)```", section(path, title), flags=re.S):
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


def test_the_tour_reads_the_makefile_the_readme_and_its_page():
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
            "--iterations", "4", "--batch-size", "8", "--device", "cpu", "--set", "task.n_test=32", "--out",
            str(tmp_path / "r")]
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
