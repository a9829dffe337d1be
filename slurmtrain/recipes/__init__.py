"""The built-in trainer's recipes, torch-free, beside the cluster profiles: the typed
recipe (``recipe.py``), model presets (``presets.py``), DeepSpeed configs
(``ds_config.py``), what a recipe asks of the world it runs in (``inputs.py``) and the
checks ``gen``/``submit`` run on a job of the trainer before it is queued (``jobcheck.py``)."""
