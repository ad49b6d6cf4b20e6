"""Names live in their registries: no module outside them compares a value with the name of a
task, core, PE form, experiment or job kind (each such difference is a capability on the entry)."""

from __future__ import annotations

import re
from pathlib import Path

from posrnn_cli.common import catalog
from posrnn_cli.common.stages.experiments import EXPERIMENTS, JOB_KINDS

from conftest import ROOT
#: the registries and the modules that implement their entries
REGISTRIES = ("posrnn_cli/common/catalog.py", "posrnn_cli/common/stages/experiments.py", "posrnn_cli/tasks/",
              "posrnn_cli/models/")
#: words that are registered names and also mean something else where they are compared
OTHER_MEANINGS = {"train"}  # a data split, a DVC stage


def registered_names() -> set[str]:
    names = set(catalog.TASKS) | set(catalog.CORES) | set(catalog.PE_FORMS) | set(EXPERIMENTS) | set(JOB_KINDS)
    return names - OTHER_MEANINGS


def name_checks(root: Path = ROOT / "posrnn_cli") -> list[str]:
    pattern = re.compile(r"""[!=]=\s*["'](%s)["']|["'](%s)["']\s*[!=]=""" % (("|".join(map(re.escape,
                                                                                           sorted(registered_names()))),
                                                                              ) * 2))
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        if rel.startswith(REGISTRIES):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                found.append(f"{rel}:{n}: {line.strip()}")
    return found


def test_no_module_outside_the_registries_compares_with_a_registered_name():
    assert name_checks() == []


def test_the_check_finds_a_comparison(tmp_path):
    pkg = tmp_path / "posrnn_cli" / "engine"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text('if cfg.model.name == "transformer":\n    pass\nif "lm" != task:\n    pass\nok = split '
                              '== "train"\n')
    assert [f.split(":")[1] for f in name_checks(tmp_path / "posrnn_cli")] == ["1", "3"]
