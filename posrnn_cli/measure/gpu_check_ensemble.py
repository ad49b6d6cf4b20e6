"""The GPU check's ``ensemble`` stage (``gpu_check``), run right after the GPU tests so that a
short run still returns it: the CUDA equivalence tests of the ensemble path
(``pytest -m gpu tests/test_ensemble.py``), then ``posrnn bench --ensemble`` for K = 1, 2, 4, 8, 16
on fig2's GRU at V = 32 and on the LSTM at V = 16,384 (the papers' L, H and batch), each eager and
under ``amp`` + ``cuda_graph``. Each bench runs in its own process under its own share of the box;
a K the device cannot hold is recorded as out of memory and the larger ones are skipped.
``micro`` is the same stage at seconds' size on a CPU (what CI runs; ``cuda_graph`` is refused there).
"""

from __future__ import annotations

import sys
from pathlib import Path

PAPER = ["--length", "64", "--hidden-size", "512", "--batch-size", "512", "--iters", "10", "--warmup-iters", "5"]
MICRO = ["--length", "5", "--hidden-size", "8", "--batch-size", "16", "--set", "task.n_test=64", "--threads", "1",
         "--iters", "2", "--warmup-iters", "1"]
#: (label, bench options) per size: the cells, then the K values
CELLS = {
    "paper": [("gru V=32", ["--model", "gru", "--vocab-size", "32", *PAPER]),
              ("lstm V=16384", ["--model", "lstm", "--vocab-size", "16384", *PAPER])],
    "micro": [("gru V=8", ["--model", "gru", "--vocab-size", "8", *MICRO])],  # one cell: CI's seconds
}
KS = {"paper": "1,2,4,8,16", "micro": "1,2"}
VARIANTS = {"eager": [], "amp+cuda_graph": ["--amp", "--cuda-graph"]}
#: the share of the stage's box the equivalence tests may take
TESTS_SHARE = 0.3


def stage_ensemble(device: str, size: str, box: float, root: Path, gc) -> dict:
    """The equivalence tests, then each cell × variant's ``bench --ensemble`` in its own time box
    (``gc``: the ``gpu_check`` module, whose ``run_boxed``, ``posrnn``, ``parse_pytest`` and
    ``last_json`` run them; passed in, so neither module imports the other's)."""
    import time

    run_boxed, posrnn, parse_pytest, last_json = gc.run_boxed, gc.posrnn, gc.parse_pytest, gc.last_json
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-v", "-rfEs", "-p", "no:cacheprovider",
           "tests/test_ensemble.py"]
    r = run_boxed(cmd, box * TESTS_SHARE, cwd=root)
    res = {"tests": parse_pytest(r["output"]), "tests_status": "timed out" if r["timed_out"] else (
        "passed" if r["rc"] == 0 else "failed"), "bench": []}
    runs = [(cell, v, opts + VARIANTS[v]) for cell, opts in CELLS[size] for v in VARIANTS]
    for i, (cell, variant, opts) in enumerate(runs):
        left = box - (time.monotonic() - t0)
        share = left / (len(runs) - i)
        b = run_boxed(posrnn("bench", *opts, "--ensemble", KS[size], "--device", device, "--json"), share)
        row = {"cell": cell, "variant": variant, "seconds": b["seconds"]}
        got = last_json(b["output"]) if b["rc"] == 0 else None
        if got is not None:
            row.update(status="ok", result=got)
        else:
            errors = [ln for ln in b["output"].splitlines() if ln.startswith("error:")]
            row.update(status="timed out" if b["timed_out"] else ("refused" if errors else "failed"),
                       error=(errors or b["output"].strip().splitlines()[-1:] or ["no output"])[0][:400])
        res["bench"].append(row)
    ok = res["tests_status"] == "passed" and all(x["status"] == "ok" or (x["status"] == "refused" and device == "cpu")
                                                 for x in res["bench"])
    res.update(status="ok" if ok else "failed", seconds=round(time.monotonic() - t0, 2))
    return res


def ensemble_figures(st) -> list[tuple[str, str, str]]:
    """The stage's (stage, figure, value) rows for the report."""
    if st is None:
        return []
    rows = [("ensemble", t["test"], t["outcome"] + (f": {t['reason']}" if t["reason"] else ""))
            for t in st.get("tests", [])]
    if st.get("tests_status") not in (None, "passed"):
        rows.append(("ensemble", "pytest -m gpu tests/test_ensemble.py", st["tests_status"]))
    if "bench" not in st:
        rows.append(("ensemble", "status", st.get("status", "-")))
    for b in st.get("bench", []):
        what = f"{b['cell']}, {b['variant']}"
        if b["status"] != "ok":
            rows.append(("ensemble", what, b["status"] + (f": {b['error']}" if b.get("error") else "")))
            continue
        for k in b["result"]["rows"]:
            if "error" in k:
                rows.append(("ensemble", f"{what}, K={k['k']}", k["error"]))
                continue
            rows.append(("ensemble", f"{what}, K={k['k']}: it/s in all, per member (× solo); peak MiB",
                         f"{k['it_per_s_in_all']:.2f}, {k['it_per_s_per_member']:.2f} ({k['vs_solo_in_all']:.2f}×); "
                         f"{k['peak_memory_mb']:,.0f}"))
    return rows
