"""The laptop's Python in tests/remote (scripts/login_node.sh puts this first on its
PYTHONPATH): slurmtrain's command line only. torch, submitit, deepspeed and transformers
cannot be imported, so a command that needed them on the laptop fails the test."""

import sys


class _NotOnTheLaptop:
    BLOCKED = ("torch", "submitit", "deepspeed", "transformers")

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.BLOCKED:
            raise ImportError(f"{name} is not on the laptop (tests/remote/laptop/sitecustomize.py)")
        return None


sys.meta_path.insert(0, _NotOnTheLaptop())
