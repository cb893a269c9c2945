"""Puts a finished bake on an object (shape keys, Mesh Cache, Mesh Sequence
Cache), takes it off again, and hides an old bake while a new one runs.

Everything here runs only after all frames were captured and written to
temporary storage: these are the few quick edits of the final swap.
"""

import os

import bpy
import numpy as np

from ..scene import compat

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
# named "Drape" (at the end of the stack) that sets positions from the mesh
# attribute "drape_position": the bake takes over exactly that place.
DRAPE_MODIFIER = "Drape"
DRAPE_RESULT_ATTRIBUTE = "drape_position"


def insertion_index(obj):
    """Stack index for the bake's modifier: where the simulation result
    enters the stack (just before Drape's own modifier), else after the
    leading pin-driving deformers, before anything that post-processes or
    changes topology."""
    names = [m.name for m in obj.modifiers if m.name != MODIFIER_NAME]
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


def _pin_driver_modifiers(obj):
    """The modifiers the simulation reads pin targets from (above its entry
    point): a shape-key bake already contains their motion."""
    return [m for m in list(obj.modifiers)[:insertion_index(obj)] if m.name != MODIFIER_NAME]


def _drop_live_result(obj):
    """Removes the live simulation's last result from the mesh, so Drape's
    modifier no longer overrides what the bake plays back."""
    attr = obj.data.attributes.get(DRAPE_RESULT_ATTRIBUTE)
    if attr is not None:
        obj.data.attributes.remove(attr)


def _set_disabled(obj, names, disabled):
    for name in names:
        mod = obj.modifiers.get(name)
        if mod is not None:
            mod.show_viewport = mod.show_render = not disabled


def _set_muted(obj, names, mute):
    keys = obj.data.shape_keys
    if keys is None:
        return
    for name in names:
        kb = keys.key_blocks.get(name)
        if kb is not None:
            kb.mute = mute


def _place(obj, mod, index):
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
    _set_disabled(obj, disabled, False)
    memo["disabled"] = disabled
    muted = [n for n in st.muted_keys.split("\n") if n]
    _set_muted(obj, muted, False)
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
    _set_disabled(obj, memo.get("disabled", ()), True)
    _set_muted(obj, memo.get("muted_keys", ()), True)
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
    _set_disabled(obj, [n for n in st.disabled_modifiers.split("\n") if n], False)
    st.disabled_modifiers = ""
    _set_muted(obj, [n for n in st.muted_keys.split("\n") if n], False)
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


def _record(obj, target, start, end, vertices, filepath=""):
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


def install_shape_keys(obj, frames, positions):
    add_frame_keys(obj, frames, positions)
    # Shape keys play before every modifier: the rig deformers that drove
    # the pins would move the baked cloth a second time.
    drivers = [m.name for m in _pin_driver_modifiers(obj) if m.show_viewport or m.show_render]
    _set_disabled(obj, drivers, True)
    obj.drape_bake.disabled_modifiers = "\n".join(drivers)
    # The artist's own shape keys fed the simulation too (pin targets):
    # muted while the bake plays, back on when it is freed.
    blocks = obj.data.shape_keys.key_blocks
    own = [kb.name for kb in list(blocks)[1:] if not kb.name.startswith(KEY_PREFIX) and not kb.mute]
    _set_muted(obj, own, True)
    obj.drape_bake.muted_keys = "\n".join(own)
    _record(obj, 'SHAPE_KEYS', frames[0], frames[-1], positions.shape[1])


# --- PC2 + Mesh Cache ----------------------------------------------------------

def install_pc2(obj, filepath, start, end, vertices):
    """A Mesh Cache modifier that overwrites positions with the PC2 samples:
    sample 0 at ``start``, one sample per scene frame, linear in between."""
    mod = obj.modifiers.new(MODIFIER_NAME, 'MESH_CACHE')
    mod.cache_format = 'PC2'
    mod.filepath = filepath
    mod.deform_mode = 'OVERWRITE'
    mod.interpolation = 'LINEAR'
    mod.time_mode = 'FRAME'
    mod.play_mode = 'SCENE'
    mod.frame_start = float(start)
    mod.frame_scale = 1.0
    mod.forward_axis = 'POS_Y'
    mod.up_axis = 'POS_Z'
    compat.mesh_cache_flip_set(mod, (False, False, False))
    mod.factor = 1.0
    _place(obj, mod, insertion_index(obj))
    _record(obj, 'PC2', start, end, vertices, filepath)


# --- Alembic ---------------------------------------------------------------

def export_alembic(obj, frames, positions, tmp_path):
    """Writes the captured frames to ``tmp_path`` with Blender's own Alembic
    exporter. A throwaway scene holds a copy of the mesh (local space,
    identity transform) animated by frame shape keys, so the exporter reads
    exactly the captured positions and steps no simulation."""
    scene = bpy.data.scenes.new("DrapeBake_alembic")
    mesh = obj.data.copy()
    mesh.name = f"{obj.name}Shape"
    # The file's node carries the object's own name: the original steps
    # aside for the few milliseconds of the export.
    real_name = obj.name
    tmp = None
    action = None
    try:
        obj.name = f"{real_name}.drape_bake_tmp"
        tmp = bpy.data.objects.new(real_name, mesh)
        object_path = f"/{_abc_name(tmp.name)}/{_abc_name(mesh.name)}"
        scene.collection.objects.link(tmp)
        if mesh.shape_keys is not None:
            tmp.shape_key_clear()
        action = add_frame_keys(tmp, frames, positions)
        scene.frame_start, scene.frame_end = frames[0], frames[-1]
        scene.render.fps = bpy.context.scene.render.fps
        scene.render.fps_base = bpy.context.scene.render.fps_base
        view_layer = scene.view_layers[0]
        tmp.select_set(True, view_layer=view_layer)
        with bpy.context.temp_override(scene=scene, view_layer=view_layer):
            result = bpy.ops.wm.alembic_export(
                filepath=tmp_path, start=frames[0], end=frames[-1], selected=True,
                uvs=True, normals=False, vcolors=False, face_sets=False, apply_subdiv=False,
                triangulate=False, export_custom_properties=False, as_background_job=False,
                evaluation_mode='VIEWPORT', init_scene_frame_range=False, global_scale=1.0,
                flatten=False, use_instancing=False, check_existing=False)
        if 'FINISHED' not in result or not os.path.isfile(tmp_path):
            raise OSError(f"Blender's Alembic exporter did not write {tmp_path}")
    finally:
        key = mesh.shape_keys
        if key is not None and key.animation_data is not None:
            key.animation_data.action = None
        if tmp is not None:
            bpy.data.objects.remove(tmp)
        obj.name = real_name
        bpy.data.scenes.remove(scene)
        bpy.data.meshes.remove(mesh)
        if action is not None and action.users == 0:
            bpy.data.actions.remove(action)
    return object_path


def _abc_name(name):
    # Blender's exporter makes names valid Alembic identifiers this way.
    return "".join("_" if c in " .:" else c for c in name)


def _open_cache_file(filepath):
    before = set(bpy.data.cache_files)
    result = bpy.ops.cachefile.open(filepath=abspath(filepath), relative_path=filepath.startswith("//"))
    new = [c for c in bpy.data.cache_files if c not in before]
    if 'FINISHED' not in result or not new:
        raise OSError(f"Blender could not open the Alembic file {filepath}")
    cache = new[0]
    cache.filepath = filepath
    # The operator leaves one user of its own: only the modifier should
    # hold it, so freeing the bake leaves it unused and removable.
    cache.user_clear()
    return cache


def install_alembic(obj, filepath, object_path, start, end, vertices):
    """A Mesh Sequence Cache modifier reading the positions of the object's
    node in the Alembic file (topology and UVs stay the mesh's own)."""
    cache = _open_cache_file(filepath)
    mod = obj.modifiers.new(MODIFIER_NAME, 'MESH_SEQUENCE_CACHE')
    mod.cache_file = cache
    mod.object_path = object_path
    mod.read_data = {'VERT'}
    _place(obj, mod, insertion_index(obj))
    obj.drape_bake.baked_cache_file = cache.name
    _record(obj, 'ALEMBIC', start, end, vertices, filepath)
