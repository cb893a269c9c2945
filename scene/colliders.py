"""Collider objects (``Object.drape_collider``) to solver arrays.

A capsule runs from the object's origin to its local (0, 1, 0), the way a bone
points, so the object's Y scale is its length; radii are in local units,
scaled by the mean of the X and Z axis lengths of the world matrix. Every
length goes to the solver in metres (the scene's Unit Scale: metres per
Blender unit). A plane
passes through the origin with its normal along local +Z. Transforms come from
the evaluated object (keyframes, parents, constraints, bone parents and
Child Of on armature poses all included) and the previous frame's transform
is kept so the solver can sweep from start to end of the step.

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


def capsule_from_matrix(m, radius_start, radius_end):
    """World endpoints and radii of a capsule under 4x4 matrix ``m`` (numpy)."""
    a = m[:3, 3]
    b = a + m[:3, 1]
    sx = float(np.linalg.norm(m[:3, 0]))
    sz = float(np.linalg.norm(m[:3, 2]))
    s = 0.5 * (sx + sz)
    return a, b, radius_start * s, radius_end * s


def plane_from_matrix(m):
    n = m[:3, 2]
    length = float(np.linalg.norm(n))
    n = n / length if length > 0 else np.array((0.0, 0.0, 1.0))
    return m[:3, 3], n


class ColliderFrame:
    """Colliders at one instant, keyed by object name."""

    __slots__ = ("capsules", "planes")

    def __init__(self):
        self.capsules = {}  # name -> (a, b, ra, rb)
        self.planes = {}    # name -> (point, normal)


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
            frame.capsules[obj.name] = capsule_from_matrix(m, c.radius_start, c.radius_end)
        elif c.kind == 'PLANE':
            frame.planes[obj.name] = plane_from_matrix(m)
    return frame


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
