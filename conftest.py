"""Make the repository importable as the package ``drape`` for every test.

`make test` links the checkout into the venv as ``drape``; under pytest-blender
(a real Blender's Python) there is no such link, so load the package by path.
"""

import importlib.util
import pathlib
import sys

_ROOT = pathlib.Path(__file__).resolve().parent

if "drape" not in sys.modules:
    try:
        import drape  # noqa: F401
    except ImportError:
        spec = importlib.util.spec_from_file_location(
            "drape", _ROOT / "__init__.py", submodule_search_locations=[str(_ROOT)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["drape"] = module
        spec.loader.exec_module(module)

# Shared test helpers (independent oracles, scene builders) live in tests/ as
# plain modules: `import oracles`.
if str(_ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(_ROOT / "tests"))
