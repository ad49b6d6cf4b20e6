"""Vocabulary extension (SPEC §3): freeze a trained model, add ``V_extra`` new ids, train
only the new embedding rows and output rows, and test on sequences made only of new ids.

Ids in the extended model: ``0 … V−1`` the trained vocabulary, ``V … V+X−1`` the new ids,
``V+X`` the output query (which reuses the trained query vector, row ``V`` of the old table).
An extended run is an ordinary run directory whose config has ``model.frozen_vocab = V``,
so ``posrnn eval`` and every other command rebuild it from its checkpoint.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor, nn

from .checkpoint import atomic_write_json, atomic_write_text
from .config import RunConfig, TaskConfig, dump_yaml
from .errors import PosrnnError
from .tasks import Batch, HeldOut, ReverseTask, reverse_layout

EXTENDABLE_TASKS = ("reverse",)


class ExtendedEmbedding(nn.Module):
    """A frozen trained table (V tokens + query) beside a new table of X rows."""

    def __init__(self, old: nn.Embedding, V: int, X: int):
        super().__init__()
        self.V, self.X = V, X
        self.old = old
        self.new = nn.Embedding(X, old.embedding_dim)  # N(0, 1) like the trained rows

    def forward(self, ids: Tensor) -> Tensor:
        V, X = self.V, self.X
        is_new = (ids >= V) & (ids < V + X)  # (B T)
        old_ids = torch.where(ids == V + X, V, ids).masked_fill(is_new, 0)  # query → old row V
        e_old = self.old(old_ids)  # (B T E)
        e_new = self.new((ids - V).clamp(0, X - 1))  # (B T E)
        return torch.where(is_new[..., None], e_new, e_old)


class ExtendedHead(nn.Module):
    """Logits over V + X classes: the frozen trained head beside X new output rows."""

    def __init__(self, old: nn.Linear, X: int):
        super().__init__()
        self.old = old
        self.new = nn.Linear(old.in_features, X)

    def forward(self, h: Tensor) -> Tensor:
        return torch.cat([self.old(h), self.new(h)], dim=-1)  # (B K V+X)


def extend_model(model: nn.Module, V: int, X: int) -> list[nn.Parameter]:
    """Freeze every parameter of ``model``, attach the new tables, return the new parameters."""
    if not hasattr(model.encoder, "embedding"):
        raise PosrnnError("this model has no token embedding (continuous task); vocabulary extension needs one")
    for p in model.parameters():
        p.requires_grad_(False)
    model.encoder.embedding = ExtendedEmbedding(model.encoder.embedding, V, X)
    model.head = ExtendedHead(model.head, X)
    return [*model.encoder.embedding.new.parameters(), *model.head.new.parameters()]


class ShiftedReverse(ReverseTask):
    """Reverse ordering over ids ``offset … offset+V−1`` with the query id ``query``: the
    new-ids-only and old-ids-only test sets of an extended model."""

    def __init__(self, cfg: TaskConfig, offset: int, query: int, classes: Optional[int] = None):
        self.offset, self._query, self.classes = offset, query, classes
        super().__init__(cfg)

    def predict(self, out: Tensor) -> Tensor:
        return (out if self.classes is None else out[..., : self.classes]).argmax(-1)

    @property
    def query_id(self) -> int:
        return self._query

    def sample(self, n, gen, device) -> Batch:
        x = torch.randint(self.V, (n, self.L), generator=gen, device=device) + self.offset  # (B L)
        inputs, out_index = reverse_layout(x, self.query_id)
        return Batch(inputs=inputs, targets=x.flip(1), out_index=out_index, key=x)


def extension_tasks(cfg: RunConfig) -> dict[str, ShiftedReverse]:
    """The test sets of an extended run: only new ids; only old ids (scored over the old
    classes, where frozen weights must give exactly the trained model's predictions); and
    only old ids scored over all classes (can the new output rows steal old predictions?)."""
    V, total = cfg.model.frozen_vocab, cfg.task.vocab_size
    X, L = total - V, cfg.task.length
    if float(X) ** L < 2 * cfg.task.n_test:
        raise PosrnnError(
            f"{X} new ids at length {L} make only {X ** L} distinct sequences, too few for {cfg.task.n_test} "
            f"new-id test sequences; raise --extra-vocab"
        )
    return {
        "new_ids": ShiftedReverse(replace(cfg.task, vocab_size=total - V), offset=V, query=total),
        "old_ids": ShiftedReverse(replace(cfg.task, vocab_size=V), offset=0, query=total, classes=V),
        "old_ids_all_classes": ShiftedReverse(replace(cfg.task, vocab_size=V), offset=0, query=total),
    }


def extend_vocab(
    run: Path, extra: int, out: Path, iterations: Optional[int] = None, seed: Optional[int] = None,
    device: str = "auto", force: bool = False, progress: bool = True, sets: Optional[list[str]] = None,
) -> dict:
    """``posrnn extend-vocab``: extend the trained run in ``run`` by ``extra`` ids into ``out``."""
    from .evaluate import evaluate_model, load_run
    from .train import Trainer, check_train_config, clear_run_dir, prepare_run_dir, resolve_device, setup_threads
    from .config import resolve_config

    if extra < 1:
        raise PosrnnError(f"--extra-vocab must be at least 1, got {extra}")
    cfg, task, model, ckpt, ckpt_path, run_dir = load_run(run, device="cpu")
    if cfg.task.name not in EXTENDABLE_TASKS or cfg.task.min_length is not None or cfg.task.rarity is not None or cfg.task.autoregressive:
        raise PosrnnError(
            f"vocabulary extension is defined for the fixed-length reverse task; {run} trains {cfg.task.name!r}"
            + (" with variable length / dual frequency / autoregression" if cfg.task.name == "reverse" else "")
        )
    if cfg.model.frozen_vocab is not None:
        raise PosrnnError(f"{run} is already an extended run; extend the original run instead")
    if Path(out).resolve() == Path(run_dir).resolve():
        raise PosrnnError("--out must differ from the trained run (the trained run is never modified)")
    V = cfg.task.vocab_size
    new_cfg = resolve_config(base=cfg, options={"task.vocab_size": V + extra, "model.frozen_vocab": V,
                                                "train.iterations": iterations, "train.seed": seed,
                                                "train.device": device}, sets=sets)
    if new_cfg.task.vocab_size != V + extra or new_cfg.model.frozen_vocab != V:
        raise PosrnnError("--set may not change task.vocab_size or model.frozen_vocab of an extension")
    check_train_config(new_cfg.train)
    tests = extension_tasks(new_cfg)
    dev = resolve_device(new_cfg.train.device)
    prepare_run_dir(Path(out), new_cfg, resume=False, force=force)
    setup_threads(new_cfg.train)

    model.to(dev)
    before_old, _ = evaluate_model(tests["old_ids"], model_on_old_ids(model, V, extra), dev, new_cfg.train.eval_batch_size)

    torch.manual_seed(new_cfg.train.seed)
    new_params = extend_model(model, V, extra)
    model.to(dev)
    combined = ReverseTask(new_cfg.task)
    held = HeldOut(Batch.cat([tests["new_ids"].test_set(), tests["old_ids"].test_set(), combined.test_set()]).to(dev))
    if force:
        clear_run_dir(Path(out))
    Path(out).mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(out) / "config.yaml", dump_yaml(new_cfg))
    trainer = Trainer(new_cfg, Path(out), model, combined, lambda n, g, d: held.sample(combined, n, g, d), dev,
                      params=new_params, extra={"extended_from": str(ckpt_path), "extended_from_step": int(ckpt["step"])})
    summary = trainer.fit(progress=progress)
    model.eval()
    after_new, _ = evaluate_model(tests["new_ids"], model, dev, new_cfg.train.eval_batch_size)
    after_old, _ = evaluate_model(tests["old_ids"], model, dev, new_cfg.train.eval_batch_size)
    after_old_all, _ = evaluate_model(tests["old_ids_all_classes"], model, dev, new_cfg.train.eval_batch_size)
    result = {
        "run_dir": str(out), "extended_from": str(ckpt_path), "vocab_size": V, "extra_vocab": extra,
        "model": cfg.model.name, "pe": cfg.model.pe, "iterations": new_cfg.train.iterations, "seconds": summary["seconds"],
        "new_ids": after_new, "old_ids": after_old, "old_ids_before": before_old,
        "old_ids_all_classes": after_old_all,
    }
    atomic_write_json(Path(out) / "extend.json", result)
    return result


class _OldIdsView(nn.Module):
    """The trained model seen through the extended id layout (query id V+X → V)."""

    def __init__(self, model: nn.Module, V: int, X: int):
        super().__init__()
        self.model, self.V, self.X = model, V, X

    def forward(self, inputs, out_index=None, query=None):
        return self.model(torch.where(inputs == self.V + self.X, self.V, inputs), out_index, query)


def model_on_old_ids(model: nn.Module, V: int, X: int) -> nn.Module:
    return _OldIdsView(model, V, X)
