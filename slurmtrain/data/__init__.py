"""The data path, torch-free (the login node runs it: ``slurmtrain tokenize``,
``demo-corpus``, the checks of ``gen``/``submit``): raw text and Hugging Face ``datasets``
folders in, tokenized shards out (``shards.py`` is the format the trainer memory-maps)."""
