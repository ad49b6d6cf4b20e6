"""What a worker does with one job (``plan.Job``): always the same result for the same job.

* A finished run whose saved config equals the job's is not trained again; an unfinished one
  resumes from its last checkpoint (or from step 0 when it has only its config); a directory
  holding a different config is refused unless the job is forced. Training is bit-exact
  across interruptions on CPU, so a sweep killed at any point and started again ends with the
  same files as one that was never interrupted.
* Each run records its identity (``common.files.rundir.record_code``: its config digest, the declared
  numerics versions, the libraries and the device type, ``common.numerics``); a run trained by
  other code (one of them differs) is kept and reported, and retrained from step 0 only under
  ``--retrain-stale`` (option ``retrain_stale``). A run that records none is reported as
  trained by unknown code and never retrained for it.
* Only the checkpoints the experiment's ``keep_checkpoints`` names are kept.
* An extension records the digest of the checkpoint it extends and is redone when its source
  run's latest checkpoint has changed.
* Evaluation (and the other cheap derived files) are recomputed every time; the stability
  values are recomputed when their checkpoints, settings or the code that computes them
  changed (their declared versions, libraries and device type are kept beside them).
* A lock file in each run directory keeps two processes from writing one run.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from ..common.files.rundir import CONFIG_FILE
from ..common.settings.config import RunConfig
from ..common.errors import PosrnnError
from ..common.stages.experiments import JOB_KINDS, resolve
from ..common.files.io import (atomic_write_json, atomic_write_text, json_digest, read_json, read_npz,
                               remove_stale_temps, write_npz)
from ..common.host.signals import Stopped, stop_requests
from ..common.results.provenance import Proof, file_sha256, stamped
from ..common.numerics import BASELINE, PROCEDURES, analysis_current, analysis_identity, library_version
from ..common.files.rundir import read_config
from .plan import Job


@contextmanager
def locked(run_dir: Path):
    """Hold ``run_dir``'s lock (``engine.lock.run_lock``: the one ``posrnn train`` takes, so the
    job's own training re-enters it) for the duration; another process gets one line naming it."""
    from ..engine.lock import run_lock

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    with run_lock(run_dir, f"posrnn sweep job {run_dir.name}"):
        yield


def code_of(job: Job) -> str:
    """The code that trained the job's run, against this one: current, other or unknown."""
    from ..common.files.rundir import code_state

    return code_state(Path(job.run_dir), job.run_config(), JOB_KINDS[job.kind].numerics)


def run_action(run_dir: Path, cfg: RunConfig, force: bool, job: Optional[Job] = None) -> str:
    """What to do with ``run_dir`` for ``cfg``: "new", "replace", "resume" or "done"; a run of
    other code is replaced when ``job`` asks for ``retrain_stale``."""
    from ..common.files.rundir import describe_diff, run_state

    st = run_state(run_dir, cfg)
    if (st.state in ("done", "resume") and job is not None and job.options.get("retrain_stale")
            and code_of(job) == "other"):
        return "replace"
    if st.state != "different":
        return st.state
    if st.foreign:
        raise PosrnnError(st.problem)
    if not force:
        if st.saved is None:
            raise PosrnnError(f"{st.problem}; pass --force to replace it")
        raise PosrnnError(f"{run_dir} holds a different run ({describe_diff(st, cfg, 'there', 'now')}); pass --force "
                          "to replace it")
    return "replace"


def ensure_trained(job: Job) -> str:
    """Train the job's run unless it is already finished; returns what was done."""
    from ..common.files.rundir import list_checkpoints
    from ..engine.train import train

    run_dir, cfg = Path(job.run_dir), job.run_config()
    state = run_action(run_dir, cfg, job.force, job)
    remove_stale_temps(run_dir)
    keep = job.options.get("keep_checkpoints", "all")
    if state == "done":
        _prune(run_dir, keep)  # a run finished before the policy, or under another one
        return "skipped (finished)"
    ckpts = list_checkpoints(run_dir) if state == "resume" else []
    train(cfg, run_dir, resume=state == "resume", force=state == "replace", progress=False, keep_checkpoints=keep)
    if ckpts:
        return f"resumed from step {ckpts[-1][0]}"
    return {"new": "trained", "replace": "replaced", "resume": "resumed"}[state]


def _prune(run_dir: Path, keep: str) -> None:
    from ..common.files.rundir import prune_checkpoints

    if keep == "last":
        prune_checkpoints(run_dir)


def run_train(job: Job) -> dict:
    from ..engine.evaluate import evaluate

    done = ensure_trained(job)
    cfg = job.run_config()
    r = evaluate(Path(job.run_dir), device=cfg.train.device)
    return {"training": done, "code": code_of(job), "token_accuracy": r.get("token_accuracy"),
            "perplexity": r.get("perplexity")}


def run_irie(job: Job) -> dict:
    from ..engine.permutation import permutation_report

    out = run_train(job)
    rep = permutation_report(Path(job.run_dir), device=job.run_config().train.device)
    proof = Proof(Path(job.run_dir))  # stamped as eval.json is: the run's latest checkpoint and its config
    sha = proof.checkpoint_sha256
    if proof.step != rep["step"]:
        raise PosrnnError(f"{job.run_dir} gained a checkpoint while its permutations were taken; run the job again")
    rec = {**rep, "checkpoint_sha256": sha, "config_digest": proof.config_digest, "n_sequences": len(rep["sensitive"])}
    atomic_write_json(Path(job.run_dir) / "permutation.json", {**rec, "record_sha256": json_digest(rec)})
    return {**out, "permutation_sensitive_share": sum(rep["sensitive"]) / max(1, len(rep["sensitive"]))}


def run_stability(job: Job) -> dict:
    from ..engine.stability import scheduled_checkpoints, stability_values

    src, out, o = Path(job.options["source"]), Path(job.run_dir), job.options
    ckpts = scheduled_checkpoints(src)
    if not ckpts:
        raise PosrnnError(f"{src} has no checkpoints; run its sweep first (posrnn sweep {Path(src).parent.name})")
    meta = {"source": str(src), "checkpoints": [[s, p.stat().st_size, _digest(p)] for s, p in ckpts],
            "triplets": o["triplets"], "chunk_size": o["chunk_size"], "seed": o["seed"],
            "target_position": o.get("target_position", 1),
            "code": analysis_identity(read_run_config(src), "stability", o.get("device", "cpu"))}
    meta_path, npz = out / "stability_meta.json", out / "stability_values.npz"
    remove_stale_temps(out)
    if npz.is_file() and meta_path.is_file() and _stamped_as(read_json(meta_path), meta, npz):
        return {"stability": "skipped (up to date)"}
    # stopped on a signal (a SLURM requeue or preemption), it keeps the checkpoints done so far and goes on from there
    part, part_meta = out / "stability_partial.npz", out / "stability_partial_meta.json"
    values = read_npz(part) if part.is_file() and part_meta.is_file() and _same_meta(read_json(part_meta), meta) else {}
    done = {int(k.split("|", 1)[0]) for k in values}

    def after(step: int, _seconds: float) -> None:
        done.add(step)
        if stop.signal is not None and len(done) < len(ckpts):
            write_npz(part, values)
            atomic_write_json(part_meta, meta)
            raise Stopped(f"{stop.signal}: stability of {src} stopped after {len(done)} of {len(ckpts)} checkpoints, "
                          f"their values kept; the same job goes on from there")

    with stop_requests() as stop:
        for s, c, p, v, _ in stability_values(src, n_triplets=o["triplets"], chunk_size=o["chunk_size"],
                                              device=o.get("device", "cpu"), seed=o["seed"], on_checkpoint=after,
                                              skip=done, target_position=o.get("target_position", 1)):
            values[f"{s}|{c}|{p}"] = v
    atomic_write_text(out / CONFIG_FILE, (src / CONFIG_FILE).read_text())
    write_npz(npz, stamped(values, file_sha256(ckpts[-1][1]), Proof(src).config_digest))  # what they analyse
    atomic_write_json(meta_path, {**meta, "keys": sorted(values), "values_sha256": file_sha256(npz)})
    part.unlink(missing_ok=True)
    part_meta.unlink(missing_ok=True)
    return {"stability": f"{len(values)} arrays"}


def _stamped_as(stored, meta: dict, npz: Path) -> bool:
    """Whether a stored record is ``meta`` with the stamps of ``npz`` (a record from before the
    stamps is not: its values are computed again, and then stamped)."""
    if not isinstance(stored, dict):
        return False
    settings = {k: v for k, v in stored.items() if k not in ("keys", "values_sha256")}
    return _same_meta(settings, meta) and stored.get("values_sha256") == file_sha256(npz)


def _same_meta(stored, meta: dict) -> bool:
    """Whether a stored stability record is ``meta``: its settings equal, its code identity the
    same (a code fingerprint from before identities counts as the baseline versions,
    ``common.numerics.analysis_current``)."""
    if not isinstance(stored, dict) or "code" not in stored:
        return False
    rest = {k: v for k, v in stored.items() if k != "code"}
    return rest == {k: v for k, v in meta.items() if k != "code"} and analysis_current(stored["code"], meta["code"])


def read_run_config(run: Path) -> RunConfig:
    """The config a run directory holds (a one-line error when it holds none)."""
    cfg = read_config(run)
    if cfg is None:
        raise PosrnnError(f"{run} holds no config.yaml; run its sweep first (posrnn sweep {Path(run).parent.name})")
    return cfg


def _digest(path: Path) -> str:
    return file_sha256(path)[:16]


def run_extend(job: Job) -> dict:
    from ..engine.evaluate import load_run
    from ..engine.extend import extend_vocab, score_extension

    out, cfg = Path(job.run_dir), job.run_config()
    state = run_action(out, cfg, job.force, job)
    remove_stale_temps(out)
    keep = job.options.get("keep_checkpoints", "all")
    source, why = Path(job.options["source"]), ""
    if state in ("done", "resume"):
        recorded, current = _extended_from(out), _latest_digest(source)
        if recorded is not None and current is not None and recorded != current:
            state, why = "replace", " (its source run changed)"
    if state == "done":
        _prune(out, keep)
        run = load_run(out, device=cfg.train.device)
        scores = score_extension(out, run.model, run.cfg, next(run.model.parameters()).device)
        return {"training": "skipped (finished)", "code": code_of(job),
                "token_accuracy": scores["new_ids"]["token_accuracy"]}
    r = extend_vocab(source, job.options["extra_vocab"], out, iterations=cfg.train.iterations,
                     seed=cfg.train.seed, device=cfg.train.device, force=state == "replace", resume=state == "resume",
                     progress=False, keep_checkpoints=keep)
    return {"training": state + why, "code": code_of(job), "token_accuracy": r["new_ids"]["token_accuracy"]}


def _extended_from(out: Path) -> Optional[str]:
    """The sha256 of the checkpoint the extension in ``out`` extends, as its latest checkpoint
    records it (None: an extension that predates the record, or none yet)."""
    from ..engine.checkpoint import load_checkpoint
    from ..common.files.rundir import list_checkpoints

    ckpts = list_checkpoints(out)
    if not ckpts:
        return None
    digest = (load_checkpoint(ckpts[-1][1]).get("extra") or {}).get("extended_from_sha256")
    return digest if isinstance(digest, str) else None


def _latest_digest(run: Path) -> Optional[str]:
    from ..common.files.rundir import list_checkpoints
    from ..common.results.provenance import file_sha256

    ckpts = list_checkpoints(run)
    return file_sha256(ckpts[-1][1]) if ckpts else None


#: how to fetch WikiText-103 (raw) into a folder ``lm_data.data_dir`` may name: the hub's parquet files
#: under ``wikitext-103-raw-v1/``, which ``lm.data`` reads as they are (this needs the network)
FETCH_WIKITEXT = 'hf download Salesforce/wikitext --repo-type dataset --include "wikitext-103-raw-v1/*" --local-dir {}'


def corpus_missing(job: Job) -> Optional[str]:
    """Why a corpus job (``lm_data``) cannot start, naming the command that fetches its data; None
    when its ``data_dir`` holds files."""
    data_dir = Path(job.options["data_dir"])
    if data_dir.is_dir() and any(p.is_file() for p in data_dir.rglob("*")):
        return None
    return (f"lm_data.data_dir {data_dir} {'holds no files' if data_dir.is_dir() else 'does not exist'}: fetch "
            f"WikiText-103 (raw) there with `{FETCH_WIKITEXT.format(data_dir)}` (needs the network), or point "
            f"it at wiki.{{train,valid,test}}.raw files or at data/wikitext-mini")


def run_lm_data(job: Job) -> dict:
    """Paragraphs → tokenizer → encoded ids, redone only when the corpus, settings, the declared
    version of the LM data preparation or sentencepiece's version changed."""
    from ..lm import data as lm_data
    from ..lm.encode import encode
    from ..lm.tokenizer import MODEL_NAME, train_tokenizer

    out, o = Path(job.run_dir), job.options
    data_dir = Path(o["data_dir"])
    missing = corpus_missing(job)
    if missing:
        raise PosrnnError(missing)
    files = sorted(p for p in data_dir.rglob("*") if p.is_file())
    code = {"lm_data": PROCEDURES["lm_data"].version, "sentencepiece": library_version("sentencepiece")}
    meta = {"options": o, "corpus": {str(p.relative_to(data_dir)): _digest(p) for p in files}, "code": code}
    meta_path = out / "lm_data_meta.json"
    stored = read_json(meta_path) if meta_path.is_file() else None
    if isinstance(stored, dict) and "code" not in stored and code["lm_data"] == BASELINE:
        stored = {**stored, "code": code}  # written before the record of its code: made under the first version
    if stored == meta and (out / "encoded" / "meta.json").is_file():
        return {"lm_data": "skipped (up to date)"}
    text, tok, enc = out / "text", out / "tokenizer", out / "encoded"
    lm_data.prepare(text, data_dir=data_dir)
    train_tokenizer(text / "train.txt", tok / Path(MODEL_NAME).stem, vocab_size=int(o["vocab_size"]),
                    num_threads=int(o["threads"]))
    m = encode(text, tok, enc, max_tokens=int(o["max_tokens"]))
    atomic_write_json(meta_path, meta)
    return {"lm_data": f"{m['vocab_size']} pieces"}


#: the thread pools a limit applies to, set in the environment before torch (or numpy) first loads them
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def job_threads(job: Job) -> Optional[int]:
    """The job's thread limit: its run's ``train.threads`` (stability jobs carry their source
    run's config), else None (lm_data: no limit; SentencePiece sets its own)."""
    n = job.config.get("train", {}).get("threads") if job.config else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else None


def limit_threads(n: Optional[int]) -> None:
    """Limit this process to ``n`` threads: the OpenMP/MKL/OpenBLAS variables (read when those
    libraries first load, so this runs before a job imports torch) and torch's own pool if torch
    is already loaded (a local worker forked from the preloaded server)."""
    import os
    import sys

    if n is None:
        return
    for var in THREAD_ENV:
        os.environ[var] = str(n)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)


def execute(job: Job) -> dict:
    """Run one job in this process (a worker, a SLURM task, or the caller): the ``run`` of its
    kind in the experiment registry, under the job's thread limit whatever its kind (a pack of
    runs trained as one ensemble: ``run_pack``)."""
    from .packing import PACK_KIND

    if job.kind == PACK_KIND:
        limit_threads(job_threads(job))
        return run_pack(job)
    if job.kind not in JOB_KINDS:
        raise PosrnnError(f"unknown job kind {job.kind!r}; known: {', '.join(JOB_KINDS)}")
    limit_threads(job_threads(job))
    with locked(Path(job.run_dir)):
        return resolve(JOB_KINDS[job.kind].run)(job)


def run_pack(job: Job) -> dict:
    """Train a pack's unfinished runs as one ensemble (a run to be replaced trains solo), then do
    each member's own job (``run_train``: evaluation, which finds its run finished)."""
    from contextlib import ExitStack

    from ..engine.ensemble import train_ensemble

    members = [job_from_dict(d) for d in job.options["members"]]
    for m in members:
        blocked = next((p for p in (Path(m.run_dir), *Path(m.run_dir).parents) if p.exists() and not p.is_dir()), None)
        if blocked is not None:
            raise PosrnnError(f"{m.label}: {blocked} is a file where the run's directory {m.run_dir} goes; move it "
                              "away, then run the sweep again")
    with ExitStack() as stack:
        for m in members:  # every member's directory held for the whole pack, as ``execute`` holds a run's
            stack.enter_context(locked(Path(m.run_dir)))
        states = {m.label: run_action(Path(m.run_dir), m.run_config(), m.force, m) for m in members}
        together = in_step([m for m in members if states[m.label] in ("new", "resume")])
        for m in members:
            if states[m.label] == "replace":
                ensure_trained(m)
        if together:
            train_ensemble([m.run_config() for m in together], [Path(m.run_dir) for m in together],
                           keep_checkpoints=together[0].options.get("keep_checkpoints", "all"))
        results = {m.label: resolve(JOB_KINDS[m.kind].run)(m) for m in members}
    for m in together:
        results[m.label]["training"] = f"trained as one of an ensemble of {len(together)}"
    return {"members": results}


def in_step(members: list[Job]) -> list[Job]:
    """The members, once each checkpoint the pack drops is named on stderr: an ensemble resumes from
    the latest step every member holds (``engine.ensemble.common_start``), so a member ahead of the
    rest (trained alone meanwhile, or killed between the members' saves) has its later checkpoints
    retrained with the pack, each member ending as its solo run would."""
    import sys

    from ..common.files.rundir import list_checkpoints

    held = {m.label: sorted(s for s, _ in list_checkpoints(Path(m.run_dir))) for m in members}
    shared = set.intersection(*(set(v) for v in held.values())) if held else set()
    start = max(shared) if shared else None
    for m in members:
        later = [s for s in held[m.label] if start is None or s > start]
        if later:
            print(f"posrnn: {m.label} holds checkpoints ahead of its pack (step {', '.join(map(str, later))}); the "
                  f"pack re-forms at step {start or 0}, so they are dropped and trained again with it", file=sys.stderr)
    return members


def distinct_configs(jobs: list[Job]) -> list[tuple[Job, RunConfig]]:
    """(job, config) of the first job of each config but its seed."""
    out, seen = [], set()
    for job in jobs:
        if job.config:
            cfg = job.run_config()
            key = tuple(sorted((k, repr(v)) for k, v in cfg.flat().items() if k != "train.seed"))
            if key not in seen:
                seen.add(key)
                out.append((job, cfg))
    return out


def check_recipes(jobs: list[Job]) -> None:
    """Every job's training settings, as the run checks them (``engine.recipe``), torch-free: a sweep
    refuses a bad recipe before torch loads, in one line naming the run."""
    from ..engine.recipe import check_train_config

    for job, cfg in distinct_configs(jobs):
        try:
            check_train_config(cfg.train)
        except PosrnnError as e:
            raise PosrnnError(f"{job.label}: {e}") from None


def validate(jobs: list[Job]) -> None:
    """Check every job's config as the run would (the recipe, then the task and the model) before
    the sweep writes anything: an impossible grid is one error naming the run, not a failed job."""
    check_recipes(jobs)
    from ..models import check_model_config
    from ..tasks import build_task

    for job, cfg in distinct_configs(jobs):
        try:
            if cfg.task.data is not None and not Path(cfg.task.data).is_dir():
                check_model_config(cfg.model)  # the task's data is made by this sweep (lm_data)
                continue
            task = build_task(cfg.task)
            check_model_config(cfg.model, task.output_start)
        except PosrnnError as e:
            raise PosrnnError(f"{job.label}: {e}") from None


def job_from_dict(d: dict) -> Job:
    return Job(**d)
