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

A field the solver cannot use (a NaN strength, a transform gone non-finite)
raises DrapeInputError naming the field object and the setting.
"""

import math

import numpy as np

from ._kernels import wind_field_kernel
from .meshdata import DrapeInputError

# The field settings sample_field reads, in the order they are reported.
_FIELD_SETTINGS = ("strength", "noise", "falloff_power", "distance_min", "distance_max", "radial_falloff",
                   "radial_min", "radial_max")


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


_SHAPES = {'POINT': 0, 'LINE': 1}
_FALLOFFS = {'SPHERE': 0, 'TUBE': 1, 'CONE': 2}
_Z = {'BOTH': 0, 'POSITIVE': 1, 'NEGATIVE': -1}


def sample_field(obj_eval, field, points, frame, out=None):
    """Add ``field``'s wind velocity at ``points`` (n, 3) into ``out``."""
    if out is None:
        out = np.zeros((points.shape[0], 3), np.float32)
    m = np.array(obj_eval.matrix_world, dtype=np.float64)
    axis = m[:3, 2] / max(float(np.linalg.norm(m[:3, 2])), 1e-12)
    wind_field_kernel(
        np.asarray(points, np.float32), m[:3, 3].copy(), axis.copy(),
        _SHAPES.get(field.shape, 2), _FALLOFFS.get(field.falloff_type, 0),
        float(field.falloff_power), float(field.distance_min) if field.use_min_distance else 0.0,
        bool(field.use_max_distance), float(field.distance_max),
        float(field.radial_falloff), float(field.radial_min) if field.use_radial_min else 0.0,
        bool(field.use_radial_max), float(field.radial_max),
        _Z.get(field.z_direction, 0), float(field.strength), float(field.noise), float(field.seed),
        float(frame), out)
    return out


def check_field(obj, obj_eval):
    """Raise DrapeInputError (``retry``) when ``obj``'s field settings or
    transform are not finite."""
    field = obj.field
    for prop in _FIELD_SETTINGS:
        value = float(getattr(field, prop))
        if not math.isfinite(value):
            name = field.bl_rna.properties[prop].name
            raise DrapeInputError(f"'{obj.name}' (wind field): {name} must be finite, got {value:g}",
                                  name=obj.name, setting=name, retry=True)
    if not np.isfinite(np.array(obj_eval.matrix_world, dtype=np.float64)).all():
        raise DrapeInputError(f"'{obj.name}' (wind field): its transform is not finite (a NaN or infinite "
                              f"Location, Rotation or Scale, or its parent's or constraints')",
                              name=obj.name, retry=True)


def wind_velocity(scene, depsgraph, points, frame, unit=1.0):
    """(n, 3) float32 wind velocity (m/s) at ``points`` (world, metres), or
    None without wind. ``unit``: metres per Blender unit; a field's distances
    are in the scene's units, its strength is a speed in m/s whatever they are."""
    fields = wind_fields(scene)
    if not fields:
        return None
    if unit != 1.0:
        points = np.asarray(points, np.float32) * np.float32(1.0 / unit)
    total = np.zeros((points.shape[0], 3), np.float32)
    for obj in fields:
        obj_eval = obj.evaluated_get(depsgraph)
        check_field(obj, obj_eval)
        sample_field(obj_eval, obj.field, points, frame, total)
    return total
