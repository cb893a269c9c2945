"""Scenes of a hanging sheet cut by fast capsules, for the capsule edge and
face contact tests (tests/solver/test_capsule_edges.py) and the colliders
benchmark: the sheet, the capsules' motions, and an oracle written apart
from the solver (the exact distance to the round cone, tests/oracles.py, of
points along every triangle edge and of every centroid)."""

import numpy as np

import oracles

# Points sampled along each edge, both ends included.
SAMPLES = 16


def hanging_sheet(vertices_per_side):
    """A 1 m sheet in the XZ plane, (v - 1)^2 quads, its top row pinned."""
    nq = vertices_per_side - 1
    rest, fi, fs = oracles.grid_sheet(nq, nq, 1.0)
    pin = np.zeros(len(rest))
    pin[:nq + 1] = 1.0
    return rest, fi, fs, pin


def surface_points(x, triangles):
    """SAMPLES points along every triangle edge and every triangle's centroid
    of positions x (n, 3), float64."""
    t = np.asarray(triangles, dtype=np.int64)
    e = np.concatenate([t[:, [0, 1]], t[:, [1, 2]], t[:, [2, 0]]])
    e = np.unique(np.sort(e, axis=1), axis=0)
    f = np.linspace(0.0, 1.0, SAMPLES)[None, :, None]
    along = x[e[:, 0]][:, None, :] * (1.0 - f) + x[e[:, 1]][:, None, :] * f
    return np.concatenate([along.reshape(-1, 3), x[t].mean(axis=1)])


def max_depth(x, triangles, a, b, ra, rb):
    """How deep (m) the deepest surface point of x sits inside the round cone
    (a, b, ra, rb); 0 if none is inside. Points farther from the axis segment
    than the larger radius cannot be inside and skip the exact search."""
    p = surface_points(np.asarray(x, dtype=np.float64), triangles)
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    ab = b - a
    s = np.clip((p - a) @ ab / max(ab @ ab, 1e-30), 0.0, 1.0)
    axis = np.linalg.norm(p - (a + s[:, None] * ab), axis=1)
    near = p[axis < max(ra, rb)]
    if len(near) == 0:
        return 0.0
    return max(0.0, -float(oracles.point_capsule_distances(near, a, b, ra, rb).min()))


def post(speed, radius=0.05):
    """A vertical capsule post (below the pinned row) that starts in front of
    the sheet and moves through it along +y at `speed` m/s for 0.7 m."""
    travel = 0.7

    def at(t):
        y = -0.15 + speed * min(t, travel / speed)
        return np.array([0.5, y, 0.1]), np.array([0.5, y, 0.75]), radius

    return at, travel / speed + 0.1


def spinning_arm(period=0.5, half=0.3, radius=0.04):
    """An arm capsule spinning about the vertical through its centre, which
    sits 12 cm in front of the sheet: each end sweeps through the sheet
    twice a turn at 2 pi half / period (3.8 m/s)."""
    c = np.array([0.5, 0.12, 0.45])

    def at(t):
        th = 2.0 * np.pi * t / period
        d = half * np.array([np.cos(th), np.sin(th), 0.0])
        return c - d, c + d, radius

    return at, 2.0 * period


def thin_bar(speed=0.5, radius=0.01):
    """A horizontal capsule far thinner than the 5 cm quads, halfway between
    two rows of vertices, pressed 15 cm through the sheet's plane and held."""
    def at(t):
        y = -0.1 + speed * min(t, 0.25 / speed)
        return np.array([0.2, y, 0.475]), np.array([0.8, y, 0.475]), radius

    return at, 0.25 / speed + 0.3


def thin_poke(speed=0.5, radius=0.01):
    """A capsule along +y, 1 cm in radius, whose tip is pressed 15 cm through
    the centroid of one triangle of a 5 cm quad (1.46 cm from its edges):
    no vertex or edge meets it, only the face."""
    # The quad of the 21 x 21 sheet with corners x 0.45..0.5, z 0.45..0.5 is
    # split along its diagonal from (0.45, 0.5) to (0.5, 0.45); the triangle
    # (0.45, 0.5), (0.45, 0.45), (0.5, 0.45) has its centroid at:
    cx, cz = 0.45 + 0.05 / 3.0, 0.45 + 0.05 / 3.0

    def at(t):
        y = -0.1 + speed * min(t, 0.25 / speed)
        return np.array([cx, y - 0.3, cz]), np.array([cx, y, cz]), radius

    return at, 0.25 / speed + 0.3
