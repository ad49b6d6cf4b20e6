"""What a result is and how far it is trusted, torch-free: confidence intervals with the seed as the
unit (``stats``), the one check of a result table (``tables``) and the stamps that prove whose a
score file is (``provenance``). Each task's floor lines sit beside the tasks (``tasks.floors``).
"""
