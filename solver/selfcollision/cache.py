"""Cached contacts (SelfCollision.cache_contacts): each vertex-triangle
contact's distance, for keeping a vertex's nearest triangles of a facing
layer, and the strip fans the solve's filter reads five corners for."""

import numpy as np
from numba import njit

from ..jit import PLAIN

from .constants import HELPER, JIT, KIND_VERTEX_TRIANGLE
from .geometry import closest_on_triangle

@njit(**JIT)
def vt_distances(pos, contact_vertex, contact_kind):
    """Distance from the vertex to the triangle of every vertex-triangle
    contact at positions pos (3, n); inf for other kinds."""
    nc = contact_kind.shape[0]
    out = np.full(nc, np.inf, np.float64)
    for k in range(nc):
        if contact_kind[k] != KIND_VERTEX_TRIANGLE:
            continue
        v = contact_vertex[k, 0]
        a = contact_vertex[k, 1]
        b = contact_vertex[k, 2]
        c = contact_vertex[k, 3]
        u, vv, w = closest_on_triangle(pos[0, v], pos[1, v], pos[2, v], pos[0, a], pos[1, a], pos[2, a],
                                        pos[0, b], pos[1, b], pos[2, b], pos[0, c], pos[1, c], pos[2, c])
        dx = pos[0, v] - (u * pos[0, a] + vv * pos[0, b] + w * pos[0, c])
        dy = pos[1, v] - (u * pos[1, a] + vv * pos[1, b] + w * pos[1, c])
        dz = pos[2, v] - (u * pos[2, a] + vv * pos[2, b] + w * pos[2, c])
        out[k] = np.sqrt(dx * dx + dy * dy + dz * dz)
    return out


# No strip fans (the solve's `fans` argument when there are none).
NO_FANS = np.zeros((6, 0), dtype=np.int32)


@njit(**HELPER)
def _shared_corners(contact_vertex, k, m):
    """How many corners the triangles of vertex-triangle contacts k and m share."""
    s = 0
    for i in range(1, 4):
        for j in range(1, 4):
            s += 1 if contact_vertex[k, i] == contact_vertex[m, j] else 0
    return s


@njit(**HELPER)
def _other_corner(contact_vertex, k, a, b):
    """The corner of contact k's triangle that is neither a nor b."""
    for i in range(1, 4):
        c = contact_vertex[k, i]
        if c != a and c != b:
            return c
    return -1


@njit(**HELPER)
def _winding(contact_vertex, k, a, b):
    """+1 if (a, b, ...) runs the way contact k's triangle does, else -1."""
    for i in range(3):
        if contact_vertex[k, 1 + i] == a:
            return 1 if contact_vertex[k, 1 + (i + 1) % 3] == b else -1
    return 0


@njit(**PLAIN)
def strip_fans(contact_vertex, contact_kind, n):
    """Vertices whose vertex-triangle contacts are exactly three, against
    triangles that make a strip: (c0, c1, c2), (c1, c2, c3), (c2, c3, c4)
    (any three triangles joined edge to edge, as a vertex's three nearest
    triangles of a facing layer are). The filter then reads five corners
    for the vertex's three contacts instead of nine (_strip_flags).

    Returns (fans (6, F) int32: the vertex and c0..c4 of each fan; order
    (3F,) int64: the fans' contacts, first the (c0, c1, c2) one of every
    fan, then the (c1, c2, c3) ones, then the (c2, c3, c4) ones; sign (3F,)
    int32: +1 where that corner order runs the way the contact's triangle
    does, -1 where it runs against it). Fans are in vertex order."""
    nc = contact_kind.shape[0]
    start = np.zeros(n + 1, np.int64)
    for k in range(nc):
        if contact_kind[k] == KIND_VERTEX_TRIANGLE:
            start[contact_vertex[k, 0] + 1] += 1
    for v in range(n):
        start[v + 1] += start[v]
    fill = start[:n].copy()
    ks = np.empty(start[n], np.int64)
    for k in range(nc):
        if contact_kind[k] == KIND_VERTEX_TRIANGLE:
            v = contact_vertex[k, 0]
            ks[fill[v]] = k
            fill[v] += 1
    fans = np.empty((6, n), np.int32)
    cols = np.empty((3, n), np.int64)
    signs = np.empty((3, n), np.int32)
    nf = 0
    for v in range(n):
        if start[v + 1] - start[v] != 3:
            continue
        k0, k1, k2 = ks[start[v]], ks[start[v] + 1], ks[start[v] + 2]
        # The middle triangle shares an edge (two corners) with each other one.
        s01 = _shared_corners(contact_vertex, k0, k1)
        s02 = _shared_corners(contact_vertex, k0, k2)
        s12 = _shared_corners(contact_vertex, k1, k2)
        if s01 == 2 and s02 == 2 and s12 < 2:
            ka, km, kc = k1, k0, k2
        elif s01 == 2 and s12 == 2 and s02 < 2:
            ka, km, kc = k0, k1, k2
        elif s02 == 2 and s12 == 2 and s01 < 2:
            ka, km, kc = k0, k2, k1
        else:
            continue
        # c2: the middle triangle's corner on both shared edges; c1, c3:
        # the other ends of the edges shared with ka and kc; c0, c4: the
        # outer corners.
        c2 = -1
        for i in range(1, 4):
            c = contact_vertex[km, i]
            in_a = False
            in_c = False
            for j in range(1, 4):
                in_a = in_a or contact_vertex[ka, j] == c
                in_c = in_c or contact_vertex[kc, j] == c
            if in_a and in_c:
                c2 = c
        if c2 < 0:
            continue
        c1 = -1
        c3 = -1
        for i in range(1, 4):
            c = contact_vertex[km, i]
            if c == c2:
                continue
            for j in range(1, 4):
                if contact_vertex[ka, j] == c:
                    c1 = c
                if contact_vertex[kc, j] == c:
                    c3 = c
        if c1 < 0 or c3 < 0 or c1 == c3:
            continue
        c0 = _other_corner(contact_vertex, ka, c1, c2)
        c4 = _other_corner(contact_vertex, kc, c2, c3)
        if c0 < 0 or c4 < 0 or c0 == c4:
            continue
        fans[0, nf] = v
        fans[1, nf] = c0
        fans[2, nf] = c1
        fans[3, nf] = c2
        fans[4, nf] = c3
        fans[5, nf] = c4
        cols[0, nf] = ka
        cols[1, nf] = km
        cols[2, nf] = kc
        signs[0, nf] = _winding(contact_vertex, ka, c0, c1)
        signs[1, nf] = _winding(contact_vertex, km, c1, c2)
        signs[2, nf] = _winding(contact_vertex, kc, c2, c3)
        nf += 1
    order = np.empty(3 * nf, np.int64)
    sign = np.empty(3 * nf, np.int32)
    for s in range(3):
        for f in range(nf):
            order[s * nf + f] = cols[s, f]
            sign[s * nf + f] = signs[s, f]
    return fans[:, :nf].copy(), order, sign
