"""The Bake sub-panel of the Drape Cloth panel (panels/cloth.py), in the 3D
View sidebar's "Drape" tab and in Properties > Physics."""

import bpy

from ..bake import job as bake_job, targets


def _draw(layout, context):
    obj = context.active_object
    if obj is None or not hasattr(obj, "drape_bake"):
        layout.label(text="No active object")
        return
    st = obj.drape_bake
    layout.use_property_split = True
    layout.use_property_decorate = False
    baked = bool(st.baked_target)
    col = layout.column()
    col.enabled = not baked
    col.prop(st, "target")
    target = targets.get(st.target)
    if target is not None and target.writes_file:
        col.prop(st, "folder")
    col.prop(st, "use_scene_range")
    if not st.use_scene_range:
        sub = col.column(align=True)
        sub.prop(st, "frame_start", text="Frame Start")
        sub.prop(st, "frame_end", text="End")
    if baked:
        box = layout.box()
        box.label(text=f"Baked to {targets.label(st.baked_target)}: frames "
                       f"{st.baked_frame_start}-{st.baked_frame_end}", icon='CHECKMARK')
        if st.baked_filepath:
            box.label(text=st.baked_filepath, icon='FILE')
        if not st.baked:
            box.label(text="Bake hidden while re-baking", icon='INFO')
    row = layout.row(align=True)
    row.scale_y = 1.3
    row.operator("drape.bake", text="Re-bake" if baked else "Bake", icon='REC').objects = 'ACTIVE'
    row.operator("drape.bake_free", text="Free Bake", icon='TRASH').objects = 'ACTIVE'
    row = layout.row(align=True)
    op = row.operator("drape.bake", text="Bake Selected")
    op.objects = 'SELECTED'
    op = row.operator("drape.bake", text="Bake All")
    op.objects = 'ALL'
    # A re-bake elsewhere keeps the old file (a saved .blend may play it):
    # the clean-up deletes what no .blend Drape knows of plays any more.
    layout.operator("drape.cache_cleanup", text="Clean Up Cache Folder", icon='BRUSH_DATA')


def _poll(context):
    obj = context.active_object
    return obj is not None and obj.type == 'MESH' and (
        bake_job.is_cloth(obj) or bool(getattr(obj.drape_bake, "baked_target", "")))


class _BakePanel:
    """The Bake sub-panel's content, shared by the sidebar and Physics panels."""

    bl_label = "Bake"
    bl_options = {'DEFAULT_CLOSED'}

    @classmethod
    def poll(cls, context):
        return _poll(context)

    def draw(self, context):
        _draw(self.layout, context)


class DRAPE_PT_bake_sidebar(_BakePanel, bpy.types.Panel):
    bl_idname = "DRAPE_PT_bake_sidebar"
    bl_space_type = 'VIEW_3D'
    bl_region_type = 'UI'
    bl_category = "Drape"
    bl_parent_id = "DRAPE_PT_cloth"


class DRAPE_PT_bake_physics(_BakePanel, bpy.types.Panel):
    bl_idname = "DRAPE_PT_bake_physics"
    bl_space_type = 'PROPERTIES'
    bl_region_type = 'WINDOW'
    bl_context = "physics"
    bl_parent_id = "DRAPE_PT_cloth_physics"


classes = (DRAPE_PT_bake_sidebar, DRAPE_PT_bake_physics)
