"""Affine transforms of (n, 3) float32 point arrays, compiled: numpy's
broadcasting costs ~0.3 ms per 10k points and a BLAS product can stall for
milliseconds when its thread pool competes with numba's."""

import numpy as np
from numba import njit

from ..solver import jit  # noqa: F401  (compiled as the solver is: see solver/jit.py)


@njit(cache=True, fastmath=True, nogil=True)
def _affine_kernel(points, m, out):
    r00, r01, r02, t0 = m[0, 0], m[0, 1], m[0, 2], m[0, 3]
    r10, r11, r12, t1 = m[1, 0], m[1, 1], m[1, 2], m[1, 3]
    r20, r21, r22, t2 = m[2, 0], m[2, 1], m[2, 2], m[2, 3]
    for i in range(points.shape[0]):
        x = points[i, 0]
        y = points[i, 1]
        z = points[i, 2]
        out[i, 0] = r00 * x + r01 * y + r02 * z + t0
        out[i, 1] = r10 * x + r11 * y + r12 * z + t1
        out[i, 2] = r20 * x + r21 * y + r22 * z + t2


def affine(points, m):
    """points @ m[:3, :3].T + m[:3, 3], float32 (n, 3)."""
    points = np.ascontiguousarray(points, dtype=np.float32)
    out = np.empty(points.shape, np.float32)
    _affine_kernel(points, np.ascontiguousarray(m, dtype=np.float32), out)
    return out


@njit(cache=True, fastmath=True, nogil=True)
def _falloff(d, power, dmin, use_max, dmax):
    if d < dmin:
        return 1.0
    if use_max:
        span = dmax - dmin
        if span <= 0.0:
            return 0.0
        t = (d - dmin) / span
        if t > 1.0:
            return 0.0
        return 1.0 - t ** max(power, 1e-6)
    if power == 0.0:
        return 1.0
    return (1.0 + d - dmin) ** (-power)


@njit(cache=True, fastmath=True, nogil=True)
def wind_field_kernel(points, origin, axis, shape, falloff_type, power, dmin, use_max, dmax,
                      rpower, rmin, use_rmax, rmax, z_direction, strength, noise, seed, frame, out):
    """Add one Wind field's velocity at ``points`` into ``out`` (see scene.wind).
    shape: 0 point, 1 line, 2 along the axis; falloff_type: 0 sphere, 1 tube,
    2 cone; z_direction: 0 both, 1 positive, -1 negative."""
    s = seed * 0.7311
    for i in range(points.shape[0]):
        rx = points[i, 0] - origin[0]
        ry = points[i, 1] - origin[1]
        rz = points[i, 2] - origin[2]
        axial = rx * axis[0] + ry * axis[1] + rz * axis[2]
        if z_direction == 1 and axial < 0.0:
            continue
        if z_direction == -1 and axial > 0.0:
            continue
        qx = rx - axial * axis[0]
        qy = ry - axial * axis[1]
        qz = rz - axial * axis[2]
        radial = np.sqrt(qx * qx + qy * qy + qz * qz)
        if shape == 0:
            d = np.sqrt(rx * rx + ry * ry + rz * rz)
        elif shape == 1:
            d = radial
        else:
            d = abs(axial)
        f = _falloff(d, power, dmin, use_max, dmax)
        if falloff_type == 1:
            f *= _falloff(radial, rpower, rmin, use_rmax, rmax)
        elif falloff_type == 2:
            f *= _falloff(np.degrees(np.arctan2(radial, abs(axial))), rpower, rmin, use_rmax, rmax)
        speed = strength * f
        if noise > 0.0:
            p0 = points[i, 0]
            p1 = points[i, 1]
            p2 = points[i, 2]
            n1 = np.sin(1.7 * p0 + 2.3 * p1 + 1.1 * p2 + 0.91 * frame + s)
            n2 = np.sin(-2.9 * p0 + 0.6 * p1 + 2.1 * p2 - 0.57 * frame + 2.0 * s)
            speed *= 1.0 + noise * 0.5 * (n1 + n2)
        out[i, 0] += speed * axis[0]
        out[i, 1] += speed * axis[1]
        out[i, 2] += speed * axis[2]
