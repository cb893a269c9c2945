"""Blender Wind force fields sampled per vertex as a wind *velocity* (m/s).

The solver's aerodynamic model turns the velocity of the air relative to each
triangle into drag and lift, weighted by the cloth's wind drag / lift
coefficients, so here we only say how fast the air moves where each vertex is.

Per field: direction = the field object's local +Z; speed = ``strength``
(read as m/s); ``shape`` decides what "distance" means (Point: to the origin,
Line: to the Z axis, Plane / Surface / Points: along the axis); ``z_direction``
keeps one side only; ``falloff_type`` Sphere uses that distance, Tube also
multiplies by a radial falloff around the Z axis, Cone by an angular one;
power / min / max distances follow Blender's effector falloff:
``1`` inside min, ``0`` beyond max, ``(1 + d - min)^-power`` between (or a
linear-power ramp to 0 at max when max is used). ``noise`` modulates the
strength with a smooth, deterministic space-time noise seeded by ``seed``.
"""

import numpy as np


def wind_fields(scene):
    out = []
    for obj in scene.objects:
        field = getattr(obj, "field", None)
        if field is None or field.type != 'WIND' or field.strength == 0.0:
            continue
        if obj.hide_viewport and obj.hide_render:
            continue
        out.append(obj)
    return out


def _falloff(distance, power, use_min, dmin, use_max, dmax):
    d = np.asarray(distance, np.float64)
    dmin = dmin if use_min else 0.0
    if use_max:
        span = dmax - dmin
        if span <= 0:
            return np.where(d < dmin, 1.0, 0.0)
        t = np.clip((d - dmin) / span, 0.0, None)
        f = np.where(t > 1.0, 0.0, 1.0 - t ** max(power, 1e-6))
        return np.where(d < dmin, 1.0, f)
    if power == 0.0:
        return np.ones_like(d)
    return np.where(d < dmin, 1.0, (1.0 + np.maximum(d - dmin, 0.0)) ** -power)


def _noise(points, frame, seed):
    """Smooth space-time noise in [-1, 1]."""
    s = float(seed) * 0.7311
    p = points.astype(np.float64)
    n1 = np.sin(p @ np.array((1.7, 2.3, 1.1)) + 0.91 * frame + s)
    n2 = np.sin(p @ np.array((-2.9, 0.6, 2.1)) - 0.57 * frame + 2.0 * s)
    return 0.5 * (n1 + n2)


def sample_field(obj_eval, field, points, frame):
    m = np.array(obj_eval.matrix_world, dtype=np.float64)
    origin = m[:3, 3]
    axis = m[:3, 2]
    axis = axis / max(float(np.linalg.norm(axis)), 1e-12)
    rel = points.astype(np.float64) - origin
    axial = rel @ axis
    radial = np.linalg.norm(rel - axial[:, None] * axis, axis=1)
    shape = field.shape
    if shape == 'POINT':
        distance = np.linalg.norm(rel, axis=1)
    elif shape == 'LINE':
        distance = radial
    else:  # PLANE, SURFACE, POINTS: distance along the wind axis
        distance = np.abs(axial)
    factor = _falloff(distance, field.falloff_power, field.use_min_distance, field.distance_min,
                      field.use_max_distance, field.distance_max)
    if field.falloff_type == 'TUBE':
        factor = factor * _falloff(radial, field.radial_falloff, field.use_radial_min, field.radial_min,
                                   field.use_radial_max, field.radial_max)
    elif field.falloff_type == 'CONE':
        angle = np.degrees(np.arctan2(radial, np.abs(axial)))
        factor = factor * _falloff(angle, field.radial_falloff, field.use_radial_min, field.radial_min,
                                   field.use_radial_max, field.radial_max)
    if field.z_direction == 'POSITIVE':
        factor = np.where(axial >= 0.0, factor, 0.0)
    elif field.z_direction == 'NEGATIVE':
        factor = np.where(axial <= 0.0, factor, 0.0)
    speed = field.strength * factor
    if field.noise > 0.0:
        speed = speed * (1.0 + field.noise * _noise(points, frame, field.seed))
    return speed[:, None] * axis[None, :]


def wind_velocity(scene, depsgraph, points, frame):
    """(n, 3) float32 wind velocity at ``points`` (world), or None without wind."""
    fields = wind_fields(scene)
    if not fields:
        return None
    total = np.zeros((points.shape[0], 3), np.float64)
    for obj in fields:
        total += sample_field(obj.evaluated_get(depsgraph), obj.field, points, frame)
    return total.astype(np.float32)
