"""Measuring posrnn: ``posrnn bench`` and its reference loop (``bench``), the ensemble bench, the
local executor's runs per hour, the cost estimate of a sweep (``cost``: the CPU calibration, the
GPU time and memory model, the language model's tokens) and the GPU check that
``tools/gpu_check.sh`` runs (``python -m posrnn_cli.measure.gpu_check``).

It sits above the engine and the sweep (it times their loops and prices their plans) and below
the CLI; neither the engine nor the sweep imports it. Importing the package imports nothing, so
the GPU check's option check runs in a bare venv.
"""
