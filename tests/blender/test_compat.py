"""Each function of scene/compat.py on the Blender these tests run in,
checked against Blender's own evaluation: whichever bpy runs the suite
checks its own branch of every version difference."""

import struct

import bpy
import numpy as np
import pytest

from drape.scene import compat, writeback
from drape.scene.meshdata import DrapeInputError


def _grid(name="Sheet", n=4):
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=n, y_subdivisions=n, size=1.0)
    obj = bpy.context.object
    obj.name = name
    return obj


def _co(mesh):
    out = np.empty(len(mesh.vertices) * 3, np.float32)
    mesh.vertices.foreach_get("co", out)
    return out.reshape(-1, 3)


def _evaluated_co(obj):
    depsgraph = bpy.context.evaluated_depsgraph_get()
    return _co(obj.evaluated_get(depsgraph).data)


def _lift_group():
    """A node group that moves every point up by its float input "Lift"."""
    ng = bpy.data.node_groups.new("Lift", 'GeometryNodeTree')
    ng.interface.new_socket(name="Geometry", in_out='INPUT', socket_type='NodeSocketGeometry')
    lift = ng.interface.new_socket(name="Lift", in_out='INPUT', socket_type='NodeSocketFloat')
    lift.default_value = 0.0
    ng.interface.new_socket(name="Geometry", in_out='OUTPUT', socket_type='NodeSocketGeometry')
    group_in = ng.nodes.new('NodeGroupInput')
    group_out = ng.nodes.new('NodeGroupOutput')
    combine = ng.nodes.new('ShaderNodeCombineXYZ')
    set_position = ng.nodes.new('GeometryNodeSetPosition')
    ng.links.new(group_in.outputs[0], set_position.inputs['Geometry'])
    ng.links.new(group_in.outputs[1], combine.inputs['Z'])
    ng.links.new(combine.outputs[0], set_position.inputs['Offset'])
    ng.links.new(set_position.outputs[0], group_out.inputs[0])
    return ng, lift.identifier


def test_modifier_input_set_reaches_the_evaluated_mesh(empty_scene):
    obj = _grid()
    rest = _co(obj.data)
    ng, lift = _lift_group()
    mod = obj.modifiers.new("Lift", 'NODES')
    mod.node_group = ng
    assert compat.modifier_input_get(mod, lift) == pytest.approx(0.0)
    compat.modifier_input_set(mod, lift, 0.25)
    assert compat.modifier_input_get(mod, lift) == pytest.approx(0.25)
    np.testing.assert_allclose(_evaluated_co(obj), rest + [0.0, 0.0, 0.25], atol=1e-6, rtol=0)
    compat.modifier_input_set(mod, lift, -0.5)
    obj.update_tag()
    np.testing.assert_allclose(_evaluated_co(obj), rest + [0.0, 0.0, -0.5], atol=1e-6, rtol=0)


def test_modifier_string_input_picks_the_vertex_group_blender_evaluates(empty_scene):
    # Drape's own modifier: its "Pin Group" input names the vertex group
    # whose weights the node tree stores as the point attribute "drape_pin".
    obj = _grid()
    n = len(obj.data.vertices)
    weights = np.linspace(0.0, 1.0, n, dtype=np.float32)
    group = obj.vertex_groups.new(name="pins")
    for i, w in enumerate(weights):
        group.add([i], float(w), 'REPLACE')
    obj.drape.pin_group = "pins"
    mod = writeback.ensure_modifier(obj)
    assert not writeback.needs_setup(obj), "the input reads back as the name just set"
    depsgraph = bpy.context.evaluated_depsgraph_get()
    attr = obj.evaluated_get(depsgraph).data.attributes[writeback.ATTR_PIN]
    stored = np.empty(n, np.float32)
    attr.data.foreach_get("value", stored)
    np.testing.assert_allclose(stored, weights, atol=1e-6, rtol=0)
    assert mod.node_group.name.startswith(writeback.NODE_GROUP)


def _shape_keyed_grid():
    obj = _grid()
    rest = _co(obj.data)
    obj.shape_key_add(name="Basis", from_mix=False)
    key = obj.shape_key_add(name="Up", from_mix=False)
    key.points.foreach_set("co", (rest + [0.0, 0.0, 1.0]).ravel())
    key.value = 0.0
    return obj, rest


def test_animation_fcurves_made_through_compat_drive_the_key(empty_scene):
    obj, rest = _shape_keyed_grid()
    keys = obj.data.shape_keys
    assert compat.animation_fcurves(keys.animation_data) is None, "no animation data yet"
    anim = keys.animation_data_create()
    anim.action = bpy.data.actions.new("Lift")
    assert compat.animation_fcurves(anim) is None or len(compat.animation_fcurves(anim)) == 0
    fcurves = compat.animation_fcurves(anim, ensure=True)
    fc = fcurves.new('key_blocks["Up"].value')
    for frame, value in ((1, 0.0), (11, 1.0)):
        fc.keyframe_points.insert(frame, value).interpolation = 'LINEAR'
    assert [f.data_path for f in compat.animation_fcurves(anim)] == ['key_blocks["Up"].value']
    empty_scene.frame_set(6)
    assert keys.key_blocks["Up"].value == pytest.approx(0.5)
    np.testing.assert_allclose(_evaluated_co(obj), rest + [0.0, 0.0, 0.5], atol=1e-6, rtol=0)
    empty_scene.frame_set(11)
    np.testing.assert_allclose(_evaluated_co(obj), rest + [0.0, 0.0, 1.0], atol=1e-6, rtol=0)

    # Removing the F-Curve through the same collection stops the animation.
    fcurves = compat.animation_fcurves(anim)
    fcurves.remove(fcurves[0])
    assert len(compat.animation_fcurves(anim)) == 0
    keys.key_blocks["Up"].value = 0.0
    empty_scene.frame_set(6)
    assert keys.key_blocks["Up"].value == pytest.approx(0.0)


def test_animation_fcurves_find_the_channels_blender_keyed(empty_scene):
    # An artist's action as Blender itself makes it (keyframe_insert), with
    # its own slot on versions that have slots: compat adds to it, not beside it.
    obj, rest = _shape_keyed_grid()
    up = obj.data.shape_keys.key_blocks["Up"]
    up.value = 0.0
    up.keyframe_insert("value", frame=1)
    up.value = 1.0
    up.keyframe_insert("value", frame=3)
    anim = obj.data.shape_keys.animation_data
    fcurves = compat.animation_fcurves(anim)
    assert [f.data_path for f in fcurves] == ['key_blocks["Up"].value']
    assert [tuple(k.co) for k in fcurves[0].keyframe_points] == [(1.0, 0.0), (3.0, 1.0)]
    again = compat.animation_fcurves(anim, ensure=True)
    assert [f.data_path for f in again] == ['key_blocks["Up"].value'], "ensure made a second channel set"
    empty_scene.frame_set(3)
    np.testing.assert_allclose(_evaluated_co(obj), rest + [0.0, 0.0, 1.0], atol=1e-6, rtol=0)


def _write_pc2(path, samples, start=1.0):
    samples = np.asarray(samples, dtype="<f4")
    with open(path, "wb") as f:
        # version, points, start frame, sample rate, samples
        f.write(b"POINTCACHE2\0" + struct.pack("<iiffi", 1, samples.shape[1], start, 1.0, samples.shape[0]))
        f.write(samples.tobytes())


@pytest.mark.parametrize("flip", [(False, False, False), (True, False, False), (False, True, True)])
def test_mesh_cache_flip_mirrors_what_blender_plays(empty_scene, tmp_path, flip):
    obj = _grid()
    rest = _co(obj.data)
    moved = rest + [0.3, -0.2, 0.7]
    path = str(tmp_path / "sheet.pc2")
    _write_pc2(path, [moved, moved])
    mod = obj.modifiers.new("Cache", 'MESH_CACHE')
    mod.cache_format = 'PC2'
    mod.filepath = path
    mod.frame_start = 1.0
    mod.forward_axis = 'POS_Y'
    mod.up_axis = 'POS_Z'
    compat.mesh_cache_flip_set(mod, flip)
    assert compat.mesh_cache_flip_get(mod) == flip
    empty_scene.frame_set(1)
    sign = np.where(flip, -1.0, 1.0)
    np.testing.assert_allclose(_evaluated_co(obj), moved * sign, atol=1e-6, rtol=0)


def test_a_tested_blender_passes_errors_through():
    if compat.untested_version() is not None:
        pytest.skip(f"Blender {bpy.app.version_string} is newer than the newest tested")
    exc = AttributeError("'AnimData' object has no attribute 'action_slot'")
    assert compat.failure_message(exc) == str(exc)
    assert compat.incompatibility() is None


def test_an_untested_blender_gets_one_line_naming_it(monkeypatch):
    # Pretend the running Blender is newer than the newest tested one.
    monkeypatch.setattr(compat, "NEWEST_TESTED", (4, 1))
    compat.forget_incompatibility()
    try:
        first = compat.failure_message(AttributeError("'Foo' object has no\nattribute 'bar'"))
        assert bpy.app.version_string in first and "\n" not in first
        assert "'Foo' object has no attribute 'bar'" in first
        assert compat.incompatibility() == first
        # Every later API error shows the same line (a handler prints it once).
        assert compat.failure_message(TypeError("expected a set, not a tuple")) == first
        # The artist's own bad input keeps its own message.
        bad = DrapeInputError("'Sheet': the pin group 'pins' does not exist")
        assert compat.failure_message(bad) == str(bad)
    finally:
        compat.forget_incompatibility()
    assert compat.incompatibility() is None


def _armature(empty_scene):
    bpy.ops.object.armature_add(location=(0, 0, 0))
    arm = bpy.context.object
    bpy.ops.object.mode_set(mode='EDIT')
    for name, head in (("b", (1, 0, 0)), ("c", (2, 0, 0))):
        eb = arm.data.edit_bones.new(name)
        eb.head, eb.tail = head, (head[0], 0, 1)
    bpy.ops.object.mode_set(mode='POSE')
    return arm


def test_bone_selection_is_what_blender_selects(empty_scene):
    arm = _armature(empty_scene)
    names = [b.name for b in arm.data.bones]
    assert len(names) == 3
    bpy.ops.pose.select_all(action='SELECT')
    assert all(compat.bone_selected(arm, n) for n in names)
    bpy.ops.pose.select_all(action='DESELECT')
    assert not any(compat.bone_selected(arm, n) for n in names)
    compat.bone_select_set(arm, "c", True)
    assert [pb.name for pb in bpy.context.selected_pose_bones] == ["c"]
    assert [compat.bone_selected(arm, n) for n in names] == [False, False, True]
    bpy.ops.object.mode_set(mode='OBJECT')


def test_action_fcurves_are_the_curves_blender_plays(empty_scene):
    bpy.ops.object.empty_add(location=(0, 0, 0))
    obj = bpy.context.object
    for frame, x in ((1, 0.0), (5, 2.0)):
        obj.location = (x, 0.5 * x, 0.0)
        obj.keyframe_insert("location", frame=frame)
    fcurves = compat.action_fcurves(obj.animation_data.action)
    assert sorted((fc.data_path, fc.array_index) for fc in fcurves) == [("location", i) for i in range(3)]
    for fc in fcurves:
        for k in fc.keyframe_points:
            k.interpolation = 'LINEAR'
    empty_scene.frame_set(3)
    for fc in fcurves:
        assert fc.evaluate(3.0) == pytest.approx(obj.location[fc.array_index])
    assert tuple(obj.location) == pytest.approx((1.0, 0.5, 0.0))


def test_a_blend_relative_cache_folder_is_accepted_without_a_warning(empty_scene, tmp_path):
    import warnings

    bpy.ops.wm.save_as_mainfile(filepath=str(tmp_path / "shot.blend"))
    obj = _grid()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 4.5+ warns on '//' unless the property allows it
        obj.drape_bake.folder = "//cache/cloth/"
    assert obj.drape_bake.folder == "//cache/cloth/"
    assert bpy.path.abspath(obj.drape_bake.folder) == str(tmp_path / "cache" / "cloth") + "/"
