"""No run goes stale because of how params.yaml is read: the config digest
(``common.settings.config.config_digest``, which ``code.json`` records and staleness compares) of every job
each profile plans is pinned here, per profile, as it was when posrnn read params.yaml with
PyYAML and reconciled it with DVC's reading. Reading it with DVC's own loader leaves every one
as it was."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from posrnn_cli.common.stages.experiments import EXPERIMENTS
from posrnn_cli.common.settings.profiles import read_params
from posrnn_cli.common.settings.config import config_digest
from posrnn_cli.sweep.plan import plan

from conftest import ROOT

PARAMS = ROOT / "params.yaml"
#: profile → (the jobs with a config it plans, the sha256 of their {label: config digest})
EXPECTED = {
    "beyond": (96, "e844b0d8f25f573f56c735eb5aa0f8de6ef0c8c1026c46b43c5b630e92f6e491"),
    "beyond2": (86, "cbce57a18818b3362e2b733c3ff1ce35e9861e07a302778ed350d3bafed69e58"),
    "beyond3": (24, "888ccffe395c99d17da9ede3d8d714b84963836efd496d54ff252f2553fbdd71"),
    "beyond_map": (144, "3c700fdc6e93bf84a5d0769a473974857e409c78b560e9e8d097c4e3f886245a"),
    "beyond_map_block": (72, "984a4e3001586806498d3d30f8e787b88ebdd8eaf88f244594962e91119d6d31"),
    "beyond_map_paper": (240, "ea203be3e681876d0cd0bee97b6279134749913644557a096fbbb22f174d6c33"),
    "beyond_paper": (460, "50cc90fafb1d2ab755af8b7403a32dfeb191edfb8f5fe36736a72d4a125fd49c"),
    "lite": (87, "48bfda28ee9a33de3b394fd65f475892508cb99e1f692efed7ebc5ae3cc0b0a8"),
    "lite_extra": (99, "969f479dccbc80245559c9c866012eda4d07985049d8556644bb78d87a4a219c"),
    "lite_round2": (156, "06582b0d96e7745129a8af3f56a11935490928ba7220884c9b9cb676b8fa2ee0"),
    "lite_seeds": (150, "4b60e75a7ecd348f5f7c9ebb3d707ea7bb77dae9cc6764517597bb6a2ef768fa"),
    "micro": (84, "e128214d74fa823db7ff4354c2dbb6c5e058dd8db8c41cc9c8c9b9328ebfadf2"),
    "paper": (1340, "21678ec36b7c31d5fd5dc45cd77f469097b3dd4909e3d2cfd39984cbbfaf0b5d"),
    "paper_core": (120, "8e28596c6e656e76af69664e6ca84115bc0e22dd4a1e1a10a43e37d7257b5ac9"),
}


def profile_digest(profile: str) -> tuple[int, str]:
    """How many jobs with a config ``profile`` plans (under the default ``runs/<profile>``) and
    the sha256 of their config digests by label."""
    prof = read_params(PARAMS)["profiles"][profile]
    digests = {}
    for exp in (e for e in EXPERIMENTS if e in prof):
        for job in plan(PARAMS, profile, [exp], runs_root=Path("runs") / profile):
            if job.config is not None:
                digests[job.label] = config_digest(job.config)
    return len(digests), hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_every_planned_config_digests_as_pinned(profile, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no run directory of the checkout is read
    if profile not in read_params(PARAMS)["profiles"]:
        pytest.skip(f"params.yaml no longer defines {profile}")
    assert profile_digest(profile) == EXPECTED[profile], (
        f"profile {profile}: its runs' configs changed, so its committed runs would read as stale; a change to how "
        f"params.yaml is read must keep every config; when the profile was changed on purpose, pin profile_digest's "
        f"new value here")
