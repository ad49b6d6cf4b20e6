"""K same-shape runs trained in one process as one batched model (``models.ensemble_model``), each
member equal to its solo run: ``train_ensemble``.

The members' configs are identical but for ``train.seed``. Each member keeps everything its solo
run has: its model built under its own seed, its own generator (so its own batches, drawn outside
the task's held-out set), its optimizer state (Adam is elementwise, so stacked parameters give
each member its own moments), its gradient clipping (``clip_grad_norm_``'s arithmetic over the
member's gradients alone) and the shared learning-rate schedule. The loss is the sum of the
members' losses, so no member's gradient depends on another's. The loop is the one training loop
(``train.Trainer``); ``EnsembleTrainer`` only supplies the member-wise parts.

A member is a run: it writes its own run directory exactly as its solo run would (config.yaml,
metrics.jsonl, checkpoints in the solo format), so ``eval``, aggregation, the scorecard, the
stability analysis and ``posrnn train --resume`` read it as any run. Its ``code.json`` and every
checkpoint's ``extra`` record the ensemble it was trained in (neither enters the config digest).
A checkpoint step is written for every member before any older checkpoint is pruned, so a process
killed at any moment leaves every member resumable alone, and the ensemble resumable from the
latest step all members hold (later checkpoints of some members are recomputed, bit-identically
on a CPU).

Under ``amp`` and ``cuda_graph`` the ensemble runs the solo path's standard mechanisms (bf16
autocast; ``graphed.GraphedStep``); NOT MEASURED ON A GPU.
"""

from __future__ import annotations

import hashlib
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

import torch

from ..common.settings.config import RunConfig, config_diff
from ..common.errors import PosrnnError
from ..common.files.io import read_marker
from ..models import count_parameters
from ..models.ensemble_model import EnsembleModel, check_ensemble_core
from ..tasks import Batch, HeldOut, Task
from .checkpoint import check_belongs, check_resumable, load_checkpoint, non_finite, save_checkpoint
from ..common.files.rundir import list_checkpoints
from .device import check_machine, resolve_device, setup_threads, world
from .graphed import graph_lr
from ..common.files.rundir import prune_checkpoints, record_code, run_state
from .optim import check_fast_paths
from .train import Trainer, build_run
from .lifecycle import TrainingStopped, begin_run, drop_unscheduled, owned_run_dir, refuse_different_run


@dataclass
class Member:
    """One run of an ensemble: its config, directory, batches and the state its checkpoints hold."""

    cfg: RunConfig
    run_dir: Path
    sample: Callable[[int, torch.Generator, torch.device], Batch]
    task: object
    n_parameters: int
    torch_rng: torch.Tensor  # the global RNG state its solo run holds once its model is built
    generator: Optional[torch.Generator] = None
    extra: dict = field(default_factory=dict)


def stack_batches(batches: list[Batch]) -> Batch:
    """The members' batches as one (K, B, …) batch; batches of different fields or shapes are refused."""
    fields = [b._tensors() for b in batches]
    if any(f.keys() != fields[0].keys() or any(v.shape != fields[0][k].shape for k, v in f.items()) for f in fields):
        raise PosrnnError("an ensemble needs its members' batches to share one shape; this task's vary: train its "
                          "runs solo")
    return replace(batches[0], **{k: torch.stack([f[k] for f in fields]) for k in fields[0]})


def member_batch(batch: Batch, k: int) -> Batch:
    return replace(batch, **{name: v[k] for name, v in batch._tensors().items()})


def member_losses(task: Task, out: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Each member's loss (K,) from the ensemble's outputs (K, B, …) and its stacked batch, as its solo
    run's ``task.loss``. The tasks' mean cross-entropy is one ``cross_entropy`` over every member,
    averaged member by member (exact: the same terms, and no member's gradient reaches another's);
    a task with a loss of its own runs it once per member, over ``unbind``'s slices. Indexing a
    member (``out[k]``) would write, in backward, a zero tensor of all K members' outputs per member."""
    if type(task).loss is not Task.loss:
        return torch.stack([task.loss(o, member_batch(batch, k)) for k, o in enumerate(out.unbind(0))])
    k = out.shape[0]
    nll = torch.nn.functional.cross_entropy(out.flatten(0, -2), batch.targets.flatten(), reduction="none").view(k, -1)
    if batch.mask is None:
        return nll.mean(1)
    m = batch.mask.reshape(k, -1).to(nll.dtype)
    return (nll * m).sum(1) / m.sum(1).clamp_min(1)


def clip_per_member(params: list[torch.Tensor], clip: float, k: int) -> torch.Tensor:
    """``clip_grad_norm_`` applied to each member's gradients alone (leading dimension ``k``):
    returns the (k,) total norms before clipping."""
    grads = [p.grad for p in params if p.grad is not None]
    norms = torch.stack([torch.linalg.vector_norm(g.reshape(k, -1), 2, dim=1) for g in grads], dim=1)  # (k P)
    total = torch.linalg.vector_norm(norms, 2, dim=1)  # (k)
    coef = torch.clamp(clip / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef.to(g.dtype).view(k, *[1] * (g.dim() - 1)))
    return total


def member_optimizer_state(sd: dict, k: int, n: int) -> dict:
    """Member ``k``'s slice of the stacked optimizer's ``state_dict`` (``n`` members): the solo format."""
    def part(v):
        return v[k].clone() if torch.is_tensor(v) and v.dim() > 0 and v.shape[0] == n else v
    return {"state": {i: {name: part(v) for name, v in st.items()} for i, st in sd["state"].items()},
            "param_groups": sd["param_groups"]}


def stacked_optimizer_state(states: list[dict]) -> dict:
    """The members' solo optimizer ``state_dict``s as the stacked optimizer's (the inverse of
    ``member_optimizer_state``)."""
    def join(vs):
        v = vs[0]
        return torch.stack(vs) if torch.is_tensor(v) and v.dim() > 0 else v
    first = states[0]
    return {"state": {i: {name: join([s["state"][i][name] for s in states]) for name in st}
                      for i, st in first["state"].items()}, "param_groups": first["param_groups"]}


@dataclass
class EnsembleTrainer(Trainer):
    """The one loop (``Trainer.fit``) over an ``EnsembleModel``: batches, losses, clipping, logs
    and checkpoints member by member."""

    members: list = field(default_factory=list)

    def __post_init__(self):
        super().__post_init__()
        for m in self.members:
            m.generator = torch.Generator(device=self.device).manual_seed(m.cfg.train.seed)
        self.log_sums = torch.zeros(len(self.members), 4, device=self.device, dtype=torch.float64)

    @property
    def k(self) -> int:
        return len(self.members)

    def run_dirs(self) -> list[Path]:
        return [m.run_dir for m in self.members]

    def next_batch(self) -> Batch:
        n = self.cfg.train.batch_size
        return stack_batches([m.sample(n, m.generator, self.device) for m in self.members])

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Each member's loss (K,) and predictions (K, B, …), from one batched forward."""
        out = self.model(batch.inputs, batch.out_index, batch.query, self.task.shared_input_start)
        out = out if out.dtype in (torch.float32, torch.float64) else out.float()
        return member_losses(self.task, out, batch), self.task.predict(out.detach())

    def clip_gradients(self) -> torch.Tensor:
        return clip_per_member(self.params, self.cfg.train.clip, self.k)

    def count_correct(self, pred: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        solo = super(EnsembleTrainer, self).count_correct
        got = [solo(p, member_batch(batch, k)) for k, p in enumerate(pred.unbind(0))]
        return torch.stack([g[0] for g in got]), torch.stack([g[1].to(got[0][0].dtype) for g in got])

    def member_state(self, k: int) -> dict:
        """Member ``k``'s checkpoint, in its solo run's format."""
        m = self.members[k]
        return {
            "config": m.cfg.to_dict(),
            "model": self.module.member_state_dict(k),
            "optimizer": member_optimizer_state(self.optimizer.state_dict(), k, self.k),
            "scheduler": self.scheduler.state_dict(),
            "rng": {"device": self.device.type, "train": m.generator.get_state(), "torch": m.torch_rng},
            "n_parameters": m.n_parameters,
            "extra": m.extra,
            "log": {"sums": self.log_sums[k].detach().cpu().clone(), "since": self.log_since},
        }

    def save(self) -> None:
        """Every member's checkpoint of this step, then (only then) each member's older ones pruned."""
        states = [self.member_state(k) for k in range(self.k)]
        for m, st in zip(self.members, states):
            bad = non_finite({key: st[key] for key in ("model", "optimizer")})
            if bad:
                ckpts = list_checkpoints(m.run_dir)
                kept = f"its last checkpoint (step {ckpts[-1][0]}) is kept" if ckpts else ("no checkpoint had been "
                                                                                           "written yet")
                raise TrainingStopped(f"step {self.step}: member {m.run_dir} holds non-finite values (first: "
                                      f"{bad[0]}); the ensemble stopped there and {kept}; lower train.lr, then resume")
        for m, st in zip(self.members, states):
            save_checkpoint(m.run_dir, self.step, st)
        for m in self.members:
            if self.keep_checkpoints == "last":
                prune_checkpoints(m.run_dir)
            else:
                drop_unscheduled(m.run_dir, m.cfg.train, self.step, m.extra)

    def load_members(self, ckpts: list[dict], paths: list[Path]) -> None:
        """Resume every member from its checkpoint of one step (``ckpts``, one per member)."""
        try:
            for k, c in enumerate(ckpts):
                self.module.load_member_state_dict(k, c["model"])
            self.optimizer.load_state_dict(stacked_optimizer_state([c["optimizer"] for c in ckpts]))
            self.scheduler.load_state_dict(ckpts[0]["scheduler"])
            for m, c in zip(self.members, ckpts):
                if c["rng"]["device"] != self.device.type:
                    m.generator.manual_seed(m.cfg.train.seed * 1_000_003 + int(c["step"]))
                else:
                    m.generator.set_state(c["rng"]["train"])
                m.torch_rng = c["rng"]["torch"]
                m.extra = {**c.get("extra", {}), **m.extra}
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:120]
            raise PosrnnError(f"checkpoints {paths[0]} … do not fit this ensemble ({first}), so they were refused; "
                              f"resume its members solo or re-train") from None
        for k, c in enumerate(ckpts):
            log = c.get("log") or {}
            if isinstance(log.get("sums"), torch.Tensor) and log["sums"].shape == (4,):
                self.log_sums[k] = log["sums"].to(self.device, torch.float64)
                self.log_since = int(log.get("since", 0))
        if self.graphed is not None:
            graph_lr(self.optimizer, self.device)
        self.step = int(ckpts[0]["step"])

    def resume_command(self) -> str:
        return (f"the same sweep, or each member alone: posrnn train --out DIR --resume "
                f"(DIR: {', '.join(str(d) for d in self.run_dirs())})")


# ---- training an ensemble ------------------------------------------------------------------
def check_members(cfgs: list[RunConfig], out_dirs: list[Path]) -> None:
    """Refuse, in one line, an ensemble whose members cannot train as one model."""
    if not cfgs or len(cfgs) != len(out_dirs):
        raise PosrnnError(f"an ensemble needs one run directory per config (got {len(cfgs)} configs, {len(out_dirs)} "
                          "directories)")
    if len({Path(d).resolve() for d in out_dirs}) != len(out_dirs):
        raise PosrnnError("an ensemble's members need distinct run directories; two are the same")
    first = cfgs[0]
    for cfg in cfgs[1:]:
        diff = config_diff(first, cfg, ignore=frozenset({"train.seed"}))
        if diff:
            raise PosrnnError("an ensemble's members may differ in train.seed only; these differ in "
                              f"{', '.join(diff[:3])}: train them in separate ensembles")
    check_ensemble_core(first.model.name)
    if first.model.frozen_vocab is not None or first.task.data:
        what = "a vocabulary extension" if first.model.frozen_vocab is not None else "a language model"
        raise PosrnnError(f"{what} has no ensemble path; train its runs solo")
    if world()[1] > 1:
        raise PosrnnError("an ensemble trains in one process; drop torchrun")


def common_start(cfgs: list[RunConfig], out_dirs: list[Path]) -> Optional[int]:
    """The step every member resumes from: the latest checkpoint all members hold (None: step 0).
    A member holding another config, or a finished run, is refused in one line."""
    steps = []
    for cfg, d in zip(cfgs, out_dirs):
        refuse_different_run(d, cfg)
        st = run_state(d, cfg)
        if st.state == "done":
            raise PosrnnError(f"{d} is already finished; leave it out of the ensemble")
        steps.append({s for s, _ in st.checkpoints} if st.state == "resume" else set())
    shared = set.intersection(*steps)
    return max(shared) if shared else None


def ensemble_record(out_dirs: list[Path], k: int) -> dict:
    """What a member's records say of its ensemble: an id (from the members' run ids), its members and its place."""
    ids = [str((read_marker(d) or {}).get("id")) for d in out_dirs]
    return {"id": hashlib.sha256("\n".join(ids).encode()).hexdigest()[:12], "member": k,
            "members": [str(d) for d in out_dirs]}


def build_members(cfgs: list[RunConfig], out_dirs: list[Path], device: torch.device) -> tuple[list[Member], list]:
    """Each member's task and model built exactly as its solo run builds them (under its own seed)."""
    members, solos, heldout = [], [], None
    for cfg, d in zip(cfgs, out_dirs):
        task, model = build_run(cfg)
        rng = torch.get_rng_state()
        if task.holds_out and heldout is None:  # the task's own test set: one for every member (same task config)
            heldout = HeldOut(task.test_set(device))
        sample = (lambda t: (lambda n, g, dev: heldout.sample(t, n, g, dev)))(task) if task.holds_out else task.sample
        members.append(Member(cfg, Path(d), sample, task, count_parameters(model), rng))
        solos.append(model)
    return members, solos


def ensemble_trainer(cfgs: list[RunConfig], out_dirs: list[Path], keep_checkpoints: str = "all") -> EnsembleTrainer:
    """The ensemble's Trainer on its device (nothing written): members built as their solo runs,
    the fast paths and batch sizes checked."""
    device = resolve_device(cfgs[0].train.device)
    check_fast_paths(cfgs[0].train, device)
    members, solos = build_members(cfgs, [Path(d) for d in out_dirs], device)
    check_machine(cfgs[0].train, members[0].task, device)
    setup_threads(cfgs[0].train.threads)
    model = EnsembleModel(solos).to(device)
    return EnsembleTrainer(cfgs[0], Path(out_dirs[0]), model, members[0].task, members[0].sample, device,
                           keep_checkpoints=keep_checkpoints, members=members)


def train_ensemble(cfgs: list[RunConfig], out_dirs: list[Path], stop_after: Optional[int] = None,
                   progress: bool = False, keep_checkpoints: str = "all",
                   on_start: Optional[Callable[[], None]] = None) -> dict:
    """Train the runs ``cfgs`` (identical but for ``train.seed``) into ``out_dirs`` as one batched
    model, each resumed from the latest step all members hold. Returns a summary of the loop and
    each member's last log line."""
    out_dirs = [Path(d) for d in out_dirs]
    if stop_after is not None and stop_after < 1:
        raise PosrnnError(f"--stop-after must be at least 1, got {stop_after}")
    check_members(cfgs, out_dirs)
    tr = ensemble_trainer(cfgs, out_dirs, keep_checkpoints)
    with ExitStack() as stack:
        for d in out_dirs:
            stack.enter_context(owned_run_dir(d, f"posrnn ensemble of {len(out_dirs)} runs ({d.name})"))
        start = common_start(cfgs, out_dirs)
        if start is not None:
            paths = [dict(list_checkpoints(d))[start] for d in out_dirs]
            ckpts = [load_checkpoint(p) for p in paths]
            for c, p, d in zip(ckpts, paths, out_dirs):
                check_resumable(c, p)
                check_belongs(c, p, d)
            tr.load_members(ckpts, paths)
        begin_members(tr, start)
        if on_start is not None:
            on_start()
        out = tr.fit(stop_after=stop_after, progress=progress)
    return {**out, "members": [str(d) for d in out_dirs], "n_parameters": tr.members[0].n_parameters}


def begin_members(tr: EnsembleTrainer, start: Optional[int]) -> None:
    """Each member's directory marked and its config written; checkpoints past ``start`` (a step
    not all members reached) dropped, to be recomputed; a member starting at step 0 records the
    code that trains it and its ensemble."""
    dirs = tr.run_dirs()
    for m in tr.members:
        begin_run(m.run_dir, m.cfg, force=False)
        for s, p in list_checkpoints(m.run_dir):
            if start is None or s > start:
                p.unlink(missing_ok=True)
    for k, m in enumerate(tr.members):
        m.extra["ensemble"] = ensemble_record(dirs, k)
        if start is None:
            record_code(m.run_dir, m.cfg, ("loop",), tr.device.type, ensemble=m.extra["ensemble"])
