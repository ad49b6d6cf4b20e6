"""Vocabulary extension (000 §4.2): freeze a trained model, add ``V_extra`` new ids, train
only the new embedding rows and output rows, and test on sequences made only of new ids.

An extended run is an ordinary run directory whose config has ``model.frozen_vocab = V``,
so ``posrnn eval`` and every other command rebuild it from its checkpoint. Besides the run
files it holds ``extend.json`` (every test set's summary) and ``extend_sequences.npz`` (the
per-sequence scores on new ids only, which aggregation pools over seeds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from ..common.settings.config import resolve_config
from ..common.errors import PosrnnError
from ..common.files.io import atomic_write_json, read_json, same_path, write_npz
from ..common.settings.config import config_digest
from ..common.results.provenance import stamped
from ..models.extension import OldIdsView, extend_model
from ..tasks import Batch, HeldOut, build_task, extension_tasks
from .device import resolve_device, setup_threads
from .paths import check_extension_out, check_out_dir, resolve_checkpoint
from .evaluate import check_finite_scores, evaluate_model, load_run
from ..common.results.provenance import file_sha256
from .lock import check_free
from ..common.files.rundir import list_checkpoints
from .optim import check_fast_paths
from .recipe import check_train_config
from .train import Trainer, open_run
from .lifecycle import owned_run_dir, start_and_fit
from .device import check_machine


def _extendable(run: Path, extra: int, out: Path):
    """The finished run in ``run`` and its checkpoint's sha256, once it is shown that it can be
    extended by ``extra`` ids into ``out`` (a reverse run over a uniform vocabulary, not itself an
    extension, ``out`` elsewhere and free)."""
    check_extension_out(run, extra, out)
    trained, source_sha = load_finished_run(run)
    if not trained.task.extendable:
        raise PosrnnError(
            f"vocabulary extension is defined for the fixed-length reverse task over a uniform vocabulary; {run} "
            f"trains {trained.task.describe()}")
    if trained.cfg.model.frozen_vocab is not None:
        raise PosrnnError(f"{run} is already an extended run; extend the original run instead")
    if same_path(out, trained.run_dir):
        raise PosrnnError("--out must differ from the trained run (the trained run is never modified)")
    check_out_dir(out, inputs=(run, trained.run_dir))
    return trained, source_sha


def extend_vocab(
    run: Path, extra: int, out: Path, iterations: Optional[int] = None, seed: Optional[int] = None,
    device: str = "auto", force: bool = False, progress: bool = True, sets: Optional[list[str]] = None,
    resume: bool = False, keep_checkpoints: str = "all", on_start=None,
) -> dict:
    """``posrnn extend-vocab``: extend the trained run in ``run`` by ``extra`` ids into ``out``
    (``resume``: continue an interrupted extension in ``out`` from its last checkpoint;
    ``on_start``: called once every check has passed, as training starts). Validate (the run, the
    new config, the machine), prepare the trainer of the new rows, train, score."""
    trained, source_sha = _extendable(Path(run), extra, out)
    cfg, model, ckpt_path = trained.cfg, trained.model, trained.ckpt_path
    new_cfg, tests, dev, combined = extension_config(cfg, extra, iterations, seed, device, sets)
    V = cfg.task.vocab_size
    out = Path(out)
    with owned_run_dir(out, f"posrnn extend-vocab --out {out}"):
        if (out / "extend.json").is_file() and not force:
            read_extend_json(out / "extend.json")  # a corrupt summary is refused before anything is written
        resume_from, res = open_run(out, new_cfg, resume=resume, force=force)
        setup_threads(new_cfg.train.threads)
        trainer, before_old = extension_trainer(trained, source_sha, new_cfg, tests, combined, dev, out,
                                                keep_checkpoints)
        if resume_from is not None:
            trainer.load(resume_from, res.checkpoint)

        def work() -> dict:
            summary = trainer.fit(progress=progress)
            model.eval()
            result = {"run_dir": str(out), "extended_from": str(ckpt_path), "vocab_size": V, "extra_vocab": extra,
                      "model": cfg.model.name, "pe": cfg.model.pe, "iterations": new_cfg.train.iterations,
                      "seconds": summary["seconds"]}
            return {**result, **score_extension(out, model, new_cfg, dev, old_before=before_old)}

        return start_and_fit(out, new_cfg, force, resume_from is None, ("loop", "extension"), dev.type, on_start, work)


def extension_config(cfg, extra: int, iterations: Optional[int], seed: Optional[int], device: str,
                     sets: Optional[list[str]]) -> tuple:
    """The config of the extension of a run of ``cfg`` by ``extra`` ids (``--iterations``, ``--seed``,
    ``--device``, ``--set`` applied), checked with the machine before the disk is touched →
    (config, its test sets, device, the task over the combined vocabulary)."""
    V = cfg.task.vocab_size
    new_cfg = resolve_config(base=cfg, options={"task.vocab_size": V + extra, "model.frozen_vocab": V,
                                                "train.iterations": iterations, "train.seed": seed,
                                                "train.device": device}, sets=sets)
    if new_cfg.task.vocab_size != V + extra or new_cfg.model.frozen_vocab != V:
        raise PosrnnError("--set may not change task.vocab_size or model.frozen_vocab of an extension")
    check_train_config(new_cfg.train)
    tests = extension_tasks(new_cfg.task, V)
    dev = resolve_device(new_cfg.train.device)
    check_fast_paths(new_cfg.train, dev)
    combined = build_task(new_cfg.task)
    check_machine(new_cfg.train, combined, dev)
    return new_cfg, tests, dev, combined


def extension_trainer(trained, source_sha: str, new_cfg, tests: dict, combined, dev: torch.device, out: Path,
                      keep_checkpoints: str) -> tuple[Trainer, dict]:
    """The trained model scored on old ids, then extended (its new rows seeded by ``train.seed``),
    and the trainer of those rows on batches of the combined vocabulary (``tests``: the extension's
    test sets) → (trainer, the scores on old ids before)."""
    model, V = trained.model, trained.cfg.task.vocab_size
    extra = new_cfg.task.vocab_size - V
    model.to(dev)
    before_old, _ = evaluate_model(tests["old_ids"], OldIdsView(model, V, extra), dev, new_cfg.train.eval_batch_size)
    torch.manual_seed(new_cfg.train.seed)
    new_params = extend_model(model, V, extra)
    model.to(dev)
    held = HeldOut(Batch.cat([tests["new_ids"].test_set(), tests["old_ids"].test_set(),
                              combined.test_set()]).to(dev))
    trainer = Trainer(new_cfg, out, model, combined, lambda n, g, d: held.sample(combined, n, g, d), dev,
                      params=new_params,
                      extra={"extended_from": str(trained.ckpt_path), "extended_from_step": int(trained.ckpt["step"]),
                             "extended_from_sha256": source_sha},
                      keep_checkpoints=keep_checkpoints)
    return trainer, before_old


def load_finished_run(run: Path):
    """The run to extend, never while another process holds its lock (trains it) → (the loaded
    run, its checkpoint's sha256). A run directory must have reached its last iteration; a
    checkpoint file named explicitly is taken as it is. Extensions of one run may run at once."""
    check_free(resolve_checkpoint(run)[1])
    trained = load_run(run, device="cpu")
    sha = file_sha256(trained.ckpt_path)
    step, total = int(trained.ckpt["step"]), trained.cfg.train.iterations
    if run.is_dir() and step < total:
        raise PosrnnError(f"{run} is not finished (step {step} of {total}); finish it first (posrnn train --out {run} "
                          f"--resume), or pass one of its checkpoint files to extend that checkpoint")
    return trained, sha


def score_extension(out: Path, model, cfg, device: torch.device, old_before: Optional[dict] = None) -> dict:
    """Score an extended model on its three test sets; write ``extend.json`` (merged with what
    is there) and ``extend_sequences.npz`` (per-sequence scores on new ids only)."""
    tests = extension_tasks(cfg.task, cfg.model.frozen_vocab)
    batch = cfg.train.eval_batch_size
    new, per_seq = evaluate_model(tests["new_ids"], model, device, batch)
    check_finite_scores(new, per_seq, f"the extension in {out}")
    old, _ = evaluate_model(tests["old_ids"], model, device, batch)
    old_all, _ = evaluate_model(tests["old_ids_all_classes"], model, device, batch)
    scores = {"new_ids": new, "old_ids": old, "old_ids_all_classes": old_all}
    if old_before is not None:
        scores["old_ids_before"] = old_before
    path = Path(out) / "extend.json"
    info = read_extend_json(path) if path.is_file() else {}
    info.update({"vocab_size": cfg.model.frozen_vocab, "extra_vocab": cfg.task.vocab_size - cfg.model.frozen_vocab,
                 "model": cfg.model.name, "pe": cfg.model.pe, "iterations": cfg.train.iterations, **scores})
    ckpts = list_checkpoints(out)  # the scores carry the checkpoint and config they score
    sequences = Path(out) / "extend_sequences.npz"
    write_npz(sequences, stamped(per_seq, file_sha256(ckpts[-1][1]) if ckpts else "", config_digest(cfg.to_dict())))
    info.update({"n_sequences": len(next(iter(per_seq.values()))), "sequences_sha256": file_sha256(sequences)})
    atomic_write_json(path, info)
    return scores


#: the rows of an extension's report: key in extend.json, label, what it measures
TEST_SETS = (
    ("new_ids", "new ids only", "sequences of new ids alone: what the extension learned"),
    ("old_ids_before", "old ids, before", "sequences of old ids, scored before the extension"),
    ("old_ids", "old ids, after", "the same after it, among old ids only (frozen: as before)"),
    ("old_ids_all_classes", "old ids, after, all classes", "choosing among all ids (do new rows steal?)"),
)


def not_learned(result: dict, command: str) -> Optional[str]:
    """The advice when the new ids were not learned at all (token accuracy exactly 0 on them):
    too few iterations for the new rows; ``command`` re-runs the extension (without --iterations)."""
    if result["new_ids"]["token_accuracy"] > 0:
        return None
    more = max(10 * int(result["iterations"]), 1000)
    return (f"the new ids were not learned (token accuracy 0.000 on them after {result['iterations']:,} iterations): "
            f"too few for the new rows; run it longer: {command} --force --iterations {more}")


def read_extend_json(path: Path) -> dict:
    """An extension's ``extend.json``: a JSON object, refused in one line when it is not."""
    info = read_json(path)
    if not isinstance(info, dict):
        raise PosrnnError(f"{path} is not an extension summary (not a JSON object); remove it and re-run extend-vocab "
                          "--resume")
    return info
