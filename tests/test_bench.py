"""posrnn bench's output fields (not its speed), and the fast paths' equivalence on CPU."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from posrnn_cli.engine.device import cpu_supports_bf16
from posrnn_cli.measure.bench import RefCodeSampler, ReferenceSampler, concurrent_throughput
from posrnn_cli.engine.checkpoint import load_checkpoint
from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import TaskConfig, resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.models import build_model
from posrnn_cli.tasks import HeldOut, ReverseTask, build_task, hash_rows
from posrnn_cli.engine.graphed import GraphedStep, graph_lr
from posrnn_cli.engine.train import Trainer, train

FIELDS = ["train_ms_per_iter", "train_tokens_per_s", "train_tflops", "train_peak_share", "train_peak_memory_mb",
          "sampler_seqs_per_s", "reference_ms_per_iter", "reference_tokens_per_s", "reference_peak_memory_mb",
          "reference_sampler_seqs_per_s", "train_speedup", "sampler_speedup", "refcode_sampler_seqs_per_s",
          "refcode_sampler_speedup", "stability_triplets_per_s",
          "stability_s_per_1024_triplets", "flops_per_iter", "device", "date", "threads", "fast_paths"]
from conftest import tiny_train

TINY = tiny_train(task=None, vocab_size=8, length=5, iterations=None, batch_size=16, seed=None, checkpoint_every=None,
                  n_test=64)


def test_bench_ensemble_gives_each_k_beside_solo_with_its_bytes_and_the_load():
    args = ["bench", *TINY, "--model", "gru", "--iters", "2", "--warmup-iters", "1", "--ensemble", "1,2"]
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert [row["k"] for row in res["rows"]] == [1, 2] and len(res["load"]["before"]) == 3
    for row in res["rows"]:
        assert row["vs_solo_in_all"] > 0 and 0.5 < row["bytes_per_member_vs_solo"] < 1.5
    r = CliRunner().invoke(app, args, terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "bytes" in r.output and "load average (1 min)" in r.output


def test_bench_prints_every_figure_as_json():
    r = CliRunner().invoke(app,
                           ["bench", *TINY, "--iters", "2", "--warmup-iters", "1", "--stability-triplets", "3",
                            "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    for key in FIELDS:
        assert key in res, key
    assert res["train_ms_per_iter"] > 0 and res["sampler_seqs_per_s"] > 0 and res["device"] == "cpu"
    assert res["train_peak_share"] is None and res["reference_peak_memory_mb"] is None  # no known CPU peak; one process
    assert res["fast_paths"] == {"amp_bf16": False, "cuda_graph": False, "fused_adam": False,
                                 "sync_free_sampler": False}
    # the analytic count: 3 × (2·3H·(D+H)·T + 2·H·V·K) per sequence, D = E + P = 16
    assert res["flops_per_iter"] == 3 * (2 * 24 * (16 + 8) * 10 + 2 * 8 * 8 * 5) * 16


def test_bench_parts_table_and_refusals():
    r = CliRunner().invoke(app, ["bench", *TINY, "--iters", "1", "--warmup-iters", "0", "--parts", "sampler",
                                 "--stability-triplets", "2", "--json"])
    res = json.loads(r.output)
    assert "sampler_speedup" in res and "train_ms_per_iter" not in res and "stability_triplets_per_s" not in res
    r = CliRunner().invoke(app,
                           ["bench", *TINY, "--model", "lstm", "--iters", "1", "--warmup-iters", "0", "--no-reference"])
    assert r.exit_code == 0 and "ms / iteration" in r.output and "fast paths: none" in r.output
    for args, msg in ((["--set", "task.name=sort"], "reverse task"), (["--parts", "train,speed"], "unknown bench part"),
                      (["--concurrent", "two"], "--concurrent"), (["--cuda-graph"], "needs a CUDA device")):
        r = CliRunner().invoke(app, ["bench", *TINY, *args])
        assert r.exit_code == 1 and msg in r.output, (args, r.output)


def test_concurrent_runs_report_aggregate_throughput():
    cfg = resolve_config(options={"task.vocab_size": 8, "task.length": 5, "task.n_test": 64, "model.name": "gru",
                                  "model.hidden_size": 8, "train.batch_size": 16, "train.device": "cpu",
                                  "train.threads": 1})
    (res,) = concurrent_throughput(cfg, (2,), iters=3, warmup=1)
    assert res["k"] == 2 and res["aggregate_it_per_s"] > 0 and res["ms_per_iter_per_run"] > 0
    assert res["speedup_vs_1"] is None  # no k = 1 in this call to compare with


@pytest.mark.parametrize("kind", [ReferenceSampler, RefCodeSampler])
def test_reference_samplers_hold_out_the_test_set_and_reverse(kind):
    """Both baselines draw valid reverse batches and never a held-out sequence (half of the
    space is held out, so rejection really happens)."""
    task = ReverseTask(TaskConfig(vocab_size=2, length=11, n_test=1024))
    test = task.test_set()
    rows = {tuple(r) for r in test.key.tolist()}
    b = kind(task, test, seed=0).sample(300, torch.device("cpu"))
    assert b.inputs.shape == (300, 22) and torch.equal(b.targets, b.inputs[:, :11].flip(1))
    assert (b.inputs[:, 11:] == task.query_id).all() and not any(tuple(k) in rows for k in b.key.tolist())
    assert len({tuple(k) for k in b.key.tolist()}) > 200  # random, not one sequence repeated


# ---- the held-out check --------------------------------------------------------------------------
def test_held_out_binary_search_agrees_with_isin():
    task = ReverseTask(TaskConfig(vocab_size=3, length=8, n_test=500))
    held = HeldOut(task.test_set())
    b = task.sample(4000, torch.Generator().manual_seed(1), torch.device("cpu"))
    got = held.contains(b)
    assert torch.equal(got, torch.isin(hash_rows(b.key), held.hashes)) and got.any() and not got.all()


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


# ---- fast paths: the same results --------------------------------------------------------------
def _run(tmp_path, name, **switches):
    cfg = resolve_config(options={"task.vocab_size": 6, "task.length": 5, "task.n_test": 64, "model.name": "gru",
                                  "model.hidden_size": 16, "train.iterations": 150, "train.batch_size": 32,
                                  "train.warmup": 10, "train.checkpoint_every": 150, "train.log_every": 50,
                                  "train.device": "cpu", **{f"train.{k}": v for k, v in switches.items()}})
    train(cfg, tmp_path / name, progress=False)
    losses = [json.loads(x)["loss"] for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return losses, load_checkpoint(tmp_path / name / "checkpoints" / "step_0000150.pt")["model"]


@pytest.mark.skipif(not cpu_supports_bf16(), reason="this CPU has no bf16 instructions (AVX-512 BF16 or AMX)")
def test_bf16_autocast_trains_to_the_same_place_within_tolerance(tmp_path):
    (fp32, _), (bf16, w) = _run(tmp_path, "fp32"), _run(tmp_path, "bf16", amp=True)
    assert fp32 != bf16  # autocast really ran in bf16
    assert all(abs(a - b) / a < 0.1 for a, b in zip(fp32, bf16))  # the same loss curve within 10%
    assert all(v.dtype == torch.float32 for v in w.values())  # fp32 master weights


def test_bf16_is_refused_with_one_line_on_a_cpu_without_bf16(tmp_path, monkeypatch):
    """An LSTM under bf16 autocast dies in oneDNN on such a CPU, and a GRU crawls: refuse it up
    front, before the run directory exists, from the library and from the CLI (train and bench)."""
    import posrnn_cli.engine.device as device

    monkeypatch.setattr(device, "cpu_supports_bf16", lambda: False)
    with pytest.raises(PosrnnError, match="needs a GPU or a CPU with AVX-512 BF16 or AMX"):
        _run(tmp_path, "bf16", amp=True)
    assert not (tmp_path / "bf16").exists()
    for argv in (["train", "--model", "lstm", "--vocab-size", "6", "--length", "4", "--hidden-size", "8",
                  "--iterations", "4", "--device", "cpu", "--set", "train.amp=true", "--set", "task.n_test=16",
                  "--out", str(tmp_path / "cli")],
                 ["bench", *TINY, "--amp", "--iters", "1"]):
        r = CliRunner().invoke(app, argv)
        assert (r.exit_code == 1 and r.output.startswith("error: train.amp")
                and len(r.output.splitlines()) == 1), r.output
    assert not (tmp_path / "cli").exists()


def test_fused_adam_gives_the_same_run_within_rounding(tmp_path):
    (plain, w0), (fused, w1) = _run(tmp_path, "plain"), _run(tmp_path, "fused", fused_adam=True)
    assert all(abs(a - b) / a < 1e-4 for a, b in zip(plain, fused))
    assert all(torch.allclose(w0[k], w1[k], atol=1e-4) for k in w0)


def test_cuda_graph_is_refused_off_cuda(tmp_path):
    with pytest.raises(PosrnnError, match="needs a CUDA device"):
        _run(tmp_path, "graph", cuda_graph=True)
    assert not (tmp_path / "graph").exists()  # refused before the run directory is made


# ---- the CUDA-graph step's logic, with a stand-in for the capture (no CUDA here) -------------------
def stand_in_capture(fn, device):
    """What a CUDA graph does, without CUDA: nothing runs at capture; every replay re-runs the
    recorded computation and writes its results into the same output tensors."""
    out = (torch.zeros(()), torch.zeros((), dtype=torch.long), torch.zeros((), dtype=torch.long), torch.zeros(()))

    def replay():
        for o, v in zip(out, fn()):
            o.copy_(v)

    return replay, out


def _trainer(tmp_path, capture=None, tensor_lr=False):
    cfg = resolve_config(options={"task.vocab_size": 6, "task.length": 5, "task.n_test": 64, "model.name": "lstm",
                                  "model.hidden_size": 8, "train.iterations": 20, "train.batch_size": 16,
                                  "train.warmup": 2, "train.log_every": 4, "train.checkpoint_every": 20,
                                  "train.device": "cpu"})
    task = build_task(cfg.task)
    torch.manual_seed(0)
    held = HeldOut(task.test_set())
    tr = Trainer(cfg, tmp_path, build_model(cfg, task), task, lambda n, g, d: held.sample(task, n, g, d),
                 torch.device("cpu"))
    if capture is not None:
        tr.graphed = GraphedStep(tr, capture=capture)
    if tensor_lr:
        graph_lr(tr.optimizer, tr.device)
    return tr


def test_graphed_step_makes_exactly_the_eager_updates(tmp_path):
    eager, graphed = _trainer(tmp_path / "a"), _trainer(tmp_path / "b", capture=stand_in_capture)
    for _ in range(GraphedStep.WARMUP + 5):  # warm-up, the checked capture, then replays
        outs = [tr.train_step(tr.sample(16, tr.generator, tr.device)) for tr in (eager, graphed)]
        assert [float(v) for v in outs[0]] == [float(v) for v in outs[1]]
    assert graphed.graphed.replay is not None
    for p, q in zip(eager.params, graphed.params):
        assert torch.equal(p, q)
    with pytest.raises(PosrnnError, match="fixed set of fields and shapes"):
        graphed.train_step(graphed.sample(8, graphed.generator, graphed.device))


def test_graphed_step_refuses_a_capture_that_disagrees(tmp_path):
    def broken(fn, device):  # replays nothing: the update is lost
        return (lambda: None), (torch.zeros(()), torch.zeros((), dtype=torch.long), torch.zeros((), dtype=torch.long),
                                torch.zeros(()))

    tr = _trainer(tmp_path, capture=broken)
    with pytest.raises(PosrnnError, match="disagrees with the eager one"):
        for _ in range(GraphedStep.WARMUP + 1):
            tr.train_step(tr.sample(16, tr.generator, tr.device))


def test_a_device_tensor_lr_follows_the_schedule_and_logs_as_a_number(tmp_path):
    tr = _trainer(tmp_path, capture=stand_in_capture, tensor_lr=True)
    tr.fit(progress=False)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [ln["step"] for ln in lines] == [4, 8, 12, 16, 20] and all(isinstance(ln["lr"], float) for ln in lines)
    assert (lines[-1]["lr"] == 0.0
            and abs(lines[0]["lr"] - 1e-3 * 0.5 * (1 + torch.cos(torch.tensor(torch.pi * 2 / 18)).item())) < 1e-9)


def test_concurrent_is_bounded_by_the_machine():
    r = CliRunner().invoke(app, ["bench", *TINY, "--concurrent", "1,100000"])
    assert r.exit_code == 1 and "--concurrent takes process counts in 1 … " in r.output and "got 1,100000" in r.output


def _spawned_children(pid: int) -> list[int]:
    import os

    out = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1]) == pid \
                    and b"spawn_main" in open(f"/proc/{p}/cmdline", "rb").read():
                out.append(int(p))
        except (OSError, ValueError, IndexError):
            continue
    return out


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.slow
def test_concurrent_workers_die_with_a_killed_bench():
    """kill -9 of the bench leaves no worker training on: each watches a pipe only the bench holds."""
    import os
    import signal
    import subprocess
    import sys
    import time

    code = ("from posrnn_cli.measure.bench import concurrent_throughput\n"
            "from posrnn_cli.common.settings.config import resolve_config\n"
            "cfg = resolve_config(options={'task.vocab_size': 8, 'task.length': 5, 'task.n_test': 64, 'model.name': "
            "'gru', 'model.hidden_size': 8, 'train.batch_size': 16, 'train.device': 'cpu', 'train.threads': 1})\n"
            "concurrent_throughput(cfg, (2,), iters=10**9, warmup=0)\n")
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 120
        while len(workers := _spawned_children(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(workers) == 2, "the bench did not start its two workers"
        time.sleep(3)  # let them get to training
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 60
    while any(map(_running, workers)) and time.monotonic() < deadline:
        time.sleep(0.5)
    alive = [w for w in workers if _running(w)]
    for w in alive:
        os.kill(w, signal.SIGKILL)
    assert not alive, f"workers {alive} outlived the killed bench"
