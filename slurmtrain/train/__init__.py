"""The built-in Llama trainer (``python -m slurmtrain.train``); the only package that imports torch.

Torch-free on purpose, so the CLI can use them on a login node: ``presets.py`` (model
shapes), ``recipe.py`` (recipe loading), ``inputs.py`` (batch, corpus and tokenizer checks),
``jobcheck.py`` (a job checked against its profile before it is queued), ``progress.py``
(reading metrics for watch/plot) and ``demo_corpus.py``. Everything else imports torch.

Pieces: ``recipe`` -> ``tokenizer``/``data`` -> ``model`` + ``parallelize`` (AC, compile,
FSDP2) -> ``trainer`` (loop, eval, logging via ``metrics``, stopping via ``stop``) with
``checkpoint`` (DCP, resume, ``load_consolidated``); ``__main__`` wires them together.
"""
