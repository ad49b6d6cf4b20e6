"""What a run and a profile are set to, torch-free: the typed run config and its digest (``config``),
the one table of config keys (``keys``), YAML as DVC reads it (``yamltypes``) and the profiles
of ``params.yaml`` (``profiles``).
"""
