"""Bake Drape cloth in a saved .blend without a UI, then save the .blend.

With a real Blender (Drape installed and enabled as an extension, or not:
this script then loads the add-on from the checkout it lives in)::

    blender -b shot.blend --python-exit-code 1 --python tools/bake_headless.py -- \\
        --object Cape --target PC2 --start 1 --end 240

With the bpy module (the dev venv)::

    .venv/bin/python tools/bake_headless.py shot.blend --object Cape --target PC2 [--threads 8]

Options, exit status and the farm command for an installed extension: see
``bake/headless.py`` (this script registers Drape from the checkout, then
runs that entry point).
"""

import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _ensure_addon():
    """Drape's classes, or load the add-on from this checkout."""
    import bpy

    if hasattr(bpy.types.Object, "drape_bake"):
        # Already enabled (an installed extension: bl_ext.<repo>.drape).
        for name in list(sys.modules):
            if name.endswith("drape.bake.job"):
                return sys.modules[name[: -len(".bake.job")]]
        raise RuntimeError("Drape is registered but its package was not found")
    try:
        import drape
    except ImportError:
        spec = importlib.util.spec_from_file_location(
            "drape", os.path.join(ROOT, "__init__.py"), submodule_search_locations=[ROOT])
        drape = importlib.util.module_from_spec(spec)
        sys.modules["drape"] = drape
        spec.loader.exec_module(drape)
    drape.register()
    return drape


def main(argv):
    import importlib

    drape = _ensure_addon()
    return importlib.import_module(f"{drape.__name__}.bake.headless").main(argv)


if __name__ == "__main__":
    argv = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else sys.argv[1:]
    code = main(argv)
    sys.stdout.flush()
    if code:
        sys.exit(code)
