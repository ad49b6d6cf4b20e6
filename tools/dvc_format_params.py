"""Write params.yaml in the form DVC writes it back (``dvc exp run -S``), so that setting one
value changes exactly one line: DVC rewrites every list in block style and drops comments that
sit inside a list. Run after editing params.yaml by hand:

    python tools/dvc_format_params.py params.yaml

It sets the active profile to itself through DVC's own writer, twice (the first pass moves
comments that follow a list; the second is then a fixed point). tests/test_params_form.py
checks the committed file is that fixed point.
"""

from __future__ import annotations

import sys

import yaml
from dvc.utils.hydra import apply_overrides


def main(path: str) -> None:
    with open(path) as f:
        profile = yaml.safe_load(f)["profile"]
    for _ in range(2):
        apply_overrides(path, [f"profile=[{','.join(profile)}]"])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "params.yaml")
