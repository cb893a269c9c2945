"""Hides the venv's copies of some top-level packages from a child process, so
it imports them the way an installed extension does (from its own wheels).

Imports nothing outside the standard library: the probe scripts that use it
(tests/blender/test_warmup.py, tests/blender/test_extension.py,
tools/measure_startup.py) run as plain child scripts before bpy is imported.
"""

import importlib.abc
import importlib.machinery
import os
import sys


class OnlyUnder(importlib.abc.MetaPathFinder):
    """Top-level imports of ``names`` are found only below ``root`` (the
    installed extension's wheels), nowhere else on sys.path."""

    def __init__(self, names, root):
        self.names = set(names)
        self.root = os.path.realpath(root)

    def find_spec(self, name, path=None, target=None):
        if path is not None or name not in self.names:
            return None
        allowed = [p for p in sys.path if os.path.realpath(p or ".").startswith(self.root + os.sep)]
        spec = importlib.machinery.PathFinder.find_spec(name, allowed)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r} below {self.root}", name=name)
        return spec


def only_under(names, root):
    """From now on this process finds ``names`` only below ``root``."""
    sys.meta_path.insert(0, OnlyUnder(names, root))
