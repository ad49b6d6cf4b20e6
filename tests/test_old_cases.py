"""Cases that slipped through before: --resume with fewer iterations than an unfinished run's
target, corrupt language-model offsets, and `profile use` on DVC's block-style list."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.settings.profiles import use_profile
from posrnn_cli.engine.checkpoint import load_checkpoint
from posrnn_cli.common.files.rundir import list_checkpoints
from posrnn_cli.engine.train import train
from posrnn_cli.lm.encode import LMCorpus


def tiny(**over):
    sets = {"task.vocab_size": 8, "task.length": 4, "task.n_test": 32, "model.name": "gru", "model.hidden_size": 8,
            "train.iterations": 20, "train.batch_size": 8, "train.warmup": 2, "train.checkpoint_every": 5,
            "train.log_every": 5, "train.seed": 3, "train.device": "cpu"}
    return resolve_config(options={**sets, **over})


def test_resume_with_fewer_iterations_than_an_unfinished_runs_target_is_refused_not_an_extension(tmp_path):
    run = tmp_path / "run"
    train(tiny(), run, progress=False, stop_after=5)
    config = (run / "config.yaml").read_bytes()
    with pytest.raises(PosrnnError, match=r"--iterations 12 is below the 20 iterations .* drop --iterations to "
                                          r"finish it"):
        train(tiny(**{"train.iterations": 12}), run, resume=True, progress=False)
    assert (run / "config.yaml").read_bytes() == config and [s for s, _ in list_checkpoints(run)] == [5]
    summary = train(tiny(**{"train.iterations": 30}), run, resume=True, progress=False)  # more is an extension
    assert summary["step"] == 30
    ckpt = load_checkpoint(list_checkpoints(run)[-1][1])
    assert ckpt["extra"]["extensions"] == [{"at_step": 5, "iterations_before": 20, "iterations_after": 30}]


# ---- corrupt language-model offsets -------------------------------------------------------------------------
def corpus(root: Path, ids, offsets) -> Path:
    ids, offsets = np.asarray(ids, dtype=np.uint16), np.asarray(offsets, dtype=np.int64)
    (root / "train").mkdir(parents=True)
    np.save(root / "train" / "ids.npy", ids)
    np.save(root / "train" / "offsets.npy", offsets)
    paragraphs = len(offsets) - 1 if offsets.ndim == 1 else 1
    (root / "meta.json").write_text(json.dumps({
        "splits": {"train": {"tokens": int(ids.size), "paragraphs": paragraphs}}, "vocab_size": 10, "bos_id": 1,
        "eos_id": 2, "unk_id": 0, "pad_id": 3, "max_tokens": 8}))
    return root


def test_a_well_formed_corpus_reads(tmp_path):
    c = LMCorpus(corpus(tmp_path, [1, 5, 2, 1, 6, 2], [0, 3, 6]))
    assert len(c) == 2 and list(c[1]) == [1, 6, 2]


@pytest.mark.parametrize("ids,offsets", [
    ([1, 5, 2, 1, 6, 2], [0, 7, 6]),  # a paragraph ending beyond the tokens, the next one negative
    ([1, 5, 2, 1, 6, 2], [0, 4, 2, 6]),  # offsets going back
    ([1, 5, 2, 1, 6, 2], [0, 0, 6]),  # an empty paragraph
    ([1, 5, 2, 1, 6, 2], [[0, 3, 6]]),  # not 1-D
    ([[1, 5, 2], [1, 6, 2]], [0, 3, 6]),
])
def test_corrupt_offsets_are_refused_in_one_line(tmp_path, ids, offsets):
    with pytest.raises(PosrnnError, match=r"(corrupt|not an encoded split).*re-run `posrnn lm encode`") as e:
        LMCorpus(corpus(tmp_path, ids, offsets))
    assert "\n" not in str(e.value)


# ---- profile use on a block-style list ----------------------------------------------------------------------
PROFILES = "profiles:\n  lite: {device: cpu}\n  micro: {device: cpu}\n"


@pytest.mark.parametrize("text,names,expected", [
    ("profile:\n- lite  # mine\n# micro is quick\n- micro\nx: 1\n", ["micro"],
     "profile:\n- micro  # mine\n# micro is quick\nx: 1\n"),
    ("profile:\n  - lite\n  # keep me here\nx: 1  # and me\n", ["micro", "lite"],
     "profile:\n  - micro\n  - lite\n  # keep me here\nx: 1  # and me\n"),
    ("profile:\r\n- lite # a\r\n# b\r\n", ["lite", "micro"], "profile:\r\n- lite # a\r\n- micro\r\n# b\r\n"),
    ("profile:\n# pick one\n\n- lite\n", ["micro"], "profile:\n# pick one\n\n- micro\n"),
])
def test_profile_use_on_a_block_list_changes_only_the_items_lines(tmp_path, text, names, expected):
    params = tmp_path / "params.yaml"
    params.write_bytes((text + PROFILES.replace("\n", "\r\n" if "\r\n" in text else "\n")).encode())
    said = use_profile(params, names)
    assert params.read_bytes().decode() == expected + PROFILES.replace("\n", "\r\n" if "\r\n" in text else "\n")
    assert said == f"profile: {', '.join(names)} (kept as a block list, one `- name` a line)"  # not a flow list
