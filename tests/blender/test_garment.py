"""Garment authoring inside Blender, the way an artist works: panels sewn with
the Sew Selected Edge Loops operator, a collider, the timeline; settings and
groups through bpy. Checks use the mesh's own data and exact geometry."""

import bmesh
import bpy
import numpy as np

from drape.scene import runtime


def select_only(obj):
    for o in bpy.context.selected_objects:
        o.select_set(False)
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj


def panels_object(name="Tube", nx=12, nz=4, width=0.5, height=0.2, gap=0.3):
    """Two flat quad panels facing each other across y = 0 (one mesh)."""
    verts, faces = [], []
    for side in (1.0, -1.0):
        base = len(verts)
        for k in range(nz + 1):
            for i in range(nx + 1):
                verts.append((-width / 2 + width * i / nx, side * gap / 2, -height / 2 + height * k / nz))
        for k in range(nz):
            for i in range(nx):
                a = base + k * (nx + 1) + i
                faces.append((a, a + 1, a + nx + 2, a + nx + 1))
    mesh = bpy.data.meshes.new(name)
    mesh.from_pydata(verts, [], faces)
    mesh.update()
    obj = bpy.data.objects.new(name, mesh)
    bpy.context.scene.collection.objects.link(obj)
    return obj, (nx + 1) * (nz + 1)


def sew_columns(obj, column_x):
    """Select the border edges of both panels at x = column_x and sew them."""
    select_only(obj)
    bpy.ops.object.mode_set(mode='EDIT')
    bm = bmesh.from_edit_mesh(obj.data)
    for e in bm.edges:
        e.select = e.is_boundary and all(abs(v.co.x - column_x) < 1e-6 for v in e.verts)
    bmesh.update_edit_mesh(obj.data)
    result = bpy.ops.drape.sew_edge_loops()
    bpy.ops.object.mode_set(mode='OBJECT')
    return result


def loose_pairs(obj):
    mesh = obj.data
    e = np.empty(2 * len(mesh.edges), np.int32)
    mesh.edges.foreach_get("vertices", e)
    used = np.zeros(len(mesh.edges), bool)
    c = np.empty(len(mesh.loops), np.int32)
    mesh.loops.foreach_get("edge_index", c)
    used[c] = True
    return e.reshape(-1, 2)[~used]


def result_world(obj):
    local = runtime.dense_positions_local(obj).astype(np.float64)
    m = np.array(obj.matrix_world, np.float64)
    return local @ m[:3, :3].T + m[:3, 3]


def test_sew_selected_edge_loops_writes_stitches_and_the_tube_closes_around_a_cylinder(empty_scene):
    scene = empty_scene
    obj, per_panel = panels_object()
    assert sew_columns(obj, -0.25) == {'FINISHED'}
    assert sew_columns(obj, 0.25) == {'FINISHED'}
    pairs = loose_pairs(obj)
    assert len(pairs) == 10   # 5 vertices a column, equal counts: one stitch each
    co = np.empty(3 * len(obj.data.vertices))
    obj.data.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    # Each stitch joins the same height of the two panels.
    assert np.all((pairs.min(axis=1) < per_panel) & (pairs.max(axis=1) >= per_panel))
    np.testing.assert_allclose(co[pairs[:, 0], 2], co[pairs[:, 1], 2], atol=1e-6)
    assert obj.drape.use_sewing
    # A capsule collider along z through the tube.
    bpy.ops.object.empty_add(location=(0, 0, -0.4))
    pole = bpy.context.active_object
    pole.rotation_euler = (np.pi / 2, 0, 0)   # local +Y points up
    pole.scale = (1.0, 0.8, 1.0)
    pole.drape_collider.kind = 'CAPSULE'
    pole.drape_collider.radius_start = pole.drape_collider.radius_end = 0.1
    select_only(obj)
    assert bpy.ops.drape.cloth_add() == {'FINISHED'}
    s = obj.drape
    s.sewing_max_force = 0.2
    s.air_drag = 2.0
    scene.gravity = (0.0, 0.0, 0.0)
    scene.frame_start, scene.frame_end = 1, 120
    for f in range(1, 121):
        scene.frame_set(f)
    assert not [t for icon, t in runtime.messages(obj) if icon == 'ERROR']
    x = result_world(obj)
    assert np.all(np.isfinite(x))
    gap = np.linalg.norm(x[pairs[:, 0]] - x[pairs[:, 1]], axis=1)
    assert gap.max() <= 1e-3
    radial = np.linalg.norm(x[:, :2], axis=1)
    assert radial.min() > 0.1 - 1e-3


def zip_panels():
    """The two panels with the back one's left column made denser (its
    border edges subdivided): 5 front and 9 back vertices at x = -0.25."""
    obj, per_panel = panels_object("Zip", nx=6, nz=4)
    select_only(obj)
    bpy.ops.object.mode_set(mode='EDIT')
    bm = bmesh.from_edit_mesh(obj.data)
    back = [e for e in bm.edges if e.is_boundary and all(abs(v.co.x + 0.25) < 1e-6 and v.co.y < 0 for v in e.verts)]
    bmesh.ops.subdivide_edges(bm, edges=back, cuts=1)
    bmesh.update_edit_mesh(obj.data)
    bpy.ops.object.mode_set(mode='OBJECT')
    return obj


def test_loops_of_different_counts_get_a_stitch_at_every_vertex(empty_scene):
    obj = zip_panels()
    assert sew_columns(obj, -0.25) == {'FINISHED'}
    pairs = loose_pairs(obj)
    co = np.empty(3 * len(obj.data.vertices))
    obj.data.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    ends = set(pairs.ravel().tolist())
    left = np.flatnonzero(np.abs(co[:, 0] + 0.25) < 1e-6)
    assert set(left.tolist()) <= ends   # 5 front and 9 back vertices all stitched
    assert len(left) == 14
    # A stitch runs between nearby heights, never across the seam's length.
    assert np.abs(co[pairs[:, 0], 2] - co[pairs[:, 1], 2]).max() <= 0.2 / 8 + 1e-6


def test_loops_of_different_counts_close_into_one_seam_line(empty_scene):
    """The Zip panels (5 front and 9 back vertices on the sewn column), sewn
    and played with no gravity: every vertex of either column ends within
    1.5 mm of the other column's polyline (exact point-segment distance),
    and no border edge of the denser column is squeezed shut."""
    obj = zip_panels()
    assert sew_columns(obj, -0.25) == {'FINISHED'}
    co = np.empty(3 * len(obj.data.vertices))
    obj.data.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    column = np.abs(co[:, 0] + 0.25) < 1e-6
    front = np.flatnonzero(column & (co[:, 1] > 0))
    back = np.flatnonzero(column & (co[:, 1] < 0))
    front, back = front[np.argsort(co[front, 2])], back[np.argsort(co[back, 2])]
    select_only(obj)
    assert bpy.ops.drape.cloth_add() == {'FINISHED'}
    obj.drape.sewing_max_force = 0.2
    obj.drape.gravity_scale = 0.0
    for f in range(1, 73):
        empty_scene.frame_set(f)
    x = result_world(obj)

    def to_polyline(p, chain):
        u, v = x[chain[:-1]], x[chain[1:]]
        d = v - u
        t = np.clip(np.einsum("ij,ij->i", p - u, d) / np.einsum("ij,ij->i", d, d), 0.0, 1.0)
        return np.linalg.norm(u + t[:, None] * d - p, axis=1).min()

    far = max(max(to_polyline(x[i], back) for i in front), max(to_polyline(x[i], front) for i in back))
    assert far <= 1.5e-3, far
    edge = np.linalg.norm(x[back[1:]] - x[back[:-1]], axis=1) / np.linalg.norm(co[back[1:]] - co[back[:-1]], axis=1)
    assert edge.min() > 0.9, edge.min()


def test_add_cloth_sews_loose_edges_between_panels(empty_scene):
    """Loose edges drawn by hand between two panels (Blender's convention
    for stitches): Add Cloth turns Sewing on and says so; switched off, the
    panel names Sewing rather than telling the artist to delete them."""
    obj, per_panel = panels_object("HandSewn", nx=4, nz=2)
    obj.data.edges.add(3)
    for k in range(3):
        obj.data.edges[-3 + k].vertices = (k * 5, per_panel + k * 5)   # the left columns, row by row
    obj.data.update()
    select_only(obj)
    assert not obj.drape.use_sewing
    assert bpy.ops.drape.cloth_add() == {'FINISHED'}
    assert obj.drape.enabled and obj.drape.use_sewing
    obj.drape.use_sewing = False
    errors = _play_error(obj)
    assert errors and "'HandSewn'" in errors[0] and "Sewing" in errors[0], errors


def test_sewing_two_borders_of_one_panel_is_refused_and_changes_nothing(empty_scene):
    obj, per_panel = panels_object("OnePanel", nx=4, nz=2)
    select_only(obj)
    edges = len(obj.data.edges)
    bpy.ops.object.mode_set(mode='EDIT')
    bm = bmesh.from_edit_mesh(obj.data)
    # The front panel's left and right columns: two borders of one panel.
    for e in bm.edges:
        e.select = e.is_boundary and all(abs(abs(v.co.x) - 0.25) < 1e-6 and v.co.y > 0 for v in e.verts)
    bmesh.update_edit_mesh(obj.data)
    try:
        result = bpy.ops.drape.sew_edge_loops()
    except RuntimeError as exc:   # the operator's ERROR report
        result = str(exc)
    bpy.ops.object.mode_set(mode='OBJECT')
    assert result != {'FINISHED'} and "one panel" in str(result), result
    assert len(obj.data.edges) == edges and not obj.drape.use_sewing


def _play_error(obj, frames=3):
    scene = bpy.context.scene
    for f in range(1, frames + 1):
        scene.frame_set(f)
    return [t for icon, t in runtime.messages(obj) if icon == 'ERROR']


def test_stitches_inside_one_panel_are_refused_by_name(empty_scene):
    obj, per_panel = panels_object("SelfSewn")
    obj.data.edges.add(1)
    obj.data.edges[-1].vertices = (0, 12)   # both ends on the front panel's bottom row
    obj.data.update()
    obj.drape.use_sewing = True
    select_only(obj)
    assert bpy.ops.drape.cloth_add() == {'FINISHED'}
    errors = _play_error(obj)
    assert errors and "'SelfSewn'" in errors[0] and "Sewing" in errors[0] and "itself" in errors[0], errors


def test_pressure_on_an_open_mesh_is_refused_by_name(empty_scene):
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=4, y_subdivisions=4)
    obj = bpy.context.active_object
    obj.name = "OpenBag"
    assert bpy.ops.drape.cloth_add() == {'FINISHED'}
    obj.drape.use_pressure = True
    errors = _play_error(obj)
    assert errors and "'OpenBag'" in errors[0] and "Pressure" in errors[0] and "closed" in errors[0], errors
    co = np.empty(3 * len(obj.data.vertices))
    obj.data.vertices.foreach_get("co", co)
    assert np.all(np.isfinite(co))


def test_warp_and_weft_without_a_uv_map_are_refused_by_name(empty_scene):
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=4, y_subdivisions=4)
    obj = bpy.context.active_object
    obj.name = "NoUV"
    while obj.data.uv_layers:
        obj.data.uv_layers.remove(obj.data.uv_layers[0])
    assert bpy.ops.drape.cloth_add() == {'FINISHED'}
    obj.drape.warp_stretch = 2.0
    errors = _play_error(obj)
    assert errors and "'NoUV'" in errors[0] and "UV map" in errors[0], errors


def test_negative_radii_cannot_be_set(empty_scene):
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=2, y_subdivisions=2)
    s = bpy.context.active_object.drape
    for prop in ("max_distance", "backstop_radius", "backstop_distance"):
        setattr(s, prop, -0.5)
        assert getattr(s, prop) == 0.0   # clamped to the property's minimum (0 = off)


def test_max_distance_holds_every_frame_while_the_object_moves_fast(empty_scene):
    scene = empty_scene
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=8, y_subdivisions=8, size=1.0, location=(0, 0, 1))
    obj = bpy.context.active_object
    obj.name = "Held"
    group = obj.vertex_groups.new(name="hold")
    n = len(obj.data.vertices)
    co = np.empty(3 * n)
    obj.data.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    held = np.flatnonzero(co[:, 0] < 0)
    weight = 0.5 + 0.5 * (co[held, 1] + 0.5)
    for i, w in zip(held, weight):
        group.add([int(i)], float(w), 'REPLACE')
    assert bpy.ops.drape.cloth_add() == {'FINISHED'}
    r = 0.08
    obj.drape.max_distance = r
    obj.drape.max_distance_group = "hold"
    scene.frame_start, scene.frame_end = 1, 40
    obj.location = (0, 0, 1)
    obj.keyframe_insert("location", frame=1)
    obj.location = (4, 0, 2)
    obj.keyframe_insert("location", frame=40)
    radius = np.zeros(n)
    radius[held] = r * weight
    free_lag = 0.0
    for f in range(1, 41):
        scene.frame_set(f)
        m = np.array(obj.matrix_world, np.float64)
        animated = co @ m[:3, :3].T + m[:3, 3]
        d = np.linalg.norm(result_world(obj) - animated, axis=1)
        assert np.all(d[held] <= radius[held] + 1e-5), (f, (d[held] - radius[held]).max())
        free = np.setdiff1d(np.arange(n), held)
        free_lag = max(free_lag, d[free].max())
    assert not [t for icon, t in runtime.messages(obj) if icon == 'ERROR']
    assert free_lag > 2 * r


def test_garment_settings_warm_up_the_general_step(empty_scene):
    from drape.scene import warmup

    bpy.ops.mesh.primitive_grid_add(x_subdivisions=2, y_subdivisions=2)
    obj = bpy.context.active_object
    assert "general" not in warmup.needed([obj], empty_scene)
    for prop, value in (("use_sewing", True), ("use_pressure", True), ("max_distance", 0.1),
                        ("backstop_radius", 0.2)):
        setattr(obj.drape, prop, value)
        assert "general" in warmup.needed([obj], empty_scene), prop
        obj.drape.property_unset(prop)


def test_max_distance_holds_on_a_proxy_sim_mesh_around_the_dense_animation(empty_scene):
    scene = empty_scene
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=16, y_subdivisions=16, size=1.0)
    dense = bpy.context.active_object
    dense.name = "Dense"
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=4, y_subdivisions=4, size=1.0)
    proxy = bpy.context.active_object
    proxy.name = "Proxy"
    proxy.hide_viewport = proxy.hide_render = True
    n = len(proxy.data.vertices)
    proxy_co = np.empty(3 * n)
    proxy.data.vertices.foreach_get("co", proxy_co)
    proxy_co = proxy_co.reshape(-1, 3)
    select_only(dense)
    assert bpy.ops.drape.cloth_add() == {'FINISHED'}
    s = dense.drape
    s.sim_source = 'PROXY'
    s.proxy = proxy
    r = 0.05
    s.max_distance = r
    scene.frame_start, scene.frame_end = 1, 30
    dense.location = (0, 0, 0)
    dense.keyframe_insert("location", frame=1)
    dense.location = (3, 0, 1)
    dense.keyframe_insert("location", frame=30)
    for f in range(1, 31):
        scene.frame_set(f)
        sim = runtime.get(dense)
        coarse = sim.state.positions_aos().astype(np.float64)
        # The dense mesh moves rigidly: a coarse vertex's animated place is
        # its rest place moved with the object.
        m = np.array(dense.matrix_world, np.float64)
        animated = proxy_co @ m[:3, :3].T + m[:3, 3]
        d = np.linalg.norm(coarse - animated, axis=1)
        assert d.max() <= r + 1e-4, (f, d.max())
    assert not [t for icon, t in runtime.messages(dense) if icon == 'ERROR']


def test_sewing_on_a_proxy_sim_mesh_is_refused_by_name(empty_scene):
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=4, y_subdivisions=4)
    proxy = bpy.context.active_object
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=8, y_subdivisions=8)
    obj = bpy.context.active_object
    obj.name = "ProxySewn"
    assert bpy.ops.drape.cloth_add() == {'FINISHED'}
    obj.drape.sim_source = 'PROXY'
    obj.drape.proxy = proxy
    obj.drape.use_sewing = True
    errors = _play_error(obj)
    assert errors and "'ProxySewn'" in errors[0] and "This mesh" in errors[0], errors
