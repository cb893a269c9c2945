"""Collider objects (``Object.drape_collider``) to solver arrays.

A capsule runs from the object's origin to its local (0, 1, 0), the way a bone
points, so the object's Y scale is its length; radii are in local units,
scaled by the mean of the X and Z axis lengths of the world matrix. Every
length goes to the solver in metres (the scene's Unit Scale: metres per
Blender unit). A plane
passes through the origin with its normal along local +Z. Transforms come from
the evaluated object (keyframes, parents, constraints, bone parents and
Child Of on armature poses all included) and the previous frame's transform
is kept so the solver can sweep from start to end of the step. A mesh
collider is the object's evaluated mesh (modifiers, armature, shape keys,
Geometry Nodes) as triangles in world space, read with foreach_get at every
frame; the previous frame's vertices are kept the same way, so a deforming
mesh sweeps from its pose at one frame to the next.

A capsule's axis may also run between two local points (axis_start,
axis_end); its radii then scale by the mean length of the world matrix's
images of two local directions across that axis (X and Z for the default
+Y axis). A sphere is a capsule whose ends meet, around its local center,
its radius scaled by the mean of the three axis lengths. A box is centred
at its local center, turned with the object's rotation, its local half
size scaled by the axis lengths (and its rounding by their mean).

A collider the solver cannot use (a NaN radius, a transform gone non-finite)
raises DrapeInputError naming the collider object and the setting, before
anything is simulated.
"""

import math

import numpy as np

from .meshdata import DrapeInputError


def collider_objects(scene):
    """Visible collider objects of ``scene``, sorted by name (stable order)."""
    found = []
    for obj in scene.objects:
        settings = getattr(obj, "drape_collider", None)
        if settings is None or settings.kind == 'NONE':
            continue
        if obj.hide_viewport and obj.hide_render:
            continue
        found.append(obj)
    found.sort(key=lambda o: o.name)
    return found


def capsule_from_matrix(m, radius_start, radius_end, start=(0.0, 0.0, 0.0), end=(0.0, 1.0, 0.0)):
    """World endpoints and radii of a capsule under 4x4 matrix ``m`` (numpy),
    its axis from local ``start`` to local ``end``."""
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    a = m[:3, :3] @ start + m[:3, 3]
    b = m[:3, :3] @ end + m[:3, 3]
    s = 0.5 * sum(float(np.linalg.norm(m[:3, :3] @ d)) for d in _across(end - start))
    return a, b, radius_start * s, radius_end * s


def _across(d):
    """Two local unit directions across the local axis direction d: X and Z
    for an axis along +Y (or -Y), cyclic for the other local axes."""
    ln = float(np.linalg.norm(d))
    if ln < 1e-12:
        return np.eye(3)[0], np.eye(3)[2]
    d = d / ln
    k = int(np.argmax(np.abs(d)))
    if abs(abs(d[k]) - 1.0) < 1e-9:
        return np.eye(3)[(k + 1) % 3], np.eye(3)[(k + 2) % 3]
    helper = np.eye(3)[int(np.argmin(np.abs(d)))]
    u = np.cross(d, helper)
    u /= np.linalg.norm(u)
    return u, np.cross(d, u)


def sphere_from_matrix(m, center, radius):
    """World centre and radius of a sphere under 4x4 matrix ``m``."""
    c = m[:3, :3] @ np.asarray(center, dtype=np.float64) + m[:3, 3]
    s = float(np.mean(np.linalg.norm(m[:3, :3], axis=0)))
    return c, radius * s


def box_from_matrix(m, center, half_extents, rounding):
    """World centre, rotation (3x3, columns: the box's axes), half extents
    and rounding of a box under 4x4 matrix ``m``."""
    scale = np.linalg.norm(m[:3, :3], axis=0)
    rot = m[:3, :3] / np.where(scale > 0, scale, 1.0)
    c = m[:3, :3] @ np.asarray(center, dtype=np.float64) + m[:3, 3]
    return c, rot, np.asarray(half_extents, dtype=np.float64) * scale, rounding * float(np.mean(scale))


def _quaternion(rot):
    """Unit quaternion (w, x, y, z) of a rotation matrix (made orthonormal
    first: a sheared matrix keeps its nearest rotation)."""
    u, _, vt = np.linalg.svd(rot)
    r = u @ vt
    if np.linalg.det(r) < 0:
        r = u @ np.diag((1.0, 1.0, -1.0)) @ vt
    t = np.trace(r)
    if t > 0:
        s = 2.0 * np.sqrt(1.0 + t)
        q = (0.25 * s, (r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s)
    else:
        i = int(np.argmax(np.diag(r)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * np.sqrt(1.0 + r[i, i] - r[j, j] - r[k, k])
        q = np.zeros(4)
        q[0] = (r[k, j] - r[j, k]) / s
        q[1 + i] = 0.25 * s
        q[1 + j] = (r[j, i] + r[i, j]) / s
        q[1 + k] = (r[k, i] + r[i, k]) / s
    q = np.asarray(q, dtype=np.float64)
    return q / np.linalg.norm(q)


def plane_from_matrix(m):
    n = m[:3, 2]
    length = float(np.linalg.norm(n))
    n = n / length if length > 0 else np.array((0.0, 0.0, 1.0))
    return m[:3, 3], n


class ColliderFrame:
    """Colliders at one instant, keyed by object name."""

    __slots__ = ("capsules", "planes", "boxes", "meshes")

    def __init__(self):
        self.capsules = {}  # name -> (a, b, ra, rb); a sphere has a == b
        self.planes = {}    # name -> (point, normal)
        self.boxes = {}     # name -> (centre, quaternion w x y z, half extents, rounding)
        self.meshes = {}    # name -> (verts (m, 3) float32 world metres, tris (t, 3) int32, thickness, friction, two_sided)


def _problem(obj, message, setting=None):
    return DrapeInputError(f"'{obj.name}' (Drape collider): {message}", name=obj.name, setting=setting,
                           retry=True)


def _check(obj, m, c):
    if not np.isfinite(m).all():
        raise _problem(obj, "its transform is not finite (a NaN or infinite Location, Rotation or Scale, "
                            "or its parent's or constraints')")
    if c.kind == 'CAPSULE':
        for prop in ("radius_start", "radius_end"):
            value = float(getattr(c, prop))
            if not math.isfinite(value) or value < 0.0:
                name = c.bl_rna.properties[prop].name
                need = "finite" if not math.isfinite(value) else ">= 0"
                raise _problem(obj, f"{name} must be {need}, got {value:g}", setting=name)
    if c.kind == 'CAPSULE':
        for prop in ("axis_start", "axis_end"):
            values = np.asarray(getattr(c, prop), dtype=np.float64)
            if not np.isfinite(values).all():
                name = c.bl_rna.properties[prop].name
                raise _problem(obj, f"{name} must be finite, got {tuple(values.tolist())}", setting=name)
    if c.kind in ('SPHERE', 'BOX'):
        props = ("sphere_radius",) if c.kind == 'SPHERE' else ("half_extents", "rounding")
        for prop in props + ("center",):
            values = np.atleast_1d(np.asarray(getattr(c, prop), dtype=np.float64))
            name = c.bl_rna.properties[prop].name
            if not np.isfinite(values).all():
                raise _problem(obj, f"{name} must be finite, got {tuple(values.tolist())}", setting=name)
            if prop != "center" and values.min() < 0.0:
                raise _problem(obj, f"{name} must be >= 0, got {tuple(values.tolist())}", setting=name)
        if c.kind == 'BOX':
            half = np.asarray(c.half_extents, dtype=np.float64) * np.linalg.norm(m[:3, :3], axis=0)
            if half.min() <= 0.0:
                name = c.bl_rna.properties["half_extents"].name
                raise _problem(obj, f"{name} times the object's scale must be > 0 on every axis, got "
                                    f"{tuple(np.round(half, 6).tolist())}", setting=name)


def read(scene, depsgraph):
    """Every collider of ``scene`` now, in metres; raises DrapeInputError for
    one the solver cannot use."""
    from .meshdata import unit_scale

    unit = unit_scale(scene)
    frame = ColliderFrame()
    for obj in collider_objects(scene):
        m = np.array(obj.evaluated_get(depsgraph).matrix_world, dtype=np.float64)
        c = obj.drape_collider
        _check(obj, m, c)
        if unit != 1.0:
            m = np.diag((unit, unit, unit, 1.0)) @ m
        if c.kind == 'CAPSULE':
            frame.capsules[obj.name] = capsule_from_matrix(m, c.radius_start, c.radius_end, c.axis_start,
                                                           c.axis_end)
        elif c.kind == 'PLANE':
            frame.planes[obj.name] = plane_from_matrix(m)
        elif c.kind == 'SPHERE':
            centre, r = sphere_from_matrix(m, c.center, c.sphere_radius)
            frame.capsules[obj.name] = (centre, centre.copy(), r, r)
        elif c.kind == 'BOX':
            centre, rot, half, rounding = box_from_matrix(m, c.center, c.half_extents, c.rounding)
            frame.boxes[obj.name] = (centre, _quaternion(rot), half, rounding)
        elif c.kind == 'MESH':
            frame.meshes[obj.name] = read_mesh(obj, depsgraph, m, unit)
    return frame


# Triangles a mesh collider may have (the solver's grid and per-substep
# rows cost about 20 ns and 60 bytes a triangle).
MAX_MESH_TRIANGLES = 4_000_000


def read_mesh(obj, depsgraph, m, unit=1.0):
    """A MESH collider's evaluated triangles: (verts (m, 3) float32 world
    metres, tris (t, 3) int32, thickness m, friction, two_sided). ``m``:
    its world matrix (numpy, metres)."""
    c = obj.drape_collider
    if obj.type != 'MESH':
        raise _problem(obj, f"a Mesh collider must be a mesh object, not {obj.type.lower()}", setting="Collider")
    if getattr(getattr(obj, "drape", None), "enabled", False):
        raise _problem(obj, "it is also a Drape cloth: a cloth cannot collide with itself as a Mesh collider "
                            "(use Self collision, or set Collider to None)", setting="Collider")
    for prop in ("outer_thickness", "friction"):
        value = float(getattr(c, prop))
        if not math.isfinite(value) or value < 0.0:
            name = c.bl_rna.properties[prop].name
            raise _problem(obj, f"{name} must be finite and >= 0, got {value:g}", setting=name)
    ev = obj.evaluated_get(depsgraph)
    me = ev.to_mesh()
    try:
        me.calc_loop_triangles()
        t = len(me.loop_triangles)
        if t == 0:
            raise _problem(obj, "its evaluated mesh has no faces: a Mesh collider needs triangles (add faces, "
                                "or use a Plane or Capsule collider)", setting="Collider")
        if t > MAX_MESH_TRIANGLES:
            raise _problem(obj, f"its evaluated mesh has {t} triangles, more than the {MAX_MESH_TRIANGLES} a "
                                "Mesh collider may have (decimate it or collide with a simpler proxy)",
                           setting="Collider")
        co = np.empty(len(me.vertices) * 3, np.float32)
        me.vertices.foreach_get("co", co)
        tris = np.empty(t * 3, np.int32)
        me.loop_triangles.foreach_get("vertices", tris)
    finally:
        ev.to_mesh_clear()
    local = co.reshape(-1, 3).astype(np.float64)
    world = local @ m[:3, :3].T + m[:3, 3]
    if not np.isfinite(world.sum()):
        raise _problem(obj, "its evaluated mesh has vertices that are not finite (NaN or infinite coordinates "
                            "from a modifier, shape key or driver)")
    return (world.astype(np.float32), tris.reshape(-1, 3), float(c.outer_thickness) * unit, float(c.friction),
            c.sides == 'BOTH')


def interpolate(start, end, t):
    """Colliders a fraction ``t`` of the way from ``start`` to ``end``
    (used when a playback skipped frames and several steps are taken)."""
    out = ColliderFrame()
    for name, (a1, b1, ra, rb) in end.capsules.items():
        a0, b0, _, _ = start.capsules.get(name, (a1, b1, ra, rb))
        out.capsules[name] = (a0 + (a1 - a0) * t, b0 + (b1 - b0) * t, ra, rb)
    for name, (p1, n1) in end.planes.items():
        p0, n0 = start.planes.get(name, (p1, n1))
        n = n0 + (n1 - n0) * t
        n = n / max(float(np.linalg.norm(n)), 1e-12)
        out.planes[name] = (p0 + (p1 - p0) * t, n)
    for name, (c1, q1, half, rounding) in end.boxes.items():
        c0, q0, _, _ = start.boxes.get(name, (c1, q1, half, rounding))
        q1 = q1 if float(np.dot(q0, q1)) >= 0 else -q1
        q = q0 + (q1 - q0) * t
        out.boxes[name] = (c0 + (c1 - c0) * t, q / max(float(np.linalg.norm(q)), 1e-12), half, rounding)
    for name, (v1, tris, th, fr, two) in end.meshes.items():
        v0 = start.meshes.get(name, (v1,))[0]
        if v0.shape == v1.shape:
            v1 = v0 + (v1 - v0) * np.float32(t)
        out.meshes[name] = (v1, tris, th, fr, two)
    return out


def solver_inputs(start, end, solver):
    """``(Capsules, Planes)`` for one step from ``start`` to ``end``; a
    collider new this frame starts where it ends (no sweep from nowhere)."""
    names = list(end.capsules)
    capsules = None
    if names:
        a0 = np.empty((len(names), 3), np.float32)
        b0 = np.empty_like(a0)
        a1 = np.empty_like(a0)
        b1 = np.empty_like(a0)
        ra = np.empty(len(names), np.float32)
        rb = np.empty(len(names), np.float32)
        for i, name in enumerate(names):
            ea, eb, era, erb = end.capsules[name]
            sa, sb, _, _ = start.capsules.get(name, end.capsules[name])
            a0[i], b0[i], a1[i], b1[i], ra[i], rb[i] = sa, sb, ea, eb, era, erb
        capsules = solver.Capsules(a0=a0, b0=b0, a1=a1, b1=b1, radius_a=ra, radius_b=rb)
    planes = None
    pnames = list(end.planes)
    if pnames:
        p0 = np.empty((len(pnames), 3), np.float32)
        n0 = np.empty_like(p0)
        p1 = np.empty_like(p0)
        n1 = np.empty_like(p0)
        for i, name in enumerate(pnames):
            ep, en = end.planes[name]
            sp, sn = start.planes.get(name, end.planes[name])
            p0[i], n0[i], p1[i], n1[i] = sp, sn, ep, en
        planes = solver.Planes(point0=p0, normal0=n0, point1=p1, normal1=n1)
    return capsules, planes


def box_inputs(start, end, solver):
    """``Boxes`` for one step from ``start`` to ``end`` (None without any); a
    box new this frame starts where it ends."""
    names = list(end.boxes)
    if not names:
        return None
    k = len(names)
    c0, c1 = np.empty((k, 3)), np.empty((k, 3))
    q0, q1 = np.empty((k, 4)), np.empty((k, 4))
    half, rounding = np.empty((k, 3)), np.empty(k)
    for i, name in enumerate(names):
        ec, eq, eh, er = end.boxes[name]
        sc, sq, _, _ = start.boxes.get(name, end.boxes[name])
        c0[i], q0[i], c1[i], q1[i], half[i], rounding[i] = sc, sq, ec, eq, eh, er
    return solver.Boxes(center0=c0, rotation0=q0, half_extents=half, center1=c1, rotation1=q1, radius=rounding)
def mesh_inputs(start, end, solver):
    """The mesh colliders (a list of ``solver.MeshCollider``, or None) for
    one step from ``start`` to ``end``. A mesh new this frame, or whose
    vertex count changed (Geometry Nodes, a Remesh), starts where it ends:
    no sweep between unrelated vertices."""
    if not end.meshes:
        return None
    out = []
    for name, (v1, tris, th, fr, two) in end.meshes.items():
        v0 = start.meshes.get(name, (v1,))[0]
        if v0.shape != v1.shape:
            v0 = v1
        out.append(solver.MeshCollider(verts0=v0, verts1=v1, tris=tris, thickness=th, friction=fr, two_sided=two,
                                       name=f"'{name}' (Drape Mesh collider)"))
    return out
