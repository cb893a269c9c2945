"""bpy Panels: the 3D View sidebar "Drape" tab and the Properties > Physics
panel, with sub-panels. Each sub-module exports a ``classes`` tuple, parents
before children."""

import importlib

_SUBMODULES = ("cloth", "colliders", "bake")


def _classes():
    for name in _SUBMODULES:
        yield from importlib.import_module(f"{__package__}.{name}").classes


def register():
    import bpy

    for cls in _classes():
        bpy.utils.register_class(cls)


def unregister():
    import bpy

    for cls in reversed(list(_classes())):
        bpy.utils.unregister_class(cls)
