"""The one bridge between bpy and the solver: reads inputs, writes results.

- ``meshdata``: meshes to arrays (foreach_get), input checks (DrapeInputError)
- ``colliders``: capsule / plane collider objects to start/end solver arrays
- ``wind``: Blender Wind force fields sampled per vertex
- ``params``: Object.drape -> solver.ClothParams, rebuild keys
- ``writeback``: the "Drape" Geometry Nodes modifier that shows the result
- ``runtime``: live solver state per object, frame_change_post preview
- ``armature``: capsules from an armature's deform bones
- ``draw``: viewport drawing of colliders
- ``simmesh``: automatic simplification of the simulated mesh (issue 6)
"""

import importlib

_HANDLER_MODULES = ("runtime", "draw")


def register():
    for name in _HANDLER_MODULES:
        importlib.import_module(f"{__package__}.{name}").register()


def unregister():
    for name in reversed(_HANDLER_MODULES):
        importlib.import_module(f"{__package__}.{name}").unregister()
