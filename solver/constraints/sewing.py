"""Sewing: stitches between panels of one mesh (Blender's convention: loose
edges, in no polygon, from one panel's border to another's).

A stitch holds a vertex at a point of the other panel's border: C = |p - xv|,
p = (1 - t) xa + t xb on the border edge (a, b) (t = 0 and a = b: a
vertex), with its own compliance (ClothParams.sewing_compliance).
Between borders that meet vertex for vertex each loose edge is one stitch of
a vertex to a vertex. Where the two borders have different vertex counts a
vertex has loose edges to several consecutive border vertices of the other
panel (a fan, as drape.sew_edge_loops writes them): zero-length stitches to
all of them cannot close at once (they pulled the border edges between them
shut while the seam stayed open), so the fan's vertex is stitched to the
middle of its partners' border path, and each partner to the point of the
fan vertex's border where it belongs by length (stitch_targets). Closed,
the two borders then lie along one seam line.

While the seam is open a stitch pulls with at most sewing_max_force newtons
(XPBD's multiplier is force times h^2, so a correction is capped at
w F h^2 per substep), which lets flat panels close around a body instead of
snapping through it. Once within its hold distance (a quarter of the
shorter border edge at its ends, at least HOLD_MIN) a stitch is closed, and
from then on holds the seam like any stiff constraint, whatever the load: a
seam that closed does not open again under a weight above the max force
(the other constraints can open a loaded seam past the hold distance within
one substep, so being closed is remembered, in the State, not read off the
gap).

Build: SewingConstraints (validated loose edges, the stitches they make,
inverse-mass copies). Solve: solve_sewing, solve_sewing4.
"""

from collections import namedtuple

import numpy as np
from numba import njit

from .. import topology
from ..config import EPS, F0, F1, as_f32, as_u32
from ..jit import KERNEL as JIT
from ..params import SolverError

# vab: flat index triples (3m,) (the vertex, then the border edge a, b its
# point lies on); w: their inverse masses (3m,); coef: alpha~, largest
# multiplier per substep (F h^2, 0 = unlimited); vab_rec: the triples as
# offsets of integrate.to_aos4's records (4 x index), for solve_sewing4;
# t: (m,) the point's place on a -> b; hold: (m,) how far open a stitch
# counts as closed, m; closed: (m,) uint8, 1 once a stitch has closed (the
# force cap no longer applies to it; the State's, see SewingConstraints.record).
SewingRecord = namedtuple("SewingRecord", "vab w coef vab_rec t hold closed")

# A closed stitch's hold distance: HOLD_FRACTION of the shorter border edge
# at its ends, and at least HOLD_MIN (m).
HOLD_MIN = 0.001
HOLD_FRACTION = 0.25


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
    """The stitches of one model (none until Model.set_sewing). pairs: the
    loose edges as given (validated, colour-ordered); len(): their number."""

    def __init__(self, n, pairs=None, face_indices=None, face_sizes=None, rest_positions=None):
        self.n = n
        pairs = np.zeros((0, 2), np.int64) if pairs is None else np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        if len(pairs):
            if pairs.min() < 0 or pairs.max() >= n:
                raise SolverError(f"sewing edges index vertices out of range 0..{n - 1}")
            if np.any(pairs[:, 0] == pairs[:, 1]):
                i = int(np.argmax(pairs[:, 0] == pairs[:, 1]))
                raise SolverError(f"sewing edge {pairs[i, 0]}-{pairs[i, 1]} joins a vertex to itself "
                                  f"(stitches join the borders of two panels)")
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
        if len(pairs):
            x = np.zeros((n, 3)) if rest_positions is None else rest_positions
            vab, t, hold = stitch_targets(pairs, x, face_indices, face_sizes)
        else:
            vab, t, hold = np.zeros((0, 3), np.int64), np.zeros(0), np.zeros(0)
        self.vab = vab
        self.t, self.hold = as_f32(t), as_f32(hold)
        self.flat = as_u32(vab.reshape(-1))
        self.flat_rec = as_u32(vab.reshape(-1) * 4)
        self.w = np.zeros(3 * len(vab), dtype=np.float32)
        self.coef = np.zeros(2, dtype=np.float32)
        self._open = np.zeros(len(vab), dtype=np.uint8)

    def __len__(self):
        return len(self.pairs)

    def set_inverse_masses(self, inv_mass):
        self.w[:] = inv_mass[self.flat] if len(self.flat) else 0.0

    def packed(self):
        return SewingRecord(self.flat, self.w, self.coef, self.flat_rec, self.t, self.hold, self._open)

    def record(self, record, state):
        """`record` (a SewingRecord, or its fields as a plain tuple) with the
        state's closed stitches (State.seams, made open for a new state or
        new stitches)."""
        if state.seams is None or state.seams.shape[0] != self.t.shape[0]:
            state.seams = np.zeros(self.t.shape[0], dtype=np.uint8)
        return tuple(record[:-1]) + (state.seams,)

    def prepare(self, c, inv_h2):
        """(record, record): the same arrays for both loops."""
        self.coef[0] = c["a_sew"] * inv_h2
        self.coef[1] = c["sew_force"] / inv_h2
        r = self.packed()
        return r, r

    def gaps(self, positions):
        """(stitches,) how far each stitch of (n, 3) positions is from
        closed: the distance from its vertex to its point on the other
        border."""
        p = np.asarray(positions, dtype=np.float64)
        t = self.t.astype(np.float64)[:, None]
        target = (1.0 - t) * p[self.vab[:, 1]] + t * p[self.vab[:, 2]]
        return np.linalg.norm(target - p[self.vab[:, 0]], axis=1)


def _border_neighbours(n, face_indices, face_sizes):
    """{vertex: [its neighbours along border edges]}, border edges being
    those of exactly one polygon."""
    fi = np.asarray(face_indices, dtype=np.int64)
    fs = np.asarray(face_sizes, dtype=np.int64)
    if len(fi) == 0:
        return {}
    starts = topology.polygon_starts(fs)
    poly = np.repeat(np.arange(len(fs)), fs)
    corner = np.arange(len(fi))
    nxt = corner + 1
    last = nxt == (starts + fs)[poly]
    nxt[last] = starts[poly[last]]
    a, b = fi[corner], fi[nxt]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    keys, counts = np.unique(lo * n + hi, return_counts=True)
    border = keys[counts == 1]
    out = {}
    for u, v in zip((border // n).tolist(), (border % n).tolist()):
        out.setdefault(u, []).append(v)
        out.setdefault(v, []).append(u)
    return out


def _chain(members, nbrs):
    """The members in order along border edges, and whether they close into
    a loop: (order, closed), or None when they are not one simple path or
    loop of border edges."""
    members = set(members)
    if len(members) == 1:
        return list(members), False
    inner = {v: [u for u in nbrs.get(v, ()) if u in members] for v in members}
    if any(len(us) > 2 for us in inner.values()):
        return None
    ends = [v for v, us in inner.items() if len(us) <= 1]
    closed = not ends
    if not closed and len(ends) != 2:
        return None
    order, prev = [min(members) if closed else min(ends)], None
    while True:
        step = [u for u in inner[order[-1]] if u != prev]
        if closed and len(order) > 1:
            step = [u for u in step if u != order[0]] if len(order) < len(members) else []
        if not step or len(order) == len(members):
            break
        prev = order[-1]
        order.append(step[0])
    if len(order) != len(members) or (closed and order[0] not in inner[order[-1]]):
        return None
    return order, closed


def _arc(x, order, closed):
    """Arc length of each vertex along a chain from its first, and the
    chain's whole length (a loop's includes its closing edge)."""
    p = x[order]
    arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(p, axis=0), axis=1))])
    total = arc[-1] + (np.linalg.norm(p[-1] - p[0]) if closed else 0.0)
    return arc, total


def _point_at(order, arc, total, closed, s):
    """The border edge (a, b) of a chain and the place t on it at arc length
    s (wrapped around a loop, clamped to an open chain's ends)."""
    if closed:
        s = s % total if total > 0 else 0.0
        ends = np.append(arc, total)
        path = list(order) + [order[0]]
    else:
        s = min(max(s, 0.0), arc[-1])
        ends, path = arc, list(order)
    if len(path) == 1:
        return path[0], path[0], 0.0
    j = int(np.clip(np.searchsorted(ends, s, side="right") - 1, 0, len(path) - 2))
    seg = ends[j + 1] - ends[j]
    t = 0.0 if seg <= 0.0 else float(np.clip((s - ends[j]) / seg, 0.0, 1.0))
    if t >= 1.0 - 1e-6:
        return path[j + 1], path[j + 1], 0.0
    if t <= 1e-6:
        return path[j], path[j], 0.0
    return path[j], path[j + 1], t


def stitch_targets(pairs, rest_positions, face_indices, face_sizes):
    """The stitches of loose edges `pairs` (m, 2) over a mesh whose rest
    positions are (n, 3): (vab (k, 3) int64: vertex, border edge a, b;
    t (k,); hold (k,)).

    The stitched vertices joined by loose edges and by the border edges
    between them make seams. A seam whose every vertex has one loose edge
    keeps them as they are: vertex-to-vertex stitches. In any other seam
    (one border has more vertices than the other: fans) each panel's
    stitched vertices must make one border path or loop; the two are
    registered by arc length (end to end; a loop turned and a border
    reversed as its loose edges fit best), and every vertex is stitched to
    the point of the other border at its fraction of the length. The map is
    one-to-one and keeps each border's proportions, so the seam can close
    completely. A seam of any other shape keeps its loose edges as
    vertex-to-vertex stitches."""
    pairs = np.asarray(pairs, dtype=np.int64)
    x = np.asarray(rest_positions, dtype=np.float64)
    n = len(x)
    label = panels(n, face_indices, face_sizes)
    nbrs = _border_neighbours(n, face_indices, face_sizes)
    partners = {}
    for a, b in pairs.tolist():
        partners.setdefault(a, []).append(b)
        partners.setdefault(b, []).append(a)
    # Seams: union-find over loose edges and border edges between stitched vertices.
    root = {v: v for v in partners}

    def find(v):
        while root[v] != v:
            root[v] = root[root[v]]
            v = root[v]
        return v

    for a, b in pairs.tolist():
        root[find(a)] = find(b)
    for v in partners:
        for u in nbrs.get(v, ()):
            if u in partners:
                root[find(u)] = find(v)
    seams, seam_pairs = {}, {}
    for v in partners:
        seams.setdefault(find(v), []).append(v)
    for a, b in pairs.tolist():
        seam_pairs.setdefault(find(a), []).append((a, b))
    vab, ts = [], []
    for key, members in seams.items():
        stitched = seam_pairs[key]
        one_to_one = all(len(partners[v]) == 1 for v in members)
        sides = sorted(set(int(label[v]) for v in members))
        chains = [_chain([v for v in members if label[v] == side], nbrs) for side in sides] if len(sides) == 2 else []
        if one_to_one or len(chains) != 2 or any(c is None for c in chains) or chains[0][1] != chains[1][1]:
            for a, b in stitched:
                vab.append((a, b, b))
                ts.append(0.0)
            continue
        (oa, closed), (ob, _) = chains
        arc_a, tot_a = _arc(x, oa, closed)
        arc_b, tot_b = _arc(x, ob, closed)
        if tot_a <= 0.0 or tot_b <= 0.0:
            for a, b in stitched:
                vab.append((a, b, b))
                ts.append(0.0)
            continue
        ua = dict(zip(oa, arc_a / tot_a))
        ub = dict(zip(ob, arc_b / tot_b))
        links = np.array([(ua[a], ub[b]) if a in ua else (ua[b], ub[a]) for a, b in stitched])
        # B's direction (and, for a loop, its turn) that best fits the loose edges.
        best = None
        for flip in (False, True):
            lb = 1.0 - links[:, 1] if flip else links[:, 1]
            if closed:
                d = np.angle(np.exp(2j * np.pi * (links[:, 0] - lb))) / (2 * np.pi)
                shift = float(np.angle(np.exp(2j * np.pi * d).mean()) / (2 * np.pi))
                err = float(np.abs(np.angle(np.exp(2j * np.pi * (d - shift)))).sum())
            else:
                shift, err = 0.0, float(np.abs(links[:, 0] - lb).sum())
            if best is None or err < best[0]:
                best = (err, flip, shift)
        _, flip, shift = best

        def to_b(q):   # B's own parameter of a registered one
            q = q - shift
            return (1.0 - q) % 1.0 if (flip and closed) else (1.0 - q if flip else (q % 1.0 if closed else q))

        # Registered by arc length alone: the zipper's vertex-to-vertex edges
        # sit at the nearest vertex, not at their proportional place, and
        # holding them would stretch one border against the other.
        exact = set()
        for i, v in enumerate(oa):
            a, b, t = _point_at(ob, arc_b, tot_b, closed, to_b(arc_a[i] / tot_a) * tot_b)
            vab.append((v, a, b))
            ts.append(t)
            if a == b:
                exact.add((b, v))
        for i, v in enumerate(ob):
            # Registered parameter of B's vertex, then back to A.
            own = arc_b[i] / tot_b
            q = (1.0 - own if flip else own) + (shift if closed else 0.0)
            if closed:
                q = q % 1.0
            a, b, t = _point_at(oa, arc_a, tot_a, closed, q * tot_a)
            if a == b and (v, a) in exact:
                continue   # the same vertex pair as the stitch from A's side
            vab.append((v, a, b))
            ts.append(t)
    vab = np.asarray(vab, dtype=np.int64).reshape(-1, 3)
    shortest = np.full(n, np.inf)
    for v, us in nbrs.items():
        shortest[v] = np.linalg.norm(x[us] - x[v], axis=1).min()
    edge = np.minimum(shortest[vab[:, 0]], np.minimum(shortest[vab[:, 1]], shortest[vab[:, 2]]))
    hold = np.where(np.isfinite(edge), np.maximum(HOLD_FRACTION * edge, HOLD_MIN), HOLD_MIN)
    return vab, np.asarray(ts), hold


# Sweeps over the stitches per call: a stitch to a point between two border
# vertices shares them with its neighbours' stitches, and one Gauss-Seidel
# sweep leaves a seam that carries weight open by about the load of a
# substep (1.3 mm at 6 substeps, 24 fps, on a tube hung from its seam);
# the stitches are a border's worth of constraints, so more sweeps cost
# little. A capped (open) stitch moves at most cap / SWEEPS a sweep.
SWEEPS = 4


@njit(inline="always", **JIT)
def _stitch_length(dist, hold, closed, i, wsum, alpha, cap):
    """The multiplier of stitch i, `dist` from its point: the XPBD
    correction of C = dist, capped at `cap` (0: none) until the stitch has
    closed (once within its hold distance: closed[i] = 1)."""
    dl = dist / (wsum + alpha)
    if closed[i] == 0:
        if dist <= hold:
            closed[i] = 1
        elif cap > F0 and dl > cap:
            dl = cap
    return dl


@njit(**JIT)
def solve_sewing(pos, vab, w, coef, t, hold, closed):
    """Zero-length XPBD stitches of each vertex v to the point
    (1 - t) xa + t xb, each multiplier capped at coef[1] (max force times
    h^2; 0 = no cap) until it has closed (_stitch_length)."""
    px, py, pz = pos[0], pos[1], pos[2]
    alpha = coef[0]
    cap = coef[1] / SWEEPS
    m = np.uint64(t.shape[0])
    for k in range(np.uint64(SWEEPS) * m):
        i = k % m
        iv, ia, ib = vab[3 * i], vab[3 * i + 1], vab[3 * i + 2]
        ta = F1 - t[i]
        tb = t[i]
        wv, wa, wb = w[3 * i], w[3 * i + 1] * ta, w[3 * i + 2] * tb
        wsum = wv + wa * ta + wb * tb
        dx = ta * px[ia] + tb * px[ib] - px[iv]
        dy = ta * py[ia] + tb * py[ib] - py[iv]
        dz = ta * pz[ia] + tb * pz[ib] - pz[iv]
        d2 = dx * dx + dy * dy + dz * dz
        if d2 < EPS * EPS or wsum == F0:
            continue
        dist = np.sqrt(d2)
        s = _stitch_length(dist, hold[i], closed, i, wsum, alpha, cap) / dist
        dx, dy, dz = s * dx, s * dy, s * dz
        px[iv] += wv * dx
        py[iv] += wv * dy
        pz[iv] += wv * dz
        px[ia] -= wa * dx
        py[ia] -= wa * dy
        pz[ia] -= wa * dz
        px[ib] -= wb * dx
        py[ib] -= wb * dy
        pz[ib] -= wb * dz


@njit(**JIT)
def solve_sewing4(p4, vab_rec, w, coef, t, hold, closed):
    """solve_sewing on x, y, z, 0 records (integrate.to_aos4)."""
    alpha = coef[0]
    cap = coef[1] / SWEEPS
    m = np.uint64(t.shape[0])
    for k in range(np.uint64(SWEEPS) * m):
        i = k % m
        iv = np.uint64(vab_rec[3 * i])
        ia = np.uint64(vab_rec[3 * i + 1])
        ib = np.uint64(vab_rec[3 * i + 2])
        ta = F1 - t[i]
        tb = t[i]
        wv, wa, wb = w[3 * i], w[3 * i + 1] * ta, w[3 * i + 2] * tb
        wsum = wv + wa * ta + wb * tb
        dx = ta * p4[ia] + tb * p4[ib] - p4[iv]
        dy = ta * p4[ia + 1] + tb * p4[ib + 1] - p4[iv + 1]
        dz = ta * p4[ia + 2] + tb * p4[ib + 2] - p4[iv + 2]
        d2 = dx * dx + dy * dy + dz * dz
        if d2 < EPS * EPS or wsum == F0:
            continue
        dist = np.sqrt(d2)
        s = _stitch_length(dist, hold[i], closed, i, wsum, alpha, cap) / dist
        dx, dy, dz = s * dx, s * dy, s * dz
        p4[iv] += wv * dx
        p4[iv + 1] += wv * dy
        p4[iv + 2] += wv * dz
        p4[ia] -= wa * dx
        p4[ia + 1] -= wa * dy
        p4[ia + 2] -= wa * dz
        p4[ib] -= wb * dx
        p4[ib + 1] -= wb * dy
        p4[ib + 2] -= wb * dz


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
