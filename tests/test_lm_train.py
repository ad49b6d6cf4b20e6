"""The language-model chain end to end on the shipped mini corpus, and data parallelism."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from typer.testing import CliRunner

from posrnn_cli.engine.checkpoint import load_checkpoint
from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.lm.encode import LMCorpus
from posrnn_cli.engine.train import train

from conftest import ROOT
runner = CliRunner()


@pytest.fixture(scope="module")
def encoded(tmp_path_factory):
    d = tmp_path_factory.mktemp("lm")
    for argv in (["lm", "prepare", "--data-dir", str(ROOT / "data/wikitext-mini"), "--out", str(d / "txt")],
                 ["lm", "tokenizer", "--data", str(d / "txt"), "--out", str(d / "tok"), "--vocab-size", "300"],
                 ["lm", "encode", "--data", str(d / "txt"), "--tokenizer", str(d / "tok"), "--out", str(d / "enc"),
                  "--max-tokens", "48"]):
        r = runner.invoke(app, argv)
        assert r.exit_code == 0, r.output
    return d / "enc"


LM_ARGS = ["--hidden-size", "16", "--iterations", "30", "--batch-size", "8", "--warmup", "3", "--device", "cpu",
           "--threads", "1", "--checkpoint-every", "30", "--set", "train.log_every=10"]


@pytest.mark.parametrize("pe", ["sinusoidal", "none"])
def test_lm_chain_trains_and_reports_perplexity(encoded, tmp_path, pe):
    out = tmp_path / "run"
    r = runner.invoke(app, ["lm", "train", "--data", str(encoded), "--out", str(out), "--pe", pe, *LM_ARGS])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["lm", "eval", str(out), "--device", "cpu", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert 1 < res["perplexity"] < 300  # below the uniform 300 after training
    test = LMCorpus(encoded, "test")
    assert res["n_paragraphs"] == len(test)
    assert res["n_tokens"] == int((test.lengths - 1).sum())  # every next-token prediction, no padding
    lines = Path(res["nll_by_position_csv"]).read_text().splitlines()
    assert lines[0] == "position,nll,tokens" and len(lines) == 1 + 47
    log = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert log[-1]["loss"] < log[0]["loss"]


def test_lm_refuses_bad_input(encoded, tmp_path):
    r = runner.invoke(app, ["lm", "train", "--data", str(tmp_path / "nope"), "--out", str(tmp_path / "r")])
    assert r.exit_code == 1 and "not an encoded corpus" in r.output
    r = runner.invoke(app,
                      ["lm", "train", "--data", str(encoded), "--out", str(tmp_path / "r"), "--set", "task.rarity=0.1",
                       *LM_ARGS])
    assert r.exit_code == 1 and "--rarity is not defined" in r.output
    assert not (tmp_path / "r").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, cfg_dict: dict, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), RANK=str(rank),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    from posrnn_cli.common.settings.config import RunConfig

    train(RunConfig.from_dict(cfg_dict), Path(out), progress=False)
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_processes_match_one_process_with_the_doubled_batch(encoded, tmp_path):
    def cfg(batch):
        return resolve_config(options={
            "task.name": "lm", "task.data": str(encoded), "task.vocab_size": 300, "task.length": 48,
            "model.hidden_size": 16, "train.iterations": 12, "train.batch_size": batch, "train.warmup": 2,
            "train.checkpoint_every": 12, "train.log_every": 3, "train.device": "cpu", "train.seed": 5})

    train(cfg(8), tmp_path / "single", progress=False)
    mp.spawn(_worker, args=(2, _free_port(), cfg(4).to_dict(), str(tmp_path / "ddp")), nprocs=2, join=True)
    a = load_checkpoint(tmp_path / "single" / "checkpoints" / "step_0000012.pt")["model"]
    b = load_checkpoint(tmp_path / "ddp" / "checkpoints" / "step_0000012.pt")["model"]
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5), k
    la = [json.loads(x)["loss"] for x in (tmp_path / "single" / "metrics.jsonl").read_text().splitlines()]
    lb = [json.loads(x)["loss"] for x in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    assert len(la) == len(lb) == 4 and la == pytest.approx(lb, rel=1e-4)


def test_the_lm_task_gets_the_bounds_every_task_gets(encoded):
    """The LM task's own checks come after the bounds declared on TaskConfig's fields, which
    every task applies (a held-out count of 0 is refused as for the synthetic tasks)."""
    from posrnn_cli.common.settings.config import TaskConfig
    from posrnn_cli.common.errors import PosrnnError
    from posrnn_cli.tasks import build_task

    meta = LMCorpus(encoded, "train").meta
    ok = TaskConfig(name="lm", vocab_size=meta["vocab_size"], length=meta["max_tokens"], data=str(encoded))
    build_task(ok)
    with pytest.raises(PosrnnError, match="task.n_test must be at least 1"):
        build_task(TaskConfig(**{**ok.__dict__, "n_test": 0}))


def test_each_process_builds_its_task_for_its_rank_and_the_slices_make_the_whole_batch(encoded):
    """A task is built knowing its place under data parallelism (never patched afterwards):
    ``build_run`` for rank r of 2 gives an LM task whose batch is the r-th half of the batch one
    process draws with the same generator; a task built outside torchrun is rank 0 of 1."""
    from posrnn_cli.common.settings.config import TaskConfig
    from posrnn_cli.engine.train import build_run
    from posrnn_cli.tasks import build_task

    cfg = resolve_config(options={"task.name": "lm", "task.data": str(encoded), "task.vocab_size": 300,
                                  "task.length": 48, "model.hidden_size": 16, "train.device": "cpu"})
    whole = build_task(cfg.task)
    halves = [build_run(cfg, r, 2)[0] for r in range(2)]
    assert (whole.rank, whole.world_size) == (0, 1)
    assert [(t.rank, t.world_size) for t in halves] == [(0, 2), (1, 2)]
    assert (build_task(TaskConfig()).rank, build_task(TaskConfig()).world_size) == (0, 1)  # every task has them
    full = whole.sample(6, torch.Generator().manual_seed(3), "cpu")
    parts = [t.sample(3, torch.Generator().manual_seed(3), "cpu") for t in halves]
    width = full.inputs.shape[1]
    joined = torch.cat([torch.nn.functional.pad(p.inputs, (0, width - p.inputs.shape[1])) for p in parts])
    assert torch.equal(joined, full.inputs)


def _lm_task(encoded, **task):
    from posrnn_cli.tasks import build_task

    meta = LMCorpus(encoded, "train").meta
    cfg = resolve_config(options={"task.name": "lm", "task.data": str(encoded), "task.vocab_size": meta["vocab_size"],
                                  "task.length": meta["max_tokens"], **{f"task.{k}": v for k, v in task.items()}})
    return cfg, build_task(cfg.task)


def test_length_buckets_are_off_by_default_and_the_default_batches_are_as_before(encoded):
    """Off (the default, and in every profile of the papers), a batch is ``n`` paragraphs drawn
    uniformly with the run's generator, collated as they always were: the draw written out here."""
    import yaml

    cfg, task = _lm_task(encoded)
    assert cfg.task.length_buckets is None and task.buckets is None
    profiles = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert "length_buckets" not in json.dumps(profiles)
    corpus = LMCorpus(encoded, "train")
    for seed in (0, 7):
        got = task.sample(8, torch.Generator().manual_seed(seed), "cpu")
        idx = torch.randint(len(corpus), (8,), generator=torch.Generator().manual_seed(seed)).tolist()
        tokens, lengths = corpus.collate(idx, pad_id=0)
        assert torch.equal(got.inputs, tokens[:, :-1]) and torch.equal(got.lengths, lengths)


def test_length_buckets_group_paragraphs_of_similar_length_and_draw_each_as_often(encoded, tmp_path):
    """With task.length_buckets = 32 each batch comes from one 32nd of the paragraphs in order of
    length: its lengths lie within one bucket's, batches pad less than unbucketed ones (on the mini
    corpus 93% of paragraphs reach the 48-token cap, so only the shortest buckets pad less), every
    paragraph is in one bucket, and the buckets hold equal counts (to one), so each is drawn as often."""
    from posrnn_cli.common.errors import PosrnnError
    from posrnn_cli.tasks import build_task
    from posrnn_cli.common.settings.config import TaskConfig

    _, plain = _lm_task(encoded)
    _, task = _lm_task(encoded, length_buckets=32)
    lengths = LMCorpus(encoded, "train").lengths
    assert sorted(i for b in task.buckets for i in b.tolist()) == list(range(len(lengths)))
    assert max(map(len, task.buckets)) - min(map(len, task.buckets)) <= 1
    spans = [(int(lengths[b].min()), int(lengths[b].max())) for b in task.buckets]
    assert all(hi <= lo for (_, hi), (lo, _) in zip(spans, spans[1:]))  # in order of length
    gen, gen_plain = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    padded, padded_plain = 0, 0
    for _ in range(200):
        batch = task.sample(8, gen, "cpu")
        assert any(lo <= int(batch.lengths.min()) and int(batch.lengths.max()) <= hi for lo, hi in spans)
        padded += batch.inputs.numel()
        padded_plain += plain.sample(8, gen_plain, "cpu").inputs.numel()
    assert padded < padded_plain
    out = tmp_path / "bucketed"  # a run trains with it, and records it in its config
    r = runner.invoke(app, ["lm", "train", "--data", str(encoded), "--out", str(out), *LM_ARGS, "--set",
                            "task.length_buckets=32"])
    assert r.exit_code == 0, r.output
    assert "length_buckets: 32" in (out / "config.yaml").read_text()
    with pytest.raises(PosrnnError, match="length_buckets .* not defined for task 'reverse'"):
        build_task(TaskConfig(length_buckets=4))
    with pytest.raises(PosrnnError, match="task.length_buckets"):
        _lm_task(encoded, length_buckets=0)
