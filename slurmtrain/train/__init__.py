"""The built-in Llama trainer (``python -m slurmtrain.train``); the only package that imports torch.

`presets.py` is the exception: it is torch-free so the CLI can list models on a login node.
"""
