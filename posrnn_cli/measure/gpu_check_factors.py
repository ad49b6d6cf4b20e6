"""The GPU check's first stage, ``factors`` (``gpu_check``): what the dry run's GPU price assumes
until it is measured (``gpu_model.FACTORS``), measured in one process, most important first, one
``FACTORS {json}`` line per figure as it comes, so that a cut-off run keeps what was done:

1. ``dtype``: the autocast dtype of each recurrent core (``torch.get_autocast_dtype``, the dtype of
   posrnn's core's output under ``torch.autocast(device, dtype=torch.bfloat16)``, which runs its
   recurrence in bf16 explicitly (``models.rnn``), and of torch's module alone under the same
   autocast: a cuDNN GRU or LSTM whose output is float16 ran in fp16, not bf16);
2. fig2's GRU at V = 32 (the papers' L, H and batch) in fp32 and under ``amp`` + ``cuda_graph``;
3. the packing gain g: ``bench.ensemble_speed`` at K = 1, 2, 4, 8 of that GRU, under ``amp`` +
   ``cuda_graph`` (eager where the device refuses them), each K beside the solo step in the same call;
4. the GRU under ``amp`` alone (α without the graph), then an LSTM at V = 256 and an Elman RNN at
   V = 32 under ``amp`` + ``cuda_graph`` and in fp32 (their steps against the GRU's).

``factor_rows`` turns a CUDA run's figures into the rows the cost model reads with no code edit
(``gpu_ms_per_iter.json``'s and ``ensemble_k.json``'s), and ``write_tables`` writes both files into
the check's --out in the committed format. ``micro`` is the same stage at seconds' size on a CPU
(what CI runs): its figures are labelled not measured on a GPU and never become rows.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PAPER = {"task.length": 64, "model.hidden_size": 512, "train.batch_size": 512}
MICRO = {"task.length": 5, "model.hidden_size": 8, "train.batch_size": 16, "task.n_test": 64, "train.threads": 1}
GRU32 = {"model.name": "gru", "task.vocab_size": 32}
AMP_GRAPH, AMP, FP32 = (True, True), (True, False), (False, False)
#: (label, cell, switches), in the order measured; the ensemble's K values come after the first two
CELLS = [("gru V=32", GRU32, FP32), ("gru V=32", GRU32, AMP_GRAPH), ("gru V=32", GRU32, AMP),
         ("lstm V=256", {"model.name": "lstm", "task.vocab_size": 256}, AMP_GRAPH),
         ("elman V=32", {"model.name": "elman", "task.vocab_size": 32}, AMP_GRAPH),
         ("lstm V=256", {"model.name": "lstm", "task.vocab_size": 256}, FP32),
         ("elman V=32", {"model.name": "elman", "task.vocab_size": 32}, FP32)]
ENSEMBLE_AFTER = 2  # cells measured before the ensemble
KS = (1, 2, 4, 8)
ITERS = {"paper": (20, 5), "micro": (2, 1)}  # (timed iterations, warm-up)
CORES = ("gru", "lstm", "elman")
GPU_NAME, ENSEMBLE_NAME = "gpu_ms_per_iter.json", "ensemble_k.json"
NOT_ON_GPU = "not measured on a GPU"


def emit(kind: str, figure: dict) -> None:
    print("FACTORS " + json.dumps({"figure": kind, **figure}), flush=True)


def autocast_dtypes(device: str) -> list[dict]:
    """Each recurrent core's dtype under bf16 autocast on ``device``: the autocast dtype torch
    reports and the dtype of the core's output (float16: the core ran in fp16)."""
    import torch

    from ..models.rnn import RecurrentCore

    out = []
    for core in CORES:
        m = RecurrentCore(core, 16, 16).to(device)
        x = torch.randn(4, 5, 16, device=device)
        try:
            with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
                y = m(x)
                raw = m.rnn(x)[0]  # the torch module alone, under autocast's own rule
                asked = str(torch.get_autocast_dtype(torch.device(device).type))
            out.append({"core": core, "autocast_dtype": asked, "output_dtype": str(y.dtype),
                        "ran_fp16": y.dtype == torch.float16, "module_alone_dtype": str(raw.dtype)})
        except Exception as e:  # a core the device cannot run under autocast: said in one line
            out.append({"core": core, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"})
    return out


def options(size: str, cell: dict, sw: tuple[bool, bool], device: str) -> dict:
    return {**(PAPER if size == "paper" else MICRO), **cell, "train.amp": sw[0], "train.cuda_graph": sw[1],
            "train.device": device}


def measure_cell(size: str, label: str, cell: dict, sw: tuple[bool, bool], device: str) -> dict:
    """One cell's training step (``bench.bench``, the train part alone): its row's figures, or the
    one-line reason the device refused or could not hold it."""
    import torch

    from .bench import bench
    from ..common.settings.config import resolve_config
    from ..common.errors import PosrnnError

    iters, warmup = ITERS[size]
    fig = {"cell": label, "amp": sw[0], "cuda_graph": sw[1]}
    try:
        r = bench(resolve_config(options=options(size, cell, sw, device)), iters, warmup, reference=False,
                  stability_triplets=0, parts=("train",))
    except PosrnnError as e:
        return {**fig, "error": str(e)}
    except torch.OutOfMemoryError:
        return {**fig, "error": "out of memory"}
    c = r["config"]
    return {**fig, "model": c["model"]["name"], "vocab": c["task"]["vocab_size"], "length": c["task"]["length"],
            "hidden": c["model"]["hidden_size"], "batch": c["train"]["batch_size"],
            "flops_per_iter": r["flops_per_iter"], "ms_per_iter": r["train_ms_per_iter"],
            "steps": 2 * c["task"]["length"]}


def measure_ensemble(size: str, device: str) -> dict:
    """The packing gain at K = 1, 2, 4, 8 of fig2's GRU at V = 32: under amp + cuda_graph, eager
    where the device refuses them (said so)."""
    from .bench_ensemble import ensemble_speed
    from ..common.settings.config import resolve_config
    from ..common.errors import PosrnnError

    iters, warmup = ITERS[size]
    refused = None
    for sw in (AMP_GRAPH, FP32):
        try:
            r = ensemble_speed(resolve_config(options=options(size, GRU32, sw, device)), KS, iters, warmup)
        except PosrnnError as e:
            refused = str(e)
            continue
        base = resolve_config(options=options(size, GRU32, sw, device))
        return {"cell": "gru V=32", "amp": sw[0], "cuda_graph": sw[1], "vocab": 32, "length": base.task.length,
                "hidden": base.model.hidden_size, "batch": base.train.batch_size, "rows": r["rows"],
                **({"refused_amp_cuda_graph": refused} if refused else {})}
    return {"cell": "gru V=32", "error": refused}


def run(size: str, device: str) -> None:
    """The stage's figures in order, one ``FACTORS`` line each as it is measured."""
    emit("dtype", {"cores": autocast_dtypes(device)})
    for i, (label, cell, sw) in enumerate(CELLS):
        if i == ENSEMBLE_AFTER:
            emit("ensemble", measure_ensemble(size, device))
        emit("cell", measure_cell(size, label, cell, sw, device))


def stage_factors(device: str, size: str, box: float, gc) -> dict:
    """``run`` in its own process under ``box`` seconds (``gc``: the ``gpu_check`` module, whose
    ``run_boxed`` runs it); its figures as they came."""
    r = gc.run_boxed([sys.executable, "-c", "import sys; from posrnn_cli.measure.gpu_check_factors import run; "
                      "run(*sys.argv[1:])", size, device], box)
    figs = [json.loads(ln.split(" ", 1)[1]) for ln in r["output"].splitlines() if ln.startswith("FACTORS {")]
    status = "timed out" if r["timed_out"] else ("ok" if r["rc"] == 0 else "failed")
    res = {"status": status, "seconds": r["seconds"], "result": figs}
    if status == "failed":
        res["error"] = (r["output"].strip().splitlines() or ["no output"])[-1][:400]
    return res


def factor_rows(stage: dict, env: dict, kind: str) -> tuple[list[dict], list[dict]]:
    """(``gpu_ms_per_iter.json`` rows, ``ensemble_k.json`` rows) of a CUDA run's figures; none off CUDA."""
    if env.get("cuda") is None or not stage:
        return [], []
    stamp = {"kind": kind, "device": env["device"], "date": env["date"][:10], "torch": env["torch"],
             "cuda": env["cuda"]}
    keys = ("model", "vocab", "length", "hidden", "batch", "amp", "cuda_graph", "flops_per_iter", "ms_per_iter",
            "steps")
    cells = [{**stamp, **{k: f[k] for k in keys}} for f in stage.get("result") or []
             if f["figure"] == "cell" and "error" not in f]
    ens = []
    for f in stage.get("result") or []:
        if f["figure"] != "ensemble" or "error" in f:
            continue
        for k in f["rows"]:
            if "error" not in k:
                ens.append({**stamp, "model": "gru", **{x: f[x] for x in ("vocab", "length", "hidden", "batch", "amp",
                                                                          "cuda_graph")},
                            "k": k["k"], "ms_per_iter": k["ms_per_step"], "solo_ms_per_iter": 1000 / k["solo_it_per_s"],
                            "gain": k["vs_solo_in_all"]})
    return cells, ens


def merged(committed: list[dict], new: list[dict], key: tuple[str, ...]) -> list[dict]:
    """``committed`` rows with ``new`` ones added, a new row replacing a committed one of the same ``key``
    (of two new rows of one key, the first: the factors stage's, timed before the others)."""
    ident = lambda r: tuple(r.get(k) for k in key)  # noqa: E731
    first: dict[tuple, dict] = {}
    for r in new:
        first.setdefault(ident(r), r)
    return [r for r in committed if ident(r) not in first] + list(first.values())


ROW_KEY = ("kind", "model", "vocab", "length", "hidden", "batch", "amp", "cuda_graph")


def write_tables(out: Path, cells: list[dict], ens: list[dict], env: dict) -> None:
    """``gpu_ms_per_iter.json`` and ``ensemble_k.json`` into ``out``, in the committed files' format: the
    committed rows with this run's added, ready to replace them (``cost.TABLE``, ``cost.ENSEMBLE_TABLE``)."""
    from ..common.files.io import write_owned
    from .cost import ENSEMBLE_TABLE, TABLE

    for name, path, new, key in ((GPU_NAME, TABLE, cells, ROW_KEY), (ENSEMBLE_NAME, ENSEMBLE_TABLE, ens,
                                                                     (*ROW_KEY, "k"))):
        doc = json.loads(path.read_text()) if path.is_file() else {"about": "", "rows": []}
        said = (f"this run added {len(new)} row(s) measured on {env['device']} ({env['date']})" if new else
                f"this run added no row: {NOT_ON_GPU} (it ran on {env['device']}) or nothing finished")
        write_owned(out / name, json.dumps({"about": doc["about"], "written_by": f"the GPU check's factors stage; "
                                            f"{said}", "rows": merged(doc["rows"], new, key)}, indent=2) + "\n")


def factor_figures(st) -> list[tuple[str, str, str]]:
    """The stage's (stage, figure, value) rows for the report."""
    if st is None:
        return []
    rows = [] if st["status"] == "ok" else [("factors", "status", st["status"] + (f": {st['error']}" if st.get(
        "error") else ""))]
    for f in st.get("result") or []:
        if f["figure"] == "dtype":
            rows += [("factors", f"{c['core']} under bf16 autocast: autocast dtype, posrnn's core, torch's module",
                      c.get("error") or f"{c['autocast_dtype']}, {c['output_dtype']}, {c.get('module_alone_dtype')}")
                     for c in f["cores"]]
        elif f["figure"] == "ensemble":
            rows += [("factors", f"packing gain, gru V=32, K={k['k']} ({'amp+cuda_graph' if f['amp'] else 'eager'})",
                      k.get("error") or f"{k['vs_solo_in_all']:.2f}× solo") for k in f.get("rows") or []]
            rows += [("factors", "packing gain", f["error"])] if "error" in f else []
        else:
            sw = "amp+cuda_graph" if f["amp"] and f["cuda_graph"] else "amp" if f["amp"] else "fp32"
            rows.append(("factors", f"{f['cell']}, {sw}: ms / iteration",
                         f.get("error") or f"{f['ms_per_iter']:.2f}"))
    return rows
