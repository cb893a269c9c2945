"""Errors an artist causes while the timeline plays, met the way they meet
them: a NaN typed into a setting (or set by a script or a driver), a collider
or wind field gone non-finite, a vertex with a NaN coordinate, a pin group
renamed or deleted mid-play. Each is printed once while it stands, shown in
the panel (``runtime.messages``, what the panel draws), names the object and
the setting as the panel labels it, and changes nothing in the scene."""

import inspect
import math

import bpy
import numpy as np
import pytest

from drape.scene import params, runtime, writeback

NAN = float("nan")


def select_only(obj):
    for o in bpy.context.selected_objects:
        o.select_set(False)
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj


def sheet(name="Cloth", n=8, z=1.0, pins=None):
    """A 1 m grid at height ``z``; ``pins``: a vertex group of its +Y edge."""
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=n, y_subdivisions=n, size=1.0, location=(0, 0, z))
    obj = bpy.context.active_object
    obj.name = name
    top = np.flatnonzero(rest(obj)[:, 1] > 0.49)
    if pins:
        obj.vertex_groups.new(name=pins).add([int(i) for i in top], 1.0, 'REPLACE')
    select_only(obj)
    bpy.ops.drape.cloth_add(pin_group=pins or "")
    return obj, top


def rest(obj):
    co = np.empty(len(obj.data.vertices) * 3, np.float32)
    obj.data.vertices.foreach_get("co", co)
    return co.reshape(-1, 3)


def shown(obj):
    """What the viewport shows of the cloth: its result (None: the mesh as modelled)."""
    return writeback.read_result(obj)


def scene_state():
    """Everything of the scene a play-time error could change, frame aside."""
    state = {}
    for obj in bpy.data.objects:
        entry = [tuple(tuple(r) for r in obj.matrix_world), [m.name for m in obj.modifiers],
                 [g.name for g in obj.vertex_groups]]
        if obj.type == 'MESH':
            entry.append(sorted(a.name for a in obj.data.attributes))
            entry.append(rest(obj).tobytes())
            result = shown(obj)
            entry.append(None if result is None else result.tobytes())
        state[obj.name] = entry
    state["objects"] = sorted(o.name for o in bpy.data.objects)
    return state


def play(scene, frames):
    for f in frames:
        scene.frame_set(f)


def printed(capsys, text):
    """How many times the console got ``text`` as one Drape message."""
    return capsys.readouterr().out.splitlines().count(f"Drape: {text}")


def messages(obj):
    return [text for _icon, text in runtime.messages(obj)]


# (setting set to NaN, its label as the panel shows it, the value the panel shows then)
SETTINGS = [
    ("gravity_scale", "Gravity scale", "nan"),
    ("areal_density", "Density", "nan"),
    ("thickness", "Collisions > Thickness", "nan"),
    ("friction", "Collisions > Friction", "nan"),
    ("static_friction", "Collisions > Static friction", "nan"),
    ("stretch_stiffness", "Stiffness > Stretch", "nan"),
    ("bend_damping", "Damping > Bend", "nan"),
    ("air_drag", "Damping > Air drag", "nan"),
    ("settle_damping", "Damping > Settling", "nan"),
    ("pin_stiffness", "Pins > Pin stiffness", "nan"),
    ("tether_scale", "Pins > Tether scale", "nan"),
    ("wind_drag", "Wind > Drag", "nan"),
]


@pytest.mark.parametrize("setting,label,value", SETTINGS, ids=[s[0] for s in SETTINGS])
def test_a_nan_setting_mid_play_is_printed_once_shown_and_changes_nothing(empty_scene, capsys, setting, label,
                                                                           value):
    scene = empty_scene
    # "Cloth" is part of "ClothParams", the solver's name for the settings: the
    # message must still be printed, with the object's name in front.
    obj, _ = sheet("Cloth", pins="Pins")
    play(scene, range(1, 4))
    assert messages(obj) == []
    capsys.readouterr()
    before = scene_state()
    good = getattr(obj.drape, setting)
    setattr(obj.drape, setting, NAN)
    play(scene, range(4, 9))
    expected = f"'Cloth': {label} must be finite, got {value}"
    assert messages(obj) == [expected]
    assert printed(capsys, expected) == 1
    assert scene_state() == before, "a rejected setting changed the scene"
    assert math.isnan(getattr(obj.drape, setting)), "the artist's value is theirs to fix"
    with pytest.raises(RuntimeError, match=r"'Cloth': .*must be finite"):
        runtime.dense_positions_local(obj)  # a bake of this frame fails with the same words

    setattr(obj.drape, setting, good)
    scene.frame_set(9)
    assert messages(obj) == []
    assert runtime.get(obj).cache_range == (1, 9), "fixed: it goes on from the last simulated frame"
    assert np.isfinite(runtime.dense_positions_local(obj)).all()
    setattr(obj.drape, setting, NAN)
    scene.frame_set(10)
    assert printed(capsys, expected) == 1, "fixed and broken again: printed again"


def test_the_self_collision_thickness(empty_scene):
    scene = empty_scene
    obj, _ = sheet("Cape", pins="Pins")
    obj.drape.self_collision = True
    play(scene, range(1, 4))
    obj.drape.self_thickness = NAN
    scene.frame_set(4)
    assert messages(obj) == ["'Cape': Self Collision > Thickness must be finite, got nan"]
    obj.drape.self_collision = False  # not read without self collision: nothing to report
    scene.frame_set(5)
    assert messages(obj) == []


def test_a_nan_setting_before_the_first_build(empty_scene, capsys):
    scene = empty_scene
    obj, _ = sheet("Cloth")
    obj.drape.gravity_scale = NAN
    play(scene, range(1, 5))
    expected = "'Cloth': Gravity scale must be finite, got nan"
    assert messages(obj) == [expected]
    assert printed(capsys, expected) == 1
    assert shown(obj) is None, "nothing simulated, nothing shown"
    obj.drape.gravity_scale = 1.0
    scene.frame_set(5)
    sim = runtime.get(obj)
    assert messages(obj) == [] and sim.cache_range == (5, 5) and sim.builds == 1


def test_the_scene_gravity(empty_scene):
    scene = empty_scene
    obj, _ = sheet("Cloth")
    play(scene, range(1, 3))
    scene.gravity = (0.0, NAN, -9.81)
    scene.frame_set(3)
    assert messages(obj) == ["'Cloth': the scene's Gravity must be finite, got (0, nan, -9.81) "
                             "(Scene Properties > Gravity)"]


def test_a_collider_problem_names_the_collider_and_prints_once_for_every_cloth(empty_scene, capsys):
    scene = empty_scene
    a, _ = sheet("Cape", z=1.0)
    b, _ = sheet("Flag", z=2.0)
    bpy.ops.object.empty_add(location=(0, 0, 0))
    arm = bpy.context.active_object
    arm.name = "Arm"
    bpy.ops.drape.collider_add(type='CAPSULE')
    play(scene, range(1, 4))
    capsys.readouterr()
    before = scene_state()
    arm.drape_collider.radius_end = NAN
    play(scene, range(4, 7))
    expected = "'Arm' (Drape collider): Radius end must be finite, got nan"
    assert messages(a) == messages(b) == [expected]
    assert printed(capsys, expected) == 1, "one collider, one message, however many cloths meet it"
    assert scene_state() == before, "a rejected collider changed the scene"
    arm.drape_collider.radius_end = 0.1
    arm.location.x = NAN
    scene.frame_set(7)
    assert messages(a) == ["'Arm' (Drape collider): its transform is not finite (a NaN or infinite Location, "
                           "Rotation or Scale, or its parent's or constraints')"]
    arm.location.x = 0.0
    scene.frame_set(8)
    assert messages(a) == messages(b) == []
    assert runtime.get(a).cache_range == (1, 8)


def test_a_wind_field_problem_names_the_field(empty_scene):
    scene = empty_scene
    obj, _ = sheet("Cloth", pins="Pins")
    bpy.ops.object.effector_add(type='WIND', location=(0, -1, 1))
    gust = bpy.context.active_object
    gust.name = "Gust"
    gust.field.strength = 2.0
    play(scene, range(1, 3))
    gust.field.strength = NAN
    scene.frame_set(3)
    assert messages(obj) == ["'Gust' (wind field): Strength must be finite, got nan"]
    gust.field.strength = 2.0
    gust.field.noise = NAN
    scene.frame_set(4)
    assert messages(obj) == ["'Gust' (wind field): Noise must be finite, got nan"]
    gust.field.noise = 0.0
    scene.frame_set(5)
    assert messages(obj) == [] and runtime.get(obj).cache_range == (1, 5)


def test_a_renamed_pin_group_keeps_the_last_pins_and_says_so(empty_scene, capsys):
    scene = empty_scene
    obj, top = sheet("Cape", n=10, pins="Pins")
    pinned = rest(obj)[top]
    play(scene, range(1, 6))
    capsys.readouterr()
    obj.vertex_groups["Pins"].name = "Pins.renamed"
    play(scene, range(6, 16))
    expected = ("'Cape': pin group 'Pins' is missing (renamed or deleted?): the cloth keeps its last pins "
                "until the group is back or the simulation is reset")
    assert messages(obj) == [expected]
    assert printed(capsys, expected) == 1
    x = runtime.dense_positions_local(obj)
    np.testing.assert_allclose(x[top], pinned, atol=1e-4)
    free = np.setdiff1d(np.arange(len(x)), top)
    assert (rest(obj)[free, 2] - x[free, 2]).max() > 0.1, "the rest of the cloth hangs under gravity"
    assert runtime.get(obj).error is None, "a vanished group is a warning: the cloth plays on"

    obj.vertex_groups["Pins.renamed"].name = "Pins"
    scene.frame_set(16)
    assert messages(obj) == []
    np.testing.assert_allclose(runtime.dense_positions_local(obj)[top], pinned, atol=1e-4)

    obj.vertex_groups.remove(obj.vertex_groups["Pins"])
    play(scene, range(17, 21))
    assert messages(obj) == [expected]
    assert printed(capsys, expected) == 1, "back, gone again: printed again"
    np.testing.assert_allclose(runtime.dense_positions_local(obj)[top], pinned, atol=1e-4)
    scene.frame_set(1)  # the reset: the group is still gone, and the build says so
    assert messages(obj) == ["'Cape' has no vertex group 'Pins' (its pin group): create it or pick an "
                             "existing group"]


def test_a_deleted_pin_group_holds_a_proxy_cloth_too(empty_scene):
    scene = empty_scene
    dense, top = sheet("Dense", n=16, pins="Pins")
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=6, y_subdivisions=6, size=1.0, location=(0, 0, 1))
    proxy = bpy.context.active_object
    proxy.name = "Proxy"
    dense.drape.sim_source = 'PROXY'
    dense.drape.proxy = proxy
    proxy_rest = rest(proxy) + np.array(proxy.location, np.float32)  # world: the proxy is only moved
    proxy_top = np.flatnonzero(proxy_rest[:, 1] > 0.49)
    play(scene, range(1, 4))
    dense.vertex_groups.remove(dense.vertex_groups["Pins"])
    play(scene, range(4, 14))
    assert messages(dense)[0].startswith("'Dense': pin group 'Pins' is missing")
    simulated = runtime.get(dense).state.positions_aos()
    np.testing.assert_allclose(simulated[proxy_top], proxy_rest[proxy_top], atol=1e-3)
    assert (proxy_rest[:, 2] - simulated[:, 2]).max() > 0.1, "the rest of the proxy hangs under gravity"
    np.testing.assert_allclose(runtime.dense_positions_local(dense)[top], rest(dense)[top], atol=1e-3)


def test_a_renamed_mass_group_is_reported_and_the_masses_stay(empty_scene, capsys):
    scene = empty_scene
    obj, top = sheet("Cape", pins="Pins")
    heavy = obj.vertex_groups.new(name="Heavy")
    heavy.add(list(range(len(obj.data.vertices))), 0.5, 'REPLACE')
    obj.drape.mass_group = "Heavy"
    play(scene, range(1, 4))
    inv_mass = runtime.get(obj).model.inv_mass.copy()
    heavy.name = "Light"
    play(scene, range(4, 7))
    sim = runtime.get(obj)
    assert messages(obj) == ["'Cape': mass group 'Heavy' is missing (renamed or deleted?): the cloth keeps its "
                             "masses until the group is back or the simulation is reset"]
    assert sim.error is None and sim.cache_range == (1, 6) and sim.builds == 1
    np.testing.assert_array_equal(sim.model.inv_mass, inv_mass)


@pytest.mark.parametrize("bad,words", [([5], "1 vertex has a NaN coordinate"),
                                       ([2, 7, 30], "3 vertices have a NaN coordinate")])
def test_a_nan_vertex_coordinate_is_called_one(empty_scene, bad, words):
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=8, y_subdivisions=8, size=1.0)
    obj = bpy.context.active_object
    obj.name = "Cloth"
    for i in bad:
        obj.data.vertices[i].co.y = NAN
    select_only(obj)
    with pytest.raises(RuntimeError) as info:
        bpy.ops.drape.cloth_add()
    message = str(info.value)
    assert f"'Cloth': {words}" in message, message
    assert "duplicate" not in message and "degenerate" not in message, message
    assert not obj.drape.enabled and not obj.modifiers


def test_a_nan_coordinate_mid_play(empty_scene, capsys):
    scene = empty_scene
    obj, _ = sheet("Cloth", pins="Pins")
    play(scene, range(1, 4))
    before = shown(obj).copy()
    obj.data.vertices[10].co.z = NAN
    obj.data.update()
    play(scene, range(4, 7))
    expected = ("'Cloth': 1 vertex has a NaN coordinate in the evaluated mesh (from its vertices, shape keys, "
                "modifiers or animation above the Drape modifier)")
    assert messages(obj) == [expected]
    assert printed(capsys, expected) == 1
    np.testing.assert_array_equal(shown(obj), before)
    obj.data.vertices[10].co.z = 0.0
    obj.data.update()
    scene.frame_set(7)
    assert messages(obj) == [] and runtime.get(obj).cache_range == (1, 7)


def test_a_nan_object_location_mid_play(empty_scene):
    scene = empty_scene
    obj, _ = sheet("Cloth")
    play(scene, range(1, 3))
    obj.location.y = NAN
    scene.frame_set(3)
    assert messages(obj) == ["'Cloth': its transform is not finite (a NaN or infinite Location, Rotation or "
                             "Scale, or its parent's or constraints')"]


@pytest.mark.parametrize("kind,words", [('EMPTY', "is an empty, not a mesh"),
                                        ('ARMATURE', "is an armature, not a mesh"),
                                        ('CURVE', "is a curve, not a mesh")])
def test_a_or_an_by_the_following_word(empty_scene, kind, words):
    scene = empty_scene
    obj, _ = sheet("Cape")
    if kind == 'EMPTY':
        bpy.ops.object.empty_add()
    elif kind == 'ARMATURE':
        bpy.ops.object.armature_add()
    else:
        bpy.ops.curve.primitive_bezier_curve_add()
    other = bpy.context.active_object
    other.name = "Other"
    obj.drape.sim_source = 'PROXY'
    obj.drape.proxy = other  # the UI's poll offers only meshes; a script can still do this
    scene.frame_set(1)
    assert messages(obj) == [f"'Cape': proxy 'Other' {words}"]
    select_only(other)
    with pytest.raises(RuntimeError, match=f"'Other' {words}"):
        bpy.ops.drape.cloth_add()


def test_solver_messages_are_turned_into_the_panel_s_words(empty_scene):
    """What reaches the solver anyway gets the same words: its field names
    are replaced by the labels, the object's name is put in front."""
    from drape import solver

    obj, _ = sheet("Cloth")
    with pytest.raises(solver.SolverError) as info:
        solver.ClothParams(collision_margin=NAN).validate()
    assert params.solver_message(obj, info.value) == "'Cloth': Collisions > Thickness must be finite and >= 0, got nan"
    with pytest.raises(solver.SolverError) as info:
        solver.ClothParams(drag_coefficient=-1.0).validate()
    assert params.solver_message(obj, info.value) == "'Cloth': Wind > Drag must be finite and >= 0, got -1.0"
    rest_, faces, sizes = np.zeros((3, 3)), np.array([0, 1, 2]), np.array([3])
    with pytest.raises(solver.SolverError) as info:
        solver.vertex_masses(rest_ + np.eye(3), faces, sizes, NAN)
    assert params.solver_message(obj, info.value).startswith("'Cloth': Density must be a positive number")


def test_every_label_is_where_the_panel_draws_it(empty_scene):
    """A label says where the artist finds the setting: the sub-panel it
    names draws the property whose name ends the label."""
    from drape.panels import cloth as cloth_panels

    draws = {label: draw for _key, label, draw, _header in cloth_panels._SUBPANELS}
    draws[""] = cloth_panels._draw_main
    obj, _ = sheet("Cloth")
    rna = obj.drape.bl_rna.properties
    labels = params.labels(obj.drape)
    seen = set()
    for prop, shown_prop, panel, _lo, _strict in params._CHECKED:
        text = labels[prop]
        assert text not in seen, f"two settings read as '{text}'"
        seen.add(text)
        assert text.split(" > ")[-1] == rna[shown_prop].name, text
        assert text.split(" > ")[0] == panel if panel else " > " not in text, text
        assert f'"{shown_prop}"' in inspect.getsource(draws[panel]), f"{shown_prop} is not drawn in '{panel}'"


def test_a_step_that_blows_up_names_the_setting_far_outside_its_range(empty_scene, capsys):
    """A finite value far past the slider (a value typed with a wrong exponent) passes
    the checks and blows the step up; the message names it and the cloth
    waits for the start frame."""
    scene = empty_scene
    bpy.ops.mesh.primitive_plane_add(size=4.0, location=(0, 0, 0.2))
    bpy.ops.drape.collider_add(type='PLANE')
    obj, _ = sheet("Cloth")
    play(scene, range(1, 3))
    capsys.readouterr()
    obj.drape.thickness = 1e38
    play(scene, range(3, 7))
    [message] = messages(obj)
    assert message.startswith("'Cloth': the simulation produced NaN/Inf at "), message
    assert "likely from Collisions > Thickness at 1e+38 (its slider ends at 0.05)" in message, message
    assert message.endswith("go to the start frame to reset it"), message
    assert printed(capsys, message) == 1
    obj.drape.thickness = 0.005
    scene.frame_set(7)
    assert messages(obj) == [message], "the state is spoilt: it waits for the start frame"
    play(scene, range(1, 4))
    assert messages(obj) == [] and np.isfinite(runtime.dense_positions_local(obj)).all()
