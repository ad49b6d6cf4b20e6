"""The files posrnn writes and how, torch-free: atomic writes, ownership markers, bounded readers,
CSV tables and ``.npz`` archives (``io``), and the run-directory format: the files a run holds,
the state a directory is in for a config and the record of the code that trained the run
(``rundir``).
"""
