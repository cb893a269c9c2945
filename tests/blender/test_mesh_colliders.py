"""MESH colliders in Blender: the evaluated mesh read at every frame
(scene/colliders.py), and cloth played against it through the add-on.

Penetration is judged apart from the solver: mathutils.bvhtree's nearest
surface point gives the distance, and the winding number about the closed
evaluated mesh (tests/mesh_scenes.py) tells inside from outside (a ray's
crossing parity miscounts where it meets a shared edge)."""

import math

import bpy
import numpy as np
import pytest
from mathutils import Vector
from mathutils.bvhtree import BVHTree

import mesh_scenes

from drape.scene import colliders, runtime
from drape.scene.meshdata import DrapeInputError

TH = 0.01


def world_mesh(obj):
    """The evaluated mesh of obj in world space: (verts (m, 3), polygons)."""
    ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
    me = ev.to_mesh()
    m = np.array(ev.matrix_world)
    co = np.array([v.co for v in me.vertices], np.float64)
    polys = [tuple(p.vertices) for p in me.polygons]
    ev.to_mesh_clear()
    return co @ m[:3, :3].T + m[:3, 3], polys


def depth_inside(points, obj):
    """How deep each point is inside obj's closed evaluated mesh (0 outside):
    inside by the winding number about its fan-triangulated polygons
    (tests/mesh_scenes.py), the depth from BVHTree's nearest surface point."""
    verts, polys = world_mesh(obj)
    tris = np.array([(p[0], p[k], p[k + 1]) for p in polys for k in range(1, len(p) - 1)], np.int64)
    tree = BVHTree.FromPolygons([Vector(v) for v in verts], polys)
    out = np.zeros(len(points))
    for i in np.nonzero(mesh_scenes.inside(points, verts, tris))[0]:
        out[i] = tree.find_nearest(Vector(points[i]))[3]
    return out


def sheet(name="Sheet", n=24, size=1.2, z=1.0):
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=n, y_subdivisions=n, size=size, location=(0, 0, z))
    obj = bpy.context.active_object
    obj.name = name
    return obj


def cloth_positions(obj):
    m = np.array(obj.matrix_world)
    local = runtime.dense_positions_local(obj).astype(np.float64)
    return local @ m[:3, :3].T + m[:3, 3]


def mesh_collider(obj, thickness=TH, sides='NORMAL'):
    c = obj.drape_collider
    c.kind = 'MESH'
    c.outer_thickness = thickness
    c.sides = sides
    return obj


def test_reads_the_evaluated_deforming_mesh_at_each_frame(empty_scene):
    # A cylinder bent by an Armature modifier (keyed pose): the collider's
    # triangles are the evaluated mesh's, in world space, at every frame.
    scene = empty_scene
    bpy.ops.mesh.primitive_cylinder_add(vertices=16, radius=0.1, depth=1.0, location=(0, 0, 0.5))
    cyl = bpy.context.active_object
    bpy.ops.object.transform_apply(location=True, rotation=True, scale=True)
    bpy.ops.object.modifier_add(type='SUBSURF')
    cyl.modifiers[-1].levels = 1
    bpy.ops.object.armature_add(location=(0, 0, 0))
    arm = bpy.context.active_object
    arm.data.bones[0].name = "Bone"
    cyl.modifiers.new("Armature", 'ARMATURE').object = arm
    group = cyl.vertex_groups.new(name="Bone")
    group.add(list(range(len(cyl.data.vertices))), 1.0, 'REPLACE')
    pb = arm.pose.bones["Bone"]
    pb.rotation_mode = 'XYZ'
    pb.rotation_euler = (0, 0, 0)
    pb.keyframe_insert("rotation_euler", frame=1)
    pb.rotation_euler = (0.6, 0, 0)
    pb.keyframe_insert("rotation_euler", frame=2)
    cyl.location = (0.3, 0, 0)
    mesh_collider(cyl, thickness=0.02)
    frames = []
    for f in (1, 2):
        scene.frame_set(f)
        frames.append(colliders.read(scene, bpy.context.evaluated_depsgraph_get()))
        verts, polys = world_mesh(cyl)
        v, tris, th, fr, two = frames[-1].meshes[cyl.name]
        np.testing.assert_allclose(v, verts, atol=1e-5)
        assert th == pytest.approx(0.02) and fr == 1.0 and two is False
        # Every polygon is covered by its triangles (the fan counts).
        assert len(tris) == sum(len(p) - 2 for p in polys)
        assert tris.min() >= 0 and tris.max() < len(v)
    assert np.abs(frames[1].meshes[cyl.name][0] - frames[0].meshes[cyl.name][0]).max() > 0.1

    class _S:
        MeshCollider = staticmethod(lambda **kw: kw)

    (m,) = colliders.mesh_inputs(frames[0], frames[1], _S)
    np.testing.assert_array_equal(m["verts0"], frames[0].meshes[cyl.name][0])
    np.testing.assert_array_equal(m["verts1"], frames[1].meshes[cyl.name][0])
    half = colliders.interpolate(frames[0], frames[1], 0.5).meshes[cyl.name][0]
    np.testing.assert_allclose(half, (m["verts0"] + m["verts1"]) / 2, atol=1e-6)


@pytest.mark.parametrize("shape", ["sphere", "table"])
def test_cloth_drops_onto_a_mesh_collider(empty_scene, shape):
    scene = empty_scene
    if shape == "sphere":
        bpy.ops.mesh.primitive_uv_sphere_add(radius=0.4, location=(0, 0, 0.4))
        body = bpy.context.active_object
        size = 1.2
    else:
        # A slab and four legs joined into one object (the legs meet the
        # slab's underside).
        bpy.ops.mesh.primitive_cube_add(size=1.0, location=(0, 0, 0.73), scale=(0.5, 0.5, 0.02))
        parts = [bpy.context.active_object]
        for sx in (-1, 1):
            for sy in (-1, 1):
                bpy.ops.mesh.primitive_cube_add(size=1.0, location=(sx * 0.45, sy * 0.45, 0.355),
                                                scale=(0.025, 0.025, 0.355))
                parts.append(bpy.context.active_object)
        for p in parts:
            p.select_set(True)
        bpy.context.view_layer.objects.active = parts[0]
        bpy.ops.object.join()
        body = bpy.context.active_object
        bpy.ops.object.transform_apply(location=False, rotation=True, scale=True)
        size = 1.6
    mesh_collider(body)
    top = float(world_mesh(body)[0][:, 2].max())
    cloth = sheet(z=top + 0.05, size=size)
    rest = np.array([v.co for v in cloth.data.vertices])
    bpy.ops.drape.cloth_add()
    for f in range(1, 61):
        scene.frame_set(f)
        if f % 20 == 0:
            x = cloth_positions(cloth)
            assert runtime.get(cloth).error is None
            assert np.isfinite(x).all()
            # The kept distance: the collider's outer thickness plus the
            # cloth's own thickness, as for capsules and planes.
            assert depth_inside(x, body).max() <= TH + cloth.drape.thickness + 1e-4
    # Held up by it: the sheet's middle is over the top, outside the
    # thickness.
    mid = (np.abs(rest[:, 0]) < 0.1) & (np.abs(rest[:, 1]) < 0.1)
    verts, polys = world_mesh(body)
    tree = BVHTree.FromPolygons([Vector(v) for v in verts], polys)
    gap = np.array([tree.find_nearest(Vector(p))[3] for p in x[mid]])
    assert mid.sum() > 0 and np.all(x[mid, 2] > top - 0.03)
    assert np.all(gap > TH * 0.5), gap


def test_bad_mesh_colliders_are_reported(empty_scene):
    scene = empty_scene
    cloth = sheet(n=6, z=1.0)
    bpy.ops.drape.cloth_add()
    # Loose vertices only: no faces to collide with.
    me = bpy.data.meshes.new("points")
    me.from_pydata([(0, 0, 0), (1, 0, 0), (0, 1, 0)], [], [])
    dots = bpy.data.objects.new("Dots", me)
    scene.collection.objects.link(dots)
    mesh_collider(dots)
    scene.frame_set(1)
    scene.frame_set(2)
    err = runtime.get(cloth).error
    assert err is not None and "'Dots'" in err and "no faces" in err
    dots.drape_collider.kind = 'NONE'
    # The cloth itself as its own Mesh collider.
    mesh_collider(cloth)
    with pytest.raises(DrapeInputError, match="'Sheet'.*also a Drape cloth"):
        colliders.read(scene, bpy.context.evaluated_depsgraph_get())
    cloth.drape_collider.kind = 'NONE'
    # A degenerate face (three collinear vertices) among good ones: skipped, no NaN.
    me = bpy.data.meshes.new("floor")
    me.from_pydata([(-1, -1, 0.5), (1, -1, 0.5), (1, 1, 0.5), (-1, 1, 0.5), (0, 0, 0.5), (0.1, 0, 0.5),
                    (0.2, 0, 0.5)], [], [(0, 1, 2, 3), (4, 5, 6)])
    floor = bpy.data.objects.new("Floor", me)
    scene.collection.objects.link(floor)
    mesh_collider(floor)
    for f in range(1, 40):
        scene.frame_set(f)
    assert runtime.get(cloth).error is None
    x = cloth_positions(cloth)
    assert np.isfinite(x).all()
    np.testing.assert_allclose(x[:, 2], 0.5 + TH + cloth.drape.thickness, atol=2e-3)
    # A non-mesh object tagged Mesh.
    bpy.ops.object.empty_add()
    bpy.context.active_object.name = "Helper"
    bpy.context.active_object.drape_collider.kind = 'MESH'
    with pytest.raises(DrapeInputError, match="'Helper'.*must be a mesh object"):
        colliders.read(scene, bpy.context.evaluated_depsgraph_get())


def test_a_million_triangle_collider_is_read(empty_scene):
    scene = empty_scene
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=709, y_subdivisions=709, size=2.0)
    mesh_collider(bpy.context.active_object)
    frame = colliders.read(scene, bpy.context.evaluated_depsgraph_get())
    (v, tris, *_rest) = frame.meshes[bpy.context.active_object.name]
    assert len(tris) >= 1_000_000 and np.isfinite(v).all()
    assert math.isclose(float(v[:, 0].max()), 1.0, abs_tol=1e-5)


def test_collider_add_makes_mesh_colliders_and_refuses_other_objects(empty_scene):
    # drape.collider_add(type='MESH') tags the selected meshes with their own
    # surface (nothing fitted: the mesh is the shape); an Empty, or no
    # selection, is refused and changes nothing.
    bpy.ops.mesh.primitive_cube_add(size=1.0, location=(0, 0, 0))
    cube = bpy.context.active_object
    bpy.ops.mesh.primitive_uv_sphere_add(radius=0.3, location=(2, 0, 0))
    ball = bpy.context.active_object
    cube.select_set(True)
    assert bpy.ops.drape.collider_add(type='MESH') == {'FINISHED'}
    assert cube.drape_collider.kind == 'MESH' and ball.drape_collider.kind == 'MESH'
    assert cube.drape_collider.outer_thickness == pytest.approx(0.01)
    bpy.ops.object.empty_add(location=(0, 3, 0))
    empty = bpy.context.active_object
    ball.drape_collider.kind = 'NONE'
    ball.select_set(True)
    with pytest.raises(RuntimeError, match="not a mesh"):
        bpy.ops.drape.collider_add(type='MESH')
    assert empty.drape_collider.kind == 'NONE' and ball.drape_collider.kind == 'NONE'
    bpy.ops.object.select_all(action='DESELECT')
    n = len(bpy.data.objects)
    with pytest.raises(RuntimeError, match="select the mesh objects"):
        bpy.ops.drape.collider_add(type='MESH')
    assert len(bpy.data.objects) == n


class _Layout:
    """Records what a panel draws."""

    def __init__(self, log):
        self.__dict__["log"] = log

    def __getattr__(self, name):
        def call(*args, **kw):
            self.log.append((name, args, kw))
            return _Layout(self.log)
        return call

    def __setattr__(self, name, value):
        self.log.append(("set", name, value))


def test_collider_panel_shows_the_mesh_settings(empty_scene):
    from types import SimpleNamespace

    from drape.panels import colliders as panel

    bpy.ops.mesh.primitive_cube_add()
    obj = mesh_collider(bpy.context.active_object)
    log = []
    panel._draw(SimpleNamespace(layout=_Layout(log)), SimpleNamespace(object=obj))
    props = [c[1][1] for c in log if c[0] == "prop"]
    assert props == ["kind", "outer_thickness", "friction", "sides"]
    assert ("set", "type", 'MESH') in log
    obj.drape_collider.kind = 'SPHERE'
    log.clear()
    panel._draw(SimpleNamespace(layout=_Layout(log)), SimpleNamespace(object=obj))
    assert "outer_thickness" not in [c[1][1] for c in log if c[0] == "prop"]
