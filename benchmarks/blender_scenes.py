"""The benchmark scene, built twice from the same arrays: once as plain numpy
arrays for Drape's solver, once through bpy for Blender's own Cloth modifier.

A square sheet hangs in the XZ plane from its pinned top row; a sphere sweeps
back and forth through it along Y. The sphere's centre is given per frame by
``sphere_center(frame)`` and both simulators get exactly these positions
(Blender through linear keyframes on every frame, Drape through the step's
start/end collider transforms).
"""

import contextlib
import math
import os
import sys
import time

import numpy as np

FPS = 24
SHEET_SIZE = 1.0          # metres, square
SHEET_TOP = 1.2           # z of the pinned row
SPHERE_RADIUS = 0.15
SWING_AMPLITUDE = 0.35    # metres along Y
SWING_PERIOD_S = 2.0
BLENDER_VERTEX_MASS = 0.3  # kg, the Cloth modifier's default mass per vertex
SWING_PHASE = math.asin((SPHERE_RADIUS + 0.05) / SWING_AMPLITUDE)


class Sheet:
    """A (res+1)^2-vertex grid of res^2 quads, top row pinned."""

    def __init__(self, res, size=SHEET_SIZE, top=SHEET_TOP):
        self.res = res
        side = res + 1
        u = np.linspace(-size / 2, size / 2, side)
        z = np.linspace(top, top - size, side)
        zz, xx = np.meshgrid(z, u, indexing="ij")    # row-major: row 0 is the top
        self.rest = np.stack([xx.ravel(), np.zeros(side * side), zz.ravel()], axis=1)
        r, c = np.meshgrid(np.arange(res), np.arange(res), indexing="ij")
        v0 = (r * side + c).ravel()
        # Counter-clockwise seen from -Y (normal towards -Y); order only matters for normals.
        self.quads = np.stack([v0, v0 + side, v0 + side + 1, v0 + 1], axis=1).astype(np.int64)
        self.face_indices = self.quads.ravel()
        self.face_sizes = np.full(len(self.quads), 4, dtype=np.int64)
        self.pin_weight = np.zeros(side * side)
        self.pin_weight[:side] = 1.0
        self.area = size * size

    @property
    def n(self):
        return len(self.rest)


def sphere_center(frame):
    """Centre of the swept sphere at a (possibly fractional) frame; frame 1 is t=0."""
    t = (frame - 1) / FPS
    # Starts 5 cm off the sheet on the -Y side already moving towards it, so even
    # a short run (the slow Blender cases) includes contact; swings through to +Y
    # and back with a peak speed of about 1.1 m/s.
    y = SWING_AMPLITUDE * math.sin(2 * math.pi * t / SWING_PERIOD_S - SWING_PHASE)
    return np.array([0.0, y, SHEET_TOP - 0.45 * SHEET_SIZE])


def res_for_vertices(n):
    return max(2, int(round(math.sqrt(n))) - 1)


# --------------------------------------------------------------------------- Blender

def blender_available():
    try:
        import bpy  # noqa: F401
        return True
    except ImportError:
        return False


def build_blender_scene(sheet, frames, quality=5, self_collision=False, mass_per_vertex=None,
                        tension=None, collision_distance=None, sphere_segments=32, sphere_rings=16):
    """A fresh empty file with the sheet (Cloth modifier, pin group) and the sphere
    (Collision modifier, linear keyframes on every frame). Returns (sheet_obj, sphere_obj)."""
    import bpy

    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.render.fps = FPS
    scene.render.fps_base = 1.0
    scene.frame_start = 1
    scene.frame_end = frames

    mesh = bpy.data.meshes.new("sheet")
    mesh.vertices.add(sheet.n)
    mesh.vertices.foreach_set("co", sheet.rest.astype(np.float32).ravel())
    nq = len(sheet.quads)
    mesh.loops.add(nq * 4)
    mesh.loops.foreach_set("vertex_index", sheet.face_indices.astype(np.int32))
    mesh.polygons.add(nq)
    mesh.polygons.foreach_set("loop_start", np.arange(0, nq * 4, 4, dtype=np.int32))
    mesh.update(calc_edges=True)
    mesh.validate()
    obj = bpy.data.objects.new("sheet", mesh)
    scene.collection.objects.link(obj)
    group = obj.vertex_groups.new(name="pin")
    pinned = np.flatnonzero(sheet.pin_weight > 0).tolist()
    group.add(pinned, 1.0, "REPLACE")

    cloth = obj.modifiers.new("Cloth", "CLOTH")
    st = cloth.settings
    st.quality = quality
    st.vertex_group_mass = "pin"
    if mass_per_vertex is not None:
        st.mass = mass_per_vertex
    if tension is not None:
        st.tension_stiffness = tension
        st.compression_stiffness = tension
    cloth.point_cache.frame_start = 1
    cloth.point_cache.frame_end = frames
    cs = cloth.collision_settings
    cs.use_collision = True
    cs.use_self_collision = self_collision
    if collision_distance is not None:
        cs.distance_min = collision_distance
        cs.self_distance_min = collision_distance

    sph_mesh = bpy.data.meshes.new("sphere")
    import bmesh
    bm = bmesh.new()
    bmesh.ops.create_uvsphere(bm, u_segments=sphere_segments, v_segments=sphere_rings,
                              radius=SPHERE_RADIUS)
    bm.to_mesh(sph_mesh)
    bm.free()
    sphere = bpy.data.objects.new("sphere", sph_mesh)
    scene.collection.objects.link(sphere)
    sphere.modifiers.new("Collision", "COLLISION")
    for f in range(1, frames + 2):
        sphere.location = tuple(sphere_center(f))
        sphere.keyframe_insert("location", frame=f)
    act = sphere.animation_data.action
    for fc in _action_fcurves(act):
        for kp in fc.keyframe_points:
            kp.interpolation = "LINEAR"
    scene.frame_set(1)
    return obj, sphere


def _action_fcurves(action):
    # Blender 5.0 keeps F-curves in layered actions (layers -> strips -> channelbags).
    if hasattr(action, "fcurves") and len(getattr(action, "fcurves", ())) > 0:
        return list(action.fcurves)
    out = []
    for layer in getattr(action, "layers", ()):
        for strip in layer.strips:
            for bag in strip.channelbags:
                out.extend(bag.fcurves)
    return out


def evaluated_positions(obj):
    import bpy
    dg = bpy.context.evaluated_depsgraph_get()
    me = obj.evaluated_get(dg).data
    co = np.empty(len(me.vertices) * 3, dtype=np.float32)
    me.vertices.foreach_get("co", co)
    return co.reshape(-1, 3)


def sphere_planes(sphere_obj):
    """(normals, offsets) of the sphere mesh's face planes in world space: the
    convex polytope Blender actually collides with."""
    me = sphere_obj.data
    co = np.empty(len(me.vertices) * 3)
    me.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    m = np.array(sphere_obj.matrix_world)
    co = co @ m[:3, :3].T + m[:3, 3]
    nrm = np.empty(len(me.polygons) * 3)
    me.polygons.foreach_get("normal", nrm)
    nrm = nrm.reshape(-1, 3)
    cen = np.empty(len(me.polygons) * 3)
    me.polygons.foreach_get("center", cen)
    cen = cen.reshape(-1, 3) @ m[:3, :3].T + m[:3, 3]
    return nrm, np.einsum("ij,ij->i", nrm, cen)


def run_blender(sheet, frames, quality=5, self_collision=False, sample_frames=(), **kw):
    """Bake by frame_set over frames 2..frames (frame 1 is the rest state).
    Returns (ms per frame list, {frame: positions}, sphere polytope per sampled frame)."""
    import bpy
    obj, sphere = build_blender_scene(sheet, frames, quality, self_collision, **kw)
    scene = bpy.context.scene
    times = []
    samples = {}
    for f in range(2, frames + 1):
        t0 = time.perf_counter()
        scene.frame_set(f)
        times.append((time.perf_counter() - t0) * 1000.0)
        if f in sample_frames:
            samples[f] = (evaluated_positions(obj).copy(), sphere_planes(sphere))
    return times, samples


@contextlib.contextmanager
def stdout_to_stderr():
    """Blender prints operator reports ("Info: ...") on the process's stdout; the
    benchmark's stdout is JSON lines only, so send them to stderr meanwhile."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def build_drape_addon_scene(sheet, frames, mass_per_vertex=BLENDER_VERTEX_MASS, substeps=None):
    """The same scene for Drape running inside Blender as the add-on: the sheet made a
    cloth with drape.cloth_add (pin group 'pin'), the sphere a zero-length capsule
    collider on an Empty keyed on every frame. Returns the sheet object."""
    import bpy
    import drape

    obj, sphere = build_blender_scene(sheet, frames, quality=1)
    obj.modifiers.remove(obj.modifiers["Cloth"])
    if not hasattr(bpy.types.Object, "drape"):
        drape.register()
    scene = bpy.context.scene
    col = bpy.data.objects.new("sphere_collider", None)
    scene.collection.objects.link(col)
    col.scale = (1.0, 1e-4, 1.0)   # a capsule's length is its Y scale: a sphere
    col.drape_collider.kind = 'CAPSULE'
    col.drape_collider.radius_start = col.drape_collider.radius_end = SPHERE_RADIUS
    for f in range(1, frames + 2):
        col.location = tuple(sphere_center(f))
        col.keyframe_insert("location", frame=f)
    for fc in _action_fcurves(col.animation_data.action):
        for kp in fc.keyframe_points:
            kp.interpolation = "LINEAR"
    bpy.data.objects.remove(sphere, do_unlink=True)
    for o in bpy.context.scene.objects:
        o.select_set(False)
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj
    with stdout_to_stderr():
        result = bpy.ops.drape.cloth_add(pin_group="pin")
    if "FINISHED" not in result:
        raise RuntimeError(f"drape.cloth_add failed: {result}")
    obj.drape.areal_density = mass_per_vertex * sheet.n / sheet.area
    if substeps is not None:
        obj.drape.substeps = substeps
    scene.frame_set(1)
    return obj
