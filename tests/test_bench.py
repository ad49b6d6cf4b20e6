"""posrnn bench's output fields (not its speed), and the fast paths' equivalence on CPU."""

from __future__ import annotations

import json

import torch
from typer.testing import CliRunner

from posrnn_cli.checkpoint import load_checkpoint
from posrnn_cli.cli import app
from posrnn_cli.config import TaskConfig, resolve_config
from posrnn_cli.tasks import HeldOut, ReverseTask
from posrnn_cli.train import train

FIELDS = ["train_ms_per_iter", "train_tokens_per_s", "train_tflops", "train_peak_share", "train_peak_memory_mb",
          "sampler_seqs_per_s", "reference_ms_per_iter", "reference_sampler_seqs_per_s", "train_speedup",
          "sampler_speedup", "stability_triplets_per_s", "flops_per_iter", "device"]


def test_bench_prints_every_figure_as_json():
    r = CliRunner().invoke(app, ["bench", "--model", "gru", "--vocab-size", "8", "--length", "5", "--hidden-size", "8",
                                 "--batch-size", "16", "--device", "cpu", "--iters", "2", "--warmup-iters", "1",
                                 "--stability-seqs", "3", "--json", "--set", "task.n_test=64"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    for key in FIELDS:
        assert key in res, key
    assert res["train_ms_per_iter"] > 0 and res["sampler_seqs_per_s"] > 0 and res["device"] == "cpu"
    assert res["train_peak_share"] is None  # no known peak for a CPU
    # the analytic count: 3 × (2·3H·(D+H)·T + 2·H·V·K) per sequence, D = E + P = 16
    assert res["flops_per_iter"] == 3 * (2 * 24 * (16 + 8) * 10 + 2 * 8 * 8 * 5) * 16


def test_bench_table_and_bad_task():
    r = CliRunner().invoke(app, ["bench", "--model", "lstm", "--vocab-size", "8", "--length", "4", "--hidden-size", "8",
                                 "--batch-size", "8", "--device", "cpu", "--iters", "1", "--warmup-iters", "0",
                                 "--no-reference", "--set", "task.n_test=32"])
    assert r.exit_code == 0 and "ms / iteration" in r.output
    r = CliRunner().invoke(app, ["bench", "--task", "sort", "--device", "cpu"])
    assert r.exit_code == 1 and "reverse task" in r.output


def test_sync_free_sampler_never_trains_on_a_test_sequence():
    task = ReverseTask(TaskConfig(vocab_size=2, length=11, n_test=1024))  # half of the space is held out
    test = task.test_set()
    held = HeldOut(test)
    rows = {tuple(r) for r in test.key.tolist()}
    gen = torch.Generator().manual_seed(0)
    masked = 0
    for _ in range(10):
        b = held.sample(task, 256, gen, torch.device("cpu"), sync_free=True)
        for key, m in zip(b.key.tolist(), b.mask.tolist()):
            if tuple(key) in rows:
                assert not any(m)  # a surviving test sequence is masked out of the loss entirely
                masked += 1
            else:
                assert all(m)
    assert masked > 0  # with half the space held out some survive both redraws: the mask is exercised


def test_bf16_autocast_trains_to_the_same_place_within_tolerance(tmp_path):
    def run(amp, name):
        cfg = resolve_config(options={"task.vocab_size": 6, "task.length": 5, "task.n_test": 64, "model.name": "gru",
                                      "model.hidden_size": 16, "train.iterations": 150, "train.batch_size": 32,
                                      "train.warmup": 10, "train.checkpoint_every": 150, "train.log_every": 50,
                                      "train.device": "cpu", "train.amp": amp})
        train(cfg, tmp_path / name, progress=False)
        return [json.loads(x)["loss"] for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]

    fp32, bf16 = run(False, "fp32"), run(True, "bf16")
    assert fp32 != bf16  # autocast really ran in bf16
    assert all(abs(a - b) / a < 0.1 for a, b in zip(fp32, bf16))  # the same loss curve within 10%
    w = load_checkpoint(tmp_path / "bf16" / "checkpoints" / "step_0000150.pt")["model"]
    assert all(v.dtype == torch.float32 for v in w.values())  # fp32 master weights
