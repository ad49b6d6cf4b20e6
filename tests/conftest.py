"""Test-wide settings: one torch thread (2-core CI machines thrash with more under load),
DVC analytics off with a private site cache."""

import os
import tempfile

import torch

torch.set_num_threads(1)
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("DVC_SITE_CACHE_DIR", tempfile.mkdtemp(prefix="dvc-site-"))
