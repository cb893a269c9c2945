"""Drape: fast, controllable XPBD cloth for Blender.

This module only registers and unregisters. It imports nothing from Blender
at import time so that ``drape.solver`` stays usable from plain Python.
"""

import os

# Sub-modules that own bpy classes, handlers or properties, in registration order.
_MODULE_NAMES = ("properties", "bake", "operators", "panels", "scene")


def _configure_numba_cache():
    """Point numba's disk cache at a writable, per-user folder.

    Runs in register(), before any of our modules imports numba: numba reads
    NUMBA_CACHE_DIR into its config on import, and a kernel picks its cache
    folder when it is decorated. Inside an installed extension the folder is
    the extension's user folder (the installed sources may be read-only and
    are replaced on update); when the package is loaded some other way (tests,
    a dev checkout) Blender refuses extension_path_user and we keep numba's
    default (next to the sources). A NUMBA_CACHE_DIR the user set wins.
    """
    import sys

    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    try:
        import bpy

        path = bpy.utils.extension_path_user(__package__, path="numba_cache", create=True)
    except (ValueError, AttributeError, ImportError):
        return
    os.environ["NUMBA_CACHE_DIR"] = path
    # Another add-on may have imported numba already: make it re-read the environment.
    config = sys.modules.get("numba.core.config")
    if config is not None:
        config.reload_config()


def _modules():
    import importlib

    return [importlib.import_module(f"{__package__}.{name}") for name in _MODULE_NAMES]


def register():
    _configure_numba_cache()
    for module in _modules():
        module.register()
    from .scene import compat, warmup

    compat.unregister_at_exit(unregister)
    warmup.start(__package__)  # the solver compiles in background processes (scene/warmup.py)


def unregister():
    from .scene import compat, warmup

    warmup.stop()
    compat.cancel_unregister_at_exit(unregister)
    compat.forget_incompatibility()
    for module in reversed(_modules()):
        module.unregister()
