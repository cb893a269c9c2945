"""Closest points (Ericson, Real-Time Collision Detection) and triangle
frames, shared by the narrow phase, the solve and the contact cache.
Scalars in and out: no allocation per call."""

import numpy as np
from numba import njit

from .constants import HELPER, JIT

@njit(**JIT)
def closest_on_triangle(px, py, pz, ax, ay, az, bx, by, bz, cx, cy, cz):
    """Barycentrics (u, v, w) of the point of triangle abc closest to p
    (Ericson, Real-Time Collision Detection 5.1.5)."""
    abx, aby, abz = bx - ax, by - ay, bz - az
    acx, acy, acz = cx - ax, cy - ay, cz - az
    apx, apy, apz = px - ax, py - ay, pz - az
    d1 = abx * apx + aby * apy + abz * apz
    d2 = acx * apx + acy * apy + acz * apz
    if d1 <= 0.0 and d2 <= 0.0:
        return 1.0, 0.0, 0.0
    bpx, bpy, bpz = px - bx, py - by, pz - bz
    d3 = abx * bpx + aby * bpy + abz * bpz
    d4 = acx * bpx + acy * bpy + acz * bpz
    if d3 >= 0.0 and d4 <= d3:
        return 0.0, 1.0, 0.0
    vc = d1 * d4 - d3 * d2
    if vc <= 0.0 and d1 >= 0.0 and d3 <= 0.0:
        t = d1 / (d1 - d3)
        return 1.0 - t, t, 0.0
    cpx, cpy, cpz = px - cx, py - cy, pz - cz
    d5 = abx * cpx + aby * cpy + abz * cpz
    d6 = acx * cpx + acy * cpy + acz * cpz
    if d6 >= 0.0 and d5 <= d6:
        return 0.0, 0.0, 1.0
    vb = d5 * d2 - d1 * d6
    if vb <= 0.0 and d2 >= 0.0 and d6 <= 0.0:
        t = d2 / (d2 - d6)
        return 1.0 - t, 0.0, t
    va = d3 * d6 - d5 * d4
    if va <= 0.0 and (d4 - d3) >= 0.0 and (d5 - d6) >= 0.0:
        t = (d4 - d3) / ((d4 - d3) + (d5 - d6))
        return 0.0, 1.0 - t, t
    den = va + vb + vc
    if den <= 1e-30:
        return 1.0, 0.0, 0.0
    v = vb / den
    w = vc / den
    return 1.0 - v - w, v, w


@njit(inline="always", **JIT)
def segment_dots(ax, ay, az, bx, by, bz, cx, cy, cz, dx, dy, dz):
    """For segments ab and cd: |b-a|^2, (b-a).(d-c), (b-a).(a-c), |d-c|^2,
    (d-c).(a-c) (Ericson's a, b, c, e, f)."""
    d1x, d1y, d1z = bx - ax, by - ay, bz - az
    d2x, d2y, d2z = dx - cx, dy - cy, dz - cz
    rx, ry, rz = ax - cx, ay - cy, az - cz
    return (d1x * d1x + d1y * d1y + d1z * d1z, d1x * d2x + d1y * d2y + d1z * d2z,
            d1x * rx + d1y * ry + d1z * rz, d2x * d2x + d2y * d2y + d2z * d2z, d2x * rx + d2y * ry + d2z * rz)


@njit(inline="always", **JIT)
def edges_cross(ax, ay, az, bx, by, bz, cx, cy, cz):
    """Triangle abc's edges u = b - a, w = c - a and m = u x w (scalars in
    and out: for the scalar and the vectorised passes alike)."""
    ux, uy, uz = bx - ax, by - ay, bz - az
    wx, wy, wz = cx - ax, cy - ay, cz - az
    return ux, uy, uz, wx, wy, wz, uy * wz - uz * wy, uz * wx - ux * wz, ux * wy - uy * wx


@njit(**JIT)
def closest_segments(ax, ay, az, bx, by, bz, cx, cy, cz, dx, dy, dz):
    """Parameters (s, t) of the closest points a + s(b-a), c + t(d-c)
    (Ericson 5.1.9), clamped to the segments."""
    a, b, c, e, f = segment_dots(ax, ay, az, bx, by, bz, cx, cy, cz, dx, dy, dz)
    eps = 1e-20
    if a <= eps and e <= eps:
        return 0.0, 0.0
    if a <= eps:
        return 0.0, min(max(f / e, 0.0), 1.0)
    if e <= eps:
        return min(max(-c / a, 0.0), 1.0), 0.0
    den = a * e - b * b
    if den > 1e-12 * a * e:
        s = min(max((b * f - c * e) / den, 0.0), 1.0)
    else:
        s = 0.0
    t = (b * s + f) / e
    if t < 0.0:
        t = 0.0
        s = min(max(-c / a, 0.0), 1.0)
    elif t > 1.0:
        t = 1.0
        s = min(max((b - c) / a, 0.0), 1.0)
    return s, t


@njit(**HELPER)
def tri_frame(x, a, b, c):
    """Orthonormal frame (u, v, n) of triangle abc at positions x (3, n)."""
    ux = x[0, b] - x[0, a]
    uy = x[1, b] - x[1, a]
    uz = x[2, b] - x[2, a]
    wx = x[0, c] - x[0, a]
    wy = x[1, c] - x[1, a]
    wz = x[2, c] - x[2, a]
    nx = uy * wz - uz * wy
    ny = uz * wx - ux * wz
    nz = ux * wy - uy * wx
    ln = np.sqrt(nx * nx + ny * ny + nz * nz)
    lu = np.sqrt(ux * ux + uy * uy + uz * uz)
    if ln < 1e-30 or lu < 1e-30:
        return 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0
    nx /= ln
    ny /= ln
    nz /= ln
    ux /= lu
    uy /= lu
    uz /= lu
    vx = ny * uz - nz * uy
    vy = nz * ux - nx * uz
    vz = nx * uy - ny * ux
    return ux, uy, uz, vx, vy, vz, nx, ny, nz


@njit(inline="always", **JIT)
def sphere_gap(sa, sb):
    """Two moving bounding spheres as 8-tuples (centre, radius, mean motion,
    largest deviation from it: _tri_sphere, _edge_sphere): the squared
    distance of the centres and the bound on their relative motion. The
    triangle and edge rejects both test |d| - r_a - r_b - cons motion >
    slack reach with them."""
    dx = sa[0] - sb[0]
    dy = sa[1] - sb[1]
    dz = sa[2] - sb[2]
    mx = sa[4] - sb[4]
    my = sa[5] - sb[5]
    mz = sa[6] - sb[6]
    return dx * dx + dy * dy + dz * dz, np.sqrt(mx * mx + my * my + mz * mz) + sa[7] + sb[7]
