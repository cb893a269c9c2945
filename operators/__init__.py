"""bpy Operators (``drape.*``): thin, validate and report; the work happens in
scene/, solver/ and bake/. Each sub-module exports a ``classes`` tuple."""

import bpy

from . import bake, cloth, colliders

classes = cloth.classes + colliders.classes + bake.classes

register, unregister = bpy.utils.register_classes_factory(classes)
