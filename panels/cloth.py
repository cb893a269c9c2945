"""Cloth panels: the 3D View sidebar "Drape" tab and Properties > Physics,
the same panel tree in both places (classes generated per space), plus the
fabric and garment preset menus (Blender's preset machinery; the built-in
presets ship in the extension's ``presets/cloth`` and ``presets/garment``
folders, the artist's own are saved to Blender's user presets folders
``presets/drape/cloth`` and ``presets/drape/garment``)."""

import os
import textwrap

import bpy

from ..scene import compat, meshdata, runtime, warmup

_PRESETS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "presets")
PRESET_SUBDIR = "drape/cloth"
BUILTIN_PRESETS = os.path.join(_PRESETS, "cloth")
GARMENT_PRESET_SUBDIR = "drape/garment"
BUILTIN_GARMENT_PRESETS = os.path.join(_PRESETS, "garment")


def preset_paths(subdir=PRESET_SUBDIR):
    """Built-in preset folder first, then user folders (where presets are added)."""
    builtin = os.path.join(_PRESETS, subdir.rsplit("/", 1)[-1])
    return [builtin] + [p for p in bpy.utils.preset_paths(subdir) if p != builtin]


class _PresetMenu:
    preset_operator = "script.execute_preset"

    def draw(self, context):
        self.path_menu(preset_paths(self.preset_subdir), self.preset_operator,
                       props_default={"menu_idname": self.bl_idname},
                       filter_ext=lambda ext: ext.lower() == ".py", add_operator=self.preset_add_operator)


class DRAPE_MT_cloth_presets(_PresetMenu, bpy.types.Menu):
    bl_idname = "DRAPE_MT_cloth_presets"
    bl_label = "Fabric Presets"
    preset_subdir = PRESET_SUBDIR
    preset_add_operator = "drape.cloth_preset_add"


class DRAPE_MT_garment_presets(_PresetMenu, bpy.types.Menu):
    bl_idname = "DRAPE_MT_garment_presets"
    bl_label = "Garment Presets"
    preset_subdir = GARMENT_PRESET_SUBDIR
    preset_add_operator = "drape.garment_preset_add"


def _preset_row(layout, menu):
    row = layout.row(align=True)
    row.menu(menu.bl_idname, text=menu.bl_label)
    row.operator(menu.preset_add_operator, text="", icon='ADD')
    row.operator(menu.preset_add_operator, text="", icon='REMOVE').remove_active = True


def _cloth(context):
    obj = context.object
    return obj if runtime.is_cloth(obj) else None


class _Cloth:
    bl_options = {'DEFAULT_CLOSED'}

    @classmethod
    def poll(cls, context):
        return _cloth(context) is not None


def _label_wrapped(layout, text, icon, width=56):
    """A long message on several lines (a label is cut at the panel's edge)."""
    for i, line in enumerate(textwrap.wrap(text, width) or [""]):
        layout.label(text=line, icon=icon if i == 0 else 'BLANK1')


def _draw_main(self, context):
    layout = self.layout
    layout.use_property_split = True
    layout.use_property_decorate = True
    obj = context.object
    if obj is None or obj.type != 'MESH':
        layout.label(text="Select a mesh to simulate", icon='INFO')
        return
    problem = compat.incompatibility()
    if problem:
        _label_wrapped(layout.column(align=True), problem, 'ERROR')
    s = obj.drape
    if not s.enabled:
        layout.operator("drape.cloth_add", icon='MOD_CLOTH')
        return
    _preset_row(layout, DRAPE_MT_cloth_presets)
    col = layout.column()
    col.prop(s, "substeps")
    col.prop(s, "iterations")
    col.prop(s, "threads")
    col.prop(s, "areal_density")
    col.prop_search(s, "mass_group", obj, "vertex_groups")
    col.prop(s, "gravity_scale")
    box = layout.box()
    entry = runtime.get(obj)
    compiling = warmup.status_line(context.scene)
    if compiling:
        _label_wrapped(box.column(align=True), compiling, 'SORTTIME')
    shown = {text for _icon, text in runtime.messages(obj)}
    for text in meshdata.animated_topology(obj):  # refused before it plays: said here too
        if text not in shown:
            _label_wrapped(box.column(align=True), text, 'ERROR')
    if runtime.is_baked(obj):
        box.label(text="Baked: playing the bake", icon='CHECKMARK')
    elif entry is None:
        box.label(text="Not simulated yet: play the timeline", icon='TIME')
    else:
        for icon, text in runtime.messages(obj):
            _label_wrapped(box.column(align=True), text, icon)
        rng = entry.cache_range
        box.label(text=f"Cache: frames {rng[0]}-{rng[1]}" if rng else "Cache: empty", icon='TIME')
        box.label(text=f"Last step: {entry.last_step_ms:.2f} ms solver, "
                       f"{entry.last_read_ms + entry.last_write_ms + entry.last_skin_ms:.2f} ms read/skin/write")
    row = layout.row(align=True)
    row.operator("drape.reset", icon='FILE_REFRESH')
    row.operator("drape.cloth_remove", icon='X')


def _settings_layout(self, context):
    """The sub-panel's layout (labels beside the fields) and the cloth's settings."""
    self.layout.use_property_split = True
    return self.layout, context.object.drape


def _draw_stiffness(self, context):
    layout, s = _settings_layout(self, context)
    col = layout.column()
    col.prop(s, "stretch_stiffness")
    col.prop(s, "shear_stiffness")
    col.prop(s, "bend_stiffness")


def _draw_damping(self, context):
    layout, s = _settings_layout(self, context)
    col = layout.column()
    col.prop(s, "stretch_damping")
    col.prop(s, "shear_damping")
    col.prop(s, "bend_damping")
    col.prop(s, "tether_damping")
    col.prop(s, "air_drag")
    col.prop(s, "settle_damping")
    col.prop(s, "settle_speed")
    col.prop(s, "air_resistance")


def _draw_collisions(self, context):
    layout, s = _settings_layout(self, context)
    col = layout.column()
    col.prop(s, "thickness")
    col.prop(s, "friction")
    col.prop(s, "static_friction")


def _draw_pins(self, context):
    layout, s = _settings_layout(self, context)
    col = layout.column()
    col.prop_search(s, "pin_group", context.object, "vertex_groups")
    col.prop(s, "pin_stiffness")
    col.prop(s, "tethers")
    col.prop(s, "stretch_hierarchy")
    col.prop(s, "stretch_limits")
    sub = col.column()
    sub.active = s.tethers or s.stretch_hierarchy or s.stretch_limits
    sub.prop(s, "tether_stiffness")
    sub.prop(s, "tether_scale")


def _draw_self_header(self, context):
    self.layout.prop(context.object.drape, "self_collision", text="")


def _draw_self(self, context):
    layout, s = _settings_layout(self, context)
    col = layout.column()
    col.active = s.self_collision
    col.prop(s, "self_thickness")
    col.prop(s, "self_friction")
    col.prop(s, "self_conservativeness")
    col.prop(s, "self_cache")
    layout.prop(s, "cloth_collision")
    row = layout.row()
    row.active = s.cloth_collision
    row.prop(s, "layer")


def _draw_wind(self, context):
    layout, s = _settings_layout(self, context)
    col = layout.column()
    col.prop(s, "wind_drag")
    col.prop(s, "wind_lift")
    col.label(text="Add a Wind force field to blow", icon='FORCE_WIND')


def _draw_simmesh(self, context):
    layout, s = _settings_layout(self, context)
    col = layout.column()
    col.prop(s, "sim_source")
    if s.sim_source == 'PROXY':
        col.prop(s, "proxy")
    elif s.sim_source == 'AUTO':
        col.prop(s, "vertex_budget")


def _draw_garment(self, context):
    layout, s = _settings_layout(self, context)
    obj = context.object
    _preset_row(layout, DRAPE_MT_garment_presets)
    col = layout.column(heading="Sewing")
    col.prop(s, "use_sewing")
    sub = col.column()
    sub.active = s.use_sewing
    sub.prop(s, "sewing_stiffness")
    sub.prop(s, "sewing_max_force")
    sub.operator("drape.sew_edge_loops", icon='AUTOMERGE_OFF')
    col = layout.column()
    col.prop(s, "shrink")
    col.prop_search(s, "shrink_group", obj, "vertex_groups")
    sub = col.column()
    sub.active = bool(s.shrink_group)
    sub.prop(s, "shrink_max")
    col = layout.column()
    col.prop_search(s, "uv_map", obj.data, "uv_layers")
    col.prop(s, "shrink_warp")
    col.prop(s, "shrink_weft")
    col.prop(s, "warp_stretch")
    col.prop(s, "weft_stretch")
    col = layout.column()
    for group, top in (("stretch_group", "stretch_group_max"), ("shear_group", "shear_group_max"),
                       ("bend_group", "bend_group_max")):
        col.prop_search(s, group, obj, "vertex_groups")
        sub = col.column()
        sub.active = bool(getattr(s, group))
        sub.prop(s, top)
    col = layout.column(heading="Pressure")
    col.prop(s, "use_pressure")
    sub = col.column()
    sub.active = s.use_pressure
    sub.prop(s, "pressure_volume")
    sub.prop(s, "pressure_compliance")
    sub.prop_search(s, "pressure_group", obj, "vertex_groups")
    col = layout.column()
    col.prop(s, "max_distance")
    col.prop_search(s, "max_distance_group", obj, "vertex_groups")
    col.prop(s, "backstop_radius")
    sub = col.column()
    sub.active = s.backstop_radius > 0
    sub.prop(s, "backstop_distance")
    sub.prop_search(s, "backstop_group", obj, "vertex_groups")


_SUBPANELS = (
    ("stiffness", "Stiffness", _draw_stiffness, None),
    ("damping", "Damping", _draw_damping, None),
    ("pins", "Pins", _draw_pins, None),
    ("collisions", "Collisions", _draw_collisions, None),
    ("self_collision", "Self Collision", _draw_self, _draw_self_header),
    ("wind", "Wind", _draw_wind, None),
    ("simmesh", "Sim Mesh", _draw_simmesh, None),
    ("garment", "Garment", _draw_garment, None),
)

_SPACES = (
    # suffix, space, region, extra attributes
    ("", 'VIEW_3D', 'UI', {"bl_category": "Drape"}),
    ("_physics", 'PROPERTIES', 'WINDOW', {"bl_context": "physics"}),
)


def _make_classes():
    made = []
    for suffix, space, region, extra in _SPACES:
        main_id = f"DRAPE_PT_cloth{suffix}"
        attrs = dict(bl_idname=main_id, bl_label="Drape Cloth", bl_space_type=space, bl_region_type=region,
                     draw=_draw_main, poll=classmethod(lambda cls, context: context.object is not None))
        attrs.update(extra)
        made.append(type(main_id, (bpy.types.Panel,), attrs))
        for key, label, draw, header in _SUBPANELS:
            sub_id = f"DRAPE_PT_cloth_{key}{suffix}"
            sub = dict(bl_idname=sub_id, bl_label=label, bl_space_type=space, bl_region_type=region,
                       bl_parent_id=main_id, draw=draw)
            sub.update(extra)
            if header is not None:
                sub["draw_header"] = header
            made.append(type(sub_id, (_Cloth, bpy.types.Panel), sub))
    return tuple(made)


classes = (DRAPE_MT_cloth_presets, DRAPE_MT_garment_presets) + _make_classes()
