"""Drape inside Blender, driven through bpy the way an artist or a script does:
operators, settings, the timeline. Checks use Blender's own data or geometry
written here, independent of the solver."""

import math
import types

import addon_utils
import bpy
import numpy as np
import pytest

from drape.scene import colliders, compat, meshdata, runtime, wind, writeback


# --------------------------------------------------------------------------- helpers


def round_cone_sdf(p, a, b, ra, rb):
    """Exact signed distance from points p (n, 3) to the round cone (convex
    hull of a sphere ra at a and rb at b); negative inside."""
    p = np.asarray(p, np.float64)
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    ba = b - a
    l2 = float(ba @ ba)
    if l2 < 1e-20:
        return np.linalg.norm(p - a, axis=1) - max(ra, rb)
    rr = ra - rb
    a2 = l2 - rr * rr
    il2 = 1.0 / l2
    pa = p - a
    y = pa @ ba
    z = y - l2
    xv = pa * l2 - np.outer(y, ba)
    x2 = (xv * xv).sum(1)
    y2 = y * y * l2
    z2 = z * z * l2
    k = np.sign(rr) * rr * rr * x2
    out = (np.sqrt(x2 * a2 * il2) + y * rr) * il2 - ra
    out = np.where(np.sign(z) * a2 * z2 > k, np.sqrt(x2 + z2) * il2 - rb, out)
    out = np.where(np.sign(y) * a2 * y2 < k, np.sqrt(x2 + y2) * il2 - ra, out)
    return out


def world(obj, local):
    m = np.array(obj.matrix_world, np.float64)
    return local @ m[:3, :3].T + m[:3, 3]


def mesh_co(obj):
    return meshdata.local_positions(obj.data).astype(np.float64)


def select_only(obj):
    for o in bpy.context.selected_objects:
        o.select_set(False)
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj


def edge_lengths(obj, positions):
    e = np.empty(len(obj.data.edges) * 2, np.int32)
    obj.data.edges.foreach_get("vertices", e)
    e = e.reshape(-1, 2)
    return np.linalg.norm(positions[e[:, 0]] - positions[e[:, 1]], axis=1)


def hanging_sheet(name="Sheet", n=12, size=1.0, z=2.0, vertical=False):
    """An n x n quad sheet with one edge in vertex group "pin": horizontal
    (pinned along +Y, it swings down when played) or vertical in the XZ
    plane (pinned along its top, hanging still)."""
    rotation = (math.pi / 2, 0, 0) if vertical else (0, 0, 0)
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=n, y_subdivisions=n, size=size, location=(0, 0, z),
                                    rotation=rotation)
    obj = bpy.context.active_object
    obj.name = name
    bpy.ops.object.transform_apply(location=False, rotation=True, scale=True)
    co = mesh_co(obj)
    axis = 2 if vertical else 1
    top = np.where(co[:, axis] > co[:, axis].max() - 1e-5)[0]
    obj.vertex_groups.new(name="pin").add([int(i) for i in top], 1.0, 'REPLACE')
    return obj, top


def play(scene, frames):
    for f in frames:
        scene.frame_set(f)


# --------------------------------------------------------------------------- the Rigify scene


def rigify_cape_scene():
    """Rigify's human metarig animated over 48 frames (spine twist, arms,
    a leg kicking back through the cape), a cape behind the back with an
    Armature modifier, its top row pinned ("collar"), capsules from the bones."""
    addon_utils.enable("rigify", default_set=True)
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, 48
    bpy.ops.object.armature_human_metarig_add()
    arm = bpy.context.active_object
    bpy.ops.object.mode_set(mode='POSE')
    keys = ((1, 0.0), (16, 1.0), (32, -0.5), (48, 0.0))
    for name, axis, amp in (("spine", 2, 0.6), ("upper_arm.L", 0, 0.8), ("upper_arm.R", 0, -0.8),
                            ("spine.003", 1, 0.3), ("thigh.L", 0, 0.9), ("thigh.R", 0, -0.7)):
        pb = arm.pose.bones[name]
        pb.rotation_mode = 'XYZ'
        for frame, k in keys:
            e = [0.0, 0.0, 0.0]
            e[axis] = amp * k
            pb.rotation_euler = e
            pb.keyframe_insert("rotation_euler", frame=frame)
    bpy.ops.object.mode_set(mode='OBJECT')

    bpy.ops.mesh.primitive_grid_add(x_subdivisions=16, y_subdivisions=24, size=1, location=(0, 0.17, 1.18),
                                    rotation=(math.pi / 2, 0, 0))
    cape = bpy.context.active_object
    cape.name = "Cape"
    cape.scale = (0.6, 0.9, 1.0)
    bpy.ops.object.transform_apply(location=False, rotation=True, scale=True)
    co = mesh_co(cape)
    collar = np.where(co[:, 2] > co[:, 2].max() - 1e-5)[0]
    cape.vertex_groups.new(name="collar").add([int(i) for i in collar], 1.0, 'REPLACE')
    cape.vertex_groups.new(name="spine.003").add(list(range(len(co))), 1.0, 'REPLACE')
    cape.modifiers.new("Armature", 'ARMATURE').object = arm

    select_only(cape)
    bpy.ops.drape.cloth_add(pin_group="collar")
    cape.drape.substeps = 8
    select_only(arm)
    bpy.ops.drape.capsules_from_armature(min_length=0.085, radius_scale=1.5)
    return scene, arm, cape, collar


def bone_skinned(arm, bone_name, cape, local_points):
    """Where Blender's linear blend skinning with weight 1 on one bone puts
    ``local_points`` of the cape (world space): computed here from the pose."""
    m_arm = np.array(arm.matrix_world, np.float64)
    pose = np.array(arm.pose.bones[bone_name].matrix, np.float64)
    rest = np.array(arm.data.bones[bone_name].matrix_local, np.float64)
    deform = m_arm @ pose @ np.linalg.inv(rest) @ np.linalg.inv(m_arm)
    p = world(cape, local_points)
    return p @ deform[:3, :3].T + deform[:3, 3]


@pytest.mark.slow
def test_cape_on_rigify_metarig_follows_pins_and_stays_out_of_capsules(empty_scene):
    scene, arm, cape, collar = rigify_cape_scene()
    capsule_objs = [o for o in scene.objects if o.drape_collider.kind == 'CAPSULE']
    deform_long = [b for b in arm.data.bones if b.use_deform and b.length >= 0.085]
    assert len(capsule_objs) == len(deform_long) > 20

    rest_local = mesh_co(cape)
    free = np.ones(len(rest_local), bool)
    free[collar] = False
    worst_pin = 0.0
    worst_depth = np.inf
    closest_contact = np.inf
    hem_motion = 0.0
    for frame in range(1, 49):
        scene.frame_set(frame)
        entry = runtime.get(cape)
        assert entry is not None and entry.error is None, entry and entry.error
        result = world(cape, runtime.dense_positions_local(cape).astype(np.float64))
        assert np.all(np.isfinite(result))
        # Pins sit on their animated target, computed from the pose here.
        target = bone_skinned(arm, "spine.003", cape, rest_local[collar])
        worst_pin = max(worst_pin, float(np.abs(result[collar] - target).max()))
        # Free vertices outside every capsule (exact round-cone distance), once simulated.
        depsgraph = bpy.context.evaluated_depsgraph_get()
        if frame > scene.frame_start:
            for obj in capsule_objs:
                a, b, ra, rb = colliders.capsule_from_matrix(
                    np.array(obj.evaluated_get(depsgraph).matrix_world, np.float64),
                    obj.drape_collider.radius_start, obj.drape_collider.radius_end)
                d = round_cone_sdf(result[free], a, b, ra, rb)
                worst_depth = min(worst_depth, float(d.min()))
                closest_contact = min(closest_contact, float(d.min()))
        skinned = bone_skinned(arm, "spine.003", cape, rest_local)
        hem_motion = max(hem_motion, float(np.linalg.norm(result - skinned, axis=1).max()))
        # The viewport shows the same result: Blender's evaluated mesh.
        evaluated = meshdata.local_positions(cape.evaluated_get(depsgraph).data)
        np.testing.assert_allclose(evaluated, runtime.dense_positions_local(cape), atol=1e-6)

    assert worst_pin < 1e-4, f"pins drifted {worst_pin} m from their armature targets"
    assert worst_depth > -1e-3, f"a vertex ended {-worst_depth * 1000:.2f} mm inside a capsule"
    assert closest_contact < 0.01, "the cloth never came near a capsule: the scene tests nothing"
    assert hem_motion > 0.05, "the cloth moved rigidly with the bone: nothing was simulated"
    entry = runtime.get(cape)
    assert entry.cache_range == (1, 48)
    assert entry.builds == 1


def test_capsules_from_armature_follow_the_pose(empty_scene):
    addon_utils.enable("rigify", default_set=True)
    bpy.ops.object.armature_human_metarig_add()
    arm = bpy.context.active_object
    pb = arm.pose.bones["forearm.L"]
    pb.rotation_mode = 'XYZ'
    pb.rotation_euler = (0.7, 0.2, -0.4)
    arm.location = (0.3, -0.2, 0.1)
    arm.scale = (2.0, 2.0, 2.0)
    bpy.ops.drape.capsules_from_armature(only_selected=False, min_length=0.2)
    depsgraph = bpy.context.evaluated_depsgraph_get()
    capsule = next(o for o in empty_scene.objects if o.get("drape_bone") == "forearm.L")
    a, b, ra, rb = colliders.capsule_from_matrix(np.array(capsule.evaluated_get(depsgraph).matrix_world),
                                                 capsule.drape_collider.radius_start,
                                                 capsule.drape_collider.radius_end)
    m = np.array(arm.matrix_world)
    head = m[:3, :3] @ np.array(pb.head) + m[:3, 3]
    tail = m[:3, :3] @ np.array(pb.tail) + m[:3, 3]
    np.testing.assert_allclose(a, head, atol=1e-5)
    np.testing.assert_allclose(b, tail, atol=1e-5)
    bone = arm.data.bones["forearm.L"]
    # No skinned mesh: envelope radii, scaled with the armature.
    assert ra == pytest.approx(2.0 * bone.head_radius, rel=1e-5)
    assert rb == pytest.approx(2.0 * bone.tail_radius, rel=1e-5)


def test_capsules_from_selected_bones_only(empty_scene):
    # Bone selection lives on PoseBone in Blender 5.0 and on Bone before it.
    addon_utils.enable("rigify", default_set=True)
    bpy.ops.object.armature_human_metarig_add()
    arm = bpy.context.active_object
    wanted = {"forearm.L", "shin.R"}
    for pb in arm.pose.bones:
        compat.bone_select_set(arm, pb.name, pb.name in wanted)
    bpy.ops.drape.capsules_from_armature(only_selected=True)
    made = {o.get("drape_bone") for o in empty_scene.objects if o.drape_collider.kind == 'CAPSULE'}
    assert made == wanted


def test_capsule_radii_from_a_skinned_body_mesh(empty_scene):
    bpy.ops.object.armature_add(location=(0, 0, 0))
    arm = bpy.context.active_object  # one bone from (0,0,0) to (0,0,1)
    bpy.ops.mesh.primitive_cylinder_add(radius=0.2, depth=1.0, location=(0, 0, 0.5), vertices=32)
    body = bpy.context.active_object
    body.modifiers.new("Armature", 'ARMATURE').object = arm
    select_only(arm)
    bpy.ops.drape.capsules_from_armature()
    capsule = next(o for o in empty_scene.objects if o.drape_collider.kind == 'CAPSULE')
    # Cylinder vertices sit on the radius-0.2 rims, except the caps' closest
    # points to the bone which are also at 0.2: the median distance is 0.2.
    assert capsule.drape_collider.radius_start == pytest.approx(0.2, abs=1e-4)
    assert capsule.drape_collider.radius_end == pytest.approx(0.2, abs=1e-4)


# --------------------------------------------------------------------------- live preview


def test_stiffness_change_mid_play_takes_effect_without_rebuild(empty_scene):
    scene = empty_scene
    sheet, top = hanging_sheet()
    select_only(sheet)
    bpy.ops.drape.cloth_add(pin_group="pin")
    sheet.drape.tethers = False
    sheet.drape.stretch_limits = False   # both hold the length whatever the stiffness
    rest = edge_lengths(sheet, mesh_co(sheet))

    def run(change_at=None):
        scene.frame_set(1)
        model = runtime.get(sheet).model
        for f in range(2, 31):
            if f == change_at:
                sheet.drape.stretch_stiffness = 0.5
                sheet.drape.shear_stiffness = 0.5
            scene.frame_set(f)
        entry = runtime.get(sheet)
        assert entry.model is model, "the model was rebuilt"
        strain = edge_lengths(sheet, runtime.dense_positions_local(sheet)) / rest
        return entry, float(strain.mean())

    stiff_k = sheet.drape.stretch_stiffness
    entry, stiff = run()
    builds = entry.builds
    entry, soft = run(change_at=15)
    assert entry.builds == builds == 1
    assert sheet.drape.stretch_compliance == pytest.approx(1 / 0.5)
    assert soft > stiff + 0.05, (stiff, soft)
    sheet.drape.stretch_stiffness = stiff_k
    assert sheet.drape.stretch_compliance == pytest.approx(1 / stiff_k)


def test_scrub_back_shows_cache_start_frame_resets(empty_scene):
    scene = empty_scene
    sheet, _ = hanging_sheet()
    select_only(sheet)
    bpy.ops.drape.cloth_add(pin_group="pin")
    play(scene, range(1, 13))
    entry = runtime.get(sheet)
    assert entry.cache_range == (1, 12)
    at5 = entry.frames[5].copy()
    at12 = entry.frames[12].copy()
    assert np.abs(at5 - at12).max() > 1e-3
    scene.frame_set(5)
    depsgraph = bpy.context.evaluated_depsgraph_get()
    np.testing.assert_array_equal(runtime.dense_positions_local(sheet), at5)
    np.testing.assert_allclose(meshdata.local_positions(sheet.evaluated_get(depsgraph).data), at5, atol=1e-6)
    steps = entry.steps
    scene.frame_set(13)  # one past the live state: steps once from frame 12
    assert entry.steps == steps + 1 and entry.cache_range == (1, 13)
    scene.frame_set(scene.frame_start)
    assert runtime.get(sheet) is entry and entry.cache_range == (1, 1) and entry.builds == 1
    np.testing.assert_allclose(runtime.dense_positions_local(sheet), mesh_co(sheet), atol=1e-6)
    # Frames skipped by playback are stepped through, one step per frame.
    scene.frame_set(4)
    assert entry.steps == steps + 1 + 3 and entry.cache_range == (1, 4)


def test_rename_delete_and_remove_while_live(empty_scene):
    scene = empty_scene
    sheet, _ = hanging_sheet()
    select_only(sheet)
    bpy.ops.drape.cloth_add(pin_group="pin")
    play(scene, range(1, 5))
    entry = runtime.get(sheet)
    sheet.name = "Renamed"
    play(scene, range(5, 8))
    assert runtime.get(bpy.data.objects["Renamed"]) is entry and entry.cache_range == (1, 7)
    dup = sheet.copy()
    dup.data = sheet.data.copy()
    scene.collection.objects.link(dup)
    scene.frame_set(8)
    assert dup.drape.uid != sheet.drape.uid, "a duplicate must get its own runtime"
    assert runtime.get(sheet) is entry and runtime.get(dup) is not entry
    bpy.data.objects.remove(dup, do_unlink=True)
    scene.frame_set(9)
    assert len(runtime._registry) == 1
    select_only(sheet)
    bpy.ops.drape.cloth_remove()
    assert not sheet.drape.enabled and writeback.find_modifier(sheet) is None
    assert not writeback.has_result(sheet)
    scene.frame_set(10)
    assert runtime.get(sheet) is None
    bpy.data.objects.remove(sheet, do_unlink=True)
    scene.frame_set(11)
    assert not runtime._registry


def test_pins_follow_shape_keys_hooks_and_animated_weights(empty_scene):
    scene = empty_scene
    sheet, top = hanging_sheet(n=8)
    # Shape key lifting the pinned row by 0.3 m, keyed 0 -> 1 over frames 1..10.
    sheet.shape_key_add(name="Basis")
    key = sheet.shape_key_add(name="Lift")
    co = mesh_co(sheet)
    co[top, 2] += 0.3
    key.data.foreach_set("co", co.astype(np.float32).ravel())
    key.value = 0.0
    key.keyframe_insert("value", frame=1)
    key.value = 1.0
    key.keyframe_insert("value", frame=10)
    # A Vertex Weight Edit modifier removes every pin weight from frame 20 on.
    vw = sheet.modifiers.new("Release", 'VERTEX_WEIGHT_EDIT')
    vw.vertex_group = "pin"
    vw.use_remove = True
    vw.remove_threshold = 0.0
    vw.keyframe_insert("remove_threshold", frame=19)
    vw.remove_threshold = 1.01
    vw.keyframe_insert("remove_threshold", frame=20)
    select_only(sheet)
    bpy.ops.drape.cloth_add(pin_group="pin")
    rest = world(sheet, mesh_co(sheet))
    for f in range(1, 11):
        scene.frame_set(f)
    got = world(sheet, runtime.dense_positions_local(sheet).astype(np.float64))
    np.testing.assert_allclose(got[top], rest[top] + (0, 0, 0.3), atol=1e-4)
    play(scene, range(11, 20))
    at19 = world(sheet, runtime.dense_positions_local(sheet).astype(np.float64))
    np.testing.assert_allclose(at19[top], rest[top] + (0, 0, 0.3), atol=1e-4)
    play(scene, range(20, 31))
    at30 = world(sheet, runtime.dense_positions_local(sheet).astype(np.float64))
    # Released: the former pins fall under gravity (about g t^2 / 2 = 0.6 m in 10 frames at 24 fps).
    assert (at19[top, 2] - at30[top, 2]).min() > 0.2
    assert runtime.get(sheet).builds == 1


def test_colliders_give_start_and_end_transforms_of_parented_keyed_objects(empty_scene):
    scene = empty_scene
    bpy.ops.object.empty_add(location=(0, 0, 0))
    parent = bpy.context.active_object
    parent.keyframe_insert("location", frame=1)
    parent.location = (1.0, 0.0, 0.0)
    parent.keyframe_insert("location", frame=2)
    bpy.ops.drape.collider_add(type='CAPSULE', radius=0.2)  # nothing selected after: creates one
    bpy.ops.object.select_all(action='DESELECT')
    bpy.ops.drape.collider_add(type='CAPSULE', radius=0.2)
    capsule = bpy.context.active_object
    assert capsule.drape_collider.kind == 'CAPSULE' and capsule is not parent
    capsule.parent = parent
    capsule.scale = (1.0, 0.5, 1.0)
    scene.frame_set(1)
    start = colliders.read(scene, bpy.context.evaluated_depsgraph_get())
    scene.frame_set(2)
    end = colliders.read(scene, bpy.context.evaluated_depsgraph_get())

    class _S:  # the solver's containers are plain dataclasses; any namespace works here
        Capsules = staticmethod(lambda **kw: kw)
        Planes = staticmethod(lambda **kw: kw)

    caps, planes = colliders.solver_inputs(start, end, _S)
    row = list(end.capsules).index(capsule.name)
    np.testing.assert_allclose(caps["a0"][row], (0, 0, 0), atol=1e-6)
    np.testing.assert_allclose(caps["a1"][row], (1, 0, 0), atol=1e-6)
    np.testing.assert_allclose(caps["b1"][row], (1, 0.5, 0), atol=1e-6)
    assert caps["radius_a"][row] == pytest.approx(0.2)
    assert planes is None


def test_wind_field_sampling_and_effect(empty_scene):
    scene = empty_scene
    bpy.ops.object.effector_add(type='WIND', location=(0, -2, 0), rotation=(-math.pi / 2, 0, 0))
    field_obj = bpy.context.active_object
    field_obj.field.strength = 4.0
    field_obj.field.falloff_power = 1.0
    pts = np.array([[0, 0, 0], [0, 1, 0], [0.5, 3, 0.2]], np.float32)
    vel = wind.wind_velocity(scene, bpy.context.evaluated_depsgraph_get(), pts, 1)
    # Plane-shaped wind blowing along its local +Z = world +Y, falloff (1 + d)^-1 by distance along it.
    expected = 4.0 / (1.0 + (pts[:, 1] + 2.0))
    np.testing.assert_allclose(vel[:, 1], expected, rtol=1e-5)
    np.testing.assert_allclose(vel[:, [0, 2]], 0.0, atol=1e-6)

    sheet, _ = hanging_sheet(n=10, vertical=True)
    select_only(sheet)
    bpy.ops.drape.cloth_add(pin_group="pin")

    def mean_y():
        play(scene, range(1, 25))
        return float(runtime.dense_positions_local(sheet)[:, 1].mean())

    with_wind = mean_y()
    field_obj.field.strength = 0.0
    without = mean_y()
    assert with_wind > without + 0.02, (with_wind, without)


def test_proxy_source_skins_the_dense_mesh(empty_scene):
    scene = empty_scene
    dense, top = hanging_sheet("Dense", n=30)
    proxy, proxy_top = hanging_sheet("Proxy", n=8)
    proxy.vertex_groups.clear()  # pins are painted once, on the render mesh
    proxy.hide_set(True)         # artists hide the proxy; it must still work
    # The dense mesh's pinned edge is lifted 0.3 m by a shape key over frames 1..10.
    dense.shape_key_add(name="Basis")
    key = dense.shape_key_add(name="Lift")
    co = mesh_co(dense)
    co[top, 2] += 0.3
    key.data.foreach_set("co", co.astype(np.float32).ravel())
    for frame, value in ((1, 0.0), (10, 1.0)):
        key.value = value
        key.keyframe_insert("value", frame=frame)
    select_only(dense)
    bpy.ops.drape.cloth_add(pin_group="pin")
    dense.drape.sim_source = 'PROXY'
    dense.drape.proxy = proxy
    play(scene, range(1, 11))
    entry = runtime.get(dense)
    assert entry.error is None, entry.error
    assert entry.model.n == len(proxy.data.vertices)
    got = world(dense, runtime.dense_positions_local(dense).astype(np.float64))
    rest = world(dense, mesh_co(dense))
    lift = np.array((0.0, 0.0, 0.3))
    np.testing.assert_allclose(got[top], rest[top] + lift, atol=1e-5)  # dense pins exact
    coarse = entry.state.positions_aos()
    coarse_rest = world(proxy, mesh_co(proxy))
    np.testing.assert_allclose(coarse[proxy_top], coarse_rest[proxy_top] + lift, atol=1e-4)  # coarse pins ride
    free = np.setdiff1d(np.arange(len(coarse)), proxy_top)
    assert (coarse_rest[free, 2] - coarse[free, 2]).max() > 0.1  # the rest of the proxy fell
    # The skinned dense mesh lies on the coarse surface: every dense vertex is
    # within a coarse cell's size of some simulated vertex.
    d = np.min(np.linalg.norm(got[:, None, :] - coarse[None, :, :], axis=2), axis=1)
    assert d.max() < 1.0 / 8 * 1.5


def test_presets_ship_with_the_addon_and_apply(empty_scene):
    from drape.panels import cloth as cloth_panels

    names = {p.rsplit("/", 1)[-1][:-3] for p in __import__("glob").glob(cloth_panels.BUILTIN_PRESETS + "/*.py")}
    assert {"cotton", "silk", "denim", "leather", "rubber", "heavy_canvas"} <= names
    assert cloth_panels.preset_paths()[0] == cloth_panels.BUILTIN_PRESETS
    sheet, _ = hanging_sheet()
    select_only(sheet)
    bpy.ops.drape.cloth_add()
    bpy.ops.script.execute_preset(filepath=cloth_panels.BUILTIN_PRESETS + "/denim.py",
                                  menu_idname="DRAPE_MT_cloth_presets")
    assert sheet.drape.areal_density == pytest.approx(0.4)
    assert sheet.drape.stretch_stiffness == pytest.approx(5e7, rel=1e-5)
    bpy.ops.script.execute_preset(filepath=cloth_panels.BUILTIN_PRESETS + "/silk.py",
                                  menu_idname="DRAPE_MT_cloth_presets")
    assert sheet.drape.areal_density == pytest.approx(0.08)
    assert sheet.drape.bend_stiffness < 1e-5


def test_garment_presets_set_the_garment_and_leave_the_fabric(empty_scene):
    import ast
    import glob
    import os

    from drape.operators import cloth as cloth_ops
    from drape.panels import cloth as cloth_panels

    files = sorted(glob.glob(cloth_panels.BUILTIN_GARMENT_PRESETS + "/*.py"))
    assert {"plain", "sewn_panels", "pillow", "puffer", "game_cloth"} <= {os.path.basename(f)[:-3] for f in files}
    assert cloth_panels.preset_paths(cloth_panels.GARMENT_PRESET_SUBDIR)[0] == cloth_panels.BUILTIN_GARMENT_PRESETS
    sheet, _ = hanging_sheet()
    select_only(sheet)
    bpy.ops.drape.cloth_add()
    settings = sheet.drape
    for f in files:
        # Each preset sets every garment number (so presets do not leak into
        # one another) and nothing of the fabric.
        assigned = {t.attr: ast.literal_eval(node.value) for node in ast.parse(open(f).read()).body
                    if isinstance(node, ast.Assign) for t in node.targets
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "drape"}
        assert set(assigned) == set(cloth_ops.GARMENT_PRESET_SETTINGS), f
        settings.areal_density, settings.stretch_stiffness = 0.37, 1234.0
        for name in cloth_ops.GARMENT_PRESET_SETTINGS:   # away from every preset's value
            value = getattr(settings, name)
            setattr(settings, name, (not value) if isinstance(value, bool) else 0.123)
        bpy.ops.script.execute_preset(filepath=f, menu_idname="DRAPE_MT_garment_presets")
        for name, value in assigned.items():
            assert getattr(settings, name) == pytest.approx(value, rel=1e-6), (f, name)
        assert settings.areal_density == pytest.approx(0.37)
        assert settings.stretch_stiffness == pytest.approx(1234.0, rel=1e-5)
    assert bpy.ops.drape.garment_preset_add.poll()


# --------------------------------------------------------------------------- files and undo


def _handler_count():
    """How many times Drape's own handlers are registered, over all lists."""
    mine = {fn for _, fn in runtime._HANDLERS}
    return sum(fn in mine for n in dir(bpy.app.handlers)
               if isinstance(getattr(bpy.app.handlers, n), list) for fn in getattr(bpy.app.handlers, n))


def test_settings_survive_save_and_reload(empty_scene, tmp_path):
    sheet, _ = hanging_sheet()
    select_only(sheet)
    bpy.ops.drape.cloth_add(pin_group="pin")
    s = sheet.drape
    s.substeps, s.iterations = 7, 2
    s.stretch_stiffness, s.bend_stiffness = 12345.0, 0.002
    s.areal_density, s.air_drag, s.tethers, s.tether_scale = 0.33, 0.7, False, 1.1
    s.self_collision, s.self_thickness, s.wind_lift = True, 0.006, 0.9
    s.sim_source, s.vertex_budget = 'AUTO', 777
    bpy.ops.object.select_all(action='DESELECT')
    bpy.ops.drape.collider_add(type='PLANE')
    plane = bpy.context.active_object
    plane.drape_collider.radius_end = 0.42
    plane_name = plane.name
    uid = s.uid
    play(bpy.context.scene, range(1, 4))
    handlers = _handler_count()
    path = str(tmp_path / "drape_settings.blend")
    bpy.ops.wm.save_as_mainfile(filepath=path)
    bpy.ops.wm.read_factory_settings(use_empty=True)
    bpy.ops.wm.open_mainfile(filepath=path)
    assert _handler_count() == handlers == len(runtime._HANDLERS)
    assert not runtime._registry, "the live cache must not survive a reload"
    sheet = bpy.data.objects["Sheet"]
    s = sheet.drape
    assert not writeback.has_result(sheet)  # no stale result shown
    assert (s.enabled, s.uid, s.pin_group, s.substeps, s.iterations) == (True, uid, "pin", 7, 2)
    assert s.stretch_stiffness == pytest.approx(12345.0, rel=1e-5)
    assert s.bend_compliance == pytest.approx(500.0, rel=1e-5)
    assert (s.tethers, s.self_collision, s.sim_source, s.vertex_budget) == (False, True, 'AUTO', 777)
    assert s.areal_density == pytest.approx(0.33) and s.self_thickness == pytest.approx(0.006)
    assert bpy.data.objects[plane_name].drape_collider.kind == 'PLANE'
    assert bpy.data.objects[plane_name].drape_collider.radius_end == pytest.approx(0.42)
    s.sim_source = 'SELF'
    play(bpy.context.scene, range(1, 4))  # simulates again after the reload
    assert runtime.get(sheet).cache_range == (1, 3)


def test_undo_after_cloth_add_leaves_nothing(empty_scene, tmp_path):
    """bpy.ops.ed.undo needs a window (its poll fails in background mode, the
    bpy module has none), so this checks the equivalent: Blender's memfile
    undo restores the ID data saved before the operator; here that snapshot
    is a saved file, and restoring it must leave no Drape data, runtime or
    handler behind."""
    assert not bpy.ops.ed.undo.poll()
    sheet, _ = hanging_sheet()
    before_mods = [m.name for m in sheet.modifiers]
    before_attrs = sorted(a.name for a in sheet.data.attributes)
    handlers = _handler_count()
    path = str(tmp_path / "before.blend")
    bpy.ops.wm.save_as_mainfile(filepath=path)
    select_only(sheet)
    bpy.ops.drape.cloth_add(pin_group="pin")
    play(bpy.context.scene, range(1, 4))
    assert runtime.get(sheet) is not None
    bpy.ops.wm.revert_mainfile()
    runtime._on_undo()
    sheet = bpy.data.objects["Sheet"]
    assert not sheet.drape.enabled and sheet.drape.pin_group == ""
    assert [m.name for m in sheet.modifiers] == before_mods
    assert sorted(a.name for a in sheet.data.attributes) == before_attrs
    assert not runtime._registry and _handler_count() == handlers
    play(bpy.context.scene, range(1, 3))
    assert not runtime._registry


def test_self_collision_settings_reach_the_solver(empty_scene):
    from drape.solver import selfcollision

    sheet, _ = hanging_sheet(n=10)
    select_only(sheet)
    bpy.ops.drape.cloth_add(pin_group="pin")
    scene = empty_scene
    play(scene, range(1, 3))
    assert runtime.get(sheet).model.self_collision is None
    sheet.drape.self_collision = True  # a rest-state setting: rebuilds with contacts
    sheet.drape.self_thickness = 0.012
    play(scene, range(3, 5))
    entry = runtime.get(sheet)
    sc = entry.model.self_collision
    assert isinstance(sc, selfcollision.SelfCollision) and entry.builds == 2
    assert float(np.max(sc.thickness)) == pytest.approx(0.012)
    sheet.drape.self_friction = 0.7  # mid-play: no rebuild
    scene.frame_set(5)
    assert runtime.get(sheet) is entry and float(np.max(entry.model.self_collision.friction)) == pytest.approx(0.7)


def test_automatic_source_simplifies_to_the_budget(empty_scene):
    scene = empty_scene
    dense, top = hanging_sheet("Dense", n=40, vertical=True)
    select_only(dense)
    bpy.ops.drape.cloth_add(pin_group="pin")
    dense.drape.sim_source = 'AUTO'
    dense.drape.vertex_budget = 300
    rest = world(dense, mesh_co(dense))
    bpy.ops.object.select_all(action='DESELECT')
    bpy.ops.drape.collider_add(type='CAPSULE', radius=0.15)
    capsule = bpy.context.active_object
    capsule.location = (-1.0, 0.1, 1.8)  # a capsule along +X sweeping into the sheet's lower half
    capsule.rotation_euler = (0, 0, -math.pi / 2)
    capsule.scale = (1, 2.0, 1)
    play(scene, range(1, 25))
    entry = runtime.get(dense)
    assert entry.error is None, entry.error
    assert abs(entry.model.n - 300) <= 0.05 * 300 + 1
    got = world(dense, runtime.dense_positions_local(dense).astype(np.float64))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got[top], rest[top], atol=1e-5)  # dense pins exact
    assert np.abs(got[:, 1] - rest[:, 1]).max() > 0.02  # pushed by the capsule


def test_baked_objects_are_not_simulated(empty_scene):
    if not hasattr(bpy.types.Object, "drape_bake"):
        pytest.skip("the bake module does not register Object.drape_bake")
    sheet, _ = hanging_sheet()
    select_only(sheet)
    bpy.ops.drape.cloth_add(pin_group="pin")
    play(empty_scene, range(1, 4))
    steps = runtime.get(sheet).steps
    sheet.drape_bake.baked = True
    play(empty_scene, range(4, 8))
    assert runtime.get(sheet).steps == steps
    assert not writeback.has_result(sheet)  # the bake plays, not the live result
    sheet.drape_bake.baked = False


class _Layout:
    """Stands in for a UILayout: records every property a panel draws and
    fails on a name the data doesn't have (a typo would only show in the UI)."""

    def __init__(self, seen):
        self.seen = seen
        self.use_property_split = self.use_property_decorate = self.active = self.enabled = True

    def prop(self, data, name, **_kw):
        assert name in data.bl_rna.properties, f"{data.bl_rna.identifier} has no property {name!r}"
        self.seen.add(name)

    def prop_search(self, data, name, search_data, search_name, **_kw):
        self.prop(data, name)
        assert search_name in search_data.bl_rna.properties

    def operator(self, idname, **_kw):
        group, name = idname.split(".")
        assert hasattr(getattr(bpy.ops, group), name), idname

        class _Props:
            pass
        return _Props()

    def row(self, **_kw):
        return self

    column = box = row

    def label(self, **_kw):
        pass

    def menu(self, idname, **_kw):
        assert hasattr(bpy.types, idname), idname


def test_panels_draw_every_setting(empty_scene):
    from drape.panels import cloth as cloth_panels
    from drape.panels import colliders as collider_panels

    sheet, _ = hanging_sheet()
    select_only(sheet)
    bpy.ops.drape.cloth_add(pin_group="pin")
    play(empty_scene, range(1, 3))
    seen = set()

    class _Ctx:
        object = sheet
        scene = empty_scene

    panels = [c for c in cloth_panels.classes + collider_panels.classes if issubclass(c, bpy.types.Panel)]
    for source in ('SELF', 'PROXY', 'AUTO'):  # the Sim mesh panel shows what the source needs
        sheet.drape.sim_source = source
        for cls in panels:
            panel = types.SimpleNamespace(layout=_Layout(seen))
            if not hasattr(cls, "poll") or cls.poll(_Ctx):
                cls.draw(panel, _Ctx)
            if hasattr(cls, "draw_header"):
                cls.draw_header(panel, _Ctx)
    shown = {"enabled", "uid"} | {p for p in sheet.drape.bl_rna.properties.keys() if p.endswith("_compliance")}
    missing = set(sheet.drape.bl_rna.properties.keys()) - {"rna_type", "name"} - seen - shown
    assert not missing, f"settings with no widget: {missing}"
    names = {c.bl_idname for c in cloth_panels.classes}
    for key in ("stiffness", "damping", "pins", "collisions", "self_collision", "wind", "simmesh"):
        assert f"DRAPE_PT_cloth_{key}" in names and f"DRAPE_PT_cloth_{key}_physics" in names


def test_capsule_outline_lies_on_the_capsule():
    from drape.scene import draw

    a, b, ra, rb = np.array((0.1, 0.2, 0.3)), np.array((0.4, -0.5, 1.0)), 0.2, 0.1
    lines = draw.capsule_lines(a, b, ra, rb)
    assert lines.shape[0] % 2 == 0 and lines.shape[0] > 50
    # On the surface: the round cone's distance is ~0 within the lerp-radius
    # skin (lines at the equator rings and along the sides lie on it exactly).
    d = round_cone_sdf(lines.astype(np.float64), a, b, ra, rb)
    assert np.abs(d).max() < 0.02 * ra


def _two_sheets(collide):
    """A hammock (pinned along two opposite edges) and a smaller free sheet
    dropped onto it from 0.12 m above."""
    hammock, _ = hanging_sheet("Hammock", n=16, size=1.0, z=1.0)
    co = mesh_co(hammock)
    sides = np.where(np.abs(co[:, 0]) > 0.5 - 1e-5)[0]
    hammock.vertex_groups["pin"].add([int(i) for i in sides], 1.0, 'REPLACE')
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=10, y_subdivisions=10, size=0.6, location=(0.03, 0.02, 1.12))
    top = bpy.context.active_object
    top.name = "Blanket"
    for obj in (hammock, top):
        select_only(obj)
        bpy.ops.drape.cloth_add(pin_group="pin" if obj is hammock else "")
        obj.drape.cloth_collision = collide
        obj.drape.self_thickness = 0.01
        obj.drape.substeps = 10  # fewer substeps let a falling blanket's contacts come too late to hold
    return hammock, top


@pytest.mark.slow
def test_cloth_cloth_collision_between_objects(empty_scene):
    import oracles

    scene = empty_scene
    results = {}
    for collide in (False, True):
        bpy.ops.wm.read_factory_settings(use_empty=True)
        scene = bpy.context.scene
        hammock, top = _two_sheets(collide)
        play(scene, range(1, 31))
        sim = runtime.get(top)
        assert sim.error is None, sim.error
        assert (sim is runtime.get(hammock)) == collide  # one model for the group
        low = world(hammock, runtime.dense_positions_local(hammock).astype(np.float64))
        high = world(top, runtime.dense_positions_local(top).astype(np.float64))
        # Height of the blanket above the hammock where the hammock's nearest vertex is.
        nearest = np.argmin(np.linalg.norm(high[:, None, :2] - low[None, :, :2], axis=2), axis=1)
        results[collide] = (high[:, 2] - low[nearest, 2]).min()
        if collide:
            tris = [meshdata.Topology(o.data).triangles() for o in (hammock, top)]
            both = np.concatenate([low, high])
            faces = np.concatenate([tris[0], tris[1] + len(low)])
            assert len(oracles.intersecting_triangle_pairs(both, faces)) == 0
            assert sim.model.self_collision.n_regions == 2
            assert [m.name for m in sim.members] == ["Blanket", "Hammock"]
    assert results[False] < -0.05, "without cloth-cloth contacts the blanket should fall through"
    assert results[True] > -0.005, results


def test_layer_order_reaches_the_shared_model_without_a_rebuild(empty_scene):
    scene = empty_scene
    hammock, top = _two_sheets(True)
    top.drape.layer, hammock.drape.layer = 1, 0
    play(scene, range(1, 4))
    sim = runtime.get(top)
    assert sim.error is None, sim.error
    order = [m.name for m in sim.members]
    layers = {name: int(v) for name, v in zip(order, sim.model.self_collision.layers)}
    assert layers == {"Blanket": 1, "Hammock": 0}
    # Swapping the order mid-play takes effect on the next step, same model.
    top.drape.layer, hammock.drape.layer = 0, 1
    play(scene, range(4, 6))
    assert runtime.get(top) is sim and sim.builds == 1
    layers = {name: int(v) for name, v in zip(order, sim.model.self_collision.layers)}
    assert layers == {"Blanket": 0, "Hammock": 1}


@pytest.mark.slow
def test_cached_contacts_hold_touching_layers_and_are_taken_again_at_the_start_frame(empty_scene):
    # "Cache contacts": the blanket starts 8 mm over the hammock (within the
    # cache's reach), the contacts between the two are found once, at the
    # first step, and no later step detects; the blanket comes to rest on
    # the sagging hammock with no triangle pair of the two crossing (exact
    # test). Back at the start frame they are taken again from that pose;
    # switched off, live detection resumes.
    import oracles

    scene = empty_scene
    hammock, top = _two_sheets(True)
    top.location.z = 1.008
    top.drape.layer, hammock.drape.layer = 1, 0
    for obj in (top, hammock):
        obj.drape.self_cache = True
    play(scene, range(1, 4))
    sim = runtime.get(top)
    assert sim.error is None, sim.error
    sc = sim.model.self_collision
    assert sc.cached and sc.count > 0
    cached = sc.count
    detects = []
    real = sc._run_detect
    sc._run_detect = lambda *a: detects.append(1) or real(*a)
    play(scene, range(4, 41))
    assert sim.error is None, sim.error
    assert not detects and sc.cached and sc.count == cached
    low = world(hammock, runtime.dense_positions_local(hammock).astype(np.float64))
    high = world(top, runtime.dense_positions_local(top).astype(np.float64))
    assert low[:, 2].min() < 0.97   # the hammock sagged under the blanket
    nearest = np.argmin(np.linalg.norm(high[:, None, :2] - low[None, :, :2], axis=2), axis=1)
    assert (high[:, 2] - low[nearest, 2]).min() > -0.005
    tris = [meshdata.Topology(o.data).triangles() for o in (hammock, top)]
    assert len(oracles.intersecting_triangle_pairs(np.concatenate([low, high]),
                                                   np.concatenate([tris[0], tris[1] + len(low)]))) == 0
    # The start frame drops the cache; the first step takes it again.
    scene.frame_set(1)
    assert runtime.get(top) is sim and not sc.cached
    play(scene, range(2, 3))
    assert sc.cached and len(detects) == 1
    # Off: live detection from the next step.
    top.drape.self_cache = False
    play(scene, range(3, 5))
    assert not sc.cached and len(detects) == 3


def test_outer_layer_keeps_the_inner_layers_thickness_off_the_colliders(empty_scene):
    # Layered cloths in one model: the outer layer's capsules grow by one
    # self-collision thickness per layer under it (so a leg pressing both
    # layers leaves room for the inner one); swapping the order mid-play
    # moves the offset to the other cloth, without a rebuild.
    scene = empty_scene
    hammock, top = _two_sheets(True)
    top.drape.layer, hammock.drape.layer = 1, 0
    play(scene, range(1, 3))
    sim = runtime.get(top)
    assert sim.error is None, sim.error
    thickness = max(top.drape.self_thickness, 1e-5)   # the lead (first member) sets it
    rows = {m.name: slice(m.start, m.stop) for m in sim.members}
    offset = sim.model.collider_offset
    np.testing.assert_allclose(offset[rows["Blanket"]], thickness, rtol=1e-6)
    np.testing.assert_array_equal(offset[rows["Hammock"]], 0.0)
    top.drape.layer, hammock.drape.layer = 0, 3
    play(scene, range(3, 5))
    assert runtime.get(top) is sim and sim.builds == 1
    np.testing.assert_array_equal(offset[rows["Blanket"]], 0.0)
    np.testing.assert_allclose(offset[rows["Hammock"]], thickness, rtol=1e-6)


def test_pins_follow_a_hook(empty_scene):
    scene = empty_scene
    sheet, top = hanging_sheet(n=8)
    bpy.ops.object.empty_add(location=(0, 0, 0))
    handle = bpy.context.active_object
    handle.keyframe_insert("location", frame=1)
    handle.location = (0.2, 0.0, 0.4)
    handle.keyframe_insert("location", frame=12)
    hook = sheet.modifiers.new("Hook", 'HOOK')
    hook.object = handle
    hook.vertex_indices_set([int(i) for i in top])
    select_only(sheet)
    bpy.ops.drape.cloth_add(pin_group="pin")
    rest = world(sheet, mesh_co(sheet))
    play(scene, range(1, 13))
    got = world(sheet, runtime.dense_positions_local(sheet).astype(np.float64))
    np.testing.assert_allclose(got[top], rest[top] + (0.2, 0.0, 0.4), atol=1e-4)


def test_mass_group_and_density_set_vertex_masses(empty_scene):
    # A 4 x 4 quad grid of 1 m: every quad is 1/16 m^2, an interior vertex
    # touches four quads and gets a quarter of each: density / 16.
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=4, y_subdivisions=4, size=1.0)
    sheet = bpy.context.active_object
    co = mesh_co(sheet)
    heavy = np.where(co[:, 0] > 0.1)[0]
    group = sheet.vertex_groups.new(name="heavy")
    group.add(list(range(len(co))), 0.5, 'REPLACE')
    group.add([int(i) for i in heavy], 1.0, 'REPLACE')
    bpy.ops.drape.cloth_add()
    sheet.drape.areal_density = 0.32
    sheet.drape.mass_group = "heavy"
    empty_scene.frame_set(1)
    mass = runtime.get(sheet).model.mass
    interior = np.where((np.abs(co[:, 0]) < 0.49) & (np.abs(co[:, 1]) < 0.49))[0]
    weight = np.where(np.isin(interior, heavy), 1.0, 0.5)
    np.testing.assert_allclose(mass[interior], 0.32 / 16 * weight, rtol=1e-5)


def test_sheet_lands_on_a_tilted_plane_collider(empty_scene):
    scene = empty_scene
    bpy.ops.mesh.primitive_plane_add(size=4.0, location=(0, 0, 0.2), rotation=(0.3, 0, 0))
    ground = bpy.context.active_object
    bpy.ops.drape.collider_add(type='PLANE')  # on the selected object
    assert ground.drape_collider.kind == 'PLANE'
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=10, y_subdivisions=10, size=1.0, location=(0, 0, 0.8))
    sheet = bpy.context.active_object
    bpy.ops.drape.cloth_add()
    play(scene, range(1, 41))
    x = world(sheet, runtime.dense_positions_local(sheet).astype(np.float64))
    m = np.array(ground.matrix_world)
    normal = m[:3, 2] / np.linalg.norm(m[:3, 2])
    height = (x - m[:3, 3]) @ normal
    assert height.min() > -1e-4, "a vertex went through the plane"
    assert height.max() < 0.05, "the sheet should lie on the plane after 40 frames"


def test_settings_reach_the_solver_parameters(empty_scene):
    from drape import solver
    from drape.scene import params

    sheet, _ = hanging_sheet()
    select_only(sheet)
    bpy.ops.drape.cloth_add()
    s = sheet.drape
    values = dict(substeps=9, iterations=3, stretch_damping=0.11, shear_damping=0.12, bend_damping=0.13,
                  tether_damping=0.14, air_drag=0.15, tethers=False, tether_scale=1.2, wind_drag=0.8,
                  wind_lift=0.7, thickness=0.009, friction=0.25, static_friction=0.45, settle_damping=7.5,
                  settle_speed=0.2, air_resistance=0.6)
    for k, v in values.items():
        setattr(s, k, v)
    s.stretch_stiffness, s.shear_stiffness, s.bend_stiffness = 2e6, 3e4, 4e-4
    s.tether_stiffness, s.pin_stiffness, s.gravity_scale = 5e8, 6e3, 0.5
    empty_scene.gravity = (0.0, 0.0, -10.0)
    p = params.cloth_params(s, empty_scene, solver)
    assert (p.substeps, p.iterations, p.tethers) == (9, 3, False)
    expected = dict(stretch_compliance=1 / 2e6, shear_compliance=1 / 3e4, bend_compliance=1 / 4e-4,
                    tether_compliance=1 / 5e8, pin_compliance=1 / 6e3, stretch_damping=0.11,
                    shear_damping=0.12, bend_damping=0.13, tether_damping=0.14, air_drag=0.15,
                    tether_scale=1.2, drag_coefficient=0.8, lift_coefficient=0.7, collision_margin=0.009,
                    friction_kinetic=0.25, friction_static=0.45, settle_damping=7.5, settle_speed=0.2,
                    air_resistance=0.6)
    for k, v in expected.items():
        assert getattr(p, k) == pytest.approx(v, rel=1e-5), k
    assert tuple(p.gravity) == pytest.approx((0.0, 0.0, -5.0))
    empty_scene.use_gravity = False
    assert tuple(params.cloth_params(s, empty_scene, solver).gravity) == (0.0, 0.0, 0.0)


def test_proxy_pins_grab_and_release_with_animated_weights(empty_scene):
    scene = empty_scene
    dense, top = hanging_sheet("Dense", n=24)
    proxy, proxy_top = hanging_sheet("Proxy", n=6)
    # Frames 1-9: nothing pinned; 10-19: the top edge grabbed; 20+: released.
    vw = dense.modifiers.new("Pins", 'VERTEX_WEIGHT_EDIT')
    vw.vertex_group = "pin"
    vw.use_remove = True
    for frame, threshold in ((9, 1.01), (10, 0.0), (19, 0.0), (20, 1.01)):
        vw.remove_threshold = threshold
        vw.keyframe_insert("remove_threshold", frame=frame)
    select_only(dense)
    bpy.ops.drape.cloth_add(pin_group="pin")
    dense.drape.sim_source = 'PROXY'
    dense.drape.proxy = proxy
    play(scene, range(1, 10))
    sim = runtime.get(dense)
    z9 = sim.state.positions_aos()[proxy_top, 2].copy()
    assert z9.max() < 2.0 - 0.1, "unpinned: the proxy falls"
    play(scene, range(10, 20))
    z19 = sim.state.positions_aos()[proxy_top, 2]
    # Grabbed: back on their targets (the animated dense mesh, here at rest) and held.
    np.testing.assert_allclose(z19, world(proxy, mesh_co(proxy))[proxy_top, 2], atol=1e-4)
    play(scene, range(20, 36))
    assert (z19 - sim.state.positions_aos()[proxy_top, 2]).min() > 0.3  # released: falling again
    assert sim.error is None and sim.builds == 1


def test_wind_shapes_falloffs_and_sides(empty_scene):
    scene = empty_scene
    bpy.ops.object.effector_add(type='WIND', location=(0, 0, 0))  # blows along +Z
    field = bpy.context.active_object.field
    field.strength = 2.0
    pts = np.array([[0, 0, 1.0], [3, 4, 0.5], [0, 0, -2.0], [0, 0, 5.0]], np.float32)

    def speed():
        return wind.wind_velocity(scene, bpy.context.evaluated_depsgraph_get(), pts, 1)[:, 2]

    field.shape, field.falloff_power = 'POINT', 2.0
    d = np.linalg.norm(pts, axis=1)
    np.testing.assert_allclose(speed(), 2.0 * (1.0 + d) ** -2.0, rtol=1e-5)
    field.use_max_distance, field.distance_max = True, 4.0
    t = d / 4.0
    np.testing.assert_allclose(speed(), np.where(d > 4.0, 0.0, 2.0 * (1 - t ** 2)), rtol=1e-5, atol=1e-6)
    field.use_max_distance = False
    field.shape, field.falloff_power, field.z_direction = 'PLANE', 0.0, 'POSITIVE'
    np.testing.assert_allclose(speed(), [2.0, 2.0, 0.0, 2.0], atol=1e-6)
    field.z_direction, field.falloff_type = 'BOTH', 'TUBE'
    field.radial_falloff, field.use_radial_max, field.radial_max = 1.0, True, 2.0
    radial = np.linalg.norm(pts[:, :2], axis=1)
    np.testing.assert_allclose(speed(), np.where(radial > 2.0, 0.0, 2.0 * (1 - radial / 2.0)), atol=1e-6)
    field.falloff_type, field.noise = 'SPHERE', 0.5
    noisy = speed()
    assert np.all(np.abs(noisy - 2.0) <= 1.0 + 1e-5) and np.ptp(noisy) > 1e-3  # strength x (1 +- noise)
