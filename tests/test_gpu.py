"""The GPU paths on a GPU: what the CPU tests can only approach through stand-ins. Marked
``gpu`` (``pytest -m gpu``, which ``tools/gpu_check.sh`` runs first); each skips with one line
where torch sees no CUDA device. Kept to a few seconds each on one GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import TaskConfig, resolve_config
from posrnn_cli.engine.checkpoint import load_checkpoint
from posrnn_cli.engine.graphed import GraphedStep
from posrnn_cli.engine.train import train
from posrnn_cli.tasks import HeldOut, ReverseTask

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: GPU test")]
from conftest import ROOT
STEPS = 120  # "some hundred steps"


def _cfg(device: str = "cuda", **switches):
    return resolve_config(options={
        "task.vocab_size": 32, "task.length": 16, "task.n_test": 256, "model.name": "lstm", "model.hidden_size": 64,
        "train.iterations": STEPS, "train.batch_size": 64, "train.warmup": 10, "train.checkpoint_every": 40,
        "train.log_every": 20, "train.device": device, **{f"train.{k}": v for k, v in switches.items()}})


def _run(tmp_path: Path, name: str, **switches):
    train(_cfg(**switches), tmp_path / name, progress=False)
    losses = [json.loads(x)["loss"] for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return losses, load_checkpoint(tmp_path / name / "checkpoints" / f"step_{STEPS:07d}.pt")["model"]


def _close(a: dict, b: dict, rtol: float, atol: float) -> list[str]:
    """The tensors of two state dicts that differ beyond the tolerance."""
    return [k for k in a if not torch.allclose(a[k].float(), b[k].float(), rtol=rtol, atol=atol)]


def test_cuda_graph_gives_the_eager_weights_within_rounding(tmp_path, monkeypatch):
    captured = []
    real = GraphedStep.__init__

    def spy(self, *args, **kwargs):
        captured.append(self)
        real(self, *args, **kwargs)

    monkeypatch.setattr(GraphedStep, "__init__", spy)
    (eager, w0), (graphed, w1) = _run(tmp_path, "eager"), _run(tmp_path, "graph", cuda_graph=True)
    assert captured and captured[0].replay is not None  # the run really replayed a captured graph
    assert len(eager) == len(graphed) == STEPS // 20
    assert graphed == pytest.approx(eager, rel=1e-3)
    assert not _close(w0, w1, rtol=1e-3, atol=1e-4)


def test_the_sync_free_sampler_never_trains_on_a_held_out_sequence():
    """On CUDA the sampler is sync-free by default: a held-out row that survives both redraws
    is masked out of the loss entirely (half of the space is held out, so some do)."""
    dev = torch.device("cuda")
    task = ReverseTask(TaskConfig(vocab_size=2, length=11, n_test=1024))
    test = task.test_set(dev)
    held = HeldOut(test)
    rows = {tuple(r) for r in test.key.tolist()}
    gen = torch.Generator(device=dev).manual_seed(0)
    masked = 0
    for _ in range(20):
        b = held.sample(task, 512, gen, dev)  # the training loop's call
        assert b.inputs.device.type == "cuda" and b.mask is not None
        for key, m in zip(b.key.tolist(), b.mask.tolist()):
            if tuple(key) in rows:
                assert not any(m)
                masked += 1
            else:
                assert all(m)
    assert masked > 0


def test_amp_trains_to_the_same_place_as_fp32(tmp_path):
    (fp32, _), (bf16, w) = _run(tmp_path, "fp32"), _run(tmp_path, "bf16", amp=True)
    assert fp32 != bf16  # autocast really ran in bf16
    assert all(abs(a - b) / a < 0.1 for a, b in zip(fp32, bf16))  # the same loss curve within 10%
    assert fp32[-1] < fp32[0] and bf16[-1] < bf16[0]
    assert all(v.dtype == torch.float32 for v in w.values())  # fp32 master weights


def test_fused_adam_gives_the_same_run_within_rounding(tmp_path):
    (plain, w0), (fused, w1) = _run(tmp_path, "plain", fused_adam=False), _run(tmp_path, "fused", fused_adam=True)
    assert fused == pytest.approx(plain, rel=1e-3)
    assert not _close(w0, w1, rtol=1e-3, atol=1e-4)


def test_a_gpu_checkpoint_resumes_on_the_cpu_and_back(tmp_path):
    out = tmp_path / "run"
    train(_cfg("cuda"), out, progress=False, stop_after=40)
    train(_cfg("cpu"), out, resume=True, progress=False, stop_after=40)
    at40 = load_checkpoint(out / "checkpoints" / "step_0000040.pt")
    at80 = load_checkpoint(out / "checkpoints" / "step_0000080.pt")
    assert at40["rng"]["device"] == "cuda" and at80["rng"]["device"] == "cpu"
    summary = train(_cfg("cuda"), out, resume=True, progress=False)
    assert summary["finished"] and summary["step"] == STEPS
    end = load_checkpoint(out / "checkpoints" / f"step_{STEPS:07d}.pt")
    assert end["rng"]["device"] == "cuda"
    assert [c["to"] for c in end["extra"]["device_changes"]] == ["cpu", "cuda"]
    log = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in log] == list(range(20, STEPS + 1, 20)) and log[-1]["loss"] < log[0]["loss"]


def test_two_runs_share_the_gpu_with_runs_per_gpu_2(tmp_path, monkeypatch):
    from posrnn_cli.sweep import SweepOptions, local_pool
    from posrnn_cli.sweep import local
    from posrnn_cli.sweep.plan import plan

    base = yaml.safe_load((ROOT / "params.yaml").read_text())
    grid = {"cells": [{"model": "gru", "vocab": 16}], "pe": ["none", "sinusoidal"], "seeds": [1], "length": 16,
            "hidden": 128, "iterations": 300, "batch": 256, "warmup": 10, "checkpoint_every": 300}
    profile = {"device": "cuda", "threads": 1, "n_test": 256, "executor": {"kind": "local"}, "fig2": grid}
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({**{k: base[k] for k in ("task", "model", "train")}, "profile": ["g"],
                                      "profiles": {"g": profile}}))
    monkeypatch.setattr(local, "gpu_count", lambda: 1)  # one GPU, whatever the machine has
    pool = local_pool(profile, SweepOptions(runs_per_gpu=2))
    assert (pool.gpus, pool.runs_per_gpu) == (1, 2)
    jobs = plan(params, "g", ["fig2"], tmp_path / "runs")
    events = []
    out = local.run_local(jobs, pool.workers, tmp_path / "logs", pool.gpus, pool.runs_per_gpu,
                          on_event=lambda kind, job, o: events.append(kind))
    assert [o.status for o in out] == ["done", "done"], [o.error for o in out]
    assert events[:2] == ["start", "start"]  # both on the GPU before either ended
    pinned = {line.split("CUDA_VISIBLE_DEVICES=")[1].split(",")[0].split(")")[0]
              for o in out for line in Path(o.log).read_text().splitlines() if "CUDA_VISIBLE_DEVICES=" in line}
    assert len(pinned) == 1  # the same GPU
    for o in out:
        assert load_checkpoint(Path(o.job.run_dir) / "checkpoints" / "step_0000300.pt")["rng"]["device"] == "cuda"


def test_torchrun_with_one_process_trains_the_lm_on_the_mini_corpus(tmp_path):
    runner = CliRunner()
    for argv in (["lm", "prepare", "--data-dir", str(ROOT / "data/wikitext-mini"), "--out", str(tmp_path / "txt")],
                 ["lm", "tokenizer", "--data", str(tmp_path / "txt"), "--out", str(tmp_path / "tok"), "--vocab-size",
                  "300"],
                 ["lm", "encode", "--data", str(tmp_path / "txt"), "--tokenizer", str(tmp_path / "tok"),
                  "--out", str(tmp_path / "enc"), "--max-tokens", "48"]):
        r = runner.invoke(app, argv)
        assert r.exit_code == 0, r.output
    out = tmp_path / "lm"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", "-m", "posrnn_cli",
           "lm", "train", "--data", str(tmp_path / "enc"), "--out", str(out), "--hidden-size", "64", "--iterations",
           "60",
           "--batch-size", "16", "--warmup", "5", "--device", "cuda", "--checkpoint-every", "60",
           "--set", "train.log_every=20"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    ckpt = load_checkpoint(out / "checkpoints" / "step_0000060.pt")
    assert ckpt["rng"]["device"] == "cuda"
    log = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(log) == 3 and log[-1]["loss"] < log[0]["loss"]
