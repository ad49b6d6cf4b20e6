"""Core invariants: config, reverse task, held-out exclusion, PE, model shapes, checkpoints, resume."""

from __future__ import annotations

import math

import pytest
import torch
import yaml

from posrnn_cli.common.files.io import mark_files
from posrnn_cli.engine.checkpoint import atomic_torch_save, load_checkpoint
from posrnn_cli.common.files.rundir import list_checkpoints
from posrnn_cli.common.settings.config import RunConfig, TaskConfig, config_diff, resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.results.stats import bootstrap_ci
from posrnn_cli.tasks.scores import sequence_scores
from posrnn_cli.models import CORES, build_model, sinusoidal_pe
from posrnn_cli.tasks import HeldOut, ReverseTask, build_task, hash_rows
from posrnn_cli.engine.optim import lr_factor
from posrnn_cli.engine.train import train

from conftest import ROOT


def tiny(**over) -> RunConfig:
    sets = {
        "task.vocab_size": 8, "task.length": 5, "task.n_test": 64, "model.name": "gru", "model.hidden_size": 16,
        "train.iterations": 40, "train.batch_size": 16, "train.warmup": 5, "train.checkpoint_every": 20,
        "train.log_every": 10, "train.seed": 3, "train.device": "cpu",
    }
    sets.update(over)
    return resolve_config(options=sets)


# ---- config --------------------------------------------------------------------------------
def test_params_yaml_run_sections_equal_the_dataclass_defaults():
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    from_file = RunConfig.from_dict({k: data[k] for k in ("task", "model", "train")})
    assert from_file.to_dict() == RunConfig().to_dict()


def test_spec_defaults():
    c = RunConfig()
    assert (c.model.hidden_size, c.model.E, c.model.P) == (512, 512, 512)
    assert (c.train.lr, c.train.betas, c.train.clip, c.train.warmup_steps, c.train.batch_size) == (1e-3, (0.9, 0.98),
                                                                                                   1.0, 1000, 512)
    assert c.train.iterations == 300_000 and c.train.checkpoint_every == 5000 and c.task.n_test == 1024


def test_precedence_params_then_options_then_set(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("model: {hidden_size: 32, pe: none}\ntrain: {lr: 0.01}\n")
    cfg = resolve_config(p, {"model.hidden_size": 48, "train.lr": None},
                         ["model.hidden_size=64", "train.betas=[0.9, 0.999]"])
    assert cfg.model.hidden_size == 64 and cfg.model.pe == "none" and cfg.train.lr == 0.01
    assert cfg.train.betas == (0.9, 0.999)
    assert resolve_config(sets=["train.lr=1e-4"]).train.lr == 1e-4  # YAML reads 1e-4 as a string


@pytest.mark.parametrize(
    "sets, words",
    [
        (["model.hiden_size=3"], "unknown key 'model.hiden_size'"),
        (["nope.x=1"], "unknown key"),
        (["model.hidden_size=abc"], "must be of type int"),
        (["train.betas=[0.9]"], "list of 2"),
        (["train.iterations"], "KEY=VALUE"),
    ],
)
def test_bad_overrides_are_refused(sets, words):
    with pytest.raises(PosrnnError, match=words.replace("(", r"\(").replace("[", r"\[")):
        resolve_config(sets=sets)


def test_unknown_section_in_params_file(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("modle: {hidden_size: 3}\n")
    with pytest.raises(PosrnnError, match="unknown section 'modle'"):
        resolve_config(p)


# ---- the reverse task ------------------------------------------------------------------------
def test_reverse_target_is_reversed_input():
    task = build_task(TaskConfig(vocab_size=10, length=7))
    b = task.sample(32, torch.Generator().manual_seed(0), torch.device("cpu"))
    L = 7
    assert b.inputs.shape == (32, 2 * L) and b.targets.shape == (32, L)
    assert torch.equal(b.targets, b.inputs[:, :L].flip(1))
    assert (b.inputs[:, L:] == task.query_id).all() and (b.inputs[:, :L] < 10).all()
    assert torch.equal(b.out_index[0], torch.arange(L, 2 * L))


def test_task_sampling_is_a_pure_function_of_the_generator():
    task = build_task(TaskConfig(vocab_size=10, length=7))
    a = task.sample(8, torch.Generator().manual_seed(5), torch.device("cpu"))
    torch.manual_seed(123)  # the global RNG must not matter
    b = task.sample(8, torch.Generator().manual_seed(5), torch.device("cpu"))
    assert torch.equal(a.inputs, b.inputs)


def test_test_set_is_distinct_and_fixed_by_its_own_seed():
    cfg = TaskConfig(vocab_size=3, length=8, n_test=1024)  # 6,561 sequences: duplicates are likely
    t1, t2 = ReverseTask(cfg).test_set(), ReverseTask(cfg).test_set()
    assert len(t1) == 1024 and torch.equal(t1.inputs, t2.inputs)
    assert len(torch.unique(t1.key, dim=0)) == 1024


def test_held_out_sequences_never_appear_in_training_batches():
    task = ReverseTask(TaskConfig(vocab_size=2, length=11, n_test=1024))  # half of all 2,048 sequences held out
    test = task.test_set()
    held = HeldOut(test)
    gen = torch.Generator().manual_seed(0)
    test_rows = {tuple(r) for r in test.key.tolist()}
    raw = task.sample(512, torch.Generator().manual_seed(0), torch.device("cpu"))
    assert held.contains(raw).any()  # the raw sampler does hit test sequences here…
    for _ in range(20):
        b = held.sample(task, 512, gen, torch.device("cpu"))
        assert not any(tuple(r) in test_rows for r in b.key.tolist())  # …the training sampler never does
        assert torch.equal(b.targets, b.inputs[:, :11].flip(1))


def test_too_small_space_is_refused():
    with pytest.raises(PosrnnError, match="too few to hold out"):
        ReverseTask(TaskConfig(vocab_size=2, length=8))


def test_hash_is_order_sensitive():
    x = torch.tensor([[1, 2, 3], [3, 2, 1], [1, 2, 3]])
    h = hash_rows(x)
    assert h[0] == h[2] and h[0] != h[1]


# ---- positional encoding and model -------------------------------------------------------------
def test_sinusoidal_pe_matches_the_spec_formula_and_has_unit_norm():
    T, P = 20, 16
    pe = sinusoidal_pe(T, P)
    for t in (0, 1, 7, 19):
        for i in range(P // 2):
            w = 10000 ** (-2 * i / P)
            assert pe[t, i].item() == pytest.approx(math.sin(t * w) / math.sqrt(P / 2), abs=1e-6)
            assert pe[t, P // 2 + i].item() == pytest.approx(math.cos(t * w) / math.sqrt(P / 2), abs=1e-6)
    assert torch.allclose(pe.norm(dim=1), torch.ones(T), atol=1e-6)


@pytest.mark.parametrize("core", sorted(CORES))
@pytest.mark.parametrize("pe,mode", [("none", "concat"), ("sinusoidal", "concat"), ("sinusoidal", "add")])
def test_model_output_shapes(core, pe, mode):
    cfg = tiny(**{"model.name": core, "model.pe": pe, "model.pe_mode": mode, "model.heads": 2})
    task = build_task(cfg.task)
    model = build_model(cfg, task)
    b = task.sample(4, torch.Generator().manual_seed(0), torch.device("cpu"))
    out = model(b.inputs, b.out_index, b.query)
    assert out.shape == (4, cfg.task.length, cfg.task.vocab_size)
    E = cfg.model.E
    assert model.encoder.out_dim == (2 * E if (pe != "none" and mode == "concat") else E)
    assert model.encoder.embedding.num_embeddings == cfg.task.vocab_size + 1  # + the output query


def test_pe_positions_run_through_input_and_output_phases():
    cfg = tiny(**{"model.pe": "sinusoidal"})
    task = build_task(cfg.task)
    model = build_model(cfg, task)
    b = task.sample(2, torch.Generator().manual_seed(0), torch.device("cpu"))
    x = model.encoder(b.inputs)  # (B, 2L, E+P)
    E = cfg.model.E
    assert torch.allclose(x[0, :, E:], sinusoidal_pe(2 * cfg.task.length, E))


@pytest.mark.parametrize(
    "sets, words",
    [
        ({"task.vocab_size": 1}, "vocab_size must be at least 2"),
        ({"task.length": 0}, "length must be at least 1"),
        ({"model.embed_size": 15}, "must be even"),
        ({"model.embed_size": 16, "model.pe_dim": 8, "model.pe_mode": "add"}, "equal the embedding size"),
        ({"model.name": "rnnn"}, "unknown model"),
        ({"task.name": "revers"}, "unknown task"),
        ({"train.warmup": 100}, "warm-up"),
    ],
)
def test_impossible_configs_are_refused(tmp_path, sets, words):
    with pytest.raises(PosrnnError, match=words):
        train(tiny(**sets), tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()  # nothing written


# ---- schedule, metrics ---------------------------------------------------------------------------
def test_lr_schedule_warms_up_linearly_then_decays_to_zero():
    assert lr_factor(0, 10, 100) == pytest.approx(0.1)
    assert lr_factor(9, 10, 100) == pytest.approx(1.0)
    assert lr_factor(10, 10, 100) == pytest.approx(1.0)
    assert lr_factor(55, 10, 100) == pytest.approx(0.5)
    assert lr_factor(100, 10, 100) == pytest.approx(0.0)


def test_sequence_scores_and_damerau_levenshtein():
    target = torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4]])
    pred = torch.tensor([[1, 2, 3, 4], [2, 1, 3, 0]])
    s = sequence_scores(pred, target)
    assert s["token_accuracy"].tolist() == [1.0, 0.25]
    assert s["sequence_accuracy"].tolist() == [1.0, 0.0]
    assert s["damerau_levenshtein"].tolist() == [0.0, 2.0]  # one transposition + one substitution
    masked = sequence_scores(pred, target, torch.tensor([[True] * 4, [True, True, False, False]]))
    assert masked["token_accuracy"].tolist() == [1.0, 0.0] and masked["damerau_levenshtein"].tolist() == [0.0, 1.0]


def test_bootstrap_ci_brackets_the_mean_and_shrinks_with_n():
    rng = torch.Generator().manual_seed(0)
    small = torch.rand(50, generator=rng).numpy()
    big = torch.rand(5000, generator=rng).numpy()
    lo, hi = bootstrap_ci(small, n_resamples=2000)
    assert lo < small.mean() < hi
    lo2, hi2 = bootstrap_ci(big, n_resamples=2000)
    assert hi2 - lo2 < (hi - lo) / 3
    assert bootstrap_ci([0.5] * 10) == (0.5, 0.5)


# ---- training, checkpoints, resume ------------------------------------------------------------
def test_training_learns_and_writes_log_and_checkpoints(tmp_path):
    cfg = tiny(**{"train.iterations": 200, "train.checkpoint_every": 100, "train.batch_size": 32, "task.vocab_size": 4,
                  "task.length": 6})
    s = train(cfg, tmp_path / "run", progress=False)
    assert s["finished"] and s["step"] == 200
    assert [st for st, _ in list_checkpoints(tmp_path / "run")] == [100, 200]
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 20
    first, last = yaml.safe_load(lines[0]), yaml.safe_load(lines[-1])
    assert last["loss"] < first["loss"] and last["accuracy"] > 0.4  # chance is 0.25
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert RunConfig.from_dict(saved).to_dict() == cfg.to_dict()
    ckpt = load_checkpoint(tmp_path / "run" / "checkpoints" / "step_0000200.pt")
    assert ckpt["config"].to_dict() == cfg.to_dict() and ckpt["step"] == 200


def test_resume_is_bit_identical(tmp_path):
    cfg = tiny(**{"train.iterations": 60, "train.checkpoint_every": 30})
    train(cfg, tmp_path / "full", progress=False)
    s = train(cfg, tmp_path / "split", progress=False, stop_after=30)
    assert not s["finished"] and s["step"] == 30
    s = train(cfg, tmp_path / "split", resume=True, progress=False)
    assert s["finished"]
    a = load_checkpoint(tmp_path / "full" / "checkpoints" / "step_0000060.pt")
    b = load_checkpoint(tmp_path / "split" / "checkpoints" / "step_0000060.pt")
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    la = (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()
    lb = (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()
    assert [yaml.safe_load(x)["loss"] for x in la] == [yaml.safe_load(x)["loss"] for x in lb]


def test_a_checkpoint_from_another_device_type_resumes_reseeded_and_says_so(tmp_path):
    """A run checkpointed on a GPU resumes on a CPU (and back): weights, Adam and schedule carry
    over; the CUDA generator's state cannot, so the sampler is reseeded from (seed, step) and
    the checkpoint records the move. Faked here by marking a CPU checkpoint as CUDA's."""
    cfg = tiny(**{"train.iterations": 60, "train.checkpoint_every": 30})
    for name in ("a", "b"):
        train(cfg, tmp_path / name, progress=False, stop_after=30)
        path = tmp_path / name / "checkpoints" / "step_0000030.pt"
        raw = torch.load(path, weights_only=True)
        raw["rng"] = {**raw["rng"], "device": "cuda", "train": torch.zeros(16, dtype=torch.uint8)}  # not a CPU state
        atomic_torch_save(raw, path)
        mark_files(tmp_path / name, ["checkpoints/step_0000030.pt"])  # as posrnn on the GPU machine would have
        s = train(cfg, tmp_path / name, resume=True, progress=False)
        assert s["finished"] and s["step"] == 60
    a = load_checkpoint(tmp_path / "a" / "checkpoints" / "step_0000060.pt")
    b = load_checkpoint(tmp_path / "b" / "checkpoints" / "step_0000060.pt")
    assert (a["extra"]["device_changes"] == [{"at_step": 30, "from": "cuda", "to": "cpu"}]
            and a["rng"]["device"] == "cpu")
    for k in a["model"]:  # the reseeding is deterministic
        assert torch.equal(a["model"][k], b["model"][k]), k


def test_resume_refuses_a_contradicting_config_and_keeps_files(tmp_path):
    cfg = tiny()
    train(cfg, tmp_path / "run", progress=False, stop_after=20)
    before = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
    with pytest.raises(PosrnnError, match="contradicts the saved run"):
        train(tiny(**{"model.hidden_size": 32}), tmp_path / "run", resume=True, progress=False)
    with pytest.raises(PosrnnError, match="already holds a different run"):
        train(tiny(**{"model.hidden_size": 32}), tmp_path / "run", progress=False)
    with pytest.raises(PosrnnError, match="already holds a posrnn run"):
        train(cfg, tmp_path / "run", progress=False)
    after = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
    assert before == after


def test_force_replaces_the_run(tmp_path):
    train(tiny(), tmp_path / "run", progress=False)
    s = train(tiny(**{"model.hidden_size": 8, "train.iterations": 20}), tmp_path / "run", force=True, progress=False)
    assert s["step"] == 20 and [st for st, _ in list_checkpoints(tmp_path / "run")] == [20]


def test_corrupt_and_missing_checkpoints(tmp_path):
    with pytest.raises(PosrnnError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint at all")
    with pytest.raises(PosrnnError, match="corrupt"):
        load_checkpoint(bad)
    train(tiny(), tmp_path / "run", progress=False)
    ck = tmp_path / "run" / "checkpoints" / "step_0000040.pt"
    ck.write_bytes(ck.read_bytes()[: len(ck.read_bytes()) // 2])  # truncated
    with pytest.raises(PosrnnError, match="corrupt"):
        load_checkpoint(ck)


def test_checkpoints_refuse_arbitrary_pickles(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "evil.pt"
    torch.save({"format": "posrnn-checkpoint", "payload": Evil()}, path)
    with pytest.raises(PosrnnError, match="was refused") as e:
        load_checkpoint(path)
    assert "weights_only" not in str(e.value) and "two options" not in str(e.value)


def test_atomic_save_leaves_no_partial_file(tmp_path):
    path = tmp_path / "x.pt"
    atomic_torch_save({"a": torch.ones(2)}, path)
    good = path.read_bytes()

    class Boom:
        def __reduce__(self):
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_torch_save({"a": Boom()}, path)
    assert path.read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == ["x.pt"]


def test_config_diff_ignores_runtime_keys():
    a, b = tiny(), tiny(**{"train.device": "auto", "train.threads": 2})
    assert config_diff(a, b) == []
    assert config_diff(a, tiny(**{"train.lr": 0.5})) == ["train.lr"]
