"""Golden traces: every core × a task of each family (a vocabulary, vectors, a corpus) × {none,
sinusoidal}, trained a few steps on the CPU at a fixed seed; the loss of each step and a checksum
of the trained parameters, with the declared versions they were computed under.

Run as a script, in a fresh process whose CPU kernels are pinned to the portable ones (``ENV``:
one thread, no vector dispatch beyond the baseline, MKL's compatible mode), so two x86-64
machines with one torch compute the same bits. tests/test_golden.py compares what it prints with
the entry of the running torch version in tests/golden_traces.json::

    .venv/bin/python tests/golden.py --write     # the entry of this torch version, written again
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: the traces of each torch version (``{version: {case: trace}}``)
GOLDEN = Path(__file__).resolve().parent / "golden_traces.json"
#: what pins the CPU kernels: set before torch is imported, so only in a fresh process
ENV = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41",
       "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
STEPS = 3
BASE = {"model.hidden_size": 8, "model.heads": 2, "model.layers": 1, "model.state_size": 4, "task.length": 4,
        "task.n_test": 8, "train.iterations": STEPS, "train.batch_size": 4, "train.warmup": 1, "train.seed": 7,
        "train.device": "cpu", "train.threads": 1}
#: a task of each family (``common.catalog``: a vocabulary, vectors, a corpus)
FAMILIES = {"reverse": {"task.name": "reverse", "task.vocab_size": 5},
            "continuous": {"task.name": "continuous", "task.dim": 4},
            "lm": {"task.name": "lm", "task.vocab_size": 12, "task.length": 6}}
PES = ("none", "sinusoidal")


def corpus(root: Path) -> Path:
    """A tiny encoded corpus (``posrnn lm encode``'s format), the same bits on every machine."""
    import numpy as np

    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 5, size=16)
    ids = np.concatenate([[1, *rng.integers(4, 12, size=n), 2] for n in lengths]).astype(np.uint16)
    offsets = np.concatenate([[0], np.cumsum(lengths + 2)]).astype(np.int64)
    (root / "train").mkdir(parents=True)
    np.save(root / "train" / "ids.npy", ids)
    np.save(root / "train" / "offsets.npy", offsets)
    (root / "meta.json").write_text(json.dumps({
        "splits": {"train": {"tokens": int(ids.size), "paragraphs": len(lengths)}}, "vocab_size": 12, "bos_id": 1,
        "eos_id": 2, "unk_id": 0, "pad_id": 3, "max_tokens": int(lengths.max()) + 2}))
    return root


def trace(core: str, task: str, pe: str, data: Path, nudge: bool = False) -> dict:
    """The loss of each of ``STEPS`` steps and a checksum of the parameters after them;
    ``nudge``: an element of the core's first weight moved by one ulp first (what the test must catch)."""
    import torch

    from posrnn_cli.common.settings.config import resolve_config
    from posrnn_cli.common.numerics import versions
    from posrnn_cli.engine.train import Trainer, build_run
    from posrnn_cli.tasks import HeldOut

    cfg = resolve_config(options={**BASE, **FAMILIES[task], "model.name": core, "model.pe": pe,
                                  **({"task.data": str(data)} if task == "lm" else {})})
    tsk, model = build_run(cfg)
    if nudge:  # the largest element of the core's first weight, one ulp up (a zero's ulp is a subnormal: no change)
        with torch.no_grad():
            w = next(model.core.parameters()).view(-1)
            i = int(w.abs().argmax())
            w[i] = torch.nextafter(w[i], torch.tensor(float("inf")))
    device = torch.device("cpu")
    sample = tsk.sample
    if tsk.holds_out:
        held = HeldOut(tsk.test_set(device))
        sample = lambda n, g, d: held.sample(tsk, n, g, d)
    trainer = Trainer(cfg, data, model, tsk, sample, device)
    losses = [float(trainer.train_step(trainer.next_batch())[0]) for _ in range(STEPS)]
    return {"versions": versions(core, cfg.task.name, pe, ("loop",)), "loss": losses,
            "params": checksum(model.state_dict())}


def checksum(state: dict) -> str:
    """A digest of the tensors' values and shapes, whatever their names and order: a renamed
    attribute or module leaves it as it was."""
    parts = sorted(hashlib.sha256(repr(tuple(t.shape)).encode() + t.detach().contiguous().numpy().tobytes()).digest()
                   for t in state.values())
    return hashlib.sha256(b"".join(parts)).hexdigest()[:16]


def traces(cores: list[str], nudge: bool = False) -> dict:
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        data = corpus(Path(tmp) / "corpus")
        return {f"{c}/{t}/{p}": trace(c, t, p, data, nudge) for c in cores for t in FAMILIES for p in PES}


def run(cores: list[str] = (), nudged: bool = False) -> tuple[str, dict, dict]:
    """(torch's version, the traces of ``cores`` (all when empty), and with ``nudged`` those of the
    same cases with one ulp moved in each core first, else {}), computed in one fresh pinned process."""
    argv = [sys.executable, __file__, "--print", *(["--nudged"] if nudged else []), *cores]
    r = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **ENV}, timeout=600)
    if r.returncode:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "golden.py failed")
    out = json.loads(r.stdout)
    return out["torch"], out["traces"], out["nudged"]


def compare(want: dict, got: dict) -> list[str]:
    """One line per case whose trace differs, saying which remedy applies: its versions were
    bumped (write the traces again), or the numbers changed under the same versions."""
    lines = []
    for case in sorted(set(want) | set(got)):
        a, b = want.get(case), got.get(case)
        if a is None or b is None:
            lines.append(f"{case}: {'not in the golden traces' if a is None else 'no longer traced'}")
        elif a["versions"] != b["versions"]:
            lines.append(f"{case}: its versions changed ({a['versions']} → {b['versions']})")
        elif a["loss"] != b["loss"] or a["params"] != b["params"]:
            step = next((i + 1 for i, (x, y) in enumerate(zip(a["loss"], b["loss"])) if x != y), None)
            where = f"loss at step {step}: {a['loss'][step - 1]!r} → {b['loss'][step - 1]!r}" if step else \
                "the parameter checksum"
            lines.append(f"{case}: numbers changed under the same versions ({where})")
    return lines


def verdict(lines: list[str]) -> str:
    """What a failed comparison tells the author of the change, then each case."""
    if any("under the same versions" in x for x in lines):
        head = ("numbers changed and no version was bumped. If the change is meant to change numbers, bump the version "
                "of each core, task, form or procedure it touches (posrnn_cli/common/catalog.py, common/numerics.py) "
                "and write the traces again (python tests/golden.py --write); if it is not meant to, a refactor "
                "changed numbers: find it")
    else:
        head = ("the declared versions changed: write the traces again (python tests/golden.py --write) and commit "
                "tests/golden_traces.json")
    return head + "\n" + "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cores", nargs="*")
    ap.add_argument("--print", action="store_true", help="print the traces (the process must be pinned: ENV)")
    ap.add_argument("--nudged", action="store_true", help="with --print: also the traces with each core nudged")
    ap.add_argument("--write", action="store_true", help="write this torch version's entry of golden_traces.json")
    a = ap.parse_args()
    if a.print:
        import torch

        from posrnn_cli.models import CORES

        cores = a.cores or list(CORES)
        print(json.dumps({"torch": torch.__version__, "traces": traces(cores),
                          "nudged": traces(cores, nudge=True) if a.nudged else {}}))
        return
    version, got, _ = run(a.cores)
    table = json.loads(GOLDEN.read_text()) if GOLDEN.is_file() else {}
    table[version] = got
    GOLDEN.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(got)} traces of torch {version} to {GOLDEN}")


if __name__ == "__main__":
    main()
