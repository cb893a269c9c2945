"""bpy Operators (``drape.*``): thin, validate and report; the work happens in
scene/, solver/ and bake/. Each sub-module exports a ``classes`` tuple."""

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
