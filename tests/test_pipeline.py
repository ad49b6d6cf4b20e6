"""The DVC pipeline: profiles, aggregation with pooled-seed CIs, figures, and one end-to-end
`dvc repro` of the seconds-long `micro` profile in a scratch git repository."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from posrnn_cli.config import RunConfig, dump_yaml
from posrnn_cli.metrics import bootstrap_ci
from posrnn_cli.pipeline import aggregate, aggregate_eval, load_profile, read_csv
from posrnn_cli.plots import draw_all

ROOT = Path(__file__).resolve().parents[1]
# the stages call `posrnn`: this interpreter's bin/ first on PATH, so a bare `pytest` works too
ENV = {**os.environ, "DVC_NO_ANALYTICS": "1",
       "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
DVC = shutil.which("dvc") or str(Path(sys.executable).with_name("dvc"))


def params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def keys(d, prefix=""):
    out = set()
    for k, v in d.items():
        out.add(prefix + k)
        if isinstance(v, dict):
            out |= keys(v, prefix + k + ".")
    return out


def test_lite_is_the_default_profile_and_profiles_share_their_keys():
    p = params()
    assert load_profile(ROOT / "params.yaml")["name"] == "lite"
    assert p["profile"] == p["profiles"]["lite"]
    shapes = {name: keys(prof) for name, prof in p["profiles"].items()}
    assert shapes["lite"] == shapes["paper"] == shapes["micro"]


def test_paper_profile_is_spec():
    paper = params()["profiles"]["paper"]
    for sweep in ("fig2", "dual"):
        s = paper[sweep]
        assert (s["length"], s["hidden"], s["iterations"], s["batch"], s["warmup"]) == (64, 512, 300_000, 512, 1000)
        assert s["seeds"] == [111, 222, 333, 444, 555]
    assert paper["dual"]["rarity"] == 0.125 and paper["dual"]["checkpoint_every"] == 5000
    assert paper["stability"]["triplets"] == 1024
    gru = sorted(c["vocab"] for c in paper["fig2"]["cells"] if c["model"] == "gru")
    assert gru[0] == 32 and gru[-1] == 256


def test_every_stage_command_exists_and_every_dep_is_a_file():
    from typer.main import get_command

    from posrnn_cli.cli import app

    commands = set(get_command(app).commands)
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    for name, stage in dvc["stages"].items():
        cmd = stage["cmd"]
        sub = re.match(r"posrnn ([\w-]+)", cmd).group(1)
        assert sub in commands, f"stage {name} calls `posrnn {sub}`, which does not exist"
        for dep in stage.get("deps", []):
            if "${" not in dep:
                assert (ROOT / dep).is_file(), f"stage {name}: dep {dep} is missing"


def fake_run(root: Path, seed: int, pe: str, token: np.ndarray) -> Path:
    cfg = RunConfig()
    cfg.task.vocab_size, cfg.task.length, cfg.model.pe, cfg.train.seed = 16, 8, pe, seed
    run = root / f"lstm-v16-{pe}-s{seed}"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(dump_yaml(cfg))
    np.savez(run / "eval_sequences.npz", token_accuracy=token, sequence_accuracy=(token == 1).astype(float),
             damerau_levenshtein=1 - token)
    return run


def test_aggregate_pools_the_seeds_of_a_cell(tmp_path):
    rng = np.random.default_rng(0)
    a, b, c = rng.random(50), rng.random(70), rng.random(60)
    fake_run(tmp_path / "fig2", 1, "none", a)
    fake_run(tmp_path / "fig2", 2, "none", b)
    fake_run(tmp_path / "fig2", 1, "sinusoidal", c)
    rows = {r["pe"]: r for r in aggregate_eval(tmp_path / "fig2", n_resamples=2000)}
    pooled = np.concatenate([a, b])
    assert rows["none"]["n_seeds"] == 2 and rows["none"]["n_sequences"] == 120
    assert rows["none"]["token_accuracy"] == pytest.approx(pooled.mean())
    lo, hi = bootstrap_ci(pooled, n_resamples=2000)
    assert (rows["none"]["token_accuracy_ci_low"], rows["none"]["token_accuracy_ci_high"]) == pytest.approx((lo, hi))
    assert rows["sinusoidal"]["n_seeds"] == 1

    tables = aggregate(tmp_path, tmp_path / "results", n_resamples=500)
    assert set(tables) == {"fig2"}
    back = read_csv(tmp_path / "results" / "fig2.csv")
    assert {r["pe"] for r in back} == {"none", "sinusoidal"}
    metrics = json.loads((tmp_path / "results" / "metrics.json").read_text())
    assert set(metrics["fig2"]) == {"lstm_V16_none", "lstm_V16_sinusoidal"}
    drawn = draw_all(tmp_path / "results", tmp_path / "figs")
    assert [p.name for p in drawn] == ["fig2_vocab.png"] and drawn[0].read_bytes()[:4] == b"\x89PNG"


def dvc(repo: Path, *args: str, timeout: int = 600) -> str:
    r = subprocess.run([DVC, *args], cwd=repo, env=ENV, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"dvc {' '.join(args)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.mark.skipif(not Path(DVC).exists(), reason="dvc is not installed")
def test_micro_profile_end_to_end_with_dvc(tmp_path):
    """A fresh git repository with dvc.yaml, params.yaml switched to `*micro`, the package and the
    shipped corpus: `dvc repro`
    runs every stage and draws every figure, a second `dvc repro` does nothing, metrics and
    plots show, and two queued experiments run in parallel (`dvc queue start --jobs 2`)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(ROOT / "dvc.yaml", repo)
    text = (ROOT / "params.yaml").read_text()
    assert "\nprofile: *lite\n" in text
    (repo / "params.yaml").write_text(text.replace("\nprofile: *lite\n", "\nprofile: *micro\n"))
    shutil.copytree(ROOT / "posrnn_cli", repo / "posrnn_cli", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "data" / "wikitext-mini", repo / "data" / "wikitext-mini")
    (repo / ".gitignore").write_text("/runs/\n__pycache__/\n")
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True)
    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "test")
    dvc(repo, "init", "-q")
    dvc(repo, "config", "core.analytics", "false")

    dvc(repo, "repro")
    figs = sorted(p.name for p in (repo / "figures" / "micro").glob("*.png"))
    assert figs == sorted(["fig2_vocab.png", "dual_frequency.png", "stability.png", "pe_forms.png",
                           "double_vanilla.png", "length_v2.png", "extend_vocab.png"])
    assert "perplexity" in (repo / "figures" / "micro" / "lm_table.md").read_text()
    again = dvc(repo, "repro")
    assert "Running stage" not in again and "up to date" in again
    metrics = json.loads(dvc(repo, "metrics", "show", "--json"))
    assert "fig2" in json.dumps(metrics)
    dvc(repo, "plots", "show", "-o", str(tmp_path / "plots"))
    assert (tmp_path / "plots" / "index.html").is_file()

    # scale-out: trials queued as experiments, run two at a time
    git("add", "-A")
    git("commit", "-qm", "micro pipeline")
    for it in (12, 16):
        dvc(repo, "exp", "run", "--queue", "-S", f"profile.fig2.iterations={it}", "fig2_eval@cell0-none-1")
    dvc(repo, "queue", "start", "--jobs", "2")
    import time

    deadline = time.time() + 300
    while time.time() < deadline:
        status = dvc(repo, "queue", "status")
        if "Queued" not in status and "Running" not in status:
            break
        time.sleep(2)
    shown = json.loads(dvc(repo, "exp", "show", "--json"))
    its = sorted(r["data"]["params"]["params.yaml"]["data"]["profile"]["fig2"]["iterations"]
                 for c in shown for e in (c.get("experiments") or []) for r in e["revs"])
    assert its == [12, 16], status
