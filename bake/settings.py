"""``Object.drape_bake``: what to bake and where, and what is baked now."""

import bpy
from bpy.props import BoolProperty, EnumProperty, IntProperty, StringProperty
from bpy.types import PropertyGroup

from ..scene import compat
from . import targets


class DrapeBakeSettings(PropertyGroup):
    """Per-object bake settings and the record of the bake in place."""

    # What the artist asks for.
    # The choices are the registered targets (bake/targets); a .blend stores a target's number.
    target: EnumProperty(name="Bake to", items=targets.enum_items, default=targets.get('PC2').number)
    folder: StringProperty(
        name="Cache folder",
        description="Folder for PC2/Alembic files; '//' means relative to the saved .blend",
        default="//drape_cache/",
        subtype='DIR_PATH',
        options=compat.blend_relative_path_options(),
    )
    use_scene_range: BoolProperty(name="Scene frame range", default=True,
                                  description="Bake the scene's frame range; off: the range below")
    frame_start: IntProperty(name="Start", default=1, min=0)
    frame_end: IntProperty(name="End", default=250, min=0)

    # What is baked now (written by the bake, read by scene.runtime and by the free).
    baked: BoolProperty(name="Baked", default=False,
                        description="The object plays its bake; the live simulation is off")
    baked_target: StringProperty(name="Baked target", default="")
    baked_filepath: StringProperty(name="Baked file", default="")
    baked_frame_start: IntProperty(name="Baked start", default=0)
    baked_frame_end: IntProperty(name="Baked end", default=0)
    baked_vertices: IntProperty(name="Baked vertices", default=0)
    created_basis: BoolProperty(default=False, options={'HIDDEN'},
                                description="The bake added the Basis shape key (the free removes it)")
    baked_action: StringProperty(default="", options={'HIDDEN'})
    baked_cache_file: StringProperty(default="", options={'HIDDEN'})
    muted_keys: StringProperty(default="", options={'HIDDEN'},
                               description="The artist's shape keys a shape-key bake muted (one per line)")
    disabled_modifiers: StringProperty(default="", options={'HIDDEN'},
                                       description="Rig modifiers a shape-key bake turned off (one per line)")


classes = (DrapeBakeSettings,)
_register_classes, _unregister_classes = bpy.utils.register_classes_factory(classes)


def register():
    _register_classes()
    bpy.types.Object.drape_bake = bpy.props.PointerProperty(type=DrapeBakeSettings)


def unregister():
    del bpy.types.Object.drape_bake
    _unregister_classes()
