"""Multilevel stretch: hierarchical position based dynamics (after Müller,
"Hierarchical Position Based Dynamics", VRIPHYS 2008).

One Gauss-Seidel pass over a cloth's edges carries a pull about one ring of
vertices per iteration, so a 100x100 sheet hung by a corner needs some
hundred iterations before its top edges stop carrying the whole weight
alone; at the add-on's few iterations per frame they stretch like rubber.
Here each level keeps a maximal independent subset of the level below
(pinned vertices first, so the coarse levels hang from the pins) and
unilateral distance constraints between the coarse vertices that share a
neighbour (or two adjacent ones) below, each with the rest length of the
shortest such path: never shorter than the chord, so a limit never fights
a curved rest shape or a fold. Every iteration solves the coarsest level
first; the correction each level's vertices received since the pass began
is carried down to the vertices of the level below by interpolation
(weights by inverse rest distance to their coarse neighbours), so the
cloth between two coarse vertices moves with them instead of being
stretched by them; the mesh's own constraints then take the fine detail.

Build: StretchHierarchy (the levels, their constraints in colour order per
level, the interpolation). Solve: solve_hierarchy4 on the x, y, z, 0
records of integrate.to_aos4.
"""

from collections import namedtuple

import numpy as np
from numba import njit

from ..config import as_f32, as_u32, EPS, F0, F1
from ..hardware import rsqrt
from ..jit import FLAT, PLAIN
from .. import topology

# What solve_hierarchy4 reads: the coarse constraints of every level,
# coarsest first (ab: record offsets, coef: [ca, cb, rest, -] per
# constraint, ends: where each level's constraints end), the coarse
# vertices' record offsets (snap_rec) whose start-of-pass records snap
# keeps, and per level the vertices it interpolates (fine_rec, their scale:
# 0 for a kinematic pin), each one's parents (par_ends, par_slot: offsets
# into snap and p4 as 4 x index, par_w), and where each level's fine
# vertices end (fine_ends); gate (n,): the vertices it leaves alone this
# substep (contact_gate).
HierarchyRecord = namedtuple("HierarchyRecord", "ab coef ends snap_rec snap fine_rec fine_scale par_ends par_rec "
                             "par_snap par_w fine_ends gate")

# contact_gate's flags: the vertex entered a collider this substep (a
# capsule's or a box's swept contact), or a collider pushed it in the
# substep before (any kind: capsules, planes, boxes, meshes, the edge and
# face contacts), or an edge joins it to such a vertex.
GATE_ENTERED = 1
GATE_TOUCHED = 2
GATE_NEAR = 4

# Stop coarsening below this many vertices, and after this many levels.
MIN_COARSE_VERTICES = 8
MAX_LEVELS = 8
# The finest coarse level (vertices about two edges apart) is kept for the
# interpolation, but its constraints are not solved: the mesh's own edges
# and the tethers carry a pull that far within the substep. On hung
# 100x100 sheets they changed the settled strain by a few percent of itself
# either way and took about a third of the pass's time (10,100 of its
# 13,448 constraints).
SOLVE_FINEST_LEVEL = False


def _csr(pairs, lengths, n):
    src = np.concatenate([pairs[:, 0], pairs[:, 1]])
    dst = np.concatenate([pairs[:, 1], pairs[:, 0]])
    ln = np.concatenate([lengths, lengths])
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return indptr, dst[order].astype(np.int64), ln[order].astype(np.float64)


@njit(**PLAIN)
def _independent_set(indptr, nbr, order):
    """A maximal independent set, greedily in `order`: True per vertex."""
    n = indptr.shape[0] - 1
    coarse = np.zeros(n, np.bool_)
    blocked = np.zeros(n, np.bool_)
    for v in order:
        if blocked[v]:
            continue
        coarse[v] = True
        blocked[v] = True
        for k in range(indptr[v], indptr[v + 1]):
            blocked[nbr[k]] = True
    return coarse


@njit(**PLAIN)
def _room(xa, xb, xl, m):
    """The three output arrays, doubled when the m-th entry would not fit."""
    if m < xa.shape[0]:
        return xa, xb, xl
    return (np.concatenate((xa, np.empty(m, np.int64))), np.concatenate((xb, np.empty(m, np.int64))),
            np.concatenate((xl, np.empty(m, np.float64))))


@njit(**PLAIN)
def _coarse_pairs(indptr, nbr, ln, coarse):
    """Pairs (a, b) of coarse vertices joined by a path of two or three
    edges through non-coarse vertices, with the shortest such path's
    length (a pair may repeat; the caller keeps the shortest)."""
    n = indptr.shape[0] - 1
    out_a = np.empty(64, np.int64)
    out_b = np.empty(64, np.int64)
    out_l = np.empty(64, np.float64)
    m = 0
    for a in range(n):
        if not coarse[a]:
            continue
        for k in range(indptr[a], indptr[a + 1]):
            f = nbr[k]
            if coarse[f]:
                continue
            l1 = ln[k]
            for k2 in range(indptr[f], indptr[f + 1]):
                g = nbr[k2]
                l2 = l1 + ln[k2]
                if g == a:
                    continue
                if coarse[g]:
                    if g > a:
                        out_a, out_b, out_l = _room(out_a, out_b, out_l, m)
                        out_a[m], out_b[m], out_l[m] = a, g, l2
                        m += 1
                    continue
                for k3 in range(indptr[g], indptr[g + 1]):
                    b = nbr[k3]
                    if b > a and coarse[b]:
                        out_a, out_b, out_l = _room(out_a, out_b, out_l, m)
                        out_a[m], out_b[m], out_l[m] = a, b, l2 + ln[k3]
                        m += 1
    return out_a[:m], out_b[:m], out_l[:m]


@njit(**PLAIN)
def _parents(indptr, nbr, ln, coarse, pinned):
    """Each non-coarse vertex's coarse neighbours and their rest distances;
    a vertex with fewer than two that are not pinned also takes the coarse
    vertices two edges away (a pin moves by nothing, and the cloth beside
    it must follow the cloth around it)."""
    n = indptr.shape[0] - 1
    fv = np.empty(4 * n + 16, np.int64)
    pv = np.empty(4 * n + 16, np.int64)
    pl = np.empty(4 * n + 16, np.float64)
    m = 0
    for v in range(n):
        if coarse[v]:
            continue
        free = 0
        for k in range(indptr[v], indptr[v + 1]):
            u = nbr[k]
            if coarse[u]:
                fv, pv, pl = _room(fv, pv, pl, m)
                fv[m], pv[m], pl[m] = v, u, ln[k]
                m += 1
                if not pinned[u]:
                    free += 1
        if free >= 2:
            continue
        for k in range(indptr[v], indptr[v + 1]):
            u = nbr[k]
            if coarse[u]:
                continue
            for k2 in range(indptr[u], indptr[u + 1]):
                b = nbr[k2]
                if not coarse[b] or pinned[b]:
                    continue
                seen = False
                for j in range(m - 1, -1, -1):
                    if fv[j] != v:
                        break
                    if pv[j] == b:
                        seen = True
                        break
                if seen:
                    continue
                fv, pv, pl = _room(fv, pv, pl, m)
                fv[m], pv[m], pl[m] = v, b, ln[k] + ln[k2]
                m += 1
    return fv[:m], pv[:m], pl[:m]


class StretchHierarchy:
    """The coarse levels of a cloth's stretch (see the module docstring).

    pairs, rest: the finest level's graph (the mesh's edges and quad
    diagonals) and its rest lengths; pinned: a bool mask of the vertices
    coarsened first. compliance, scale: the CONFIG fields of the coarse
    constraints' compliance and of the factor on their rest lengths."""

    def __init__(self, n, pairs, rest, pinned, compliance="a_tether", scale="tether_scale", switch="use_hierarchy"):
        self.n = int(n)
        self.compliance, self.scale, self.switch = compliance, scale, switch
        pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
        rest = np.asarray(rest, np.float64).ravel()
        levels_ab, levels_rest, fine, parents = [], [], [], []
        members = np.arange(self.n, dtype=np.int64)   # this level's vertices (global ids)
        pinned = np.asarray(pinned, bool).ravel()
        for _ in range(MAX_LEVELS):
            k = len(members)
            if k < 2 * MIN_COARSE_VERTICES or len(pairs) == 0:
                break
            local = np.full(self.n, -1, np.int64)
            local[members] = np.arange(k)
            lp = local[pairs]
            indptr, nbr, ln = _csr(lp, rest, k)
            order = np.concatenate([np.flatnonzero(pinned[members]), np.flatnonzero(~pinned[members])])
            coarse = _independent_set(indptr, nbr, order.astype(np.int64))
            if coarse.sum() < MIN_COARSE_VERTICES:
                break
            ca, cb, cl = _coarse_pairs(indptr, nbr, ln, coarse)
            cpairs, crest = topology.shortest_pairs(ca, cb, cl, k)
            if len(cpairs) == 0:
                break
            # The interpolation: each vertex of this level that is not coarse
            # follows its coarse neighbours, weighted by 1 / rest distance.
            fv, pv, pl = _parents(indptr, nbr, ln, coarse, pinned[members])
            w = 1.0 / np.maximum(pl, 1e-9)
            tot = np.bincount(fv, weights=w, minlength=k)
            fine.append(members[np.unique(fv)])
            parents.append((members[fv], members[pv], w / tot[fv]))
            gpairs = members[cpairs]
            levels_ab.append(gpairs)
            levels_rest.append(crest)
            members = members[coarse]
            # The next level's graph: this level's coarse constraints.
            pairs, rest = gpairs, crest
        self.levels = len(levels_ab)
        self.level_pairs = levels_ab   # finest first, solved or not
        if levels_ab and not SOLVE_FINEST_LEVEL:
            levels_ab = [np.zeros((0, 2), np.int64)] + levels_ab[1:]
            levels_rest = [np.zeros(0)] + levels_rest[1:]
        # Coarsest first.
        ab, rests, ends = [], [], [0]
        for lab, lrest in zip(levels_ab[::-1], levels_rest[::-1]):
            order, _ = topology.colour_order(lab, self.n)
            ab.append(lab[order])
            rests.append(lrest[order])
            ends.append(ends[-1] + len(lab))
        self.pairs = np.concatenate(ab) if ab else np.zeros((0, 2), np.int64)
        self.rest = np.concatenate(rests) if rests else np.zeros(0)
        self.ends = np.asarray(ends, np.int64)
        self.ab = as_u32(self.pairs.reshape(-1) * 4)
        self.coef = np.zeros((len(self.pairs), 4), np.float32)
        self.coef[:, 2] = self.rest
        coarse_all = np.unique(np.concatenate([self.pairs.reshape(-1)] + [p[1] for p in parents]))
        slot = np.full(self.n, -1, np.int64)
        slot[coarse_all] = np.arange(len(coarse_all))
        self.snap_rec = as_u32(coarse_all * 4)
        self.snap = np.zeros(4 * len(coarse_all), np.float32)
        f_rec, f_ends, p_ends, p_rec, p_snap, p_w = [], [0], [0], [], [], []
        self.fine = []
        for fv_global, (fv, pv, pw) in zip(fine[::-1], parents[::-1]):
            order = np.lexsort((pv, fv))
            fv, pv, pw = fv[order], pv[order], pw[order]
            verts, counts = np.unique(fv, return_counts=True)
            self.fine.append(verts)
            f_rec.append(verts * 4)
            f_ends.append(f_ends[-1] + len(verts))
            p_ends.extend((p_ends[-1] + np.cumsum(counts)).tolist())
            p_rec.append(pv * 4)
            p_snap.append(slot[pv] * 4)
            p_w.append(pw)
        cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)  # noqa: E731
        self.fine_rec = as_u32(cat(f_rec, np.int64))
        self.fine_vertices = cat(self.fine, np.int64)
        self.fine_scale = np.ones(len(self.fine_rec), np.float32)
        self.fine_ends = np.asarray(f_ends, np.int64)
        self.par_ends = np.asarray(p_ends, np.int64)
        self.par_rec = as_u32(cat(p_rec, np.int64))
        self.par_snap = as_u32(cat(p_snap, np.int64))
        self.par_vertices = cat(p_rec, np.int64) // 4
        self.par_weight = cat(p_w, np.float64)
        self.par_w = as_f32(self.par_weight)
        self.wa = np.zeros(len(self.pairs), np.float32)
        self.wb = np.zeros(len(self.pairs), np.float32)
        self.gate = np.zeros(self.n, np.int32)
        self._coef_alpha = None

    def __len__(self):
        return len(self.pairs)

    def set_inverse_masses(self, inv_mass):
        if len(self.pairs):
            self.wa[:] = inv_mass[self.pairs[:, 0]]
            self.wb[:] = inv_mass[self.pairs[:, 1]]
        self.fine_scale[:] = (inv_mass[self.fine_vertices] > 0).astype(np.float32)
        # A pinned parent moves by nothing, so a vertex beside a pin would
        # get only part of the correction of the cloth around it (the pull
        # that holds the whole cloth up): it follows its free parents only.
        if len(self.par_w):
            w = self.par_weight * (inv_mass[self.par_vertices] > 0)
            child = np.repeat(np.arange(len(self.fine_vertices)), np.diff(self.par_ends))
            tot = np.bincount(child, weights=w, minlength=len(self.fine_vertices))
            self.par_w[:] = np.where(tot[child] > 0, w / np.where(tot[child] > 0, tot[child], 1.0), 0.0)
        self._coef_alpha = None

    def refresh_coefficients(self, alpha_tilde):
        if self._coef_alpha == alpha_tilde:
            return
        wa, wb = self.wa.astype(np.float64), self.wb.astype(np.float64)
        den = wa + wb + alpha_tilde
        den[den == 0] = 1.0
        self.coef[:, 0] = wa / den
        self.coef[:, 1] = wb / den
        self._coef_alpha = alpha_tilde

    def packed(self):
        return HierarchyRecord(self.ab, self.coef.reshape(-1), self.ends, self.snap_rec, self.snap, self.fine_rec,
                               self.fine_scale, self.par_ends, self.par_rec, self.par_snap, self.par_w,
                               self.fine_ends, self.gate)

    def prepare(self, c, inv_h2):
        """(record, fast record) for the step's config record c and 1/h^2."""
        self.refresh_coefficients(float(c[self.compliance] * inv_h2))
        if self.scale is not None:
            self.coef[:, 2] = self.rest * c[self.scale]
        if len(self) == 0:
            c[self.switch] = 0.0
        record = self.packed()
        return record, record


@njit(**FLAT)
def contact_gate(gate, hit, bhit, clist, count, fresh, edge_start, edge_other):
    """The vertices the coarse pass leaves alone this substep (gate[i] !=
    0): those that entered a capsule (hit) or a box (bhit: empty without
    boxes) this substep, those a collider pushed in the substep before, and
    the vertices joined to either by an edge (GATE_NEAR: an edge with one
    end on a collider and the other carried across it by the interpolation
    cuts through a fast arm). fresh: the contact list clist[:count] is that
    substep's; otherwise (a step's first substep) the marks mark_touched
    left at the end of the step before stand. edge_start, edge_other: the
    mesh's edges (colliders.edges.SurfaceEdges)."""
    n = np.uint64(gate.shape[0])
    boxes = bhit.shape[0] == n
    for i in range(n):
        t = np.int32(0) if fresh else gate[i] & np.int32(GATE_TOUCHED)
        if hit[i] != 0 or (boxes and bhit[i] != 0):
            t |= np.int32(GATE_ENTERED)
        gate[i] = t
    if fresh:
        for q in range(np.uint64(count)):
            gate[clist[q]] |= np.int32(GATE_TOUCHED)
    # One ring of edges around them. (Two rings let a sheet dropped on a
    # sphere tear at the wider gate's rim, where the coarse corrections
    # stop.)
    on = np.int32(GATE_ENTERED | GATE_TOUCHED)
    for i in range(n):
        if gate[i] & on:
            for e in range(edge_start[i], edge_start[i + 1]):
                gate[edge_other[e]] |= np.int32(GATE_NEAR)


@njit(**FLAT)
def mark_touched(gate, clist, count):
    """At a step's end: the vertices of its last substep's contact list, for
    the next step's first substep (contact_gate)."""
    gate[:] = 0
    for q in range(np.uint64(count)):
        gate[clist[q]] = np.int32(GATE_TOUCHED)


@njit(**FLAT)
def solve_hierarchy4(p4, ab, coef, ends, snap_rec, snap, fine_rec, fine_scale, par_ends, par_rec, par_snap,
                     par_w, fine_ends, gate):
    """One pass over the coarse levels, coarsest first, on x, y, z, 0 records:
    each level's unilateral constraints, then the vertices of the level below
    move by the interpolated correction their coarse neighbours received
    since the pass began. A vertex in contact with a collider (gate[i] != 0,
    contact_gate) is neither moved by a coarse constraint nor interpolated:
    a correction of centimetres in one pass would carry it through the
    collider (a sheet dropped on a sphere tore and fell off it, one dropped
    on a box slid through its edge)."""
    for i in range(snap_rec.shape[0]):
        r = np.uint64(snap_rec[i])
        e = np.uint64(4 * i)
        snap[e] = p4[r]
        snap[e + 1] = p4[r + 1]
        snap[e + 2] = p4[r + 2]
        snap[e + 3] = p4[r + 3]
    levels = ends.shape[0] - 1
    for lv in range(levels):
        for i in range(ends[lv], ends[lv + 1]):
            ia = np.uint64(ab[2 * i])
            ib = np.uint64(ab[2 * i + 1])
            e = 4 * i
            dx = p4[ib] - p4[ia]
            dy = p4[ib + 1] - p4[ia + 1]
            dz = p4[ib + 2] - p4[ia + 2]
            dw = p4[ib + 3] - p4[ia + 3]
            d2 = (dx * dx + dy * dy) + (dz * dz + dw * dw)
            if d2 < EPS * EPS:
                continue
            # Unilateral without a branch: whether a coarse constraint is
            # stretched is a coin toss to the branch predictor.
            f = max(F1 - coef[e + 2] * rsqrt(d2), F0)
            dx, dy, dz, dw = dx * f, dy * f, dz * f, dw * f
            sa = coef[e] if gate[ia >> np.uint64(2)] == 0 else F0
            sb = coef[e + 1] if gate[ib >> np.uint64(2)] == 0 else F0
            p4[ia] += sa * dx
            p4[ia + 1] += sa * dy
            p4[ia + 2] += sa * dz
            p4[ia + 3] += sa * dw
            p4[ib] -= sb * dx
            p4[ib + 1] -= sb * dy
            p4[ib + 2] -= sb * dz
            p4[ib + 3] -= sb * dw
        for j in range(fine_ends[lv], fine_ends[lv + 1]):
            s = fine_scale[j]
            if s == F0 or gate[np.uint64(fine_rec[j]) >> np.uint64(2)] != 0:
                continue
            cx = F0
            cy = F0
            cz = F0
            for k in range(par_ends[j], par_ends[j + 1]):
                r = np.uint64(par_rec[k])
                q = np.uint64(par_snap[k])
                w = par_w[k]
                cx += w * (p4[r] - snap[q])
                cy += w * (p4[r + 1] - snap[q + 1])
                cz += w * (p4[r + 2] - snap[q + 2])
            r = np.uint64(fine_rec[j])
            p4[r] += cx
            p4[r + 1] += cy
            p4[r + 2] += cz
