"""Every result file proves its run (fabricated inputs, beside the bad-input table): per-sequence
scores read by ``compare``, stability values, permutation reports and extension scores, copied from
another run, cut short or with keys dropped, or left behind by a run retrained since, are refused
by every reader in one line naming the command that redoes them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from posrnn_cli.analysis.aggregate import table_extend, table_irie, table_stability
from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import RunConfig, resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.files.io import read_npz, write_npz
from posrnn_cli.common.results.provenance import Proof, file_sha256
from posrnn_cli.engine.train import train
from posrnn_cli.sweep import jobs
from posrnn_cli.sweep.plan import Job

from fabricate import scored_run


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_compare_refuses_per_sequence_scores_copied_from_another_run(tmp_path):
    a, b = (scored_run(tmp_path / n, cfg(s), scores(s)) for n, s in (("a", 1), ("b", 2)))  # evaluated, as eval writes
    assert invoke("compare", a, b, "--device", "cpu").exit_code == 0
    shutil.copy(b / "eval_sequences.npz", a / "eval_sequences.npz")
    r = invoke("compare", a, b, "--device", "cpu")
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code != 0 and len(lines) == 1, r.output
    assert "eval_sequences.npz scores another checkpoint" in lines[0] and "posrnn eval" in lines[0]


# ---- stability ----------------------------------------------------------------------------------------
def source(tmp_path: Path, seed: int, lr: float = 0.01) -> Path:
    sets = {"task.vocab_size": 8, "task.length": 5, "task.n_test": 32, "model.name": "gru", "model.hidden_size": 8,
            "train.iterations": 20, "train.batch_size": 8, "train.warmup": 2, "train.checkpoint_every": 10,
            "train.device": "cpu", "train.seed": seed, "train.lr": lr}
    run = tmp_path / "runs" / "fig2" / f"r{seed}"
    train(resolve_config(options=sets), run, progress=False, force=run.exists())
    return run


def analyse(src: Path, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    opts = {"source": str(src), "triplets": 4, "chunk_size": 4, "seed": 0, "device": "cpu"}
    return jobs.run_stability(Job("stability", out.name, "stability", str(out), None, opts))


@pytest.fixture(scope="module")
def analysed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stab")
    for seed in (1, 2):
        analyse(source(root, seed), root / "runs" / "stability" / f"r{seed}")
    return root


@pytest.fixture
def stab(analysed, tmp_path) -> Path:
    """A private copy of the analysed tree (records name their source by its path: rewritten)."""
    shutil.copytree(analysed, tmp_path, dirs_exist_ok=True)
    for seed in (1, 2):
        meta = tmp_path / "runs" / "stability" / f"r{seed}" / "stability_meta.json"
        meta.write_text(meta.read_text().replace(str(analysed), str(tmp_path)))
    return tmp_path / "runs" / "stability"


def refused(runs: list[Path], words: str) -> str:
    with pytest.raises(PosrnnError, match=words) as e:
        table_stability(runs, n_resamples=20)
    assert "\n" not in str(e.value) and "posrnn sweep stability" in str(e.value)
    return str(e.value)


def test_a_proven_stability_analysis_is_tabled(stab):
    rows = table_stability([stab / "r1", stab / "r2"], n_resamples=20)
    assert {r["step"] for r in rows} == {10, 20} and all(r["n_triplets"] == 8 for r in rows)


def test_stability_values_copied_between_seeds_are_refused(stab):
    shutil.copy(stab / "r2" / "stability_values.npz", stab / "r1" / "stability_values.npz")
    refused([stab / "r1", stab / "r2"], "is not the file stability_meta.json records")
    meta = json.loads((stab / "r1" / "stability_meta.json").read_text())  # and with the record made to agree
    meta["values_sha256"] = file_sha256(stab / "r1" / "stability_values.npz")
    (stab / "r1" / "stability_meta.json").write_text(json.dumps(meta))
    refused([stab / "r1"], "another config than when it was analysed")


@pytest.mark.parametrize("cut", ["one triplet", "half the keys"])
def test_stability_values_cut_short_are_refused_even_with_the_record_made_to_agree(stab, cut):
    path, meta_path = stab / "r1" / "stability_values.npz", stab / "r1" / "stability_meta.json"
    data = read_npz(path)
    pairs = [k for k in data if "|" in k]
    data = ({k: (v[:1] if k in pairs else v) for k, v in data.items()} if cut == "one triplet"
            else {k: v for k, v in data.items() if k not in pairs[: len(pairs) // 2]})
    write_npz(path, data)
    refused([stab / "r1"], "is not the file")
    meta = json.loads(meta_path.read_text())
    meta["values_sha256"] = file_sha256(path)
    meta_path.write_text(json.dumps(meta))
    refused([stab / "r1"], "does not hold the .* pairs of 4 finite values")


def test_a_stability_table_of_a_run_retrained_since_is_refused_and_the_sweep_redoes_it(stab):
    src = stab.parent / "fig2" / "r1"
    source(stab.parent.parent, 1, lr=0.05)  # retrained with another learning rate
    refused([stab / "r1"], "another config than when it was analysed")
    assert analyse(src, stab / "r1") != {"stability": "skipped (up to date)"}
    assert table_stability([stab / "r1"], n_resamples=20)


def test_an_unstamped_stability_record_is_refused_and_computed_again(stab):
    meta_path = stab / "r1" / "stability_meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({k: v for k, v in meta.items() if k not in ("values_sha256", "keys")}))
    refused([stab / "r1"], "records no digest of its values")
    assert analyse(stab.parent / "fig2" / "r1", stab / "r1") == {"stability": "4 arrays"}  # not skipped
    assert json.loads(meta_path.read_text()) == meta


# ---- permutation reports and extension scores ----------------------------------------------------------
def cfg(seed: int) -> RunConfig:
    return RunConfig.from_dict({"task": {"name": "reverse", "vocab_size": 6, "length": 4},
                                "model": {"name": "transformer", "hidden_size": 8, "layers": 1},
                                "train": {"seed": seed, "iterations": 4}})


def scores(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {k: rng.random(10) for k in ("token_accuracy", "sequence_accuracy", "damerau_levenshtein")}


def with_permutations(run: Path, n: int = 10) -> Path:
    proof = Proof(run)
    rep = {"step": 4, "sensitive": [1, 0] * (n // 2), "max_logit_change": 0.5, "tolerance": 1e-5, "permutations": 8,
           "checkpoint_sha256": proof.checkpoint_sha256, "config_digest": proof.config_digest, "n_sequences": n}
    (run / "permutation.json").write_text(json.dumps(rep))
    return run


def test_permutation_reports_copied_between_runs_or_cut_are_refused(tmp_path):
    runs = [with_permutations(scored_run(tmp_path / "irie" / f"r{s}", cfg(s), scores(s))) for s in (1, 2)]
    assert table_irie(runs, 20)[0]["permutation_sensitive_share"] == 0.5
    shutil.copy(runs[1] / "permutation.json", runs[0] / "permutation.json")
    with pytest.raises(PosrnnError, match="analyses another checkpoint or config .*posrnn sweep irie"):
        table_irie(runs, 20)
    with_permutations(runs[0])
    rep = json.loads((runs[0] / "permutation.json").read_text())
    (runs[0] / "permutation.json").write_text(json.dumps({**rep, "sensitive": rep["sensitive"][:3]}))
    with pytest.raises(PosrnnError, match="does not hold the 10 values it records"):
        table_irie(runs, 20)
    (runs[0] / "permutation.json").write_text(json.dumps({k: v for k, v in rep.items() if k != "config_digest"}))
    with pytest.raises(PosrnnError, match="records no checkpoint or config digest"):
        table_irie(runs, 20)


def test_an_extension_score_file_cut_short_keeping_its_stamps_is_refused(tmp_path):
    c = cfg(1)
    c.model.frozen_vocab, c.task.vocab_size = 4, 6
    run = scored_run(tmp_path / "extend" / "r1", c, scores(1), name="extend_sequences.npz")
    assert table_extend([run], 20)
    data = read_npz(run / "extend_sequences.npz")
    write_npz(run / "extend_sequences.npz", {k: (v[:3] if v.ndim else v) for k, v in data.items()})  # stamps kept
    with pytest.raises(PosrnnError, match="not the file its eval.json recorded|ragged or cut"):
        table_extend([run], 20)
    (run / "extend.json").write_text("{}")  # written before the summary recorded its scores
    with pytest.raises(PosrnnError, match="records no digest of extend_sequences.npz.*posrnn sweep extend"):
        table_extend([run], 20)
