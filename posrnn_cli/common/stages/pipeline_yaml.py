"""``dvc.yaml``, written from the experiment registry (``experiments.EXPERIMENTS`` and ``STAGES``):
each stage that runs experiments names them in its command and its outputs, the aggregate stage
reads every experiment that makes a table, and each stage depends on the whole profile, so a
profile holds only the sections of the experiments it runs (DVC refuses a listed parameter key
that the params file lacks). ``posrnn dvc-yaml`` writes the file; ``--check`` compares.

Torch-free and text only: the file keeps its comments and its layout."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..errors import PosrnnError
from .experiments import EXPERIMENTS, STAGES, Experiment, Stage
from ..numerics import NAMED

#: the file of declared numerics versions (``common.numerics.numerics_table``) the stages that run
#: experiments read theirs from, in place of the code: a version bumped changes dvc.lock, a refactor does not
NUMERICS_FILE = "numerics.json"
#: what the result stages depend on (no training code): the analysis package and every other module it
#: imports, each by its own path (tests/test_house.py checks that they cover every module a stage's command runs)
RESULT_PACKAGE = "posrnn_cli.analysis"

HEADER = """\
# The experiments of the papers as one DVC pipeline, one stage per step, each a `foreach` over
# the active profile(s) in params.yaml (`profile: [lite]`; switch with `posrnn profile use NAME`).
# Written by `posrnn dvc-yaml` from the experiment registry (posrnn_cli/common/stages/experiments.py):
# edit the registry, not this file, then run it (`posrnn dvc-yaml --check` compares).
#
#   dvc repro                                             # the active profile: runs/, results/, figures/<name>
#   dvc exp run -S profiles.lite.fig2.iterations=8000     # one value changed, as an experiment
#   dvc metrics show                                      # one row per experiment
#   dvc plots show                                        # the figures and every run's training curves
#
# `train` runs every training experiment of the profile as one sweep (`posrnn sweep`: all cores or
# GPUs busy, or a SLURM array), so no core idles between experiments. A run is skipped when it is
# finished with the same config, resumed when interrupted, replaced when its config changed
# (--force: the stage owns its outputs); outputs persist between runs of a stage, so only the
# cells that changed are trained. Each stage reads the whole profile (a profile holds only the
# sections of the experiments it runs; a change elsewhere in it re-runs a sweep that finds its
# runs up to date). A stage that runs experiments reads the declared numerics versions of what it
# runs from numerics.json (written with this file; bumped by hand when a change is meant to change
# numbers), not the code: a refactor or a rename re-runs nothing. The result stages depend on the
# modules they run; tests/test_house.py checks that the deps cover every module their commands import.
#
# The outputs that hold checkpoints are `cache: false`: DVC records their hashes (so a change
# reruns what reads them) but keeps no second copy of the checkpoints in .dvc/cache; the
# profile's `keep_checkpoints` decides how many each run keeps (docs/pipeline.md, "Storage").
"""

RESULT_STAGES = """\
  # ---- from here on: result files only (no training code) -----------------------------------
  aggregate:
    foreach: ${{profile}}
    do:
      cmd: >-
        posrnn aggregate runs/${{item}} --out results/${{item}}/tables --metrics results/${{item}}/metrics
        --curves results/${{item}}/curves
      deps:
{runs}
{result_code}
      outs:
        - results/${{item}}/tables: {{cache: false}}
      metrics:
        - results/${{item}}/metrics: {{cache: false}}
      plots:  # every run's training loss and accuracy, one figure per experiment, a line per run
        - results/${{item}}/curves:
            cache: false
            x: step
            y: loss
            template: posrnn_cli/analysis/training_curves.json

  plot:
    foreach: ${{profile}}
    do:
      cmd: posrnn plot results/${{item}}/tables --out figures/${{item}}
      deps:
        - results/${{item}}/tables
{result_code}
      plots:
        - figures/${{item}}: {{cache: false}}

  scorecard:
    foreach: ${{profile}}
    do:
      cmd: posrnn scorecard ${{item}} --results results/${{item}}/tables --out results/${{item}}/scorecard --quiet
      params:  # the design's power (the claims its seeds are not expected to decide) is in the profile
        - profiles.${{item}}
      deps:
        - results/${{item}}/tables
{result_code}
      outs:
        - results/${{item}}/scorecard: {{cache: false}}
"""


def _items(lines: list[str]) -> str:
    return "\n".join(f"        - {x}" for x in lines)


def result_code() -> list[str]:
    """The deps of the result stages: ``posrnn_cli/__init__.py``, the analysis package and each
    module outside it that the analysis imports, directly or not."""
    from .sources import ROOT, closure, module_files

    files = module_files()
    mods = set().union(*(closure(m) for m in files if m == RESULT_PACKAGE or m.startswith(RESULT_PACKAGE + ".")))
    top = ROOT.parent
    outside = sorted(files[m].relative_to(top).as_posix() for m in mods
                     if m != RESULT_PACKAGE and not m.startswith(RESULT_PACKAGE + ".") and m != "posrnn_cli")
    return ["posrnn_cli/__init__.py", RESULT_PACKAGE.replace(".", "/"), *outside]


def stage_numerics(exps: list[Experiment]) -> list[str]:
    """The keys of numerics.json a stage running ``exps`` reads: the versions of every core, task
    and form, and those of the procedures its job kinds run."""
    procedures = dict.fromkeys(p for e in exps for p in e.job_kind.numerics)
    return [*NAMED, *procedures]


def _stage(stage: Stage, exps: list[Experiment]) -> str:
    names = [e.name for e in exps]
    inside = set(names)
    sources = list(dict.fromkeys(f"runs/${{item}}/{e.source}" for e in exps if e.source and e.source not in inside))
    params = (["task", "model", "train"] if stage.shared_config else []) + ["profiles.${item}"]
    versions = "".join(f"\n            - {k}" for k in stage_numerics(exps))
    deps = [*stage.inputs, *sources]
    outs = [f"runs/${{item}}/{e.name}: {{persist: true{', cache: false' if e.job_kind.trains else ''}}}" for e in exps]
    return (f"  {stage.name}:\n    foreach: ${{profile}}\n    do:\n"
            f"      cmd: posrnn sweep {' '.join(names)} --profile ${{item}} --force\n"
            f"      params:\n{_items(params)}\n        - {NUMERICS_FILE}:{versions}\n"
            + (f"      deps:\n{_items(deps)}\n" if deps else "")
            + f"      outs:\n{_items(outs)}\n")


def dvc_yaml(experiments: Optional[dict[str, Experiment]] = None, stages: Optional[dict[str, Stage]] = None) -> str:
    """The text of ``dvc.yaml`` for the registry (or the ``experiments`` and ``stages`` given)."""
    experiments = EXPERIMENTS if experiments is None else experiments
    stages = STAGES if stages is None else stages
    unknown = sorted({e.stage for e in experiments.values()} - set(stages))
    if unknown:
        raise PosrnnError(f"experiments name stage(s) {', '.join(unknown)} that the registry's STAGES lacks; add them")
    parts = [_stage(s, [e for e in experiments.values() if e.stage == s.name]) for s in stages.values()]
    parts = [p for s, p in zip(stages.values(), parts) if any(e.stage == s.name for e in experiments.values())]
    runs = [f"runs/${{item}}/{e.name}" for s in stages for e in experiments.values() if e.stage == s and e.table]
    results = RESULT_STAGES.format(runs=_items(runs), result_code=_items(result_code()))
    return HEADER + "\nstages:\n" + "\n".join(parts) + "\n" + results


#: the line every dvc.yaml that ``posrnn dvc-yaml`` writes holds near its top: its proof of authorship
AUTHOR_LINE = "# Written by `posrnn dvc-yaml` from the experiment registry"


def written_by_us(data: bytes) -> bool:
    """Whether ``data`` is a dvc.yaml that ``posrnn dvc-yaml`` wrote (its header line, at the top)."""
    return any(line.startswith(AUTHOR_LINE.encode()) for line in data[:4096].splitlines()[:12])


def check_dvc_yaml(path: Path) -> Optional[str]:
    """None when ``path`` holds what the registry gives, else a one-line reason."""
    from ..errors import PosrnnError
    from ..files.io import read_bounded

    want = dvc_yaml()
    try:
        have = read_bounded(path, "dvc.yaml").decode("utf-8")
    except FileNotFoundError:
        return f"{path} does not exist; write it with posrnn dvc-yaml"
    except PosrnnError as e:
        return str(e)
    except (OSError, UnicodeDecodeError) as e:
        return f"{path} cannot be read ({type(e).__name__}); restore it from git or write it with posrnn dvc-yaml"
    if have == want:
        return None
    a, b = have.splitlines(), want.splitlines()
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return (f"{path} differs from what the experiment registry gives, first at line {i + 1}; "
            f"run posrnn dvc-yaml to write it (edit posrnn_cli/common/stages/experiments.py, not dvc.yaml)")
