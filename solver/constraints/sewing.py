"""Sewing: stitches between panels of one mesh (Blender's convention: loose
edges, in no polygon, from one panel's border to another's).

Each stitch is a zero-length distance constraint C = |xb - xa| with its own
compliance (ClothParams.sewing_compliance). While the seam is open a stitch
pulls with at most sewing_max_force newtons (XPBD's multiplier is force
times h^2, so a correction is capped at w F h^2 per substep), which lets
flat panels close around a body instead of snapping through it; once closed
the stitch holds the seam like any stiff constraint.

Build: SewingConstraints (validated pairs, inverse-mass copies). Solve:
solve_sewing.
"""

from collections import namedtuple

import numpy as np
from numba import njit

from .. import topology
from ..config import EPS, F0, as_u32
from ..jit import KERNEL as JIT
from ..params import SolverError

# ab: flat index pairs (2m,); w: their inverse masses (2m,); coef: alpha~,
# largest multiplier per substep (F h^2, 0 = unlimited); ab_rec: the pairs
# as offsets of integrate.to_aos4's records (4 x index), for solve_sewing4.
SewingRecord = namedtuple("SewingRecord", "ab w coef ab_rec")


def panels(n, face_indices, face_sizes):
    """(n,) int64 panel id per vertex (the connected pieces of the polygons),
    -1 for a vertex in no polygon."""
    fi = np.asarray(face_indices, dtype=np.int64)
    fs = np.asarray(face_sizes, dtype=np.int64)
    label = np.arange(n, dtype=np.int64)
    used = np.zeros(n, dtype=bool)
    used[fi] = True
    if len(fi):
        starts = np.repeat(np.cumsum(fs) - fs, fs)
        nxt = np.arange(len(fi)) + 1
        ends = np.cumsum(fs)
        nxt[ends - 1] = starts[ends - 1]
        a, b = fi, fi[nxt]
        # Label propagation to the smallest index: a few passes over the edges.
        while True:
            lo = np.minimum(label[a], label[b])
            before = label.copy()
            np.minimum.at(label, a, lo)
            np.minimum.at(label, b, lo)
            label = label[label]
            if np.array_equal(before, label):
                break
    label[~used] = -1
    return label


class SewingConstraints:
    """The stitches of one model (none until Model.set_sewing)."""

    def __init__(self, n, pairs=None, face_indices=None, face_sizes=None):
        self.n = n
        pairs = np.zeros((0, 2), np.int64) if pairs is None else np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        if len(pairs):
            if pairs.min() < 0 or pairs.max() >= n:
                raise SolverError(f"sewing edges index vertices out of range 0..{n - 1}")
            pairs = pairs[pairs[:, 0] != pairs[:, 1]]
            label = panels(n, face_indices, face_sizes)
            la, lb = label[pairs[:, 0]], label[pairs[:, 1]]
            lonely = (la < 0) | (lb < 0)
            if lonely.any():
                i = int(np.argmax(lonely))
                raise SolverError(f"sewing edge {pairs[i, 0]}-{pairs[i, 1]} ends at a vertex in no polygon "
                                  f"(stitches join the borders of two panels)")
            same = la == lb
            if same.any():
                i = int(np.argmax(same))
                raise SolverError(f"{int(same.sum())} sewing edge(s) join a panel to itself (the first: vertices "
                                  f"{pairs[i, 0]}-{pairs[i, 1]}); stitches join two different panels")
            order, _ = topology.colour_order(pairs, n)
            pairs = pairs[order]
        self.pairs = pairs
        self.ab = as_u32(pairs.reshape(-1))
        self.ab_rec = as_u32(pairs.reshape(-1) * 4)
        self.w = np.zeros(2 * len(pairs), dtype=np.float32)
        self.coef = np.zeros(2, dtype=np.float32)

    def __len__(self):
        return len(self.pairs)

    def set_inverse_masses(self, inv_mass):
        self.w[:] = inv_mass[self.ab] if len(self.ab) else 0.0

    def packed(self):
        return SewingRecord(self.ab, self.w, self.coef, self.ab_rec)

    def prepare(self, c, inv_h2):
        """(record, record): the same arrays for both loops."""
        self.coef[0] = c["a_sew"] * inv_h2
        self.coef[1] = c["sew_force"] / inv_h2
        r = self.packed()
        return r, r

    def gaps(self, positions):
        """(m,) distance across each stitch of (n, 3) positions."""
        p = np.asarray(positions, dtype=np.float64)
        return np.linalg.norm(p[self.pairs[:, 0]] - p[self.pairs[:, 1]], axis=1)


@njit(**JIT)
def solve_sewing(pos, ab, w, coef):
    """Zero-length XPBD stitches with each multiplier capped at coef[1]
    (max force times h^2; 0 = no cap)."""
    px, py, pz = pos[0], pos[1], pos[2]
    alpha = coef[0]
    cap = coef[1]
    m = np.uint64(ab.shape[0]) >> np.uint64(1)
    for i in range(m):
        ia = ab[2 * i]
        ib = ab[2 * i + 1]
        wa = w[2 * i]
        wb = w[2 * i + 1]
        wsum = wa + wb
        dx = px[ib] - px[ia]
        dy = py[ib] - py[ia]
        dz = pz[ib] - pz[ia]
        d2 = dx * dx + dy * dy + dz * dz
        if d2 < EPS * EPS or wsum == F0:
            continue
        dist = np.sqrt(d2)
        dl = dist / (wsum + alpha)
        if cap > F0 and dl > cap:
            dl = cap
        s = dl / dist
        px[ia] += wa * s * dx
        py[ia] += wa * s * dy
        pz[ia] += wa * s * dz
        px[ib] -= wb * s * dx
        py[ib] -= wb * s * dy
        pz[ib] -= wb * s * dz


@njit(**JIT)
def solve_sewing4(p4, ab_rec, w, coef):
    """solve_sewing on x, y, z, 0 records (integrate.to_aos4)."""
    alpha = coef[0]
    cap = coef[1]
    m = ab_rec.shape[0] // 2
    for i in range(m):
        ia = np.uint64(ab_rec[2 * i])
        ib = np.uint64(ab_rec[2 * i + 1])
        wa = w[2 * i]
        wb = w[2 * i + 1]
        wsum = wa + wb
        dx = p4[ib] - p4[ia]
        dy = p4[ib + 1] - p4[ia + 1]
        dz = p4[ib + 2] - p4[ia + 2]
        d2 = dx * dx + dy * dy + dz * dz
        if d2 < EPS * EPS or wsum == F0:
            continue
        dist = np.sqrt(d2)
        dl = dist / (wsum + alpha)
        if cap > F0 and dl > cap:
            dl = cap
        s = dl / dist
        p4[ia] += wa * s * dx
        p4[ia + 1] += wa * s * dy
        p4[ia + 2] += wa * s * dz
        p4[ib] -= wb * s * dx
        p4[ib + 1] -= wb * s * dy
        p4[ib + 2] -= wb * s * dz


def _params(points, closed):
    """Normalised arc-length parameter (0..1) of each point of a chain."""
    p = np.asarray(points, dtype=np.float64)
    seg = np.linalg.norm(np.diff(p, axis=0), axis=1)
    total = seg.sum() + (np.linalg.norm(p[0] - p[-1]) if closed else 0.0)
    t = np.concatenate([[0.0], np.cumsum(seg)])
    return t / total if total > 0 else np.linspace(0.0, 1.0, len(p))


def _nearest(t_from, t_to, closed):
    d = np.abs(t_from[:, None] - t_to[None, :])
    if closed:
        d = np.minimum(d, 1.0 - d)
    return np.argmin(d, axis=1)


def pair_loops(points_a, points_b, closed=False):
    """Stitches between two border chains given in order along themselves,
    (k, 3) and (l, 3) positions, any counts: (m, 2) int64 pairs (index in a,
    index in b). B is turned (and, closed, rotated) to run alongside A; each
    vertex of both chains gets at least one stitch, to the vertex of the
    other at the nearest fraction of its length (a zipper)."""
    a = np.asarray(points_a, dtype=np.float64)
    b = np.asarray(points_b, dtype=np.float64)
    if len(a) < 1 or len(b) < 1:
        raise SolverError("each edge loop to sew needs at least one vertex")
    best = None
    starts = range(len(b)) if closed else [0]
    for flip in (False, True):
        order = np.arange(len(b))[::-1] if flip else np.arange(len(b))
        for s in starts:
            o = np.roll(order, -s)
            ta, tb = _params(a, closed), _params(b[o], closed)
            ia = np.arange(len(a))
            ib = _nearest(ta, tb, closed)
            jb = np.arange(len(b))
            ja = _nearest(tb, ta, closed)
            pairs = np.unique(np.concatenate([np.stack([ia, o[ib]], 1), np.stack([ja, o[jb]], 1)]), axis=0)
            cost = np.linalg.norm(a[pairs[:, 0]] - b[pairs[:, 1]], axis=1).sum()
            if best is None or cost < best[0]:
                best = (cost, pairs)
    return best[1].astype(np.int64)
