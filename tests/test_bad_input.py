"""Bad input to every command: a wrong option, an impossible config, a missing / empty / corrupt
file, the wrong kind of run (a language model where a synthetic run is expected, and the
reverse), non-finite and out-of-range numbers, an unwritable output directory, a path with spaces
and non-ASCII characters.

The standard, checked on the real console entry point (``python -m posrnn_cli`` in a
subprocess): a non-zero exit, exactly one non-empty stderr line and it starts with ``error: ``
(usage errors too), no ``Traceback`` anywhere, and the working tree unchanged (every file's path
and bytes, every directory). A *valid* path with spaces and non-ASCII characters simply works
(exit 0).

The fixtures (a tiny synthetic run, a dual-frequency run, a language-model chain, an aggregated
results directory, broken files) are built once per module in ``base/``; each row runs in its own
copy of that tree (its working directory), so a row that wrongly writes cannot disturb another.
The selected rows run in a thread pool, one subprocess per core, before the first is checked.
The unwritable directory is ``chmod 0o500``; as root, where that stops no write, its rows run
through ``setpriv`` without CAP_DAC_OVERRIDE, and are skipped where that is not possible.

A second test draws ``posrnn train --set KEY=VALUE`` over every config key and awkward values
(hypothesis, in-process through ``typer.testing.CliRunner``): the run either trains (exit 0) or
is refused with one ``error:`` line, writing nothing.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from posrnn_cli.common.settings.config import RunConfig, parse_set, set_key
from posrnn_cli.common.errors import PosrnnError

from conftest import ROOT, tiny_train
MINI = ROOT / "data" / "wikitext-mini"
ENV = {**os.environ, "DVC_NO_ANALYTICS": "1"}
ROW_TIMEOUT_S = 120
#: the tiny synthetic run every training row starts from
TINY = " ".join(tiny_train(iterations=20, checkpoint_every=10, seed=None))
SPACED = "runs/ä ö run"  # a copy of the synthetic run under a path with spaces and non-ASCII characters
BIG = str(10**19)  # an integer beyond int64 (click's INT takes it)
#: as root, a 0o500 directory stops writes only without CAP_DAC_OVERRIDE: setpriv drops it
SETPRIV = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]


def _blocked(prefix: list[str]) -> bool:
    """Whether creating a file in a 0o500 directory fails when run through ``prefix``."""
    with tempfile.TemporaryDirectory() as d:
        locked = Path(d) / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        try:
            if not prefix:
                try:
                    (locked / "probe").touch()
                except PermissionError:
                    return True
                return False
            try:
                p = subprocess.run([*prefix, sys.executable, "-c", f"open({str(locked / 'probe')!r}, 'w')"],
                                   capture_output=True, timeout=30)
            except (OSError, subprocess.SubprocessError):
                return False
            return p.returncode != 0 and b"PermissionError" in p.stderr
        finally:
            locked.chmod(0o700)


#: how to run a row whose output directory is unwritable: as is (not root), through setpriv (root
#: that may drop CAP_DAC_OVERRIDE), or not at all (root in a container that may not)
LOCK_PREFIX: Optional[list[str]] = [] if _blocked([]) else (SETPRIV if shutil.which("setpriv")
                                                            and _blocked(SETPRIV) else None)


# ---- the tree and its hash ------------------------------------------------------------------------
def tree_state(root: Path) -> dict[str, str]:
    """``{relative path: sha256 of its bytes, "dir", or "link:TARGET"}`` for everything under ``root`` except
    ``__pycache__`` and the ``.logs`` folders that ``posrnn sweep`` writes."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", ".logs"))
        for d in dirnames:
            state[os.path.relpath(os.path.join(dirpath, d), root)] = "dir"
        for f in sorted(filenames):
            p = os.path.join(dirpath, f)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):  # a symlink (a loop, say) is its target's name, never followed
                state[rel] = "link:" + os.readlink(p)
                continue
            with open(p, "rb") as fh:
                state[rel] = hashlib.sha256(rel.encode() + b"\0" + fh.read()).hexdigest()
    return state


def tree_diff(before: dict[str, str], after: dict[str, str]) -> str:
    created = sorted(after.keys() - before.keys())
    deleted = sorted(before.keys() - after.keys())
    changed = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    return "; ".join(f"{what}: {', '.join(items[:6])}{' …' if len(items) > 6 else ''}" for what, items in
                     (("created", created), ("deleted", deleted), ("changed", changed)) if items)


def unlock_tree(root: Path) -> None:
    for dirpath, _, _ in os.walk(root):
        os.chmod(dirpath, 0o700)


# ---- the fixtures: built once, in-process --------------------------------------------------------
def cli(*args: str) -> None:
    """Run one posrnn command in-process (the fixtures only); fail loudly if it fails."""
    from typer.testing import CliRunner

    from posrnn_cli.cli import app

    argv = [a for part in args for a in shlex.split(part)]
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0 and r.exception is None, f"fixture `posrnn {' '.join(argv)}` failed:\n{r.output}"


def scratch_params(path: Path, **profile: Any) -> None:
    """A params.yaml: the repository's base config and one active profile ``t`` with a tiny fig2."""
    base = yaml.safe_load((ROOT / "params.yaml").read_text())
    tiny = {"cells": [{"model": "gru", "vocab": 4}], "pe": ["none"], "seeds": [1], "length": 4, "hidden": 8,
            "iterations": 4, "batch": 8, "warmup": 1, "checkpoint_every": 2}
    prof = {"device": "cpu", "threads": 1, "n_test": 32, "executor": {"kind": "local", "workers": 1}, "fig2": tiny,
            **profile}
    data = {k: base[k] for k in ("task", "model", "train")} | {"profile": ["t"], "profiles": {"t": prof}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


def build_base(base: Path) -> None:
    """Every fixture the rows name, under ``base`` (the rows use paths relative to it)."""
    import torch

    base.mkdir(parents=True, exist_ok=True)
    cwd, threads = os.getcwd(), torch.get_num_threads()
    os.chdir(base)  # the runs record relative paths (task.data), so every copy of the tree is self-contained
    try:
        cli(f"train {TINY} --out runs/syn")
        cli("eval runs/syn --device cpu")
        cli(f"train {TINY} --rarity 0.25 --vocab-size 8 --out runs/dual")
        cli(f"lm prepare --data-dir {shlex.quote(str(MINI))} --out lm/text")
        cli("lm tokenizer --data lm/text --out lm/tok --vocab-size 300")
        cli("lm encode --data lm/text --tokenizer lm/tok --out lm/enc --max-tokens 32")
        cli("lm train --data lm/enc --out runs/lm --iterations 5 --batch-size 4 --hidden-size 8 --device cpu")
        shutil.copytree("lm/enc", "lm/gone")  # an LM run whose encoded corpus is deleted afterwards
        cli("lm train --data lm/gone --out runs/lm-orphan --iterations 2 --batch-size 4 --hidden-size 8 --device cpu")
        shutil.rmtree("lm/gone")
        # an aggregated results directory: a runs root with a fig2/ experiment holding the tiny run
        shutil.copytree("runs/syn", "pipeline/runs/fig2/gru-v6-sinusoidal-s111")
        cli("aggregate pipeline/runs --out pipeline/results/tables --resamples 100")
    finally:
        os.chdir(cwd)
        torch.set_num_threads(threads)

    runs, bad = base / "runs", base / "bad"
    shutil.copytree(runs / "syn", base / SPACED)
    shutil.copytree(runs / "lm", runs / "ä ö lm")
    shutil.copytree(runs / "syn", runs / "corrupt")  # a run whose latest checkpoint is cut short
    latest = runs / "corrupt" / "checkpoints" / "step_0000020.pt"
    latest.write_bytes(latest.read_bytes()[: latest.stat().st_size // 2])
    (runs / "corrupt" / "eval.json").unlink()
    # loose broken files, and a directory where a file is expected (and the reverse)
    bad.mkdir()
    (bad / "corrupt.pt").write_bytes((runs / "syn" / "checkpoints" / "step_0000020.pt").read_bytes()[:700])
    (bad / "empty").write_bytes(b"")
    (bad / "empty.pt").write_bytes(b"")
    (bad / "empty.yaml").write_bytes(b"")
    (bad / "notes.txt").write_text("shopping list: eggs, milk\n")
    (bad / "dir.yaml").mkdir()
    (bad / "file").write_text("a file where a directory is expected\n")
    (bad / "emptydir").mkdir()
    (bad / "corrupt.yaml").write_text("task: [1,\n  model: {\n")
    (bad / "list.yaml").write_text("- 1\n- 2\n")
    # WikiText folders that are not WikiText, prepared text that is empty, an encoded corpus cut short
    for name, data in (("wiki-binary", b"\xff\xfe\x00\x81 not utf-8 \xc3\x28\n"), ("wiki-empty", b"")):
        (bad / name).mkdir()
        for split in ("train", "valid", "test"):
            (bad / name / f"wiki.{split}.raw").write_bytes(data)
    (bad / "text-empty").mkdir()
    for split in ("train", "valid", "test"):
        (bad / "text-empty" / f"{split}.txt").write_bytes(b"")
    shutil.copytree(base / "lm" / "enc", bad / "enc-corrupt")
    meta = bad / "enc-corrupt" / "meta.json"
    meta.write_bytes(meta.read_bytes()[:20])
    # params files for the pipeline commands
    scratch_params(base / "params.yaml")
    scratch_params(base / "cfg ä ö" / "params.yaml")
    fig2 = {"cells": [{"model": "gru", "vocab": 4}], "pe": ["none"], "seeds": [1], "length": 4, "hidden": 8}
    scratch_params(bad / "sweep-negative.yaml", fig2={**fig2, "iterations": -5})
    scratch_params(bad / "sweep-nan.yaml", fig2={**fig2, "iterations": 4, "lr": float("nan")})
    scratch_params(bad / "sweep-triplets.yaml", stability={"triplets": "many"})
    scratch_params(bad / "sweep-unknown.yaml", fig3={"cells": []})
    scratch_params(bad / "sweep-executor.yaml", executor="local")
    scratch_params(bad / "sweep-workers.yaml", executor={"kind": "local", "workers": 0})
    slurm = {"kind": "slurm"}
    scratch_params(bad / "slurm-timeout-zero.yaml", executor=slurm, slurm={"timeout_min": 0})
    scratch_params(bad / "slurm-partition-number.yaml", executor=slurm, slurm={"partition": 5})
    scratch_params(bad / "slurm-mem-text.yaml", executor=slurm, slurm={"mem_gb": "4G"})
    scratch_params(bad / "slurm-setup-text.yaml", executor=slurm, slurm={"setup": "module load cuda"})
    scratch_params(bad / "slurm-extra-reserved.yaml", executor=slurm, slurm={"extra": {"array": "0-3"}})
    scratch_params(bad / "slurm-extra-list.yaml", executor=slurm, slurm={"extra": ["--exclusive"]})
    scratch_params(bad / "slurm-unknown-key.yaml", executor=slurm, slurm={"gpus": 1})
    noactive = yaml.safe_load((base / "params.yaml").read_text()) | {"profile": ["nope"]}
    (bad / "params-noactive.yaml").write_text(yaml.safe_dump(noactive, sort_keys=False))
    # runs roots that aggregate must refuse
    (bad / "runs-yaml" / "fig2" / "r1").mkdir(parents=True)
    (bad / "runs-yaml" / "fig2" / "r1" / "config.yaml").write_text("task: [1,\n")
    shutil.copytree(runs / "syn", bad / "runs-npz" / "fig2" / "r1")
    (bad / "runs-npz" / "fig2" / "r1" / "eval_sequences.npz").write_bytes(b"PK\x03\x04 cut short")
    shutil.copytree(runs / "syn", bad / "runs-npz-keys" / "fig2" / "r1")
    import numpy as np

    np.savez(bad / "runs-npz-keys" / "fig2" / "r1" / "eval_sequences.npz", something_else=np.zeros(3))
    shutil.copytree(runs / "syn", bad / "runs-manifest" / "fig2" / "r1")
    (bad / "runs-manifest" / "fig2" / "sweep.json").write_text('{"cells": [{"nam')
    shutil.copytree(runs / "lm", bad / "runs-lm" / "lm" / "r1")  # an LM run never evaluated
    # result tables that plot / scorecard must refuse
    (bad / "results-binary").mkdir()
    (bad / "results-binary" / "fig2.csv").write_bytes(b"\x00\x01garbage,\n\xff\xfe,,,\n")
    (bad / "results-empty").mkdir()
    (bad / "results-empty" / "fig2.csv").write_bytes(b"")
    (bad / "results-nan").mkdir()
    table = (base / "pipeline" / "results" / "tables" / "fig2.csv").read_text().splitlines()
    header, first = table[0].split(","), table[1].split(",")
    first[header.index("token_accuracy")] = "nan"
    (bad / "results-nan" / "fig2.csv").write_text("\n".join([table[0], ",".join(first), *table[2:]]) + "\n")
    build_hardening(base)
    # an unwritable directory holding a run (itself unwritable) and a params file
    locked = base / "locked"
    shutil.copytree(runs / "syn", locked / "run")
    (locked / "run" / "eval.json").unlink()
    (locked / "run" / "eval_sequences.npz").unlink()
    scratch_params(locked / "params.yaml")
    two = yaml.safe_load((locked / "params.yaml").read_text())
    two["profiles"]["u"] = two["profiles"]["t"]  # a second profile, so that `profile use u` must write
    (locked / "params.yaml").write_text(yaml.safe_dump(two, sort_keys=False, allow_unicode=True))
    (locked / "run").chmod(0o500)
    locked.chmod(0o500)


#: a YAML "billion laughs": nine aliases deep, 9^9 values once expanded
LAUGHS = "[" + ", ".join(f"&l{i} [" + ", ".join([f"*l{i - 1}" if i else "lol"] * 9) + "]" for i in range(9)) + "]"


def build_hardening(base: Path) -> None:
    """The fixtures of the cases where an output could overwrite, or a crafted input crash."""
    import json

    import numpy as np
    import torch

    runs, bad = base / "runs", base / "bad"
    cwd = os.getcwd()
    os.chdir(base)
    try:
        cli(f"train {TINY} --lr 0.05 --out runs/other")  # another run, for a foreign checkpoint
        cli("extend-vocab runs/syn --extra-vocab 6 --out runs/ext --iterations 2 --device cpu")
        cli("plot pipeline/results/tables --out pipeline/figures")
    finally:
        os.chdir(cwd)
    ckpt_file = runs / "syn" / "checkpoints" / "step_0000020.pt"
    ckpt = torch.load(ckpt_file, weights_only=True)

    def crafted(name: str, change) -> None:
        c = dict(ckpt)
        change(c)
        torch.save(c, bad / f"ckpt-{name}.pt")
        shutil.copytree(runs / "syn", runs / f"crafted-{name}")
        torch.save(c, runs / f"crafted-{name}" / "checkpoints" / "step_0000020.pt")

    crafted("no-config", lambda c: c.pop("config"))
    crafted("no-model", lambda c: c.pop("model"))
    crafted("no-step", lambda c: c.pop("step"))
    crafted("bad-optimizer", lambda c: c.update(optimizer={"state": 5}))
    crafted("bad-rng", lambda c: c.update(rng={"device": "cpu", "train": torch.zeros(3), "torch": "x"}))
    crafted("nan-weights", lambda c: c.update(model={k: v * float("nan") for k, v in c["model"].items()}))
    crafted("edited-config", lambda c: c.update(config={**c["config"], "train": {**c["config"]["train"], "lr": 0.5}}))
    # a CSV over a checkpoint; another run's checkpoint in place of the run's own
    shutil.copytree(runs / "syn", runs / "csv-ckpt")
    (runs / "csv-ckpt" / "checkpoints" / "step_0000020.pt").write_text("step,loss\n1,0.5\n")
    shutil.copytree(runs / "syn", runs / "foreign")
    shutil.copy(runs / "other" / "checkpoints" / "step_0000020.pt",
                runs / "foreign" / "checkpoints" / "step_0000020.pt")
    # a config.yaml that is not UTF-8
    shutil.copytree(runs / "syn", runs / "latin1")
    (runs / "latin1" / "config.yaml").write_bytes((runs / "syn" / "config.yaml").read_bytes() + b"# caf\xe9\n")
    # eval.json: not an object, edited after eval, CI bounds swapped
    for name, edit in (("eval-list", lambda e: [1, 2]), ("eval-edited", lambda e: {**e, "token_accuracy": 0.999}),
                       ("eval-swapped", lambda e: {**e, "token_accuracy_ci": e["token_accuracy_ci"][::-1]})):
        shutil.copytree(runs / "syn", runs / name)
        e = json.loads((runs / "syn" / "eval.json").read_text())
        (runs / name / "eval.json").write_text(json.dumps(edit(e)))
    # an extension whose extend.json is corrupt
    shutil.copytree(runs / "ext", runs / "ext-corrupt")
    (runs / "ext-corrupt" / "extend.json").write_text('{"new_ids": ')
    # an encoded corpus whose metadata claims a vocabulary smaller than its ids
    shutil.copytree(base / "lm" / "enc", bad / "enc-small-vocab")
    meta = json.loads((bad / "enc-small-vocab" / "meta.json").read_text())
    (bad / "enc-small-vocab" / "meta.json").write_text(json.dumps({**meta, "vocab_size": 10}))
    # YAML that expands without bound; params files profile use cannot or can edit
    (bad / "laughs.yaml").write_text(f"task: {{name: reverse}}\nlaughs: {LAUGHS}\n")
    params = (base / "params.yaml").read_text()
    (bad / "params-dup.yaml").write_text(params + '"profile": [t]\n')
    (bad / "params-commented.yaml").write_text(params.replace("profile:\n- t\n", "profile:\n# the active one\n\n- t\n"))
    (bad / "loop").symlink_to("loop")
    # runs roots that aggregate must refuse: a NaN score, non-UTF-8 files, odd log lines, a bad
    # manifest, and a broken experiment after a good one (the good one's table must not be written)
    shutil.copytree(runs / "syn", bad / "runs-nan" / "fig2" / "r1")
    scores = dict(np.load(runs / "syn" / "eval_sequences.npz"))
    scores["token_accuracy"] = scores["token_accuracy"] * np.nan
    np.savez(bad / "runs-nan" / "fig2" / "r1" / "eval_sequences.npz", **scores)
    shutil.copytree(runs / "syn", bad / "runs-latin1" / "fig2" / "r1")
    (bad / "runs-latin1" / "fig2" / "r1" / "config.yaml").write_bytes(b"task: {name: caf\xe9}\n")
    shutil.copytree(runs / "syn", bad / "runs-log-latin1" / "fig2" / "r1")
    (bad / "runs-log-latin1" / "fig2" / "r1" / "metrics.jsonl").write_bytes(b'{"step": 1, "loss": 1.0}\n\xff\xfe\n')
    shutil.copytree(runs / "syn", bad / "runs-oddlog" / "fig2" / "r1")
    with open(bad / "runs-oddlog" / "fig2" / "r1" / "metrics.jsonl", "a") as f:
        f.write('[1, 2]\n{"step": "x", "loss": null}\n"text"\n{"step": 30, "loss": 1e999, "accuracy": 0.5}\n')
    shutil.copytree(runs / "syn", bad / "runs-manifest-names" / "fig2" / "r1")
    (bad / "runs-manifest-names" / "fig2" / "sweep.json").write_text('{"cells": [{"name": 5}, {"name": ".."}]}')
    shutil.copytree(base / "pipeline" / "runs" / "fig2", bad / "runs-partial" / "fig2")
    shutil.copytree(bad / "runs-npz" / "fig2", bad / "runs-partial" / "zz")
    # tables plot must refuse: a missing column, a repeated header, swapped CIs, a good table beside a broken one
    table = (base / "pipeline" / "results" / "tables" / "fig2.csv").read_text().splitlines()
    header = table[0].split(",")
    for name, lines in (
        ("results-missing-column", [",".join(h for h in header if h != "token_accuracy")]
         + [",".join(c for h, c in zip(header, ln.split(",")) if h != "token_accuracy") for ln in table[1:]]),
        ("results-repeated-header", [table[0] + ",model"] + [ln + ",gru" for ln in table[1:]]),
        ("results-swapped-ci", [table[0]] + [",".join(
            ln.split(",")[header.index("token_accuracy_ci_high")] if h == "token_accuracy_ci_low" else
            ln.split(",")[header.index("token_accuracy_ci_low")] if h == "token_accuracy_ci_high" else c
            for h, c in zip(header, ln.split(","))) for ln in table[1:]]),
    ):
        (bad / name).mkdir()
        (bad / name / "fig2.csv").write_text("\n".join(lines) + "\n")
    (bad / "results-partial").mkdir()
    shutil.copy(base / "pipeline" / "results" / "tables" / "fig2.csv", bad / "results-partial" / "fig2.csv")
    (bad / "results-partial" / "stability.csv").write_text("model,pe,step\ngru,none,1\n")


# ---- the table ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    args: str  # the command line after ``posrnn``, split like a shell
    ok: bool = False  # a valid input: must exit 0
    locked: bool = False  # writes into the unwritable directory


@dataclass
class Outcome:
    rc: Optional[int]
    out: str
    err: str
    before: dict
    after: dict
    seconds: float
    cwd: Path
    torch: bool = False  # torch was imported by the time the command ended


def row(id: str, args: str, *, ok: bool = False, locked: bool = False):
    marks = []
    if locked:
        marks.append(pytest.mark.skipif(LOCK_PREFIX is None, reason="running as root, and setpriv cannot drop "
                                        "CAP_DAC_OVERRIDE here: a 0o500 directory does not stop writes"))
    return pytest.param(Row(args, ok, locked), id=id, marks=marks)


SYN_TRAIN = f"train {TINY} --out runs/new"
LM_TRAIN = "lm train --data lm/enc --out runs/lm2 --iterations 2 --batch-size 4 --hidden-size 8 --device cpu"
BENCH = ("bench --device cpu --vocab-size 6 --length 4 --hidden-size 8 --batch-size 4 --iters 1 --no-reference --parts "
         "train")
TOKENIZER = "lm tokenizer --data lm/text --out tok --vocab-size 300"
ENCODE = "lm encode --data lm/text --tokenizer lm/tok --out enc --max-tokens 32"

ROWS = [
    # ---- the command line itself
    row("posrnn-unknown-command", "nope"),
    row("posrnn-unknown-option", "--nope"),
    row("lm-unknown-command", "lm nope"),
    # ---- train: refused by the option parser
    row("train-unknown-option", f"{SYN_TRAIN} --nope"),
    row("train-unknown-task", f"{SYN_TRAIN} --task nope"),
    row("train-vocab-nan", f"{SYN_TRAIN} --vocab-size nan"),
    row("train-no-out", f"train {TINY}"),
    # ---- train: refused by the config
    row("train-lr-inf", f"{SYN_TRAIN} --lr inf"),
    row("train-dummy-with-add", f"{SYN_TRAIN} --pe dummy --pe-mode add"),
    row("train-hidden-beyond-int64", f"{SYN_TRAIN} --hidden-size {BIG}"),
    # ---- train: the wrong kind of run, a file where a directory is expected, a broken checkpoint
    row("train-out-holds-lm-run", f"train {TINY} --out runs/lm"),
    row("train-resume-corrupt-checkpoint", f"train {TINY} --iterations 30 --resume --out runs/corrupt"),
    row("train-out-unwritable", f"train {TINY} --out locked/new", locked=True),
    # ---- eval
    row("eval-no-run", "eval"),
    row("eval-step-not-a-number", "eval runs/syn --step abc"),
    row("eval-missing-spaced-run", "eval 'runs/ä ö nope' --device cpu"),
    row("eval-corrupt-checkpoint", "eval bad/corrupt.pt --device cpu"),
    row("eval-batch-zero", "eval runs/syn --batch-size 0 --device cpu"),
    row("eval-run-unwritable", "eval locked/run --device cpu", locked=True),
    row("eval-spaced-run", f"eval '{SPACED}' --device cpu", ok=True),
    # ---- compare
    row("compare-no-runs", "compare"),
    row("compare-missing-run", "compare runs/syn runs/nope --device cpu"),
    # ---- stability
    row("stability-triplets-nan", "stability runs/dual --triplets nan"),
    row("stability-lm-run", "stability runs/lm --triplets 4 --device cpu"),
    row("stability-seed-beyond-int64", f"stability runs/dual --triplets 4 --seed {BIG}0000 --device cpu"),
    # ---- extend-vocab
    row("extend-no-extra-vocab", "extend-vocab runs/syn --out runs/ext"),
    row("extend-extra-vocab-zero", "extend-vocab runs/syn --extra-vocab 0 --out runs/ext --device cpu"),
    row("extend-lm-run", "extend-vocab runs/lm --extra-vocab 4 --out runs/ext --iterations 2 --device cpu"),
    row("extend-extra-vocab-beyond-int64", f"extend-vocab runs/syn --extra-vocab {BIG} --out runs/ext --iterations 2 "
                                           "--device cpu"),
    # ---- bench (sized tiny, so that a wrongly accepted value costs seconds)
    row("bench-unknown-model", "bench --model nope"),
    row("bench-other-task", f"{BENCH} --set task.n_test=32 --set task.name=copy"),
    # ---- bench-sweep (sized so that a wrongly accepted value costs seconds)
    row("bench-sweep-workers-text", "bench-sweep --workers a,b --runs 1 --iterations 2"),
    row("bench-sweep-workers-zero", "bench-sweep --workers 0 --runs 1 --iterations 2"),
    # ---- sweep
    row("sweep-unknown-experiment", "sweep nope"),
    row("sweep-params-empty", "sweep fig2 --params bad/empty.yaml"),
    row("sweep-params-corrupt", "sweep fig2 --params bad/corrupt.yaml"),
    row("sweep-params-is-directory", "sweep fig2 --params bad/dir.yaml"),
    row("sweep-params-binary", "sweep fig2 --params bad/corrupt.pt"),
    row("sweep-profile-unknown", "sweep fig2 --profile nope"),
    row("sweep-active-profile-undefined", "sweep fig2 --params bad/params-noactive.yaml"),
    row("sweep-executor-unknown", "sweep fig2 --executor nope"),
    row("sweep-executor-not-a-mapping", "sweep fig2 --params bad/sweep-executor.yaml"),
    row("sweep-profile-workers-zero", "sweep fig2 --params bad/sweep-workers.yaml"),
    row("sweep-stage-unknown", "sweep --stage nope"),
    row("sweep-workers-zero", "sweep fig2 --workers 0"),
    row("sweep-lr-nan", "sweep fig2 --params bad/sweep-nan.yaml"),
    row("sweep-iterations-negative", "sweep fig2 --params bad/sweep-negative.yaml"),
    row("sweep-triplets-not-a-number", "sweep stability --params bad/sweep-triplets.yaml --dry-run"),
    row("sweep-unknown-section", "sweep fig2 --params bad/sweep-unknown.yaml"),
    # SLURM settings are checked before anything is submitted (the profile's slurm: section, the options)
    row("sweep-slurm-timeout-zero", "sweep fig2 --params bad/slurm-timeout-zero.yaml"),
    row("sweep-slurm-partition-number", "sweep fig2 --params bad/slurm-partition-number.yaml"),
    row("sweep-slurm-mem-text", "sweep fig2 --params bad/slurm-mem-text.yaml --dry-run"),
    row("sweep-slurm-setup-text", "sweep fig2 --params bad/slurm-setup-text.yaml"),
    row("sweep-slurm-extra-reserved", "sweep fig2 --params bad/slurm-extra-reserved.yaml"),
    row("sweep-slurm-extra-list", "sweep fig2 --params bad/slurm-extra-list.yaml"),
    row("sweep-slurm-unknown-key", "sweep fig2 --params bad/slurm-unknown-key.yaml"),
    row("sweep-slurm-gpus-negative", "sweep fig2 --executor slurm --gpus-per-task -1"),
    row("sweep-slurm-timeout-text", "sweep fig2 --executor slurm --timeout soon"),
    row("sweep-timeout-local", "sweep fig2 --timeout 5m"),
    row("sweep-test-only-without-dry-run", "sweep fig2 --executor slurm --test-only"),
    row("sweep-spaced-params-dry-run", "sweep fig2 --params 'cfg ä ö/params.yaml' --dry-run", ok=True),
    # ---- profile use / list
    row("profile-use-no-name", "profile use"),
    row("profile-use-unknown", "profile use nope"),
    row("profile-use-params-missing", "profile use t --params bad/missing.yaml"),
    row("profile-use-params-list", "profile use t --params bad/list.yaml"),
    row("profile-use-unwritable", "profile use u --params locked/params.yaml", locked=True),
    row("profile-list-params-empty", "profile list --params bad/empty.yaml"),
    row("profile-list-params-is-directory", "profile list --params bad/dir.yaml"),
    row("profile-list-params-binary", "profile list --params bad/corrupt.pt"),
    row("profile-list-spaced-params", "profile list --params 'cfg ä ö/params.yaml'", ok=True),
    # ---- aggregate
    row("aggregate-missing-root", "aggregate runs-nope --out res/tables"),
    row("aggregate-root-is-file", "aggregate bad/file --out res/tables"),
    row("aggregate-resamples-zero", "aggregate pipeline/runs --out res/tables --resamples 0"),
    row("aggregate-resamples-negative", "aggregate pipeline/runs --out res/tables --resamples -5"),
    row("aggregate-resamples-beyond-int64", f"aggregate pipeline/runs --out res/tables --resamples {BIG}"),
    row("aggregate-experiment-unknown", "aggregate pipeline/runs --out res/tables --experiment nope"),
    row("aggregate-nothing-evaluated", "aggregate runs --out res/tables --resamples 10"),
    row("aggregate-corrupt-config", "aggregate bad/runs-yaml --out res/tables --resamples 10"),
    row("aggregate-corrupt-scores", "aggregate bad/runs-npz --out res/tables --resamples 10"),
    row("aggregate-scores-without-metrics", "aggregate bad/runs-npz-keys --out res/tables --resamples 10"),
    row("aggregate-corrupt-manifest", "aggregate bad/runs-manifest --out res/tables --resamples 10"),
    row("aggregate-unevaluated-lm-run", "aggregate bad/runs-lm --out res/tables --resamples 10"),
    row("aggregate-out-is-file", "aggregate pipeline/runs --out bad/file --resamples 10"),
    row("aggregate-out-unwritable", "aggregate pipeline/runs --out locked/tables --resamples 10", locked=True),
    row("aggregate-spaced-out", "aggregate pipeline/runs --out 'res ä ö/tables' --resamples 10", ok=True),
    # ---- plot
    row("plot-missing-tables", "plot res-nope --out figs"),
    row("plot-no-tables", "plot bad/emptydir --out figs"),
    row("plot-empty-table", "plot bad/results-empty --out figs"),
    row("plot-binary-table", "plot bad/results-binary --out figs"),
    row("plot-out-is-file", "plot pipeline/results/tables --out bad/file"),
    row("plot-out-unwritable", "plot pipeline/results/tables --out locked/figs", locked=True),
    # ---- scorecard
    row("scorecard-missing-results", "scorecard --results res-nope"),
    row("scorecard-results-is-file", "scorecard --results bad/file"),
    row("scorecard-unknown-profile", "scorecard nope"),
    row("scorecard-params-corrupt", "scorecard --params bad/corrupt.yaml"),
    row("scorecard-binary-table", "scorecard --results bad/results-binary"),
    row("scorecard-nan-in-table", "scorecard --results bad/results-nan"),
    row("scorecard-out-is-file", "scorecard --results pipeline/results/tables --out bad/file"),
    row("scorecard-out-unwritable", "scorecard --results pipeline/results/tables --out locked/sc", locked=True),
    # ---- lm prepare
    row("lm-prepare-data-dir-missing", "lm prepare --data-dir bad/nope --out text"),
    row("lm-prepare-data-dir-is-file", "lm prepare --data-dir bad/file --out text"),
    row("lm-prepare-data-dir-without-wikitext", "lm prepare --data-dir bad/emptydir --out text"),
    row("lm-prepare-empty-splits", "lm prepare --data-dir bad/wiki-empty --out text"),
    row("lm-prepare-not-utf8", "lm prepare --data-dir bad/wiki-binary --out text"),
    row("lm-prepare-out-is-file", f"lm prepare --data-dir {shlex.quote(str(MINI))} --out bad/file"),
    row("lm-prepare-out-unwritable", f"lm prepare --data-dir {shlex.quote(str(MINI))} --out locked/text", locked=True),
    # ---- lm tokenizer
    row("lm-tokenizer-data-missing", TOKENIZER.replace("lm/text", "bad/nope")),
    row("lm-tokenizer-no-train-txt", TOKENIZER.replace("lm/text", "bad/emptydir")),
    row("lm-tokenizer-empty-train-txt", TOKENIZER.replace("lm/text", "bad/text-empty")),
    row("lm-tokenizer-vocab-zero", TOKENIZER.replace("300", "0")),
    row("lm-tokenizer-vocab-above-max", TOKENIZER.replace("300", "100000")),
    row("lm-tokenizer-vocab-too-small", TOKENIZER.replace("300", "3")),
    row("lm-tokenizer-vocab-beyond-corpus", TOKENIZER.replace("300", "60000")),
    row("lm-tokenizer-seed-negative", f"{TOKENIZER} --seed -1"),
    row("lm-tokenizer-sentences-zero", f"{TOKENIZER} --input-sentence-size 0"),
    row("lm-tokenizer-out-unwritable", TOKENIZER.replace("--out tok", "--out locked/tok"), locked=True),
    # ---- lm encode
    row("lm-encode-max-tokens-nan", ENCODE.replace("32", "nan")),
    row("lm-encode-tokenizer-not-sentencepiece", ENCODE.replace("lm/tok", "bad/notes.txt")),
    row("lm-encode-empty-text", ENCODE.replace("lm/text", "bad/text-empty")),
    # ---- lm train
    row("lm-train-no-data", "lm train --out runs/lm2"),
    row("lm-train-unknown-pe", f"{LM_TRAIN} --pe nope"),
    row("lm-train-data-is-synthetic-run", LM_TRAIN.replace("lm/enc", "runs/syn")),
    row("lm-train-corrupt-meta", LM_TRAIN.replace("lm/enc", "bad/enc-corrupt")),
    row("lm-train-set-task-reverse", f"{LM_TRAIN} --set task.name=reverse"),
    # ---- lm eval
    row("lm-eval-synthetic-run", "lm eval runs/syn --device cpu"),
    row("lm-eval-corpus-gone", "lm eval runs/lm-orphan --device cpu"),
    row("lm-eval-spaced-run", "lm eval 'runs/ä ö lm' --device cpu", ok=True),
    # ---- nothing of the user's overwritten: outputs inside a run, equal to an input, odd paths
    row("stability-out-over-checkpoint", "stability runs/dual --triplets 4 --device cpu --out "
                                         "runs/dual/checkpoints/step_0000020.pt"),
    row("stability-out-over-config", "stability runs/dual --triplets 4 --device cpu --out runs/dual/config.yaml"),
    row("stability-out-inside-another-run", "stability runs/dual --triplets 4 --device cpu --out "
                                            "runs/syn/stability.csv"),
    row("stability-out-over-user-file", "stability runs/dual --triplets 4 --device cpu --out bad/notes.txt"),
    row("stability-out-symlink-loop", "stability runs/dual --triplets 4 --device cpu --out bad/loop"),
    row("stability-out-empty", "stability runs/dual --triplets 4 --device cpu --out ''"),
    row("extend-out-inside-checkpoints", "extend-vocab runs/syn --extra-vocab 2 --out runs/syn/checkpoints "
                                         "--iterations 2 --device cpu"),
    row("extend-out-inside-run", "extend-vocab runs/syn --extra-vocab 2 --out runs/syn/ext --iterations 2 --device "
                                 "cpu"),
    row("extend-out-holds-input", "extend-vocab runs/syn --extra-vocab 2 --out runs --iterations 2 --device cpu"),
    row("extend-out-empty", "extend-vocab runs/syn --extra-vocab 2 --out '' --iterations 2 --device cpu"),
    row("extend-out-current-dir", "extend-vocab runs/syn --extra-vocab 2 --out . --iterations 2 --device cpu"),
    row("extend-out-symlink-loop", "extend-vocab runs/syn --extra-vocab 2 --out bad/loop --iterations 2 --device cpu"),
    row("extend-resume-corrupt-extend-json", "extend-vocab runs/syn --extra-vocab 6 --out runs/ext-corrupt "
                                             "--iterations 2 --resume --device cpu"),
    # ---- checkpoints that are not what they claim
    row("eval-checkpoint-without-config", "eval bad/ckpt-no-config.pt --device cpu"),
    row("eval-checkpoint-without-model", "eval bad/ckpt-no-model.pt --device cpu"),
    row("eval-checkpoint-without-step", "eval bad/ckpt-no-step.pt --device cpu"),
    row("eval-checkpoint-nan-weights", "eval runs/crafted-nan-weights --device cpu"),
    row("eval-checkpoint-config-edited", "eval runs/crafted-edited-config --device cpu"),
    row("eval-csv-over-checkpoint", "eval runs/csv-ckpt --device cpu"),
    row("eval-foreign-checkpoint", "eval runs/foreign --device cpu"),
    row("resume-checkpoint-without-config", f"train {TINY} --iterations 30 --resume --out runs/crafted-no-config"),
    row("resume-checkpoint-without-model", f"train {TINY} --iterations 30 --resume --out runs/crafted-no-model"),
    row("resume-checkpoint-without-step", f"train {TINY} --iterations 30 --resume --out runs/crafted-no-step"),
    row("resume-checkpoint-bad-optimizer", f"train {TINY} --iterations 30 --resume --out runs/crafted-bad-optimizer"),
    row("resume-checkpoint-bad-rng", f"train {TINY} --iterations 30 --resume --out runs/crafted-bad-rng"),
    row("resume-foreign-checkpoint", f"train {TINY} --iterations 30 --resume --out runs/foreign"),
    # ---- train: --force replaces only on success; a failure leaves nothing behind; odd --out paths
    row("train-force-failing-keeps-old-run", f"train {TINY} --lr 1e300 --force --out runs/syn"),
    row("train-non-finite-weights-no-checkpoint", f"{SYN_TRAIN} --checkpoint-every 1 --set train.weight_decay=3e38"),
    row("train-failing-removes-new-parents", f"train {TINY} --lr 1e300 --out new/deeper/run"),
    row("train-out-empty", f"train {TINY} --out ''"),
    row("train-out-current-dir", f"train {TINY} --out ."),
    row("train-out-inside-run", f"train {TINY} --out runs/syn/sub"),
    row("train-out-inside-checkpoints", f"train {TINY} --out runs/syn/checkpoints"),
    row("train-out-symlink-loop", f"train {TINY} --out bad/loop"),
    row("train-threads-beyond-cores", f"{SYN_TRAIN} --threads 1000"),
    row("train-batch-beyond-machine", f"{SYN_TRAIN} --batch-size 16777216"),
    # ---- files that are not text, or not what a reader expects
    row("train-resume-config-not-utf8", "train --resume --out runs/latin1 --device cpu"),
    row("train-out-config-not-utf8", f"train {TINY} --out runs/latin1"),
    row("compare-config-not-utf8", "compare runs/latin1 runs/syn --device cpu"),
    row("compare-eval-json-not-an-object", "compare runs/eval-list runs/syn --device cpu"),
    row("compare-eval-json-edited", "compare runs/eval-edited runs/syn --device cpu"),
    row("compare-eval-json-ci-swapped", "compare runs/eval-swapped runs/syn --device cpu"),
    row("bench-chunk-size-zero", f"{BENCH.replace('--parts train', '--parts stability')} --stability-triplets 4 "
                                 "--chunk-size 0"),
    row("lm-train-meta-vocab-too-small", LM_TRAIN.replace("lm/enc", "bad/enc-small-vocab")),
    # ---- YAML that expands without bound
    row("sweep-params-billion-laughs", "sweep fig2 --params bad/laughs.yaml"),
    row("profile-list-params-billion-laughs", "profile list --params bad/laughs.yaml"),
    row("train-params-billion-laughs", f"{SYN_TRAIN} --params bad/laughs.yaml"),
    row("train-set-billion-laughs", f"{SYN_TRAIN} --set {shlex.quote('task.name=' + LAUGHS)}"),
    # ---- profile use: a file it cannot edit safely is refused; one with comments in the list is edited
    row("profile-use-duplicate-key", "profile use t --params bad/params-dup.yaml"),
    row("profile-use-comment-in-list", "profile use t --params bad/params-commented.yaml", ok=True),
    # ---- results: nothing half-replaced, nothing non-finite, nothing malformed
    row("aggregate-out-equals-curves", "aggregate pipeline/runs --out res/t --curves res/t --resamples 10"),
    row("aggregate-out-is-run-root", "aggregate pipeline/runs --out pipeline/runs --resamples 10"),
    row("aggregate-nan-score", "aggregate bad/runs-nan --out res/tables --resamples 10"),
    row("aggregate-config-not-utf8", "aggregate bad/runs-latin1 --out res/tables --resamples 10"),
    row("aggregate-log-not-utf8", "aggregate bad/runs-log-latin1 --out res/tables --resamples 10"),
    row("aggregate-odd-log-lines", "aggregate bad/runs-oddlog --out res/tables --resamples 10", ok=True),
    row("aggregate-manifest-bad-names", "aggregate bad/runs-manifest-names --out res/tables --resamples 10"),
    row("aggregate-second-experiment-broken", "aggregate bad/runs-partial --out pipeline/results/tables --resamples "
                                              "10"),
    row("plot-missing-column", "plot bad/results-missing-column --out figs"),
    row("plot-repeated-header", "plot bad/results-repeated-header --out figs"),
    row("plot-ci-swapped", "plot bad/results-swapped-ci --out figs"),
    row("plot-nan-in-table", "plot bad/results-nan --out figs"),
    row("plot-second-table-broken", "plot bad/results-partial --out pipeline/figures"),
]


#: ``python -m posrnn_cli ARGS`` that, as it exits, leaves a mark file (outside the row's tree) when
#: torch was imported: what a refusal checked before torch loads never does
PROBE = ("import atexit, os, runpy, sys\n"
         "mark = os.environ.pop('POSRNN_TORCH_MARK')\n"
         "atexit.register(lambda: 'torch' in sys.modules and open(mark, 'w').close())\n"
         "runpy.run_module('posrnn_cli', run_name='__main__', alter_sys=True)\n")


def run_row(r: Row, base: Path, cwd: Path) -> Outcome:
    """Copy the fixture tree to ``cwd``, run ``posrnn ARGS`` there, hash the tree before and after."""
    shutil.copytree(base, cwd, symlinks=True)
    before = tree_state(cwd)
    prefix = (LOCK_PREFIX or []) if r.locked else []
    mark = cwd.with_name(cwd.name + ".torch")
    start = time.perf_counter()
    try:
        p = subprocess.run([*prefix, sys.executable, "-c", PROBE, *shlex.split(r.args)], cwd=cwd,
                           env={**ENV, "POSRNN_TORCH_MARK": str(mark)}, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, errors="replace", timeout=ROW_TIMEOUT_S)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = None, str(e.stdout or ""), str(e.stderr or "")
    return Outcome(rc, out, err, before, tree_state(cwd), time.perf_counter() - start, cwd, mark.exists())


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad-input") / "base"
    build_base(root)
    yield root
    unlock_tree(root)


#: commands that import torch before refusing (about 3 s a row; the rest about 0.4 s): started first
TORCH_COMMANDS = ("train", "eval", "compare", "stability", "extend-vocab", "bench", "lm encode", "lm train", "lm eval")


def expected_cost(r: Row) -> float:
    return 3.0 if any(r.args.startswith(c + " ") for c in TORCH_COMMANDS) else 0.4


@pytest.fixture(scope="module")
def outcomes(request, base) -> dict[str, Outcome]:
    """Every selected row, run at once in a thread pool (one subprocess per core); rows selected
    later (or skipped here) run on demand."""
    selected = [item for item in request.session.items
                if getattr(item, "originalname", None) == "test_bad_input" and item.module is request.module
                and not any(m.name == "skipif" and m.args and m.args[0] for m in item.iter_markers())]
    selected.sort(key=lambda item: -expected_cost(item.callspec.params["r"]))
    rows_root = base.parent / "rows"
    rows_root.mkdir()
    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        futures = {item.callspec.id: pool.submit(run_row, item.callspec.params["r"], base, rows_root / f"{i:03d}")
                   for i, item in enumerate(selected)}
        done = {k: f.result() for k, f in futures.items()}
    yield done
    unlock_tree(rows_root)


@pytest.mark.parametrize("r", ROWS)
def test_bad_input(r: Row, outcomes, base, request):
    o = outcomes.get(request.node.callspec.id) or run_row(r, base, base.parent / "rows" / request.node.callspec.id)
    shown = (f"posrnn {r.args}\n(cwd {o.cwd}, exit {o.rc}, {o.seconds:.1f}s)\n"
             f"stdout: {o.out[-1500:]}\nstderr: {o.err[-3000:]}")
    assert o.rc is not None, f"did not finish in {ROW_TIMEOUT_S}s: {shown}"
    assert "Traceback" not in o.out + o.err, shown
    if r.ok:
        assert o.rc == 0, shown
    else:
        assert o.rc != 0, shown
        lines = [line for line in o.err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), shown
        assert o.before == o.after, f"the tree changed ({tree_diff(o.before, o.after)}): {shown}"
    unlock_tree(o.cwd)
    shutil.rmtree(o.cwd)


#: the most refusals (rows not ``ok``) that may import torch before refusing: each command refuses what
#: it can tell from its options and paths before torch loads (``engine.paths``' checks, ``lm``'s)
TORCH_REFUSALS_CEILING = 36


def test_refusals_import_torch_no_more_often_than_the_ceiling(outcomes):
    """Of the refused rows run here (every row, run with the whole module), those that imported
    torch: never more than the ceiling, lowered as commands check more before torch."""
    rows = {p.id: p.values[0] for p in ROWS}
    heavy = sorted(k for k, o in outcomes.items() if o.torch and not rows[k].ok)
    assert len(heavy) <= TORCH_REFUSALS_CEILING, f"{len(heavy)} refusals import torch: {', '.join(heavy)}"
    print(f"{len(heavy)} of {sum(not rows[k].ok for k in outcomes)} refusals import torch: {', '.join(heavy)}")


# ---- property: posrnn train --set KEY=VALUE ------------------------------------------------------
KEYS = sorted(RunConfig().flat())
#: text that YAML (or the config's own number parsing) reads as an awkward value: non-finite and
#: out-of-range numbers, integers beyond int64, empty and YAML-special text, lists, mappings,
#: booleans, names of the wrong kind
AWKWARD = [
    ".nan", "nan", "NaN", ".inf", "inf", "-.inf", "-inf", "1e308", "-1e308", "1e-320", "-0.0", "0", "-1", "-7", "0.5",
    "2.5", "-1.5", str(2**63), str(-(2**63) - 1), str(10**30), "1e30", "", "~", "null", "abc", "ä ö", "[1,", "{a: 1}",
    "{", "]", "[]", "[1, 2]", "[.nan, 0.9]", "[0.9, 1.0]", "[0.9, 0.999, 0.5]", "true", "false", "yes", "'7'", "0x10",
    "1_0", "1e1", "!!binary aGk=", "&a 1", "*a", "- 1", "? a", "cpu", "cuda", "cuda:99", "mps", "meta", "none",
    "sinusoidal", "random", "learnable", "dummy", "phase", "add", "concat", "copy", "sort", "continuous", "lm",
    "delayed-add", "predecessor", "lstm", "elman", "s4d", "transformer", "bogus-name",
]
TINY_SET = shlex.split(TINY.replace("--iterations 20", "--iterations 2").replace("--batch-size 8", "--batch-size 4"))
EXAMPLE_LIMIT_S = 8  # one tiny run takes a fraction of a second; the first one a few
REFUSED = object()


def coerced(key: str, text: str) -> Any:
    """The value ``--set KEY=TEXT`` puts in the config, or ``REFUSED``."""
    cfg = RunConfig()
    try:
        k, v = parse_set(f"{key}={text}")
        set_key(cfg, k, v)
    except PosrnnError:
        return REFUSED
    return cfg.flat()[key]


def too_long(key: str, text: str) -> bool:
    """A valid but long run: more than a handful of iterations."""
    v = coerced(key, text)
    return key == "train.iterations" and isinstance(v, int) and v > 16


def values() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(AWKWARD),
        st.integers(-3, 16).map(str),
        st.floats(allow_nan=True, allow_infinity=True).filter(lambda f: not 16 < abs(f) < 1e19).map(repr),
        st.text(alphabet="ab:-_ ./[]{}~'\"#0", max_size=6),
    )


KEY_VALUES = st.sampled_from(KEYS).flatmap(
    lambda k: st.tuples(st.just(k), values().filter(lambda v: not too_long(k, v))))


class TooSlow(BaseException):
    """An example ran past its time limit (raised from a timer signal, through any ``except Exception``)."""


def train_with(workdir: Path, key: str, value: str, limit_s: float = EXAMPLE_LIMIT_S):
    """``posrnn train TINY --set KEY=VALUE --out run`` in-process, in ``workdir``: the result and
    the tree before and after."""
    import torch
    from typer.testing import CliRunner

    from posrnn_cli.cli import app

    def alarm(signum, frame):
        raise TooSlow(f"--set {key}={value} ran past {limit_s} s")

    before = tree_state(workdir)
    threads, cwd = torch.get_num_threads(), os.getcwd()
    previous = signal.signal(signal.SIGALRM, alarm)
    os.chdir(workdir)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        r = CliRunner().invoke(app, ["train", *TINY_SET, "--set", f"{key}={value}", "--out", "run"])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        os.chdir(cwd)
        torch.set_num_threads(threads)
    return r, before, tree_state(workdir)


def check_train_set(workdir: Path, key: str, value: str, limit_s: float = EXAMPLE_LIMIT_S) -> None:
    shown = f"posrnn train ... --set {key}={value}"
    try:
        try:
            r, before, after = train_with(workdir, key, value, limit_s)
        except TooSlow as e:
            raise AssertionError(f"{shown}: {e}") from None
        assert r.exception is None or isinstance(r.exception, SystemExit), \
            f"{shown}: {type(r.exception).__name__}: {str(r.exception)[:300]}\n{r.output[-1500:]}"
        text = r.output + (r.stderr or "")
        assert "Traceback" not in text, f"{shown}\n{text[-2000:]}"
        if r.exit_code == 0:
            assert sorted((workdir / "run" / "checkpoints").glob("step_*.pt")), f"{shown}: exit 0 without a checkpoint"
            return
        assert r.exit_code in (1, 2), f"{shown}: exit {r.exit_code}\n{text[-2000:]}"
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert (len(lines) == 1 and lines[0].startswith("error: ")), (f"{shown}: exit {r.exit_code}, stderr "
                                                                      f"{r.stderr[-2000:]!r}")
        assert before == after, f"{shown}: exit {r.exit_code}, the tree changed ({tree_diff(before, after)})"
    finally:
        if (workdir / "run").exists():
            shutil.rmtree(workdir / "run")


@pytest.fixture(scope="module")
def set_workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("train-set")


#: edge values of each kind (beyond int64, overflowing float32, out of range), always among the examples
SET_EDGE_EXAMPLES = [
    ("model.hidden_size", str(2**63)),
    ("model.embed_size", "1e19"),
    ("model.pe_dim", "1e308"),
    ("task.vocab_size", str(2**63)),
    ("train.batch_size", str(2**63)),
    ("train.threads", str(2**63)),
    ("train.seed", str(2**64)),
    ("task.test_seed", str(-(2**63) - 1)),
    ("task.length", str(2**63)),
    ("model.frozen_vocab", "-1"),
    ("model.frozen_vocab", "6"),
    ("train.lr", "1e39"),
    ("train.weight_decay", "1e308"),
]


def _with_edge_examples(test):
    for key, value in reversed(SET_EDGE_EXAMPLES):
        test = example(kv=(key, value))(test)
    return test


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@_with_edge_examples
@given(kv=KEY_VALUES)
def test_train_set_any_value(kv, set_workdir):
    key, value = kv
    check_train_set(set_workdir, key, value)



# ---- property: random bytes in any file of a run ---------------------------------------------------------
#: (command, the run files it reads): each read file, overwritten with random bytes, must be refused
#: in one line with the tree unchanged, or give exactly the clean run's result
READS = {
    "eval": ("checkpoints/step_0000020.pt", "config.yaml"),
    "compare": ("checkpoints/step_0000020.pt", "config.yaml", "eval.json"),
}
CORRUPTIONS = st.sampled_from(sorted((c, f) for c, files in READS.items() for f in files))


def run_in(workdir: Path, argv: list[str]):
    from typer.testing import CliRunner

    from posrnn_cli.cli import app

    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        return CliRunner().invoke(app, argv)
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="module")
def clean_results(base, tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("clean")
    shutil.copytree(base / "runs" / "syn", work / "run")
    out = {}
    for cmd in READS:
        r = run_in(work, [cmd, "run", "--device", "cpu", "--json"])
        assert r.exit_code == 0, r.output
        out[cmd] = r.stdout
    return out


def scores(out: str) -> list:
    """A command's --json output without the paths it names."""
    import json

    data = json.loads(out)
    return [{k: v for k, v in r.items() if k not in ("run_dir", "checkpoint", "label", "digest")}
            for r in (data if isinstance(data, list) else [data])]


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(corruption=CORRUPTIONS, data=st.binary(max_size=200))
def test_random_bytes_in_a_run_file_are_refused_or_harmless(corruption, data, base, clean_results, tmp_path_factory):
    cmd, name = corruption
    work = tmp_path_factory.mktemp("bytes")
    shutil.copytree(base / "runs" / "syn", work / "run")
    (work / "run" / name).write_bytes(data)
    before = tree_state(work)
    r = run_in(work, [cmd, "run", "--device", "cpu", "--json"])
    shown = f"posrnn {cmd} run with {len(data)} random bytes in {name}: exit {r.exit_code}\n{r.output[-1500:]}"
    assert (r.exception is None
            or isinstance(r.exception, SystemExit)), f"{shown}\n{type(r.exception).__name__}: {r.exception}"
    assert "Traceback" not in r.output, shown
    if r.exit_code == 0:  # harmless bytes: exactly the clean result
        assert scores(r.stdout) == scores(clean_results[cmd]), shown
    else:
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), shown
        assert before == tree_state(work), f"the tree changed ({tree_diff(before, tree_state(work))}): {shown}"
    shutil.rmtree(work)
