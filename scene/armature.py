"""Capsule colliders from an armature's deform bones.

One Empty per deform bone, in the collection "Drape Colliders", held on the
bone by a Child Of constraint (identity inverse) so it follows the pose: its
origin is the bone's head and, with a local Y scale equal to the bone's
length, local (0, 1, 0) is the tail. Radii come from the meshes skinned to the
armature (an Armature modifier pointing at it): every vertex is given to the
nearest deform-bone segment at rest, and each end's radius is the median
distance of the vertices on that half of the bone. Without a skinned mesh (or
with too few vertices on a bone) the bone's envelope radii are used.
"""

import bpy
import numpy as np

from . import compat, meshdata

COLLECTION = "Drape Colliders"
_MIN_VERTICES = 6


def _bone_selected(arm_obj, bone):
    return compat.bone_selected(arm_obj, bone.name)


def deform_bones(arm_obj, only_selected=False, min_length=0.0):
    names = []
    for bone in arm_obj.data.bones:
        if not bone.use_deform or bone.length < min_length:
            continue
        if only_selected and not _bone_selected(arm_obj, bone):
            continue
        names.append(bone.name)
    return names


def skinned_meshes(arm_obj, scene):
    out = []
    for obj in scene.objects:
        if obj.type != 'MESH' or obj.drape.enabled:
            continue
        if any(m.type == 'ARMATURE' and m.object == arm_obj for m in obj.modifiers):
            out.append(obj)
    return out


def _segment_distance(points, a, b):
    ab = b - a
    t = np.clip(((points - a) @ ab) / max(float(ab @ ab), 1e-20), 0.0, 1.0)
    closest = a + t[:, None] * ab
    return np.linalg.norm(points - closest, axis=1), t


def estimate_radii(arm_obj, bone_names, meshes):
    """{bone: (radius_head, radius_tail)} in armature space (the units the
    capsule's radii use under the armature's scale)."""
    m_arm = np.array(arm_obj.matrix_world, dtype=np.float64)
    arm_scale = float(np.mean(np.linalg.norm(m_arm[:3, :3], axis=0)))
    bones = arm_obj.data.bones
    heads = np.array([bones[n].head_local for n in bone_names], np.float64) @ m_arm[:3, :3].T + m_arm[:3, 3]
    tails = np.array([bones[n].tail_local for n in bone_names], np.float64) @ m_arm[:3, :3].T + m_arm[:3, 3]
    radii = {n: (bones[n].head_radius, bones[n].tail_radius) for n in bone_names}
    if not meshes or not bone_names:
        return radii, "envelope"
    points = np.concatenate([
        meshdata.to_world(meshdata.local_positions(m.data), m.matrix_world).astype(np.float64) for m in meshes
    ])
    best = np.full(points.shape[0], np.inf)
    owner = np.full(points.shape[0], -1)
    param = np.zeros(points.shape[0])
    for i in range(len(bone_names)):
        d, t = _segment_distance(points, heads[i], tails[i])
        closer = d < best
        best[closer], owner[closer], param[closer] = d[closer], i, t[closer]
    used_mesh = False
    for i, name in enumerate(bone_names):
        mine = owner == i
        if mine.sum() < _MIN_VERTICES:
            continue
        head_side = mine & (param < 0.5)
        tail_side = mine & (param >= 0.5)
        r_all = float(np.median(best[mine]))
        rh = float(np.median(best[head_side])) if head_side.sum() >= 3 else r_all
        rt = float(np.median(best[tail_side])) if tail_side.sum() >= 3 else r_all
        radii[name] = (rh / arm_scale, rt / arm_scale)
        used_mesh = True
    return radii, ("mesh" if used_mesh else "envelope")


def _collection(scene):
    coll = bpy.data.collections.get(COLLECTION)
    if coll is None:
        coll = bpy.data.collections.new(COLLECTION)
    if scene.collection.children.get(coll.name) is None and coll not in scene.collection.children_recursive:
        scene.collection.children.link(coll)
    return coll


def existing_capsules(arm_obj):
    return [o for o in bpy.data.objects if o.get("drape_armature") == arm_obj.name and o.get("drape_bone")]


def make_capsules(scene, arm_obj, bone_names, radii, radius_scale=1.0):
    from mathutils import Matrix

    coll = _collection(scene)
    made = []
    for name in bone_names:
        bone = arm_obj.data.bones[name]
        empty = bpy.data.objects.new(f"DC_{arm_obj.name}_{name}", None)
        empty.empty_display_type = 'PLAIN_AXES'
        empty.empty_display_size = 0.02
        empty.scale = (1.0, bone.length, 1.0)
        empty["drape_armature"] = arm_obj.name
        empty["drape_bone"] = name
        coll.objects.link(empty)
        con = empty.constraints.new('CHILD_OF')
        con.name = "Drape bone"
        con.target = arm_obj
        con.subtarget = name
        con.inverse_matrix = Matrix.Identity(4)
        rh, rt = radii[name]
        empty.drape_collider.kind = 'CAPSULE'
        empty.drape_collider.radius_start = rh * radius_scale
        empty.drape_collider.radius_end = rt * radius_scale
        empty.hide_render = True
        made.append(empty)
    return made
