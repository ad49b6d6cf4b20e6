"""How fast a mistake is refused: ``posrnn --help`` against ``posrnn train --model`` with a name
no core has, each run ``--repeat`` times in a fresh process; the least wall time and the least CPU
time (user + system, which other work on the machine disturbs less) of each, and their ratios::

    python -m posrnn_cli.measure.refusal_bench --repeat 15

A benchmark, not a test: it prints figures and checks nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: the commands compared, after the ``posrnn`` executable
CASES = {"posrnn --help": ["--help"],
         "posrnn train --model no_such_core": ["train", "--model", "no_such_core", "--out", "{tmp}/r"]}


def timed(argv: list[str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the child, exit code) of one run of ``argv``."""
    before = os.times()
    start = time.perf_counter()
    rc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    wall = time.perf_counter() - start
    after = os.times()
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system), rc


def measure(exe: str, repeat: int) -> dict[str, dict]:
    """Each case's least wall and CPU time over ``repeat`` runs, and its exit code."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in CASES.items():
            runs = [timed([exe, *(a.format(tmp=tmp) for a in args)]) for _ in range(repeat)]
            out[name] = {"wall_s": min(w for w, _, _ in runs), "cpu_s": min(c for _, c, _ in runs),
                         "exit": runs[-1][2]}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args(argv)
    exe = shutil.which("posrnn") or str(Path(sys.executable).with_name("posrnn"))
    res = measure(exe, max(1, args.repeat))
    load = os.getloadavg()[0]
    print(f"least of {args.repeat} runs each ({os.cpu_count()} cores, 1-minute load average {load:.1f}):")
    for name, r in res.items():
        print(f"  {name:40s} wall {r['wall_s']:.3f} s   CPU {r['cpu_s']:.3f} s   exit {r['exit']}")
    (h, b) = (res[n] for n in CASES)
    print(f"  a bad --model against --help: wall {b['wall_s'] / h['wall_s']:.2f}x, CPU {b['cpu_s'] / h['cpu_s']:.2f}x")


if __name__ == "__main__":
    main()
