"""Bounds that fit the machine: options each within their declared maximum but together beyond
the memory available are refused in one line, before anything is allocated or written."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from posrnn_cli.common.host import memory
from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.common.errors import PosrnnError

from conftest import ROOT
SIX_GB = 6 * 10**9


def test_parts_within_the_memory_pass_and_beyond_it_name_the_largest():
    parts = [(2 * 10**9, "a", "x.a"), (3 * 10**9, "b", "x.b")]
    memory.check_fits(parts, "it", available=SIX_GB)
    with pytest.raises(PosrnnError, match=r"^it needs at least 7.0 GB of memory, more than the 6.0 GB available here "
                                          r"\(largest: b, 3.0 GB\); lower x.b$"):
        memory.check_fits([*parts, (2 * 10**9, "c", "x.c")], "it", available=SIX_GB)


def test_the_paper_settings_fit_in_six_gb():
    cfg = resolve_config(options={"task.vocab_size": 256, "task.length": 64, "model.hidden_size": 512})
    memory.check_fits(memory.run_parts(cfg, 128, 64, 257, 256), "the paper's run", available=SIX_GB)


def test_three_maxima_on_the_tiny_model_are_refused_before_anything_is_allocated(tmp_path):
    """vocab_size, n_test and eval_batch_size at their maxima: refused on a 6 GB machine while the
    process is still small (a 1.5 GB address-space limit would stop any allocation of them)."""
    code = ("import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, 1_500_000_000))\n"
            "from posrnn_cli.common.host import memory\nmemory.available_bytes = lambda: 6 * 10**9\n"
            "from posrnn_cli.cli import run\nsys.argv = ['posrnn', 'train', '--task', 'reverse', '--model', 'gru', "
            "'--hidden-size', '8', '--length', '8', '--vocab-size', str(2**24), '--set', 'task.n_test=10000000', "
            "'--set', f'train.eval_batch_size={2**24}', '--iterations', '2', '--device', 'cpu', '--out', "
            "'run']\nrun()\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "Traceback" not in out and len(out.strip().splitlines()) == 1, out[-2000:]
    assert "this run needs at least" in out and "more than the 6.0 GB available here" in out
    assert "lower train.eval_batch_size, task.vocab_size" in out
    assert not (tmp_path / "run").exists()


def test_a_stability_analysis_beyond_the_memory_is_refused(tmp_path, monkeypatch):
    from posrnn_cli.engine.stability import stability_values
    from posrnn_cli.engine.train import train

    cfg = resolve_config(options={"task.vocab_size": 8, "task.length": 5, "task.n_test": 32, "model.name": "gru",
                                  "model.hidden_size": 8, "train.iterations": 2, "train.batch_size": 8,
                                  "train.warmup": 1, "train.device": "cpu"})
    train(cfg, tmp_path / "run", progress=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: 10**8)
    with pytest.raises(PosrnnError, match=r"this stability analysis needs at least .* \(largest: the triplets' "
                                          r"Jacobians"):
        next(stability_values(tmp_path / "run", n_triplets=10**6, device="cpu"))
    assert len(list(stability_values(tmp_path / "run", n_triplets=4, device="cpu"))) == 2


@pytest.mark.parametrize("core, sets, width", [("gated_deltanet", {"model.heads": 1}, 16 * 16),
                                               ("mamba", {"model.state_size": 8}, None)])
def test_stability_counts_each_cores_real_state_and_names_the_triplets_that_fit(tmp_path, monkeypatch, core, sets,
                                                                                width):
    """Gated DeltaNet's state is a matrix per head (H² with one head), Mamba's N × its inner width:
    far beyond the 2H of an LSTM, so an estimate of 2H let runs through that were killed for memory."""
    from posrnn_cli.engine.stability import stability_values, state_width
    from posrnn_cli.engine.evaluate import load_run
    from posrnn_cli.engine.train import train

    cfg = resolve_config(options={"task.vocab_size": 8, "task.length": 5, "task.n_test": 32, "model.name": core,
                                  "model.hidden_size": 16, "train.iterations": 2, "train.batch_size": 8,
                                  "train.warmup": 1, "train.device": "cpu", **sets})
    train(cfg, tmp_path / "run", progress=False)
    run = load_run(tmp_path / "run", device="cpu")
    dz = state_width(run.model, run.task.query_id)
    assert dz > 2 * 16 and (width is None or dz == width)
    lstm_like = sum(b for b, _, _ in memory.stability_parts(4096, 5, 16))  # what the old estimate counted
    monkeypatch.setattr(memory, "available_bytes", lambda: 2 * lstm_like)
    with pytest.raises(PosrnnError, match=rf"this stability analysis needs at least .*16 × {dz:,}.*--triplets [\d,]+ "
                                          r"fits") as e:
        next(stability_values(tmp_path / "run", n_triplets=4096, device="cpu"))
    fit = int(str(e.value).rsplit("--triplets ", 1)[1].split()[0].replace(",", ""))
    assert 2 <= fit < 4096
    assert sum(b for b, _, _ in memory.stability_parts(fit, 5, 16, dz)) <= 2 * lstm_like
    assert len(list(stability_values(tmp_path / "run", n_triplets=min(fit, 8), device="cpu"))) == 2
