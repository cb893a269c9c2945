"""drape.collider_add fits spheres, boxes and capsules to a mesh's shape;
what the solver receives (scene.colliders.read) and what the overlay draws
(scene.draw.scene_lines) are checked against the mesh's own world-space
vertices (Blender's data) with exact signed distances written here."""

import math

import bpy
import numpy as np
import pytest

from drape.scene import colliders, draw


def select_only(obj):
    for o in bpy.context.selected_objects:
        o.select_set(False)
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj


def world_vertices(obj):
    co = np.empty(3 * len(obj.data.vertices))
    obj.data.vertices.foreach_get("co", co)
    m = np.array(obj.matrix_world)
    return co.reshape(-1, 3) @ m[:3, :3].T + m[:3, 3]


def capsule_sdf(p, a, b, r):
    ab = b - a
    t = np.clip(((p - a) @ ab) / max(ab @ ab, 1e-300), 0.0, 1.0) if ab @ ab > 0 else np.zeros(len(p))
    return np.linalg.norm(p - (a + t[:, None] * ab), axis=1) - r


def box_sdf(p, centre, q, half, r):
    w, x, y, z = q
    rot = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                    [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                    [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])
    e = np.abs((p - centre) @ rot) - (half - r)
    return np.linalg.norm(np.maximum(e, 0), axis=1) + np.minimum(e.max(axis=1), 0) - r


def collider_sdf(scene, obj):
    """Signed distance function of obj's collider as the solver gets it."""
    frame = colliders.read(scene, bpy.context.evaluated_depsgraph_get())
    if obj.name in frame.boxes:
        c, q, half, r = frame.boxes[obj.name]
        return lambda p: box_sdf(p, c, q, half, r)
    a, b, ra, rb = frame.capsules[obj.name]
    assert ra == pytest.approx(rb)
    return lambda p: capsule_sdf(p, a, b, ra)


def overlay_points(scene, obj):
    for o in scene.objects:
        if o is not obj:
            o.drape_collider.kind = 'NONE'
    return draw.scene_lines(scene, bpy.context.evaluated_depsgraph_get()).astype(np.float64)


def fitted(kind, obj):
    select_only(obj)
    assert bpy.ops.drape.collider_add(type=kind) == {'FINISHED'}
    assert obj.drape_collider.kind == kind
    bpy.context.view_layer.update()
    return collider_sdf(bpy.context.scene, obj)


def test_sphere_box_capsule_fit_a_uv_sphere(empty_scene):
    bpy.ops.mesh.primitive_uv_sphere_add(radius=0.4, location=(1.0, -2.0, 0.5), segments=32, ring_count=16)
    ball = bpy.context.active_object
    x = world_vertices(ball)
    sdf = fitted('SPHERE', ball)
    # Every vertex of a UV sphere lies on its sphere.
    assert np.abs(sdf(x)).max() < 1e-5
    for kind in ('BOX', 'CAPSULE'):
        sdf = fitted(kind, ball)
        d = sdf(x)
        # The mesh touches its collider's surface and does not stick out of it
        # by more than a capsule's rounding of the bounds allows.
        assert d.max() < 0.4 * (1 - 1 / math.sqrt(2)) + 1e-5 and d.max() > -1e-5
        assert np.abs(d).min() < 1e-5


@pytest.mark.parametrize("rotation", [(0.0, 0.0, 0.0), (0.3, -0.5, 1.1)])
def test_box_fits_a_non_uniformly_scaled_cube(empty_scene, rotation):
    bpy.ops.mesh.primitive_cube_add(size=2.0, location=(0.5, 0.2, 1.0), rotation=rotation)
    cube = bpy.context.active_object
    cube.scale = (1.5, 0.3, 0.7)
    bpy.context.view_layer.update()
    x = world_vertices(cube)
    sdf = fitted('BOX', cube)
    # The 8 corners are the box's corners.
    assert np.abs(sdf(x)).max() < 1e-5
    # Points just inside / outside each face's centre.
    m = np.array(cube.matrix_world)
    for axis in range(3):
        for sign in (-1, 1):
            face = m[:3, 3] + sign * m[:3, axis]
            normal = sign * m[:3, axis] / np.linalg.norm(m[:3, axis])
            assert sdf((face + 0.01 * normal)[None])[0] == pytest.approx(0.01, abs=1e-5)
            assert sdf((face - 0.01 * normal)[None])[0] == pytest.approx(-0.01, abs=1e-5)
    # The box turns and scales with its object.
    cube.rotation_euler[2] += 0.7
    cube.scale[0] = 2.0
    bpy.context.view_layer.update()
    assert np.abs(collider_sdf(bpy.context.scene, cube)(world_vertices(cube))).max() < 1e-5
    # The capsule runs along the longest world axis (local X here).
    cube.scale = (1.5, 0.3, 0.7)
    bpy.context.view_layer.update()
    m = np.array(cube.matrix_world)
    fitted('CAPSULE', cube)
    frame = colliders.read(bpy.context.scene, bpy.context.evaluated_depsgraph_get())
    a, b, ra, _ = frame.capsules[cube.name]
    axis = (b - a) / np.linalg.norm(b - a)
    xw = m[:3, 0] / np.linalg.norm(m[:3, 0])
    assert abs(abs(axis @ xw) - 1) < 1e-6
    assert ra == pytest.approx(0.5 * (0.3 + 0.7), rel=1e-6)
    assert np.linalg.norm(b - a) + 2 * ra == pytest.approx(2 * 1.5, rel=1e-6)


def test_capsule_fits_a_cylinder_along_x(empty_scene):
    bpy.ops.mesh.primitive_cylinder_add(radius=0.3, depth=2.0, vertices=32, rotation=(0.0, math.pi / 2, 0.0))
    cyl = bpy.context.active_object
    bpy.ops.object.transform_apply(location=False, rotation=True, scale=False)
    cyl.location = (0.0, 1.0, 2.0)
    bpy.context.view_layer.update()
    x = world_vertices(cyl)
    sdf = fitted('CAPSULE', cyl)
    frame = colliders.read(bpy.context.scene, bpy.context.evaluated_depsgraph_get())
    a, b, ra, rb = frame.capsules[cyl.name]
    assert ra == pytest.approx(0.3, rel=1e-4) and rb == pytest.approx(ra)
    # Along X, spanning the cylinder's length (its tips at the caps' centres).
    assert np.allclose(a[1:], (1.0, 2.0), atol=1e-6) and np.allclose(b[1:], (1.0, 2.0), atol=1e-6)
    assert sorted((a[0], b[0])) == pytest.approx([-0.7, 0.7], abs=1e-5)
    # Every vertex is on a rim, 0.3 beyond a tip's sphere centre along X
    # and 0.3 off the axis: sqrt(0.3^2 + 0.3^2) - 0.3 outside the capsule.
    assert np.allclose(sdf(x), math.sqrt(0.18) - 0.3, atol=1e-5)
    # Turning the object turns the capsule.
    cyl.rotation_euler = (0.0, 0.0, math.pi / 2)
    bpy.context.view_layer.update()
    a, b, _, _ = colliders.read(bpy.context.scene, bpy.context.evaluated_depsgraph_get()).capsules[cyl.name]
    assert abs(abs((b - a)[1]) - 1.4) < 1e-5


@pytest.mark.parametrize("kind, rounding", [('SPHERE', 0.0), ('BOX', 0.0), ('BOX', 0.15), ('CAPSULE', 0.0)])
def test_overlay_draws_the_shape_that_collides(empty_scene, kind, rounding):
    bpy.ops.mesh.primitive_cube_add(size=1.0, location=(0.2, 0.3, 0.4), rotation=(0.2, 0.4, 0.6))
    obj = bpy.context.active_object
    obj.scale = (1.0, 2.0, 0.6)
    bpy.context.view_layer.update()
    fitted(kind, obj)
    obj.drape_collider.rounding = rounding
    bpy.context.view_layer.update()
    sdf = collider_sdf(bpy.context.scene, obj)
    pts = overlay_points(bpy.context.scene, obj)
    assert len(pts) > 20
    # Every drawn point lies on the collider's surface...
    assert np.abs(sdf(pts)).max() < 1e-5
    # ...and the drawing spans it: its extent along the object's axes is the
    # collider's (points outside the drawing's extent are outside the shape).
    m = np.array(obj.matrix_world)
    for axis in range(3):
        u = m[:3, axis] / np.linalg.norm(m[:3, axis])
        far = pts @ u
        centre = np.array(obj.matrix_world)[:3, 3]
        for extreme, sign in ((far.max(), 1.0), (far.min(), -1.0)):
            probe = centre + (extreme - centre @ u) * u + sign * 0.02 * u
            assert sdf(probe[None])[0] > 0.0


def _state(obj):
    c = obj.drape_collider
    return (c.kind, c.radius_start, c.radius_end, tuple(c.axis_start), tuple(c.axis_end), tuple(c.center),
            c.sphere_radius, tuple(c.half_extents), c.rounding)


def _refused(obj, *words, **props):
    select_only(obj)
    before = _state(obj)
    with pytest.raises(RuntimeError) as info:
        bpy.ops.drape.collider_add(**props)
    message = str(info.value)
    assert f"'{obj.name}'" in message, message
    for word in words:
        assert word.lower() in message.lower(), message
    assert _state(obj) == before, "a refused collider_add changed the object"
    return message


def test_bad_input_changes_nothing(empty_scene):
    bpy.ops.object.camera_add()
    camera = bpy.context.active_object
    for kind in ('SPHERE', 'BOX', 'CAPSULE'):
        _refused(camera, "not a mesh", "Fit to object", type=kind)

    mesh = bpy.data.meshes.new("Nothing")
    nothing = bpy.data.objects.new("Nothing", mesh)
    bpy.context.scene.collection.objects.link(nothing)
    _refused(nothing, "no vertices", "Fit to object", type='BOX')

    mesh = bpy.data.meshes.new("Dot")
    mesh.from_pydata([(0.1, 0.2, 0.3)] * 3, [], [(0, 1, 2)])
    dot = bpy.data.objects.new("Dot", mesh)
    bpy.context.scene.collection.objects.link(dot)
    for kind in ('SPHERE', 'BOX', 'CAPSULE'):
        _refused(dot, "zero size", "Fit to object", type=kind)

    bpy.ops.mesh.primitive_cube_add()
    flat = bpy.context.active_object
    flat.name = "Squashed"
    flat.scale = (1.0, 1.0, 0.0)
    bpy.context.view_layer.update()
    _refused(flat, "flat", "Fit to object", type='BOX')

    bpy.ops.mesh.primitive_uv_sphere_add()
    ball = bpy.context.active_object
    _refused(ball, "Radius", ">= 0", type='SPHERE', fit=False, radius=-0.2)
    _refused(ball, "Radius", ">= 0", type='CAPSULE', radius=-1.0)

    # Several objects: one bad one refuses them all.
    bpy.ops.mesh.primitive_cube_add(location=(3, 0, 0))
    good = bpy.context.active_object
    good_before = _state(good)
    good.select_set(True)
    dot.select_set(True)
    bpy.context.view_layer.objects.active = good
    with pytest.raises(RuntimeError, match="'Dot'"):
        bpy.ops.drape.collider_add(type='BOX')
    assert _state(good) == good_before


def test_settings_the_solver_cannot_use_are_named_when_read(empty_scene):
    from drape.scene.meshdata import DrapeInputError

    bpy.ops.mesh.primitive_cube_add()
    cube = bpy.context.active_object
    fitted('BOX', cube)
    cube.drape_collider.center = (float("nan"), 0.0, 0.0)
    with pytest.raises(DrapeInputError, match="'Cube'.*Center"):
        colliders.read(bpy.context.scene, bpy.context.evaluated_depsgraph_get())
    cube.drape_collider.center = (0.0, 0.0, 0.0)
    cube.scale[1] = 0.0
    bpy.context.view_layer.update()
    with pytest.raises(DrapeInputError, match="'Cube'.*Half size"):
        colliders.read(bpy.context.scene, bpy.context.evaluated_depsgraph_get())


def _demo():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tools" / "demo.py"
    spec = importlib.util.spec_from_file_location("drape_demo_tool", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("shape", ["sphere", "capsule", "box"])
def test_demo_penetration_oracle_counts_what_the_exact_distance_counts(addon, shape):
    # The demo's quality line counts cloth vertices inside colliders with
    # mathutils.bvhtree on the colliders' surface meshes: checked here
    # against exact signed distances on random points.
    demo = _demo()
    rng = np.random.default_rng(7)
    pts = rng.uniform(-0.6, 0.6, size=(600, 3))
    if shape == "box":
        q = np.array([0.9, 0.1, -0.3, 0.2])
        q /= np.linalg.norm(q)
        half = np.array([0.4, 0.2, 0.3])
        verts, tris = demo.box_surface(np.zeros(3), q, half)
        d = box_sdf(pts, np.zeros(3), q, half, 0.0)
    else:
        a = np.array([-0.2, 0.1, 0.0]) if shape == "capsule" else np.zeros(3)
        b = np.array([0.25, -0.1, 0.1]) if shape == "capsule" else np.zeros(3)
        verts, tris = demo.capsule_surface(a, b, 0.3, 0.3, segments=96, rings=24)
        d = capsule_sdf(pts, a, b, 0.3)
    # The tessellation lies inside the true surface by < 0.3 (1 - cos(pi/96)) ~ 0.2 mm.
    clear = np.abs(d) > 3e-3
    expected = int(np.sum(d[clear] < -1e-3))
    assert expected > 20
    assert demo.penetrating(pts[clear], verts, tris) == expected


def test_cloth_played_onto_a_fitted_turned_box_stays_out(empty_scene):
    # The whole path: collider_add fits a box to a turned, scaled cube,
    # playing the timeline steps the cloth with it (scene.runtime), and no
    # vertex of the played mesh ends inside the cube's own mesh (the
    # demo's bvhtree oracle).
    scene = empty_scene
    bpy.ops.mesh.primitive_cube_add(size=1.0, location=(0.0, 0.0, 0.5), rotation=(0.0, 0.0, 0.5))
    cube = bpy.context.active_object
    cube.scale = (0.8, 0.5, 0.2)
    fitted('BOX', cube)
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=24, y_subdivisions=24, size=1.4, location=(0.0, 0.0, 0.75))
    sheet = bpy.context.active_object
    select_only(sheet)
    assert bpy.ops.drape.cloth_add() == {'FINISHED'}
    for f in range(1, 25):
        scene.frame_set(f)
    depsgraph = bpy.context.evaluated_depsgraph_get()
    demo = _demo()
    x, _, _ = demo._world_mesh(sheet, depsgraph)
    verts, _, _ = demo._world_mesh(cube, depsgraph)
    _, fi, fs = demo._world_mesh(cube, depsgraph)
    tris = [(fi[s], fi[s + k], fi[s + k + 1]) for s, n in zip(np.cumsum(fs) - fs, fs) for k in range(1, n - 1)]
    assert demo.penetrating(x, verts, np.array(tris)) == 0
    # Its middle rests on the top (it did not fall through or slide off;
    # the hanging corners may swing in underneath).
    rest = np.empty(3 * len(sheet.data.vertices))
    sheet.data.vertices.foreach_get("co", rest)
    middle = np.abs(rest.reshape(-1, 3)[:, :2]).max(axis=1) < 0.1
    assert middle.sum() >= 4 and np.all(np.abs(x[middle, 2] - (0.5 + 0.1)) < 0.02)
