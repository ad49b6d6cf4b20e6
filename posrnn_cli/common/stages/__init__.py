"""The DVC pipeline, declared, torch-free: every experiment its stages run (``experiments``), the
``dvc.yaml`` written from them (``pipeline_yaml``) and the package's own import graph, from which
the result stages' deps are listed and the tests check the layering (``sources``).
"""
