"""Cloth operators: ``drape.cloth_add``, ``drape.cloth_remove``, ``drape.reset``,
``drape.cloth_preset_add`` and ``drape.garment_preset_add`` (Blender's preset
machinery)."""

import bpy
from bpy.props import BoolProperty, StringProperty
from bl_operators.presets import AddPresetBase

from ..scene import garment, meshdata, runtime, writeback


class _Sewing:
    """A cloth's settings as they will be with Sewing on (for the checks
    before cloth_add turns it on)."""

    use_sewing = True

    def __init__(self, settings):
        self._settings = settings

    def __getattr__(self, name):
        return getattr(self._settings, name)


def _targets(context):
    objs = list(context.selected_objects)
    if not objs and context.active_object is not None:
        objs = [context.active_object]
    return objs


class DRAPE_OT_cloth_add(bpy.types.Operator):
    """Make the selected meshes Drape cloths (live in the timeline)"""

    bl_idname = "drape.cloth_add"
    bl_label = "Add Drape Cloth"
    bl_options = {'REGISTER', 'UNDO'}

    pin_group: StringProperty(name="Pin group", description="Vertex group to pin (optional)", default="")

    @classmethod
    def poll(cls, context):
        if context.mode != 'OBJECT':
            cls.poll_message_set("Switch to Object Mode")
            return False
        if not _targets(context):
            cls.poll_message_set("Select the mesh to simulate")
            return False
        return True

    def execute(self, context):
        objs = [o for o in _targets(context) if not (o.type == 'MESH' and o.drape.enabled)]
        if not objs:
            self.report({'WARNING'}, "The selected objects are already Drape cloths")
            return {'CANCELLED'}
        depsgraph = context.evaluated_depsgraph_get()
        problems = []
        # Loose edges that all join two panels are stitches (Blender's
        # convention): such a cloth starts with Sewing on.
        sewn = [o for o in objs if o.type == 'MESH' and not o.drape.use_sewing
                and garment.loose_edges_are_stitches(o.data)]
        for obj in objs:
            problems += meshdata.check_mesh(obj, "cloth", settings=_Sewing(obj.drape) if obj in sewn else None,
                                            depsgraph=depsgraph)
            if self.pin_group and obj.type == 'MESH' and obj.vertex_groups.get(self.pin_group) is None:
                problems.append(f"'{obj.name}' has no vertex group '{self.pin_group}' (its pin group)")
        if problems:  # all or nothing: no object changes when one is unusable
            self.report({'ERROR'}, "Nothing changed: " + "; ".join(problems))
            return {'CANCELLED'}
        for obj in objs:
            settings = obj.drape
            settings.uid = runtime.new_uid()
            if self.pin_group:
                settings.pin_group = self.pin_group
            settings.enabled = True
            if obj in sewn:
                settings.use_sewing = True
            writeback.ensure_modifier(obj)
        names = ", ".join(f"'{o.name}'" for o in objs)
        self.report({'INFO'}, f"Drape cloth added to {names}; play the timeline to simulate")
        if sewn:
            self.report({'INFO'}, "Sewing turned on for " + ", ".join(f"'{o.name}'" for o in sewn)
                        + ": their loose edges join panels and are sewn as stitches")
        return {'FINISHED'}


class DRAPE_OT_cloth_remove(bpy.types.Operator):
    """Stop simulating the selected Drape cloths and remove their Drape modifier"""

    bl_idname = "drape.cloth_remove"
    bl_label = "Remove Drape Cloth"
    bl_options = {'REGISTER', 'UNDO'}

    @classmethod
    def poll(cls, context):
        if context.mode != 'OBJECT':
            cls.poll_message_set("Switch to Object Mode")
            return False
        if not any(runtime.is_cloth(o) for o in _targets(context)):
            cls.poll_message_set("Select a Drape cloth")
            return False
        return True

    def execute(self, context):
        objs = [o for o in _targets(context) if runtime.is_cloth(o)]
        for obj in objs:
            runtime.drop(obj)
            writeback.remove_modifier(obj)
            obj.drape.enabled = False
        self.report({'INFO'}, "Drape cloth removed from " + ", ".join(f"'{o.name}'" for o in objs))
        return {'FINISHED'}


class DRAPE_OT_reset(bpy.types.Operator):
    """Drop the live simulation cache; it restarts from the frame where the timeline next moves"""

    bl_idname = "drape.reset"
    bl_label = "Reset Simulation"
    bl_options = {'REGISTER'}

    all_cloths: BoolProperty(name="All cloths", description="Reset every Drape cloth in the scene",
                             default=False)

    @classmethod
    def poll(cls, context):
        if not any(runtime.is_cloth(o) for o in context.scene.objects):
            cls.poll_message_set("The scene has no Drape cloth")
            return False
        return True

    def execute(self, context):
        pool = context.scene.objects if self.all_cloths else _targets(context)
        objs = [o for o in pool if runtime.is_cloth(o)]
        if not objs:
            objs = [o for o in context.scene.objects if runtime.is_cloth(o)]
        for obj in objs:
            runtime.drop(obj)
        self.report({'INFO'}, "Drape cache dropped for " + ", ".join(f"'{o.name}'" for o in objs))
        return {'FINISHED'}


# Settings a preset stores: the physical ones, not the mesh or group choices.
PRESET_SETTINGS = (
    "areal_density", "stretch_compliance", "shear_compliance", "bend_compliance", "tether_compliance",
    "stretch_damping", "shear_damping", "bend_damping", "tether_damping", "air_drag", "friction", "static_friction",
    "tethers", "tether_scale", "wind_drag", "wind_lift", "thickness", "self_thickness", "self_friction",
)


# What a garment preset stores: how the cloth is made up (sewing, shrink,
# warp and weft, pressure, skinned limits), not the fabric (a fabric preset
# and a garment preset combine) and not the groups and UV map (the mesh's).
GARMENT_PRESET_SETTINGS = (
    "use_sewing", "sewing_compliance", "sewing_max_force", "shrink", "shrink_max", "shrink_warp", "shrink_weft",
    "warp_stretch", "weft_stretch", "stretch_group_max", "shear_group_max", "bend_group_max", "use_pressure",
    "pressure_volume", "pressure_compliance", "max_distance", "backstop_radius", "backstop_distance",
)


class _PresetAdd(AddPresetBase):
    preset_defines = ["obj = bpy.context.object", "drape = obj.drape"]

    @classmethod
    def poll(cls, context):
        return runtime.is_cloth(context.object)


class DRAPE_OT_cloth_preset_add(_PresetAdd, bpy.types.Operator):
    """Save the active cloth's fabric settings as a preset (or remove one)"""

    bl_idname = "drape.cloth_preset_add"
    bl_label = "Add Drape Fabric Preset"
    preset_menu = "DRAPE_MT_cloth_presets"
    preset_subdir = "drape/cloth"
    preset_values = [f"drape.{name}" for name in PRESET_SETTINGS]


class DRAPE_OT_garment_preset_add(_PresetAdd, bpy.types.Operator):
    """Save the active cloth's garment settings (sewing, shrink, pressure, max distance) as a preset (or remove one)"""

    bl_idname = "drape.garment_preset_add"
    bl_label = "Add Drape Garment Preset"
    preset_menu = "DRAPE_MT_garment_presets"
    preset_subdir = "drape/garment"
    preset_values = [f"drape.{name}" for name in GARMENT_PRESET_SETTINGS]


classes = (DRAPE_OT_cloth_add, DRAPE_OT_cloth_remove, DRAPE_OT_reset, DRAPE_OT_cloth_preset_add,
           DRAPE_OT_garment_preset_add)


def _border_chains(bm):
    """The selected border edges of an edit mesh as ordered vertex chains:
    [(vertices, closed)], or a message saying why not."""
    edges = [e for e in bm.edges if e.select and e.is_boundary]
    if not edges:
        return None, "Select two border edge loops (edges of one face only) to sew"
    nbr = {}
    for e in edges:
        a, b = e.verts
        nbr.setdefault(a, []).append(b)
        nbr.setdefault(b, []).append(a)
    if any(len(v) > 2 for v in nbr.values()):
        return None, "The selected border edges branch: select two separate loops"
    chains, seen = [], set()
    for start in nbr:
        if start in seen:
            continue
        # Walk from an end when there is one (an open chain), else anywhere.
        component, stack = [], [start]
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            component.append(v)
            stack += nbr[v]
        ends = [v for v in component if len(nbr[v]) == 1]
        first = ends[0] if ends else component[0]
        chain, prev = [first], None
        while True:
            nxt = [v for v in nbr[chain[-1]] if v is not prev and v not in chain]
            if not nxt:
                break
            prev = chain[-1]
            chain.append(nxt[0])
        chains.append((chain, not ends))
    if len(chains) != 2:
        return None, f"Select exactly two border edge loops to sew ({len(chains)} selected)"
    return chains, None


def _same_panel(va, vb):
    """Whether two bmesh vertices lie on one piece of the polygons (joined
    through faces)."""
    seen = {va}
    todo = [va]
    while todo:
        v = todo.pop()
        if v is vb:
            return True
        for face in v.link_faces:
            for u in face.verts:
                if u not in seen:
                    seen.add(u)
                    todo.append(u)
    return False


class DRAPE_OT_sew_edge_loops(bpy.types.Operator):
    """Stitch two selected border edge loops with loose edges (any vertex counts): Drape's sewing pulls them
    together"""

    bl_idname = "drape.sew_edge_loops"
    bl_label = "Sew Selected Edge Loops"
    bl_options = {'REGISTER', 'UNDO'}

    @classmethod
    def poll(cls, context):
        obj = context.edit_object
        if obj is None or obj.type != 'MESH' or context.mode != 'EDIT_MESH':
            cls.poll_message_set("Select two border edge loops in Edit Mode")
            return False
        return True

    def execute(self, context):
        import bmesh
        import numpy as np

        from ..solver.constraints.sewing import pair_loops

        obj = context.edit_object
        bm = bmesh.from_edit_mesh(obj.data)
        chains, problem = _border_chains(bm)
        if problem:
            self.report({'ERROR'}, problem)
            return {'CANCELLED'}
        (a, closed_a), (b, closed_b) = chains
        if closed_a != closed_b:
            self.report({'ERROR'}, "Select two closed loops or two open edge chains, not one of each")
            return {'CANCELLED'}
        if _same_panel(a[0], b[0]):
            self.report({'ERROR'}, f"'{obj.name}': both loops are borders of one panel; sewing joins two "
                                   f"different panels (pieces of the mesh), nothing changed")
            return {'CANCELLED'}
        pairs = pair_loops(np.array([v.co for v in a]), np.array([v.co for v in b]), closed_a)
        made = 0
        for i, j in pairs:
            va, vb = a[int(i)], b[int(j)]
            if bm.edges.get((va, vb)) is None:
                bm.edges.new((va, vb))
                made += 1
        bmesh.update_edit_mesh(obj.data)
        obj.drape.use_sewing = True
        self.report({'INFO'}, f"'{obj.name}': {made} sewing edges between loops of {len(a)} and {len(b)} "
                              f"vertices; Garment > Sewing is on")
        return {'FINISHED'}


classes = classes + (DRAPE_OT_sew_edge_loops,)
