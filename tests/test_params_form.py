"""params.yaml is kept in the form DVC writes back, so `dvc exp run -S` and `posrnn profile use`
change exactly the line they set and no comment is lost (tools/dvc_format_params.py restores
the form after a hand edit)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from posrnn_cli.common.settings.profiles import active_profiles, use_profile

from conftest import ROOT
PARAMS = ROOT / "params.yaml"


def _changed(a: str, b: str) -> list[tuple[str, str]]:
    import difflib
    return [ln for ln in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
            if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]


def test_params_is_the_fixed_point_of_dvcs_writer(tmp_path):
    from dvc.utils.hydra import apply_overrides

    p = tmp_path / "params.yaml"
    shutil.copy(PARAMS, p)
    apply_overrides(str(p), ["profile=[lite]"])
    assert p.read_text() == PARAMS.read_text(), "params.yaml has drifted: run python tools/dvc_format_params.py"
    apply_overrides(str(p), ["profiles.micro.fig2.iterations=33"])
    assert _changed(PARAMS.read_text(), p.read_text()) == ["-      iterations: 20", "+      iterations: 33"]


def test_a_hand_edit_in_flow_style_is_caught_and_the_tool_restores_the_form(tmp_path):
    from dvc.utils.hydra import apply_overrides

    p = tmp_path / "params.yaml"
    p.write_text(PARAMS.read_text().replace("profile:\n- lite\n", "profile: [lite]\n# a note after a list\n", 1))
    before = p.read_text()
    apply_overrides(str(p), ["profile=[lite]"])
    assert p.read_text() != before  # DVC would rewrite the hand edit
    p.write_text(before)
    subprocess.run([sys.executable, str(ROOT / "tools" / "dvc_format_params.py"), str(p)], check=True)
    after = p.read_text()
    apply_overrides(str(p), ["profile=[lite]"])
    assert p.read_text() == after and yaml.safe_load(after) == yaml.safe_load(before)


def test_profile_use_changes_one_line(tmp_path):
    p = tmp_path / "params.yaml"
    shutil.copy(PARAMS, p)
    use_profile(p, ["micro"])
    assert active_profiles(p) == ["micro"]
    assert _changed(PARAMS.read_text(), p.read_text()) == ["-- lite", "+- micro"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_dvc_exp_run_set_param_changes_one_line(tmp_path):
    """A real `dvc exp run -S` on the committed params.yaml (a one-stage pipeline that reads it)."""
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t.invalid"}
    dvc = [sys.executable, "-m", "dvc"]
    shutil.copy(PARAMS, tmp_path / "params.yaml")
    (tmp_path / "dvc.yaml").write_text("stages:\n  s:\n    cmd: echo ok\n    params:\n      - profiles.micro.fig2\n")
    for cmd in (["git", "init", "-q"], [*dvc, "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "init"],
                [*dvc, "exp", "run", "-q", "-S", "profiles.micro.fig2.iterations=33"]):
        subprocess.run(cmd, cwd=tmp_path, env=env, check=True, capture_output=True, timeout=300)
    new = (tmp_path / "params.yaml").read_text()
    assert _changed(PARAMS.read_text(), new) == ["-      iterations: 20", "+      iterations: 33"]
    assert re.findall(r"#.*", new) == re.findall(r"#.*", PARAMS.read_text())
