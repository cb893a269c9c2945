"""What every bake target shares in Blender data: where the bake goes in the
modifier stack, the frame shape keys, the record of the bake in place; taking
any bake off again (:func:`free`), and hiding an old bake while a new one runs.
Each target's own installation is in :mod:`.targets`.

Everything here runs only after all frames were captured and written to
temporary storage: these are the few quick edits of the final swap.
"""

import os

import bpy
import numpy as np

from ..scene import compat, writeback

MODIFIER_NAME = "Drape Bake"
KEY_PREFIX = "drape_"
ACTION_PREFIX = "DrapeBake_"

# Deformers that drive the cloth's pins (the rig): the simulation happens
# after them, so the bake that replaces it goes after them too. Everything
# else (smoothing, displacement, subdivision, solidify...) stays after the bake.
_PIN_DRIVERS = {'ARMATURE', 'HOOK', 'LATTICE', 'CURVE', 'MESH_DEFORM', 'SURFACE_DEFORM'}


def key_name(frame):
    return f"{KEY_PREFIX}{frame:04d}"


# scene.writeback shows the simulation through a Geometry Nodes modifier
# named "Drape", wherever the artist put it in the stack: the bake takes over
# exactly that place (the positions of the mesh as it leaves Drape), and the
# modifiers below it work on the bake as they did on the simulation.
DRAPE_MODIFIER = "Drape"
# Where older versions of Drape kept the result (on the cloth's own mesh).
DRAPE_RESULT_ATTRIBUTE = "drape_position"


def insertion_index(obj):
    """Stack index for the bake's modifier: where the simulation result
    enters the stack (just before Drape's own modifier), else after the
    leading pin-driving deformers, before anything that post-processes or
    changes topology."""
    names = [m.name for m in obj.modifiers if m.name != MODIFIER_NAME]
    drape = writeback.find_modifier(obj)
    if drape is not None:
        return names.index(drape.name)
    if DRAPE_MODIFIER in names:
        return names.index(DRAPE_MODIFIER)
    index = 0
    for mod in obj.modifiers:
        if mod.name == MODIFIER_NAME:
            continue
        if mod.type not in _PIN_DRIVERS:
            break
        index += 1
    return index


def topology_above(obj):
    """The enabled modifiers above the bake's entry point that change the
    topology: the mesh there is not the mesh's own vertices, so a bake that
    plays on the mesh itself (shape keys) cannot stand for the simulation,
    and Alembic writes the mesh as it enters Drape."""
    from ..scene import meshdata

    return [m for m in pin_driver_modifiers(obj)
            if (m.show_viewport or m.show_render) and meshdata.changes_topology(m)]


def topology_problem(obj, target_label):
    """The message when ``obj``'s stack keeps ``target_label`` from holding its bake, or None."""
    above = topology_above(obj)
    if not above:
        return None
    names = ", ".join(f"'{m.name}'" for m in above)
    return (f"'{obj.name}': {target_label} cannot hold this bake: modifier {names} above the Drape modifier "
            f"changes the topology, so the simulated mesh is not the mesh's own vertices; bake to Point Cache "
            f"(PC2) or Alembic, which play at Drape's place in the stack")


def pin_driver_modifiers(obj):
    """The modifiers the simulation reads pin targets from (above its entry
    point): a shape-key bake already contains their motion."""
    return [m for m in list(obj.modifiers)[:insertion_index(obj)] if m.name != MODIFIER_NAME]


def _drop_live_result(obj):
    """Removes the live simulation's last result from the mesh, so Drape's
    modifier no longer overrides what the bake plays back."""
    writeback.clear_result(obj)
    attr = obj.data.attributes.get(DRAPE_RESULT_ATTRIBUTE)
    if attr is not None:
        obj.data.attributes.remove(attr)


def set_disabled(obj, names, disabled):
    for name in names:
        mod = obj.modifiers.get(name)
        if mod is not None:
            mod.show_viewport = mod.show_render = not disabled


def set_muted(obj, names, mute):
    keys = obj.data.shape_keys
    if keys is None:
        return
    for name in names:
        kb = keys.key_blocks.get(name)
        if kb is not None:
            kb.mute = mute


def place(obj, mod, index):
    current = list(obj.modifiers).index(mod)
    if current != index:
        obj.modifiers.move(current, index)


def abspath(path):
    return os.path.normpath(bpy.path.abspath(path))


# --- hiding an old bake while re-baking -----------------------------------

def suspend(obj):
    """Turns an existing bake off so the live simulation runs; returns what
    :func:`resume` needs to put it back exactly as it was."""
    st = obj.drape_bake
    memo = {"baked": st.baked}
    mod = obj.modifiers.get(MODIFIER_NAME)
    if mod is not None:
        memo["modifier"] = (mod.show_viewport, mod.show_render)
        mod.show_viewport = mod.show_render = False
    keys = obj.data.shape_keys
    if keys is not None:
        muted = {kb.name: kb.mute for kb in keys.key_blocks if kb.name.startswith(KEY_PREFIX)}
        for name in muted:
            keys.key_blocks[name].mute = True
        memo["mute"] = muted
    disabled = [n for n in st.disabled_modifiers.split("\n") if n]
    set_disabled(obj, disabled, False)
    memo["disabled"] = disabled
    muted = [n for n in st.muted_keys.split("\n") if n]
    set_muted(obj, muted, False)
    memo["muted_keys"] = muted
    st.baked = False
    return memo


def resume(obj, memo):
    st = obj.drape_bake
    mod = obj.modifiers.get(MODIFIER_NAME)
    if mod is not None and "modifier" in memo:
        mod.show_viewport, mod.show_render = memo["modifier"]
    keys = obj.data.shape_keys
    if keys is not None:
        for name, mute in memo.get("mute", {}).items():
            kb = keys.key_blocks.get(name)
            if kb is not None:
                kb.mute = mute
    set_disabled(obj, memo.get("disabled", ()), True)
    set_muted(obj, memo.get("muted_keys", ()), True)
    st.baked = memo["baked"]


# --- removing a bake -------------------------------------------------------

def free(obj, delete_files=False):
    """Removes the bake's keys / modifier / cache file datablock and turns
    the live simulation back on. Files on disk are kept unless asked."""
    st = obj.drape_bake
    old_file = abspath(st.baked_filepath) if st.baked_filepath else ""
    mod = obj.modifiers.get(MODIFIER_NAME)
    if mod is not None:
        obj.modifiers.remove(mod)
    if st.baked_cache_file:
        cache = bpy.data.cache_files.get(st.baked_cache_file)
        if cache is not None and cache.users == 0:
            bpy.data.batch_remove([cache])  # cache_files has no remove()
    keys = obj.data.shape_keys
    if keys is not None:
        anim = keys.animation_data
        fcurves = compat.animation_fcurves(anim)
        if fcurves is not None:
            for fc in [fc for fc in fcurves if fc.data_path.startswith(f'key_blocks["{KEY_PREFIX}')]:
                fcurves.remove(fc)
        if st.baked_action:
            action = bpy.data.actions.get(st.baked_action)
            if anim is not None and action is not None and anim.action == action:
                anim.action = None
            if action is not None and action.users == 0:
                bpy.data.actions.remove(action)
        for kb in [kb for kb in keys.key_blocks if kb.name.startswith(KEY_PREFIX)]:
            obj.shape_key_remove(kb)
        keys = obj.data.shape_keys
        if st.created_basis and keys is not None and len(keys.key_blocks) == 1:
            obj.shape_key_clear()
    set_disabled(obj, [n for n in st.disabled_modifiers.split("\n") if n], False)
    st.disabled_modifiers = ""
    set_muted(obj, [n for n in st.muted_keys.split("\n") if n], False)
    st.muted_keys = ""
    if delete_files and old_file and os.path.isfile(old_file):
        os.unlink(old_file)
    st.baked = False
    st.baked_target = ""
    st.baked_filepath = ""
    st.baked_action = ""
    st.baked_cache_file = ""
    st.created_basis = False
    st.baked_vertices = 0
    return old_file


def record(obj, target, start, end, vertices, filepath=""):
    """The bake of ``target`` (its id) is in place: the live result goes, the settings say so."""
    _drop_live_result(obj)
    st = obj.drape_bake
    st.baked_target = target
    st.baked_filepath = filepath
    st.baked_frame_start = start
    st.baked_frame_end = end
    st.baked_vertices = vertices
    st.baked = True


# --- shape keys --------------------------------------------------------------

def add_frame_keys(obj, frames, positions):
    """One relative shape key per frame holding that frame's positions, and an
    action on the Key that keeps exactly one of them at 1.0 on every frame
    (linear in between, so sub-frames interpolate positions for motion blur).
    Returns the action. ``positions``: (len(frames), n, 3)."""
    mesh = obj.data
    st = obj.drape_bake
    if mesh.shape_keys is None:
        obj.shape_key_add(name="Basis", from_mix=False)
        st.created_basis = True
    keys = []
    for frame, pos in zip(frames, positions):
        kb = obj.shape_key_add(name=key_name(frame), from_mix=False)
        # ShapeKey.points takes the raw-array fast path (data does not: ~100x slower).
        kb.points.foreach_set("co", np.ascontiguousarray(pos, dtype=np.float32).ravel())
        kb.value = 0.0
        keys.append(kb)
    shape_keys = mesh.shape_keys
    anim = shape_keys.animation_data or shape_keys.animation_data_create()
    action = anim.action
    if action is None:
        action = bpy.data.actions.new(f"{ACTION_PREFIX}{obj.name}")
        anim.action = action
        st.baked_action = action.name
    else:  # the artist animates shape keys already: add our channels to that action
        st.baked_action = ""
    fcurves = compat.animation_fcurves(anim, ensure=True)
    linear = bpy.types.Keyframe.bl_rna.properties["interpolation"].enum_items["LINEAR"].value
    last = len(keys) - 1
    for i, (frame, kb) in enumerate(zip(frames, keys)):
        points = [(frame - 1, 0.0), (frame, 1.0), (frame + 1, 0.0)]
        if i == last:
            points.pop()
        if i == 0:
            points.pop(0)
        fc = fcurves.new(f'key_blocks["{kb.name}"].value')
        fc.keyframe_points.add(len(points))
        fc.keyframe_points.foreach_set("co", np.asarray(points, dtype=np.float32).ravel())
        fc.keyframe_points.foreach_set("interpolation", [linear] * len(points))
        fc.update()
    return action


def check_modifier(obj, frames):
    """A cache target's part of the headless check of a saved .blend."""
    if obj.modifiers.get(MODIFIER_NAME) is None:
        return f"no '{MODIFIER_NAME}' modifier"
    return None
