"""Register/unregister cycles leave nothing behind, and Blender still exits
cleanly after Drape was unregistered and its modules dropped."""

import pathlib
import subprocess
import sys

import bpy

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _snapshot():
    return (
        {name for name in dir(bpy.types) if name.startswith("DRAPE_")},
        {name for name in dir(bpy.types.Object) if name.startswith("drape")},
        sum(len(getattr(bpy.app.handlers, n)) for n in dir(bpy.app.handlers)
            if isinstance(getattr(bpy.app.handlers, n), list)),
    )


def test_register_cycles_leave_nothing():
    import drape

    session_registered = hasattr(bpy.types.Object, "drape")  # the `addon` fixture of earlier tests
    if session_registered:
        drape.unregister()
    before = _snapshot()
    for _ in range(2):
        drape.register()
        drape.unregister()
        assert _snapshot() == before
    if session_registered:
        drape.register()


# What Blender's extension uninstaller does: disable, then drop the add-on's
# modules from sys.modules. In Blender 4.2 a property callback that kept the
# bpy module alive made the process crash at exit after this (rc 139).
_UNINSTALL_AND_EXIT = """
import importlib.util, sys
import bpy
spec = importlib.util.spec_from_file_location("drape", sys.argv[1] + "/__init__.py",
                                              submodule_search_locations=[sys.argv[1]])
drape = importlib.util.module_from_spec(spec)
sys.modules["drape"] = drape
spec.loader.exec_module(drape)
drape.register()
bpy.ops.mesh.primitive_grid_add(x_subdivisions=4, y_subdivisions=4)
obj = bpy.context.object
obj.drape.pin_group = "none"
obj.drape.stretch_stiffness = 1e6
assert abs(obj.drape.stretch_compliance - 1e-6) < 1e-12
drape.unregister()
for name in [m for m in sys.modules if m == "drape" or m.startswith("drape.")]:
    sys.modules.pop(name)
del drape
print("unregistered")
"""


def test_blender_exits_cleanly_after_drape_is_unregistered_and_dropped():
    proc = subprocess.run([sys.executable, "-c", _UNINSTALL_AND_EXIT, str(ROOT)],
                          capture_output=True, text=True, timeout=300)
    assert "unregistered" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, f"exit status {proc.returncode}: " + proc.stderr[-3000:]


# A script or farm job that registers Drape and simply ends. Blender 4.2 and
# 4.5 as a Python module crashed (4.2, rc 139) or never exited (4.5) when a
# class or handler was still registered at exit.
_REGISTER_AND_END = """
import importlib.util, sys
import bpy
spec = importlib.util.spec_from_file_location("drape", sys.argv[1] + "/__init__.py",
                                              submodule_search_locations=[sys.argv[1]])
drape = importlib.util.module_from_spec(spec)
sys.modules["drape"] = drape
spec.loader.exec_module(drape)
drape.register()
bpy.ops.mesh.primitive_grid_add(x_subdivisions=4, y_subdivisions=4)
assert bpy.ops.drape.cloth_add() == {'FINISHED'}
print("registered")
"""


def test_a_script_that_leaves_drape_registered_exits_cleanly():
    proc = subprocess.run([sys.executable, "-c", _REGISTER_AND_END, str(ROOT)],
                          capture_output=True, text=True, timeout=120)
    assert "registered" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, f"exit status {proc.returncode}: " + proc.stderr[-3000:]
