"""The machine and posrnn's processes on it, torch-free: defaults that fit the machine (``machine``),
the memory a run needs against what is free (``memory``), stopping at a safe point on a signal
(``signals``) and child processes that die with their starter (``lifeline``).
"""
