"""Collider panel, in the 3D View "Drape" tab and Properties > Physics."""

import bpy


def _draw(self, context):
    layout = self.layout
    layout.use_property_split = True
    obj = context.object
    if obj is not None and not (obj.type == 'MESH' and obj.drape.enabled):
        c = obj.drape_collider
        layout.prop(c, "kind")
        if c.kind == 'CAPSULE':
            col = layout.column(align=True)
            col.prop(c, "radius_start")
            col.prop(c, "radius_end")
            col = layout.column(align=True)
            col.prop(c, "axis_start")
            col.prop(c, "axis_end")
        elif c.kind == 'SPHERE':
            layout.prop(c, "center")
            layout.prop(c, "sphere_radius")
        elif c.kind == 'BOX':
            layout.prop(c, "center")
            layout.prop(c, "half_extents")
            layout.prop(c, "rounding")
        elif c.kind == 'MESH':
            layout.prop(c, "outer_thickness")
            layout.prop(c, "friction")
            layout.prop(c, "sides")
    row = layout.row(align=True)
    row.operator("drape.collider_add", text="Capsule", icon='MESH_CAPSULE').type = 'CAPSULE'
    row.operator("drape.collider_add", text="Plane", icon='MESH_PLANE').type = 'PLANE'
    row = layout.row(align=True)
    row.operator("drape.collider_add", text="Sphere", icon='MESH_UVSPHERE').type = 'SPHERE'
    row.operator("drape.collider_add", text="Box", icon='MESH_CUBE').type = 'BOX'
    layout.operator("drape.collider_add", text="Mesh", icon='MESH_DATA').type = 'MESH'
    layout.operator("drape.capsules_from_armature", icon='ARMATURE_DATA')
    layout.operator("drape.collider_remove", icon='X')


def _make(suffix, space, region, extra):
    attrs = dict(bl_idname=f"DRAPE_PT_colliders{suffix}", bl_label="Drape Colliders", bl_space_type=space,
                 bl_region_type=region, bl_options={'DEFAULT_CLOSED'}, draw=_draw)
    attrs.update(extra)
    return type(attrs["bl_idname"], (bpy.types.Panel,), attrs)


classes = (
    _make("", 'VIEW_3D', 'UI', {"bl_category": "Drape"}),
    _make("_physics", 'PROPERTIES', 'WINDOW', {"bl_context": "physics"}),
)
