"""Made by hand for the tests, so a test can then break one thing at a time:

- run directories for the aggregation tests: a config, a stand-in checkpoint file and scores
  stamped exactly as ``posrnn eval`` stamps them (``common.results.provenance``);
- aggregated tables with per-seed values for the scorecard tests (``ev``, ``dual``, ``stab``,
  ``lm``, ``irie``), scored one claim at a time (``score``);
- a params.yaml holding one profile ``t`` for the sweep tests (``scratch``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import yaml

from posrnn_cli.analysis import scorecard as sc
from posrnn_cli.common.settings.config import RunConfig, dump_yaml
from posrnn_cli.common.files.io import write_csv, write_npz
from posrnn_cli.common.settings.config import config_digest
from posrnn_cli.common.results.provenance import eval_digest, file_sha256, stamped


def scored_run(run: Path, cfg: RunConfig, scores: dict, name: str = "eval_sequences.npz", summary: dict = None) -> Path:
    """``run`` with ``cfg`` as config.yaml, a checkpoint file at its last step and ``scores`` as
    its per-sequence file, stamped; for ``eval_sequences.npz`` also the eval.json beside it
    (holding ``summary`` too: what a task's report adds), for ``extend_sequences.npz`` the
    extend.json recording its length and sha256."""
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.yaml").write_text(dump_yaml(cfg))
    step = cfg.train.iterations
    ckpt = run / "checkpoints" / f"step_{step:07d}.pt"
    ckpt.parent.mkdir(exist_ok=True)
    ckpt.write_bytes(f"stand-in weights of {run.name}".encode())
    sha, digest = file_sha256(ckpt), config_digest(cfg.to_dict())
    write_npz(run / name, stamped(scores, sha, digest))
    if name == "eval_sequences.npz":
        n = len(next(iter(scores.values())))
        result = {"checkpoint": str(ckpt), "checkpoint_sha256": sha, "config_digest": digest, "step": step,
                  "task": cfg.task.name, "model": cfg.model.name, "pe": cfg.model.pe, "seed": cfg.train.seed,
                  "n_test": n, "sequences_sha256": file_sha256(run / name),
                  **{k: float(np.mean(v)) for k, v in scores.items() if k != "group"}, **(summary or {})}
        result["digest"] = eval_digest(result)
        (run / "eval.json").write_text(json.dumps(result))
    elif name == "extend_sequences.npz":  # the summary records the per-sequence file, as extend-vocab writes it
        (run / "extend.json").write_text(json.dumps({"n_sequences": len(next(iter(scores.values()))),
                                                     "sequences_sha256": file_sha256(run / name)}))
    return run


def scratch(tmp_path: Path, **sections) -> Path:
    """A params.yaml holding the repository's base config and a profile ``t`` with ``sections``."""
    root = Path(__file__).resolve().parents[1]
    base = yaml.safe_load((root / "params.yaml").read_text())
    profile = {"device": "cpu", "threads": 1, "n_test": 32, "executor": {"kind": "local", "workers": 2}, **sections}
    data = {k: base[k] for k in ("task", "model", "train")} | {"profile": ["t"], "profiles": {"t": profile}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return tmp_path / "params.yaml"


# ---- aggregated tables with per-seed values, for the scorecard --------------------------------
CLAIMS = {c["id"]: c for c in sc.load_claims()}
R, NR, DO, NM = sc.REPRODUCED, sc.NOT_REPRODUCED, sc.DIRECTION_ONLY, sc.NOT_MEASURED
INC, FEW = sc.INCONCLUSIVE, sc.TOO_FEW_SEEDS
UP, NT = sc.UNDERPOWERED, sc.NOT_TESTABLE
SEEDS = (111, 222, 333)
PAPER = {"length": 64, "hidden_size": 512}  # the papers' regime for the reverse task
LITE = {"length": 8, "hidden_size": 64}     # a CPU cell, outside it


# ---- fabricated tables ----------------------------------------------------------------------
def vals(x, spread=0.01, seeds=SEEDS):
    """Per-seed values: ``x`` as a list, or a number spread ±``spread`` over the seeds."""
    if isinstance(x, (list, tuple)):
        return [float(v) for v in x]
    k = len(seeds)
    return [float(x) + spread * (i - (k - 1) / 2) for i in range(k)]


def measure(prefix, per_seed, seeds):
    m = float(np.mean(per_seed))
    return {prefix: m, f"{prefix}_by_seed": " ".join(f"{v:.6g}" for v in per_seed),
            f"{prefix}_ci_low": min(per_seed + [m]), f"{prefix}_ci_high": max(per_seed + [m])}


def ev(model, pe, V, acc, seeds=SEEDS, at=PAPER, spread=0.01, iterations=300000, dl=None, **extra):
    """One eval-table row: a cell, its seeds and per-seed token accuracy."""
    per = vals(acc, spread, seeds)
    row = {"task": "reverse", "model": model, "pe": pe, "vocab_size": V, "length": at["length"],
           "min_length": None, "rarity": None, "delay": 60, "hidden_size": at["hidden_size"], "layers": 1,
           "iterations": iterations, "batch_size": 512, "warmup": 1000,
           "seeds": " ".join(map(str, seeds)), "n_seeds": len(seeds), "n_sequences": 1024 * len(seeds),
           **measure("token_accuracy", per, seeds),
           **measure("damerau_levenshtein", vals(dl if dl is not None else 1.0, 0.01, seeds), seeds)}
    return {**row, **extra}


def dual(model, pe, condition, acc, half="all", V=64, seeds=SEEDS, at=PAPER, spread=0.01):
    row = ev(model, pe, V, acc, seeds=seeds, at=at, spread=spread)
    return {**row, "rarity": 0.125, "condition": condition, "half": half}


def stab(model, pe, step, condition, value, seeds=SEEDS, at=PAPER, pair="common_target", spread=0.01):
    per = vals(value, spread, seeds)
    m = float(np.mean(per))
    return {"task": "reverse", "model": model, "pe": pe, "vocab_size": 64, "length": at["length"], "rarity": 0.125,
            "hidden_size": at["hidden_size"], "iterations": 300000, "batch_size": 512, "warmup": 1000,
            "step": step, "condition": condition, "pair": pair, "stability": m,
            "stability_by_seed": " ".join(f"{v:.6g}" for v in per), "ci_low": min(per), "ci_high": max(per),
            "seeds": " ".join(map(str, seeds)), "n_seeds": len(seeds), "n_triplets": 1024 * len(seeds)}


def lm(pe, perplexities, model="lstm", seeds=SEEDS, V=32768, tokens=1024):
    return {"task": "lm", "model": model, "pe": pe, "vocab_size": V, "max_tokens": tokens, "hidden_size": 512,
            "iterations": 300000, "batch_size": 512, "warmup": 1000, "seeds": " ".join(map(str, seeds)),
            "n_seeds": len(seeds), "perplexity": float(np.mean(perplexities)),
            "perplexity_by_seed": " ".join(map(str, perplexities)), "perplexity_min": min(perplexities),
            "perplexity_max": max(perplexities)}


def irie(layers, share, change, pe="none", acc=0.5, seeds=SEEDS, tol=1e-5):
    return {"model": "transformer", "layers": layers, "pe": pe, "vocab_size": 256, "length": 16, "hidden_size": 64,
            "iterations": 2000, "batch_size": 128, "warmup": 20, "seeds": " ".join(map(str, seeds)),
            "n_seeds": len(seeds), "n_sequences": 1024 * len(seeds),
            **measure("token_accuracy", vals(acc, 0.01, seeds), seeds),
            "permutation_sensitive_share": share,
            "permutation_sensitive_share_by_seed": " ".join(str(share) for _ in seeds),
            "max_logit_change": change, "tolerance": tol, "permutations": 8}


def score(tmp_path: Path, claim, **tables) -> dict:
    """Write the tables into a fresh results directory and score one claim (by id or entry)."""
    out = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    for name, rows in tables.items():
        write_csv(rows, out / f"{name}.csv")
    entry = CLAIMS[claim] if isinstance(claim, str) else claim
    row = sc.scorecard(out, [entry])[0]
    for scope in sc.SCOPES:
        assert row[scope]["verdict"] in sc.VERDICTS
    json.dumps(row)  # machine-readable details stay JSON-safe
    return row


def at(row):
    return row["at_regime"]["verdict"]


def ind(row):
    return row["indication"]["verdict"]


def with_params(cid: str, **params) -> dict:
    c = copy.deepcopy(CLAIMS[cid])
    c["params"].update(params)
    return c


