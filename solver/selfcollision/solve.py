"""The Jacobi solve of the frozen contacts, once per substep iteration.

Two passes: every contact computes the corrections of its own vertices from
the positions as they were when the pass started (pass 1: a branch-free
filter lists the contacts that can act, then one vectorised row pass per
kind), then every vertex sums its corrections in a fixed order (pass 2: the
serial scatter, or the parallel gather over each vertex's contact slots).
Neither pass writes what another iteration of the same pass reads, so the
result is bit-identical for any thread count.
"""

import numpy as np
from numba import njit, prange

from ..hardware import compact_flags, prefer_scalar_loads
from ..jit import NoAliasCompiler, PLAIN, renamed
from .constants import (CONTACT_DEPTH, EE_REACH, F32_ONE, F32_TINY, F32_ZERO, HELPER, JIT, KIND_EDGE_EDGE,
                        KIND_POINT_POINT, KIND_VERTEX_TRIANGLE, SLOT_OFF, SLOT_ON, SLOT_STALE, VT_REACH)
from .geometry import edges_cross, segment_dots


def _solve_impl(pos, prev_pos, inv_mass, contact_vertex, contact_kind, contact_normal, contact_frame,
                triangles, contact_target, contact_friction, slot_delta, slot_active, frows, fans, work,
                vertex_list, vertex_slot_start, vertex_slot):
    _pass1_parallel(pos, prev_pos, inv_mass, contact_vertex, contact_kind, contact_normal, contact_frame,
                    triangles, contact_target, contact_friction, slot_delta, slot_active, frows, fans, work, True)
    _gather(pos, slot_delta, slot_active, vertex_list, vertex_slot_start, vertex_slot)


# A listed contact's own tests decide; the filter skips only contacts its
# tests would skip too, with this much room for the two compilations'
# rounding (vectorised here, scalar there).
_FILTER_ROOM = np.float32(1.001)
_DEPTH2 = np.float32(CONTACT_DEPTH * CONTACT_DEPTH)
_ROOM2 = _FILTER_ROOM * _FILTER_ROOM
_REACH2 = np.float32(VT_REACH * VT_REACH)

# Only triangles whose corner angle at corner 1 has sin^2 above this take
# the filter's beside test: a sliver's normal (from either corner order)
# is rounding, and pass 1 decides for it.
_WELL_SHAPED = np.float32(1e-4)


@njit(inline="always", **JIT)
def _plane_flag(x0, y0, z0, x1, y1, z1, x2, y2, z2, x3, y3, z3, k, side, target, slot_active, sel):
    """_plane_flags' tests for contact k: vertex (x0, y0, z0), triangle
    corners 1..3 in the order side[k] is given for.

    Besides the plane tests, a vertex-triangle contact whose vertex lies
    beside its triangle (beyond one of its edges by more than pass 1's
    reach) is left here: pass 1 would switch it off, or to SLOT_STALE when
    it is deep behind the plane, and so does this test, where both
    answers are sure (the room again). On the cached layered bench this
    leaves 264 of the 690 contacts a substep that the plane tests list:
    a vertex lies over one or two of its strip's three triangles."""
    ux, uy, uz, wx, wy, wz, mx_, my_, mz_ = edges_cross(x1, y1, z1, x2, y2, z2, x3, y3, z3)
    dx, dy, dz = x0 - x1, y0 - y1, z0 - z1
    # side 0 (other kinds): hh = 0, never clear nor deep: listed.
    sk = np.float32(side[k])
    hh = sk * (dx * mx_ + dy * my_ + dz * mz_)
    tg = target[k]
    m2 = mx_ * mx_ + my_ * my_ + mz_ * mz_
    lim = _FILTER_ROOM * (tg * tg) * m2
    clear = (hh > F32_ZERO) & (hh * hh >= lim)
    behind = hh < F32_ZERO
    deep = behind & (hh * hh > _DEPTH2 * lim)
    maybe_deep = behind & (hh * hh * _ROOM2 > _DEPTH2 * lim)
    stale_deep = (slot_active[k] == SLOT_STALE) & deep
    # Beyond an edge: (p - a) . (e x m) > 0 for the edge from a along e (e x m
    # points out of the triangle in its plane), by more than the reach when
    # its square exceeds reach^2 |e|^2 |m|^2. With m = u x w and d = p - p1
    # the three are, by the triple product expansion, s1 = (d.u)(u.w) -
    # (d.w)(u.u) (edge u), s3 = (d.w)(u.w) - (d.u)(w.w) (edge -w) and
    # s2 = -s1 - s3 - |m|^2 (edge w - u): five dot products.
    du = dx * ux + dy * uy + dz * uz
    dw = dx * wx + dy * wy + dz * wz
    uu = ux * ux + uy * uy + uz * uz
    ww = wx * wx + wy * wy + wz * wz
    uw = ux * wx + uy * wy + uz * wz
    s1 = du * uw - dw * uu
    s3 = dw * uw - du * ww
    s2 = -s1 - s3 - m2
    limb = _REACH2 * lim
    beside = (sk != F32_ZERO) & (m2 > _WELL_SHAPED * uu * ww) & (
        ((s1 > F32_ZERO) & (s1 * s1 > limb * uu))
        | ((s2 > F32_ZERO) & (s2 * s2 > limb * (uu + ww - uw - uw)))
        | ((s3 > F32_ZERO) & (s3 * s3 > limb * ww)))
    off = clear | (beside & ~maybe_deep)
    stale = beside & deep
    slot_active[k] = SLOT_OFF if off else (SLOT_STALE if stale else slot_active[k])
    sel[k] = 0 if off | stale | stale_deep else 1


@njit(pipeline_class=NoAliasCompiler, **JIT)
def _strip_flags(x, y, z, fv, f0, f1, f2, f3, f4, side, target, slot_active, sel):
    """_plane_flags for the strip fans' contacts (the first 3 F, see
    strip_fans): a fan's vertex and five corners read once for its three
    contacts, f, F + f and 2 F + f, whose sides are given for the corner
    orders (c0, c1, c2), (c1, c2, c3), (c2, c3, c4). Half the gathers of
    three separate contacts (18 instead of 36): on the cached layered bench
    (1,242 fans of 1,250 vertices) 10.8 -> 7.8 us a substep."""
    prefer_scalar_loads()
    nf = np.uint64(fv.shape[0])
    for f in range(nf):
        v = np.uint64(fv[f])
        i0 = np.uint64(f0[f])
        i1 = np.uint64(f1[f])
        i2 = np.uint64(f2[f])
        i3 = np.uint64(f3[f])
        i4 = np.uint64(f4[f])
        xv, yv, zv = x[v], y[v], z[v]
        x0, y0, z0 = x[i0], y[i0], z[i0]
        x1, y1, z1 = x[i1], y[i1], z[i1]
        x2, y2, z2 = x[i2], y[i2], z[i2]
        x3, y3, z3 = x[i3], y[i3], z[i3]
        x4, y4, z4 = x[i4], y[i4], z[i4]
        _plane_flag(xv, yv, zv, x0, y0, z0, x1, y1, z1, x2, y2, z2, f, side, target, slot_active, sel)
        _plane_flag(xv, yv, zv, x1, y1, z1, x2, y2, z2, x3, y3, z3, nf + f, side, target, slot_active, sel)
        _plane_flag(xv, yv, zv, x2, y2, z2, x3, y3, z3, x4, y4, z4, nf + nf + f, side, target, slot_active,
                    sel)


@njit(pipeline_class=NoAliasCompiler, **JIT)
def _plane_flags(x, y, z, r0, r1, r2, r3, side, target, slot_active, sel, start):
    """sel[k] = 0 for a vertex-triangle contact that pass 1 would leave at
    once: its vertex clearly on its side of the triangle's plane (switched
    off here), or a stale contact still deep behind it (left as it is);
    else 1. r0..r3, side: the rows of filter_rows (contiguous: only x, y, z
    are gathered). The tests of pass 1, branch-free, on 1-D rows: LLVM
    vectorises it (AVX-512 gathers). On the cached layered bench 60% of the
    contacts end at the first test and a quarter are stale; pass 1 took
    that three-way split one contact at a time, this pass in ~4 ns per
    contact. Contacts from `start` on (the strip fans' come first)."""
    prefer_scalar_loads()
    nc = np.uint64(target.shape[0])
    for k in range(np.uint64(start), nc):
        i0 = np.uint64(r0[k])
        i1 = np.uint64(r1[k])
        i2 = np.uint64(r2[k])
        i3 = np.uint64(r3[k])
        _plane_flag(x[i0], y[i0], z[i0], x[i1], y[i1], z[i1], x[i2], y[i2], z[i2], x[i3], y[i3], z[i3], k,
                    side, target, slot_active, sel)


@njit(**JIT)
def filter_rows(contact_vertex, contact_kind, contact_normal):
    """(5, nc) int32 for _plane_flags, once per detect: the four vertex
    slots as rows, and the side (+-1) of each vertex-triangle contact (0
    for the other kinds, whose slots 2 and 3 repeat 0 and 1: valid
    indices, read but unused)."""
    nc = contact_kind.shape[0]
    out = np.empty((5, nc), np.int32)
    for k in range(nc):
        vt = contact_kind[k] == KIND_VERTEX_TRIANGLE
        out[0, k] = contact_vertex[k, 0]
        out[1, k] = contact_vertex[k, 1]
        out[2, k] = contact_vertex[k, 2] if vt else contact_vertex[k, 0]
        out[3, k] = contact_vertex[k, 3] if vt else contact_vertex[k, 1]
        out[4, k] = (1 if contact_normal[k, 0] > 0.0 else -1) if vt else 0
    return out


_VT_REACH = np.float32(VT_REACH)
_EE_REACH = np.float32(EE_REACH)
_SEG_EPS = np.float32(1e-20)
_SEG_DEN = np.float32(1e-12)
_DEPTH = np.float32(CONTACT_DEPTH)
_WSUM_MIN = np.float32(1e-20)
_TL_MIN = np.float32(1e-12)
_VT_UNCHANGED = np.uint8(3)

# Listed contacts per call of a row pass (_vt_rows, _ee_rows, _pp_rows): a
# parallel pass 1 hands each thread whole chunks.
_ROWS_CHUNK = 256


@njit(inline="always", **JIT)
def _pick(cond, u, v, w, nu, nv, nw):
    """(nu, nv, nw) where cond holds, else (u, v, w): selects, no branch."""
    return (nu if cond else u), (nv if cond else v), (nw if cond else w)


@njit(inline="always", **JIT)
def _closest_rows(px, py, pz, ax, ay, az, bx, by, bz, cx, cy, cz):
    """closest_on_triangle without branches (for vectorised loops): every
    region's answer is computed and the first region that holds, in
    Ericson's order, is selected. float32 throughout."""
    abx, aby, abz = bx - ax, by - ay, bz - az
    acx, acy, acz = cx - ax, cy - ay, cz - az
    apx, apy, apz = px - ax, py - ay, pz - az
    d1 = abx * apx + aby * apy + abz * apz
    d2 = acx * apx + acy * apy + acz * apz
    bpx, bpy, bpz = px - bx, py - by, pz - bz
    d3 = abx * bpx + aby * bpy + abz * bpz
    d4 = acx * bpx + acy * bpy + acz * bpz
    cpx, cpy, cpz = px - cx, py - cy, pz - cz
    d5 = abx * cpx + aby * cpy + abz * cpz
    d6 = acx * cpx + acy * cpy + acz * cpz
    vc = d1 * d4 - d3 * d2
    vb = d5 * d2 - d1 * d6
    va = d3 * d6 - d5 * d4
    # Inside (or a degenerate triangle: its first corner).
    den = va + vb + vc
    inner = den > F32_TINY
    rden = F32_ONE / (den if inner else F32_ONE)
    v = vb * rden if inner else F32_ZERO
    w = vc * rden if inner else F32_ZERO
    u = F32_ONE - v - w
    # Edge bc.
    e43 = d4 - d3
    e56 = d5 - d6
    sbc = e43 + e56
    tbc = e43 / (sbc if sbc > F32_ZERO else F32_ONE)
    u, v, w = _pick((va <= F32_ZERO) & (e43 >= F32_ZERO) & (e56 >= F32_ZERO), u, v, w,
                    F32_ZERO, F32_ONE - tbc, tbc)
    # Edge ac.
    sac = d2 - d6
    tac = d2 / (sac if sac > F32_ZERO else F32_ONE)
    u, v, w = _pick((vb <= F32_ZERO) & (d2 >= F32_ZERO) & (d6 <= F32_ZERO), u, v, w,
                    F32_ONE - tac, F32_ZERO, tac)
    # Corner c.
    u, v, w = _pick((d6 >= F32_ZERO) & (d5 <= d6), u, v, w, F32_ZERO, F32_ZERO, F32_ONE)
    # Edge ab.
    sab = d1 - d3
    tab = d1 / (sab if sab > F32_ZERO else F32_ONE)
    u, v, w = _pick((vc <= F32_ZERO) & (d1 >= F32_ZERO) & (d3 <= F32_ZERO), u, v, w,
                    F32_ONE - tab, tab, F32_ZERO)
    # Corner b.
    u, v, w = _pick((d3 >= F32_ZERO) & (d4 <= d3), u, v, w, F32_ZERO, F32_ONE, F32_ZERO)
    # Corner a.
    u, v, w = _pick((d1 <= F32_ZERO) & (d2 <= F32_ZERO), u, v, w, F32_ONE, F32_ZERO, F32_ZERO)
    return u, v, w


@njit(inline="always", **JIT)
def _lane_vertices(cv, k, x, y, z):
    """A contact lane's four vertex indices (unsigned) and their positions,
    (x0, y0, z0, ..., z3); cv: contact_vertex flattened."""
    i0 = np.uint64(cv[4 * k])
    i1 = np.uint64(cv[4 * k + 1])
    i2 = np.uint64(cv[4 * k + 2])
    i3 = np.uint64(cv[4 * k + 3])
    return (i0, i1, i2, i3), (x[i0], y[i0], z[i0], x[i1], y[i1], z[i1], x[i2], y[i2], z[i2], x[i3], y[i3], z[i3])


@njit(inline="always", **JIT)
def _push_rows(p, xp, yp, zp, i, inv_mass, c, n, tg, mu):
    """The correction of one contact lane (_vt_rows, _ee_rows, _pp_rows):
    p = (x0, y0, z0, ..., z3) its four vertices (indices i), contact points
    sum c_j p_j, normal n, target gap tg, friction mu. Returns (whether the
    contact pushes: violated, with a movable vertex; then the corrections
    of its four vertices, x, y, z each): pass 1's arithmetic for every
    kind, branch-free. Tuples in and out: numba inlines no call with ~30
    separate arguments, and with the stores to dl inside the helper LLVM
    left the calling loops scalar."""
    x0, y0, z0, x1, y1, z1, x2, y2, z2, x3, y3, z3 = p
    i0, i1, i2, i3 = i
    c0, c1, c2, c3 = c
    nx, ny, nz = n
    gap = c0 * (x0 * nx + y0 * ny + z0 * nz) + c1 * (x1 * nx + y1 * ny + z1 * nz) \
        + c2 * (x2 * nx + y2 * ny + z2 * nz) + c3 * (x3 * nx + y3 * ny + z3 * nz)
    C = gap - tg
    w0 = inv_mass[i0]
    w1 = inv_mass[i1]
    w2 = inv_mass[i2]
    w3 = inv_mass[i3]
    wsum = w0 * c0 * c0 + w1 * c1 * c1 + w2 * c2 * c2 + w3 * c3 * c3
    rw = F32_ONE / (wsum if wsum > _WSUM_MIN else F32_ONE)
    lam = -C * rw
    # Friction: the contact points' relative tangential motion over this substep.
    ddx = c0 * (x0 - xp[i0]) + c1 * (x1 - xp[i1]) + c2 * (x2 - xp[i2]) + c3 * (x3 - xp[i3])
    ddy = c0 * (y0 - yp[i0]) + c1 * (y1 - yp[i1]) + c2 * (y2 - yp[i2]) + c3 * (y3 - yp[i3])
    ddz = c0 * (z0 - zp[i0]) + c1 * (z1 - zp[i1]) + c2 * (z2 - zp[i2]) + c3 * (z3 - zp[i3])
    dn = ddx * nx + ddy * ny + ddz * nz
    fx = ddx - dn * nx
    fy = ddy - dn * ny
    fz = ddz - dn * nz
    tl = np.sqrt(fx * fx + fy * fy + fz * fz)
    limit = mu * (-C)
    slide = (mu > F32_ZERO) & (tl > _TL_MIN)
    scale = F32_ONE if tl <= limit else limit / (tl if tl > _TL_MIN else F32_ONE)
    scale = scale * rw if slide else F32_ZERO
    gx = lam * nx - fx * scale
    gy = lam * ny - fy * scale
    gz = lam * nz - fz * scale
    # No vertex moves farther than the gap the contact closes: a contact
    # point near a pinned end (an edge hanging from a waist) otherwise moves
    # the free end |C| / s, on a lever (0.12 m in one substep on the demo's
    # skirts). The contact resolves over a few substeps.
    a0, a1, a2, a3 = abs(w0 * c0), abs(w1 * c1), abs(w2 * c2), abs(w3 * c3)
    lever = max(max(a0, a1), max(a2, a3))
    r = wsum / lever if lever > wsum else F32_ONE
    gx *= r
    gy *= r
    gz *= r
    return ((C < F32_ZERO) & (wsum > _WSUM_MIN),
            w0 * c0 * gx, w0 * c0 * gy, w0 * c0 * gz, w1 * c1 * gx, w1 * c1 * gy, w1 * c1 * gz,
            w2 * c2 * gx, w2 * c2 * gy, w2 * c2 * gz, w3 * c3 * gx, w3 * c3 * gy, w3 * c3 * gz)


@njit(inline="always", **JIT)
def _closest_segments_rows(ax, ay, az, bx, by, bz, cx, cy, cz, dx, dy, dz):
    """closest_segments without branches (for vectorised loops), float32."""
    a, b, c, e, f = segment_dots(ax, ay, az, bx, by, bz, cx, cy, cz, dx, dy, dz)
    pa = a > _SEG_EPS
    pe = e > _SEG_EPS
    ra = F32_ONE / (a if pa else F32_ONE)
    re = F32_ONE / (e if pe else F32_ONE)
    den = a * e - b * b
    skew = den > _SEG_DEN * a * e
    s = min(max((b * f - c * e) / (den if skew else F32_ONE), F32_ZERO), F32_ONE) if skew else F32_ZERO
    t = (b * s + f) * re
    s_lo = min(max(-c * ra, F32_ZERO), F32_ONE)
    s_hi = min(max((b - c) * ra, F32_ZERO), F32_ONE)
    s = s_lo if t < F32_ZERO else (s_hi if t > F32_ONE else s)
    t = min(max(t, F32_ZERO), F32_ONE)
    # A point for a segment: clamp the other's parameter alone.
    s = s if pe else s_lo
    t = t if pe else F32_ZERO
    t = t if pa else min(max(f * re, F32_ZERO), F32_ONE)
    s = s if pa else F32_ZERO
    return s, t


@njit(pipeline_class=NoAliasCompiler, **JIT)
def _ee_rows(ee, start, end, x, y, z, xp, yp, zp, cv, nrm, frame, tri, target, friction, inv_mass, slot_active,
             st, dl):
    """_vt_rows for the listed edge-edge contacts ee[start:end]: the stored
    normal turned with its frame triangle, the closest points of the two
    edges, the stale and reach tests, the correction. tri: the triangles
    flattened (3 corners per triangle)."""
    prefer_scalar_loads()
    for q in range(np.uint64(start), np.uint64(end)):
        k = np.uint64(ee[q])
        i, p = _lane_vertices(cv, k, x, y, z)
        x0, y0, z0, x1, y1, z1, x2, y2, z2, x3, y3, z3 = p
        tg = target[k]
        # The frame of the owner triangle (tri_frame), the normal in it.
        f = np.uint64(frame[k])
        fa = np.uint64(tri[3 * f])
        fb = np.uint64(tri[3 * f + 1])
        fc = np.uint64(tri[3 * f + 2])
        ux, uy, uz, wx, wy, wz, mx_, my_, mz_ = edges_cross(x[fa], y[fa], z[fa], x[fb], y[fb], z[fb],
                                                             x[fc], y[fc], z[fc])
        ln = np.sqrt(mx_ * mx_ + my_ * my_ + mz_ * mz_)
        lu = np.sqrt(ux * ux + uy * uy + uz * uz)
        flat = (ln < F32_TINY) | (lu < F32_TINY)
        rn = F32_ONE / (F32_ONE if flat else ln)
        ru = F32_ONE / (F32_ONE if flat else lu)
        tnx = F32_ZERO if flat else mx_ * rn
        tny = F32_ZERO if flat else my_ * rn
        tnz = F32_ONE if flat else mz_ * rn
        ux = F32_ONE if flat else ux * ru
        uy = F32_ZERO if flat else uy * ru
        uz = F32_ZERO if flat else uz * ru
        vx = tny * uz - tnz * uy
        vy = tnz * ux - tnx * uz
        vz = tnx * uy - tny * ux
        a_ = nrm[3 * k]
        b_ = nrm[3 * k + 1]
        n_ = nrm[3 * k + 2]
        nx = a_ * ux + b_ * vx + n_ * tnx
        ny = a_ * uy + b_ * vy + n_ * tny
        nz = a_ * uz + b_ * vz + n_ * tnz
        s, t = _closest_segments_rows(x0, y0, z0, x1, y1, z1, x2, y2, z2, x3, y3, z3)
        c0 = F32_ONE - s
        c2 = t - F32_ONE
        ex = c0 * x0 + s * x1 + c2 * x2 - t * x3
        ey = c0 * y0 + s * y1 + c2 * y2 - t * y3
        ez = c0 * z0 + s * z1 + c2 * z2 - t * z3
        eh = ex * nx + ey * ny + ez * nz
        # Like a vertex beside its triangle: closest points apart by more
        # than the reach across the frozen normal make a stale contact (the
        # edges slid apart sideways since detection), however negative the
        # gap along that normal looks.
        deep = eh < -_DEPTH * tg
        keep_stale = (slot_active[k] == SLOT_STALE) & deep
        tol = _EE_REACH * tg
        beside = ex * ex + ey * ey + ez * ez - eh * eh > tol * tol
        ok, d0, d1, d2, d3, d4, d5, d6, d7, d8, d9, d10, d11 = _push_rows(
            p, xp, yp, zp, i, inv_mass, (c0, s, c2, -t), (nx, ny, nz), tg, friction[k])
        dl[0, q], dl[1, q], dl[2, q], dl[3, q], dl[4, q], dl[5, q] = d0, d1, d2, d3, d4, d5
        dl[6, q], dl[7, q], dl[8, q], dl[9, q], dl[10, q], dl[11, q] = d6, d7, d8, d9, d10, d11
        on = ~keep_stale & ~beside & ok
        state = SLOT_ON if on else (SLOT_STALE if beside & deep else SLOT_OFF)
        st[q] = _VT_UNCHANGED if keep_stale else np.uint8(state)


@njit(pipeline_class=NoAliasCompiler, **JIT)
def _vt_rows(vt, start, end, x, y, z, xp, yp, zp, cv, nrm, target, friction, inv_mass, slot_active, st, dl):
    """Pass 1 for the listed vertex-triangle contacts vt[start:end], one
    lane each, branch-free (LLVM vectorises it; one contact at a time, the
    branches of the closest-point regions and of the early outs
    mispredicted: ~50 ns a contact on the cached layered bench). Writes the
    lane's new slot state st[q] (SLOT_OFF, SLOT_ON, SLOT_STALE, or
    _VT_UNCHANGED for a stale contact still deep behind its plane) and its
    vertices' corrections dl[3 j + axis, q]. x, y, z and xp, yp, zp: the
    rows of pos and prev_pos; cv, nrm: contact_vertex and contact_normal
    flattened."""
    prefer_scalar_loads()
    for q in range(np.uint64(start), np.uint64(end)):
        k = np.uint64(vt[q])
        i, p = _lane_vertices(cv, k, x, y, z)
        x0, y0, z0, x1, y1, z1, x2, y2, z2, x3, y3, z3 = p
        s = nrm[3 * k]
        tg = target[k]
        # The height over the triangle's plane (times |m|): clear of it, or deep behind it.
        e1x, e1y, e1z, e2x, e2y, e2z, mx_, my_, mz_ = edges_cross(x1, y1, z1, x2, y2, z2, x3, y3, z3)
        hh = s * ((x0 - x1) * mx_ + (y0 - y1) * my_ + (z0 - z1) * mz_)
        m2 = mx_ * mx_ + my_ * my_ + mz_ * mz_
        clear = (hh > F32_ZERO) & (hh * hh >= tg * tg * m2)
        deep = (hh < F32_ZERO) & (hh * hh > (_DEPTH * tg) * (_DEPTH * tg) * m2)
        keep_stale = (slot_active[k] == SLOT_STALE) & deep
        # Only while the vertex is over the triangle (within the reach beside
        # it): beside it (in the plane, as in cloth squeezed flat) the
        # triangle's normal is the wrong way to push; the neighbouring
        # triangle's contact or the edge-edge contacts hold it there.
        u, v, w = _closest_rows(x0, y0, z0, x1, y1, z1, x2, y2, z2, x3, y3, z3)
        dx = x0 - (u * x1 + v * x2 + w * x3)
        dy = y0 - (u * y1 + v * y2 + w * y3)
        dz = z0 - (u * z1 + v * z2 + w * z3)
        ln = np.sqrt(m2)
        lu2 = e1x * e1x + e1y * e1y + e1z * e1z
        flat = (ln < F32_TINY) | (lu2 < F32_TINY * F32_TINY)
        rl = F32_ONE / (F32_ONE if flat else ln)
        tnx = F32_ZERO if flat else mx_ * rl
        tny = F32_ZERO if flat else my_ * rl
        tnz = F32_ONE if flat else mz_ * rl
        h = dx * tnx + dy * tny + dz * tnz
        tx = dx - h * tnx
        ty = dy - h * tny
        tz = dz - h * tnz
        tol = _VT_REACH * tg
        beside = tx * tx + ty * ty + tz * tz > tol * tol
        ok, d0, d1, d2, d3, d4, d5, d6, d7, d8, d9, d10, d11 = _push_rows(
            p, xp, yp, zp, i, inv_mass, (F32_ONE, -u, -v, -w), (s * tnx, s * tny, s * tnz), tg, friction[k])
        dl[0, q], dl[1, q], dl[2, q], dl[3, q], dl[4, q], dl[5, q] = d0, d1, d2, d3, d4, d5
        dl[6, q], dl[7, q], dl[8, q], dl[9, q], dl[10, q], dl[11, q] = d6, d7, d8, d9, d10, d11
        on = ~clear & ~keep_stale & ~beside & ok
        state = SLOT_ON if on else (SLOT_STALE if beside & deep else SLOT_OFF)
        st[q] = _VT_UNCHANGED if keep_stale else np.uint8(state)


@njit(pipeline_class=NoAliasCompiler, **JIT)
def _pp_rows(pp, start, end, x, y, z, xp, yp, zp, cv, nrm, target, friction, inv_mass, st, dl):
    """_vt_rows for the listed point-point contacts pp[start:end]: the
    stored normal, no reach test (the rows' last two vertices are the
    first two again, with weight 0)."""
    prefer_scalar_loads()
    for q in range(np.uint64(start), np.uint64(end)):
        k = np.uint64(pp[q])
        i0 = np.uint64(cv[4 * k])
        i1 = np.uint64(cv[4 * k + 1])
        x0, y0, z0 = x[i0], y[i0], z[i0]
        x1, y1, z1 = x[i1], y[i1], z[i1]
        ok, d0, d1, d2, d3, d4, d5, d6, d7, d8, d9, d10, d11 = _push_rows(
            (x0, y0, z0, x1, y1, z1, x0, y0, z0, x1, y1, z1), xp, yp, zp, (i0, i1, i0, i1), inv_mass,
            (F32_ONE, -F32_ONE, F32_ZERO, F32_ZERO), (nrm[3 * k], nrm[3 * k + 1], nrm[3 * k + 2]),
            target[k], friction[k])
        dl[0, q], dl[1, q], dl[2, q], dl[3, q], dl[4, q], dl[5, q] = d0, d1, d2, d3, d4, d5
        dl[6, q], dl[7, q], dl[8, q], dl[9, q], dl[10, q], dl[11, q] = d6, d7, d8, d9, d10, d11
        st[q] = SLOT_ON if ok else SLOT_OFF


@njit(**PLAIN)
def solve_work(nc):
    """The solve's scratch for nc contacts (SelfCollision makes it with
    every new set of contacts; pass 1 allocates nothing): sel (the filter's
    flags, zero-padded to whole words), todo (the listed contacts), rows
    (them by kind), place (where each listed contact is in rows), st and dl
    (the rows' new slot states and corrections, (12, nc)). todo is as long
    as sel (compact_flags writes past the listed contacts)."""
    room = (nc + 7) // 8 * 8
    return (np.zeros(room, np.uint8), np.empty(room, np.uint32), np.empty(nc, np.uint32),
            np.empty(nc, np.uint32), np.empty(nc, np.uint8), np.empty((12, nc), np.float32))


def _pass1_impl(pos, prev_pos, inv_mass, contact_vertex, contact_kind, contact_normal, contact_frame,
                triangles, contact_target, contact_friction, slot_delta, slot_active, frows, fans, work,
                keep_slots):
    # Pass 1: every contact computes its own vertices' corrections from `pos`
    # as it is now (nobody writes pos during this pass). slot_active[k] also
    # carries the contact's state from the last substep (SLOT_STALE).
    # Only the listed contacts (_plane_flags) can change their slot or
    # correction; pass 2 reads the active ones among them.
    # Returns (todo, count, vt_only): the listed contacts, and whether all
    # of them are vertex-triangle (then row q of st and dl is item q's and
    # place is not written). work: solve_work(nc).
    # keep_slots: also write the listed contacts' new slot states and copy
    # the active ones' corrections into slot_delta (the parallel gather
    # reads them there; the serial scatter writes the states itself and
    # reads the rows, dl, through place).
    sel, todo, rows, place, st, dl = work
    nf = fans.shape[1]
    if nf > 0:
        _strip_flags(pos[0], pos[1], pos[2], fans[0], fans[1], fans[2], fans[3], fans[4], fans[5], frows[4],
                     contact_target, slot_active, sel)
    _plane_flags(pos[0], pos[1], pos[2], frows[0], frows[1], frows[2], frows[3], frows[4], contact_target,
                 slot_active, sel, 3 * nf)
    nt = compact_flags(sel, todo)
    # The listed contacts by kind, each kind through its vectorised pass:
    # rows[:nv] vertex-triangle (_vt_rows), rows[nv:nv + ne] edge-edge
    # (_ee_rows), the rest point-point (_pp_rows).
    nv = 0
    ne = 0
    for q in range(nt):
        kind = contact_kind[todo[q]]
        nv += 1 if kind == KIND_VERTEX_TRIANGLE else 0
        ne += 1 if kind == KIND_EDGE_EDGE else 0
    npp = nt - nv - ne
    vt_only = nv == nt
    if vt_only:
        # Vertex-triangle only (cached layers): the list is the rows already
        # (place is not written: the scatter reads row q for item q).
        rows = todo
    else:
        at_v = 0
        at_e = nv
        at_p = nv + ne
        for q in range(nt):
            k = todo[q]
            kind = contact_kind[k]
            is_vt = kind == KIND_VERTEX_TRIANGLE
            is_ee = kind == KIND_EDGE_EDGE
            r = at_v if is_vt else (at_e if is_ee else at_p)
            rows[r] = k
            place[q] = r
            at_v += 1 if is_vt else 0
            at_e += 1 if is_ee else 0
            at_p += 0 if is_vt or is_ee else 1
    cvf = contact_vertex.reshape(contact_vertex.size)
    nrf = contact_normal.reshape(contact_normal.size)
    for c in prange((nv + _ROWS_CHUNK - 1) // _ROWS_CHUNK):
        _vt_rows(rows, c * _ROWS_CHUNK, min(nv, (c + 1) * _ROWS_CHUNK), pos[0], pos[1], pos[2],
                 prev_pos[0], prev_pos[1], prev_pos[2], cvf, nrf, contact_target, contact_friction,
                 inv_mass, slot_active, st, dl)
    for c in prange((ne + _ROWS_CHUNK - 1) // _ROWS_CHUNK):
        _ee_rows(rows, nv + c * _ROWS_CHUNK, nv + min(ne, (c + 1) * _ROWS_CHUNK), pos[0], pos[1], pos[2],
                 prev_pos[0], prev_pos[1], prev_pos[2], cvf, nrf, contact_frame, triangles.reshape(triangles.size),
                 contact_target, contact_friction, inv_mass, slot_active, st, dl)
    for c in prange((npp + _ROWS_CHUNK - 1) // _ROWS_CHUNK):
        _pp_rows(rows, nv + ne + c * _ROWS_CHUNK, nv + ne + min(npp, (c + 1) * _ROWS_CHUNK), pos[0], pos[1], pos[2],
                 prev_pos[0], prev_pos[1], prev_pos[2], cvf, nrf, contact_target, contact_friction, inv_mass,
                 st, dl)
    if keep_slots:
        # The parallel solve: the listed contacts' new slot states, and the
        # active ones' corrections where _gather reads them (the serial
        # _scatter writes the states as it goes and reads dl itself).
        for q in prange(nt):
            k = rows[q]
            state = st[q]
            if state != _VT_UNCHANGED:
                slot_active[k] = state
            if state == SLOT_ON:
                for j in range(4):
                    slot_delta[k, j, 0] = dl[3 * j, q]
                    slot_delta[k, j, 1] = dl[3 * j + 1, q]
                    slot_delta[k, j, 2] = dl[3 * j + 2, q]
    return todo, nt, vt_only


_pass1_serial = njit(**HELPER)(_pass1_impl)


_pass1_parallel = njit(parallel=True, **JIT)(renamed(_pass1_impl, "_pass1_parallel_impl"))


def _gather_impl(pos, slot_delta, slot_active, vertex_list, vertex_slot_start, vertex_slot):
    # Pass 2: every vertex averages its active contacts' corrections, in the
    # fixed order of its slot list.
    for q in prange(vertex_list.shape[0]):
        i = vertex_list[q]
        sx = F32_ZERO
        sy = F32_ZERO
        sz = F32_ZERO
        nact = F32_ZERO
        for j in range(vertex_slot_start[q], vertex_slot_start[q + 1]):
            code = vertex_slot[j]
            k = code >> 2
            if slot_active[k] != SLOT_ON:
                continue
            sl = code & 3
            sx += slot_delta[k, sl, 0]
            sy += slot_delta[k, sl, 1]
            sz += slot_delta[k, sl, 2]
            nact += F32_ONE
        if nact > F32_ZERO:
            inv = F32_ONE / nact
            pos[0, i] += sx * inv
            pos[1, i] += sy * inv
            pos[2, i] += sz * inv


@njit(**HELPER)
def _scatter(pos, dl, st, place, cvf, contact_kind, acc, touched, todo, nt, slot_active, vt_only):
    """Pass 2, serial: the same sums as _gather (each vertex adds its active
    contacts' float32 corrections in contact order, in float32), but reading
    only the contacts pass 1 listed (todo[:nt], in order; no other can be
    active), instead of every vertex's slot list, and their corrections
    where pass 1 left them (row place[q] of st and dl, see solve_work; row
    q when vt_only, every listed contact vertex-triangle), not
    copied into slot_delta. The vertices they touch
    are listed as they are first met (touched, (n + 1,) scratch), and only those
    are moved: on the cached layered bench ~310 of the 1,250 vertices with
    contacts, which the loop over all of them had visited every substep.
    touched needs n + 1 items: each slot's vertex is written before the
    branch-free count decides whether it stays. cvf: contact_vertex
    flattened; acc: (4 n,) float32, each vertex's x, y, z sums and count
    (zero between calls). Indices unsigned: no negative-index fix-ups on
    the read-modify-writes. Sums in float32 (they were float64): the
    sums half the size, no conversions. With the unsigned indices the
    cached layered bench's contact solve took 29.7 us a substep instead of
    31.0 (its recorded substeps). The corrections are float32, and a vertex
    sums a few of them; _gather sums the same way. It also writes the
    listed contacts' new slot states (st, see _pass1_impl's keep_slots):
    one pass over them fewer."""
    nv = np.uint64(0)
    for q in range(np.uint64(nt)):
        r = q if vt_only else np.uint64(place[q])
        k = np.uint64(todo[q])
        s = st[r]
        if s != _VT_UNCHANGED:
            slot_active[k] = s
        if s != SLOT_ON:
            continue
        m = np.uint64(4) if vt_only or contact_kind[k] != KIND_POINT_POINT else np.uint64(2)
        for sl in range(m):
            i = np.uint64(cvf[np.uint64(4) * k + sl])
            b = np.uint64(4) * i
            touched[nv] = i
            nv += np.uint64(1) if acc[b + np.uint64(3)] == F32_ZERO else np.uint64(0)
            j = np.uint64(3) * sl
            acc[b] += dl[j, r]
            acc[b + np.uint64(1)] += dl[j + np.uint64(1), r]
            acc[b + np.uint64(2)] += dl[j + np.uint64(2), r]
            acc[b + np.uint64(3)] += F32_ONE
    for q in range(nv):
        i = np.uint64(touched[q])
        b = np.uint64(4) * i
        inv = F32_ONE / acc[b + np.uint64(3)]
        pos[0, i] += acc[b] * inv
        pos[1, i] += acc[b + np.uint64(1)] * inv
        pos[2, i] += acc[b + np.uint64(2)] * inv
        acc[b] = F32_ZERO
        acc[b + np.uint64(1)] = F32_ZERO
        acc[b + np.uint64(2)] = F32_ZERO
        acc[b + np.uint64(3)] = F32_ZERO


_gather = njit(parallel=True, **JIT)(_gather_impl)


# The passes it calls are the parallel ones; the wrapper itself has no loop
# to split (parallel=True on it only raised NumbaPerformanceWarning).
solve_parallel = njit(**JIT)(_solve_impl)


def _solve_serial_impl(pos, prev_pos, inv_mass, contact_vertex, contact_kind, contact_normal, contact_frame,
                       triangles, contact_target, contact_friction, slot_delta, slot_active, frows,
                       fans, work, touched, acc):
    todo, nt, vt_only = _pass1_serial(pos, prev_pos, inv_mass, contact_vertex, contact_kind, contact_normal,
                                      contact_frame, triangles, contact_target, contact_friction, slot_delta,
                                      slot_active, frows, fans, work, False)
    _, _, _, place, st, dl = work
    _scatter(pos, dl, st, place, contact_vertex.reshape(contact_vertex.size), contact_kind, acc, touched, todo, nt,
             slot_active, vt_only)


solve_serial = njit(**HELPER)(_solve_serial_impl)


@njit(**JIT)
def build_vertex_slots(contact_vertex, contact_kind, n):
    """CSR from vertex to the (contact, slot) codes touching it, in contact order."""
    nc = contact_kind.shape[0]
    deg = np.zeros(n + 1, np.int64)
    for k in range(nc):
        m = 2 if contact_kind[k] == KIND_POINT_POINT else 4
        for s in range(m):
            deg[contact_vertex[k, s]] += 1
    nv = 0
    for i in range(n):
        if deg[i] > 0:
            nv += 1
    vertex_list = np.empty(nv, np.int32)
    start = np.empty(nv + 1, np.int64)
    local = np.full(n, -1, np.int64)
    q = 0
    acc = 0
    for i in range(n):
        if deg[i] > 0:
            vertex_list[q] = i
            start[q] = acc
            local[i] = q
            acc += deg[i]
            q += 1
    start[nv] = acc
    fill = start[:-1].copy()
    slots = np.empty(acc, np.int64)
    for k in range(nc):
        m = 2 if contact_kind[k] == KIND_POINT_POINT else 4
        for s in range(m):
            qq = local[contact_vertex[k, s]]
            slots[fill[qq]] = k * 4 + s
            fill[qq] += 1
    return vertex_list, start, slots
