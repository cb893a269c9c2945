"""Every input an artist can get wrong gets a clear message naming the object
and the problem, and nothing in the scene changes."""

import bmesh
import bpy
import numpy as np
import pytest

from drape.scene import runtime, writeback


def select_only(obj):
    for o in bpy.context.selected_objects:
        o.select_set(False)
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj


def mesh_object(name, verts, faces=(), edges=()):
    mesh = bpy.data.meshes.new(name)
    mesh.from_pydata([tuple(v) for v in verts], list(edges), [tuple(f) for f in faces])
    mesh.update()
    obj = bpy.data.objects.new(name, mesh)
    bpy.context.scene.collection.objects.link(obj)
    return obj


def grid_object(name="Bad", n=4):
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=n, y_subdivisions=n, size=1.0)
    obj = bpy.context.active_object
    obj.name = name
    return obj


def snapshot(obj):
    """What cloth_add could change on an object."""
    data = obj.data
    attrs = sorted(a.name for a in data.attributes) if obj.type == 'MESH' else []
    return (obj.drape.enabled, obj.drape.uid, obj.drape.pin_group, [m.name for m in obj.modifiers], attrs,
            len(bpy.data.node_groups), tuple(obj.scale))


def expect_refusal(obj, *words, **props):
    select_only(obj)
    before = snapshot(obj)
    with pytest.raises(RuntimeError) as info:
        bpy.ops.drape.cloth_add(**props)
    message = str(info.value)
    assert f"'{obj.name}'" in message, message
    for word in words:
        assert word.lower() in message.lower(), message
    assert snapshot(obj) == before, "a refused cloth_add changed the object"
    return message


def test_non_mesh_object(empty_scene):
    bpy.ops.curve.primitive_bezier_curve_add()
    curve = bpy.context.active_object
    curve.name = "Rope"
    expect_refusal(curve, "'Rope' is a curve, not a mesh")


def test_empty_object(empty_scene):
    bpy.ops.object.empty_add()
    empty = bpy.context.active_object
    expect_refusal(empty, f"'{empty.name}' is an empty, not a mesh")


def test_armature_object(empty_scene):
    bpy.ops.object.armature_add()
    arm = bpy.context.active_object
    expect_refusal(arm, f"'{arm.name}' is an armature, not a mesh")


def test_mesh_without_faces(empty_scene):
    obj = mesh_object("Points", [(0, 0, 0), (1, 0, 0), (0, 1, 0)], edges=[(0, 1), (1, 2)])
    expect_refusal(obj, "no faces")


def test_loose_vertices(empty_scene):
    obj = mesh_object("LooseV", [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (5, 5, 5)], faces=[(0, 1, 2, 3)])
    expect_refusal(obj, "1 loose vertices")


def test_loose_edges(empty_scene):
    obj = mesh_object("LooseE", [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (3, 0, 0), (4, 0, 0)],
                      faces=[(0, 1, 2, 3)], edges=[(4, 5)])
    expect_refusal(obj, "1 loose edges")


def test_degenerate_face(empty_scene):
    obj = mesh_object("Flat", [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (2, 0, 0), (3, 0, 0)],
                      faces=[(0, 1, 2, 3), (1, 4, 5)])
    expect_refusal(obj, "degenerate")


def test_duplicate_vertices(empty_scene):
    obj = mesh_object("Doubles", [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (1, 0, 0), (2, 0, 0), (2, 1, 0)],
                      faces=[(0, 1, 2, 3), (4, 5, 6, 2)])
    expect_refusal(obj, "duplicate vertices", "merge")


def test_nan_vertex_coordinate(empty_scene):
    obj = grid_object("Torn", n=10)
    obj.data.vertices[3].co.x = float("nan")
    obj.data.vertices[40].co.z = float("nan")
    message = expect_refusal(obj, "'Torn': 2 vertices have a NaN coordinate")
    assert "duplicate" not in message, message  # NaN compares unequal to everything, itself included


def test_missing_pin_group(empty_scene):
    obj = grid_object("Sheet")
    expect_refusal(obj, "no vertex group 'collar'", pin_group="collar")


def test_topology_changing_modifier_goes_below_drape(empty_scene):
    obj = grid_object("Subdivided")
    obj.modifiers.new("Subsurf", 'SUBSURF')
    obj.select_set(True)
    assert bpy.ops.drape.cloth_add() == {'FINISHED'}
    assert [m.name for m in obj.modifiers] == ["Drape", "Subsurf"]  # it smooths the simulated result


def test_animated_topology_above_drape(empty_scene):
    obj = grid_object("Decimated")
    dec = obj.modifiers.new("Decimate", 'DECIMATE')
    dec.keyframe_insert("ratio", frame=1)
    assert bpy.ops.drape.cloth_add() == {'FINISHED'}  # Drape goes above the Decimate: nothing to refuse
    obj.modifiers.move(0, 1)
    obj.drape.enabled = False
    expect_refusal(obj, "'Decimate'", "changes the topology between frames")


def test_conflicting_cloth_modifier(empty_scene):
    obj = grid_object("Twice")
    obj.modifiers.new("Cloth", 'CLOTH')
    expect_refusal(obj, "cloth modifier")


@pytest.mark.parametrize("scale,word", [((1.0, 0.0, 1.0), "zero scale"), ((1.0, -1.0, 1.0), "negative scale")])
def test_zero_or_negative_scale(empty_scene, scale, word):
    obj = grid_object("Scaled")
    obj.scale = scale
    bpy.context.view_layer.update()
    expect_refusal(obj, word)


def test_one_bad_object_changes_none_of_the_selection(empty_scene):
    good = grid_object("Good")
    bad = mesh_object("NoFaces", [(0, 0, 0), (1, 0, 0)], edges=[(0, 1)])
    good.select_set(True)
    bad.select_set(True)
    with pytest.raises(RuntimeError, match="'NoFaces' has no faces"):
        bpy.ops.drape.cloth_add()
    assert not good.drape.enabled and not good.modifiers


def test_ngons_are_accepted_and_simulate(empty_scene):
    bpy.ops.mesh.primitive_circle_add(vertices=12, fill_type='NGON', radius=0.5, location=(0, 0, 1))
    disc = bpy.context.active_object
    bpy.ops.drape.cloth_add()
    scene = bpy.context.scene
    for f in range(1, 6):
        scene.frame_set(f)
    entry = runtime.get(disc)
    assert entry.error is None
    x = runtime.dense_positions_local(disc)
    assert np.all(np.isfinite(x)) and x[:, 2].max() < -1e-3  # it fell


def test_proxy_not_a_mesh_is_reported_at_play_and_nothing_written(empty_scene, capsys):
    obj = grid_object("Cape")
    bpy.ops.drape.cloth_add()
    bpy.ops.object.empty_add()
    empty = bpy.context.active_object
    empty.name = "NotAMesh"
    obj.drape.sim_source = 'PROXY'
    obj.drape.proxy = empty  # the UI's poll hides non-meshes; a script can still do this
    bpy.context.scene.frame_set(1)
    bpy.context.scene.frame_set(2)
    entry = runtime.get(obj)
    assert entry is not None and "'Cape'" in entry.error and "'NotAMesh'" in entry.error
    assert "not a mesh" in entry.error
    assert not writeback.has_result(obj)
    assert "Drape: 'Cape'" in capsys.readouterr().out  # printed once for the console
    with pytest.raises(RuntimeError, match="not a mesh"):
        runtime.dense_positions_local(obj)


def test_missing_proxy(empty_scene):
    obj = grid_object("Cape")
    bpy.ops.drape.cloth_add()
    obj.drape.sim_source = 'PROXY'
    bpy.context.scene.frame_set(1)
    assert "none is set" in runtime.get(obj).error


def test_problems_appearing_after_cloth_add_are_reported_not_crashed(empty_scene):
    obj = grid_object("Later")
    bpy.ops.drape.cloth_add()
    scene = bpy.context.scene
    scene.frame_set(1)
    scene.frame_set(2)
    assert runtime.get(obj).error is None
    # The artist renames the pin group to one that doesn't exist, then adds Blender's Cloth too.
    obj.drape.pin_group = "gone"
    scene.frame_set(3)
    assert "no vertex group 'gone'" in runtime.get(obj).error
    obj.drape.pin_group = ""
    obj.modifiers.new("Cloth", 'CLOTH')
    writeback.ensure_modifier(obj)
    scene.frame_set(1)
    assert "'Cloth': remove it" in runtime.get(obj).error
    obj.modifiers.remove(obj.modifiers["Cloth"])
    scene.frame_set(1)
    scene.frame_set(2)
    assert runtime.get(obj).error is None  # fixed: it simulates again from the start frame


def test_topology_edit_mid_play_rebuilds(empty_scene):
    obj = grid_object("Edited", n=6)
    bpy.ops.drape.cloth_add()
    scene = bpy.context.scene
    for f in range(1, 4):
        scene.frame_set(f)
    bm = bmesh.new()
    bm.from_mesh(obj.data)
    bmesh.ops.subdivide_edges(bm, edges=bm.edges[:], cuts=1, use_grid_fill=True)
    bm.to_mesh(obj.data)
    bm.free()
    scene.frame_set(4)
    entry = runtime.get(obj)
    assert entry.error is None and entry.model.n == len(obj.data.vertices)
    assert entry.cache_range == (4, 4)  # restarted at the current frame with the new topology


def test_drape_modifier_deleted_by_hand_comes_back(empty_scene):
    obj = grid_object("Sheet", n=6)
    co = np.empty(len(obj.data.vertices) * 3, np.float32)
    obj.data.vertices.foreach_get("co", co)
    top = np.where(co.reshape(-1, 3)[:, 1] > 0.49)[0]
    obj.vertex_groups.new(name="pin").add([int(i) for i in top], 1.0, 'REPLACE')
    bpy.ops.drape.cloth_add(pin_group="pin")
    scene = bpy.context.scene
    for f in range(1, 4):
        scene.frame_set(f)
    obj.modifiers.remove(writeback.find_modifier(obj))
    for f in range(4, 8):
        scene.frame_set(f)
    assert writeback.find_modifier(obj) is not None
    entry = runtime.get(obj)
    assert entry.error is None and entry.builds == 2
    x = runtime.dense_positions_local(obj)
    np.testing.assert_allclose(x[top], co.reshape(-1, 3)[top], atol=1e-5)  # pins still hold


def test_mesh_shared_with_another_object(empty_scene):
    obj = grid_object("Original")
    twin = bpy.data.objects.new("Twin", obj.data)
    bpy.context.scene.collection.objects.link(twin)
    expect_refusal(obj, "shares its mesh", "'Twin'", "single-user")
