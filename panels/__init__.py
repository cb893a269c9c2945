"""bpy Panels: the 3D View sidebar "Drape" tab and the Properties > Physics
panel, with sub-panels. Each sub-module exports a ``classes`` tuple, parents
before children."""

import bpy

from . import bake, cloth, colliders

classes = cloth.classes + colliders.classes + bake.classes

register, unregister = bpy.utils.register_classes_factory(classes)
