"""Skinned constraints: keep cloth near its animation.

The animated position of a vertex is its pin target (StepInputs.pin_targets,
what the modifier stack above Drape makes of the mesh), interpolated over
the step as the pins are. Two constraints, projected last in every
iteration of every substep (after the colliders), so they hold exactly:

- max distance: |x - a| <= r, r = ClothParams.max_distance times the
  vertex's weight (a vertex of weight 0 is free);
- backstop: |x - s| >= R for the sphere of radius R = backstop_radius
  centred at s = a - (backstop_distance + R) n, n the animated surface's
  normal at the vertex (the targets' area-weighted vertex normals at step
  end): the cloth may not go deeper than backstop_distance behind its
  animated surface.

Build: SkinnedConstraints (the weighted vertices). Solve: animated_normals
(once per step), solve_skinned.
"""

from collections import namedtuple

import numpy as np
from numba import njit

from ..config import EPS, F0, F1, as_f32, as_u32
from ..jit import KERNEL as JIT
from ..params import SolverError

# vertex: the constrained vertices (empty: none); radius: their max
# distance (m, 0 = no limit); backstop: their backstop weight (0 = none);
# normal: (3, n) scratch for the animated normals; coef: backstop distance,
# backstop radius (m).
SkinnedRecord = namedtuple("SkinnedRecord", "vertex radius backstop normal coef")


class SkinnedConstraints:
    """Max distance and backstop of one model."""

    def __init__(self, n):
        self.n = n
        self.distance_weight = np.ones(n, dtype=np.float32)
        self.backstop_weight = np.ones(n, dtype=np.float32)
        self.inv_mass = np.ones(n, dtype=np.float32)
        self.normal = np.zeros((3, n), dtype=np.float32)
        self.coef = np.zeros(2, dtype=np.float32)
        self._key = None
        self._arrays = None
        self._none_u = np.zeros(0, dtype=np.uint32)
        self._none_f = np.zeros(0, dtype=np.float32)

    def set_weights(self, distance=None, backstop=None):
        for name, value in (("max distance", distance), ("backstop", backstop)):
            if value is None:
                continue
            w = np.asarray(value, dtype=np.float32).ravel()
            if w.shape != (self.n,) or not np.all(np.isfinite(w)) or (len(w) and w.min() < 0):
                raise SolverError(f"{name} weights must be ({self.n},) finite values >= 0")
            if name == "max distance":
                self.distance_weight = as_f32(w)
            else:
                self.backstop_weight = as_f32(w)
        self._key = None

    def set_inverse_masses(self, inv_mass):
        self.inv_mass = as_f32(inv_mass)
        self._key = None

    def prepare(self, c, inv_h2):
        r, bd, br = float(c["max_distance"]), float(c["backstop_distance"]), float(c["backstop_radius"])
        key = (r, bd, br)
        if self._key != key:
            radius = self.distance_weight * np.float32(r) if r > 0 else np.zeros(self.n, np.float32)
            back = self.backstop_weight if br > 0 else np.zeros(self.n, np.float32)
            use = ((radius > 0) | (back > 0)) & (self.inv_mass > 0)
            ids = np.flatnonzero(use)
            if len(ids):
                self._arrays = (as_u32(ids), as_f32(radius[ids]), as_f32(back[ids]))
            else:
                self._arrays = (self._none_u, self._none_f, self._none_f)
            self._key = key
        self.coef[0], self.coef[1] = bd, br
        rec = SkinnedRecord(*self._arrays, self.normal, self.coef)
        return rec, rec


@njit(**JIT)
def animated_normals(target, tris, normal):
    """Area-weighted unit vertex normals of the (3, n) target positions."""
    n = target.shape[1]
    tx, ty, tz = target[0], target[1], target[2]
    nx, ny, nz = normal[0], normal[1], normal[2]
    for i in range(n):
        nx[i] = F0
        ny[i] = F0
        nz[i] = F0
    for t in range(tris.shape[1]):
        a, b, c = tris[0, t], tris[1, t], tris[2, t]
        ux, uy, uz = tx[b] - tx[a], ty[b] - ty[a], tz[b] - tz[a]
        vx, vy, vz = tx[c] - tx[a], ty[c] - ty[a], tz[c] - tz[a]
        cx, cy, cz = uy * vz - uz * vy, uz * vx - ux * vz, ux * vy - uy * vx
        for j in (a, b, c):
            nx[j] += cx
            ny[j] += cy
            nz[j] += cz
    for i in range(n):
        d = np.sqrt(nx[i] * nx[i] + ny[i] * ny[i] + nz[i] * nz[i])
        if d > EPS:
            inv = F1 / d
            nx[i] *= inv
            ny[i] *= inv
            nz[i] *= inv


@njit(**JIT)
def solve_skinned(pos, vertex, radius, backstop, normal, coef, pin_start, pin_end, t1):
    """Project each constrained vertex into its max-distance sphere around
    the animated position, then out of its backstop sphere."""
    s1 = F1 - t1
    bd = coef[0]
    br = coef[1]
    for j in range(vertex.shape[0]):
        i = vertex[j]
        ax = s1 * pin_start[0, i] + t1 * pin_end[0, i]
        ay = s1 * pin_start[1, i] + t1 * pin_end[1, i]
        az = s1 * pin_start[2, i] + t1 * pin_end[2, i]
        if backstop[j] > F0:
            k = bd + br
            sx = ax - k * normal[0, i]
            sy = ay - k * normal[1, i]
            sz = az - k * normal[2, i]
            dx, dy, dz = pos[0, i] - sx, pos[1, i] - sy, pos[2, i] - sz
            d2 = dx * dx + dy * dy + dz * dz
            if d2 < br * br:
                d = np.sqrt(d2)
                if d > EPS:
                    f = br / d
                    pos[0, i] = sx + dx * f
                    pos[1, i] = sy + dy * f
                    pos[2, i] = sz + dz * f
                else:
                    pos[0, i] = sx + br * normal[0, i]
                    pos[1, i] = sy + br * normal[1, i]
                    pos[2, i] = sz + br * normal[2, i]
        r = radius[j]
        if r > F0:
            dx, dy, dz = pos[0, i] - ax, pos[1, i] - ay, pos[2, i] - az
            d2 = dx * dx + dy * dy + dz * dz
            if d2 > r * r:
                # Slightly inside, so float32 rounding cannot leave it outside.
                f = r * np.float32(0.99999) / np.sqrt(d2)
                pos[0, i] = ax + dx * f
                pos[1, i] = ay + dy * f
                pos[2, i] = az + dz * f
