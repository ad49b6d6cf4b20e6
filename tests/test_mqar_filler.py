"""MQAR as the Zoology harness runs it: ``--filler zero`` (its ``random_non_queries = False``)
fills the query region's other steps with id 0 and changes nothing else of the draw; the
harness's V > L check; the setting left out of a run's digest at its default; and a run at
L = 16P with zero filler trains and shows a filler column."""

from __future__ import annotations

import re

import pytest
import torch

from posrnn_cli.cli import run
from posrnn_cli.common.settings.config import RunConfig, TaskConfig
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.settings.config import config_digest
from posrnn_cli.tasks import build_task

from conftest import tiny_train

CPU = torch.device("cpu")


def draw(filler: str, V=64, L=32, P=2, n=256, seed=0):
    task = build_task(TaskConfig(name="mqar", vocab_size=V, length=L, pairs=P, filler=filler, n_test=16))
    return task.sample(n, torch.Generator().manual_seed(seed), CPU)


def test_zero_filler_leaves_id_0_wherever_no_pair_or_query_is():
    b = draw("zero")
    P = 2
    asked = torch.zeros_like(b.inputs, dtype=torch.bool).scatter_(1, b.out_index, True)
    asked[:, : 2 * P] = True  # the pairs
    assert (b.inputs[~asked] == 0).all() and (b.inputs[asked] != 0).all()  # no key is id 0
    keys = b.inputs[:, 0 : 2 * P : 2]
    assert torch.equal(b.inputs.gather(1, b.out_index).sort(1).values, keys.sort(1).values)  # each key asked once


def test_random_filler_is_the_default_draw_and_zero_changes_only_the_filler():
    base = build_task(TaskConfig(name="mqar", vocab_size=64, length=32, pairs=2, n_test=16))
    a = base.sample(64, torch.Generator().manual_seed(3), CPU)
    r, z = draw("random", n=64, seed=3), draw("zero", n=64, seed=3)
    assert torch.equal(a.inputs, r.inputs) and torch.equal(a.targets, r.targets)
    assert (r.inputs != 0).float().mean() > 0.9  # random ids fill the region
    # the pairs are drawn before the filler, so the keys and values agree; the queries' places are drawn after
    assert torch.equal(z.inputs[:, :4], r.inputs[:, :4])


@pytest.mark.parametrize("opts, words", [
    ({"vocab_size": 32, "length": 32}, "--vocab-size 32 ≤ --length 32; raise --vocab-size above 32"),
    ({"filler": "noise"}, "unknown --filler 'noise'; choose one of: random, zero"),
    ({"task": "reverse", "pairs": None, "filler": "zero"}, "--filler is not defined for task 'reverse'; drop it"),
])
def test_impossible_settings_are_refused_with_one_line(opts, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = {"task": "mqar", "vocab_size": 64, "length": 32, "pairs": 2, **opts}
    with pytest.raises(SystemExit) as e:
        run(["train", *tiny_train(**base), "--out", "x"])
    err = capsys.readouterr().err
    assert e.value.code == 1 and words in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x").exists()
    with pytest.raises(PosrnnError, match=re.escape(words)):
        build_task(TaskConfig(name=base["task"],
                              **{k: v for k, v in base.items() if k not in ("task",) and v is not None}))


def test_a_config_written_before_task_filler_keeps_its_digest_and_zero_changes_it():
    now = RunConfig().to_dict()
    before = {s: {k: v for k, v in sec.items() if f"{s}.{k}" != "task.filler"} for s, sec in now.items()}
    assert config_digest(RunConfig.from_dict(before).to_dict()) == config_digest(before)
    now["task"]["filler"] = "zero"
    assert config_digest(now) != config_digest(before)


def test_zero_filler_at_16_p_trains(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        run(["train", *tiny_train(task="mqar", vocab_size=64, length=32, pairs=2, filler="zero"), "--out", "z"])
    assert e.value.code == 0
    assert "filler: zero" in (tmp_path / "z" / "config.yaml").read_text()
