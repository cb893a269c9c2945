"""The narrow phase: the contacts of one pair of triangles, feature by
feature (point-point, vertex-triangle, edge-edge), each emitted exactly
once (the lowest triangle pair around its features makes it), into the
contact buffers (a Contacts record)."""

import numpy as np
from numba import njit

from .constants import (HELPER, KIND_EDGE_EDGE, KIND_POINT_POINT, KIND_VERTEX_TRIANGLE, LAYER_DEPTH, MODE_FULL,
                        MODE_POINT_POINT)
from .geometry import closest_on_triangle, closest_segments, sphere_gap, tri_frame
from .records import Pair

@njit(inline="always", **HELPER)
def _emit(out, count, kind, i0, i1, i2, i3, n0, n1, n2, frame, target, friction):
    """Contact `count` into the buffers (out: a Contacts record) when there
    is room; returns count + 1. Cast here to the stored types, so
    _put_contact compiles once whatever its callers hold."""
    return _put_contact(out, np.int64(count), np.int8(kind), np.int32(i0), np.int32(i1), np.int32(i2),
                        np.int32(i3), np.float32(n0), np.float32(n1), np.float32(n2), np.int32(frame),
                        np.float32(target), np.float32(friction))


@njit(**HELPER)
def _put_contact(out, count, kind, i0, i1, i2, i3, n0, n1, n2, frame, target, friction):
    if count < out.kind.shape[0]:
        out.kind[count] = kind
        out.vertex[count, 0] = i0
        out.vertex[count, 1] = i1
        out.vertex[count, 2] = i2
        out.vertex[count, 3] = i3
        out.normal[count, 0] = n0
        out.normal[count, 1] = n1
        out.normal[count, 2] = n2
        out.frame[count] = frame
        out.target[count] = target
        out.friction[count] = friction
    return count + 1


@njit(**HELPER)
def _edge_sphere(pos, rel, edges, e):
    """Edge e's bounding sphere at step start (midpoint, half length) and its
    motion (mean relative displacement of its ends, half their difference):
    an 8-tuple. Unsigned indices (no negative-index fix-ups)."""
    a = np.uint64(edges[e, 0])
    b = np.uint64(edges[e, 1])
    hx = pos[0, b] - pos[0, a]
    hy = pos[1, b] - pos[1, a]
    hz = pos[2, b] - pos[2, a]
    gx = rel[0, b] - rel[0, a]
    gy = rel[1, b] - rel[1, a]
    gz = rel[2, b] - rel[2, a]
    return (0.5 * (pos[0, a] + pos[0, b]), 0.5 * (pos[1, a] + pos[1, b]), 0.5 * (pos[2, a] + pos[2, b]),
            0.5 * np.sqrt(hx * hx + hy * hy + hz * hz),
            0.5 * (rel[0, a] + rel[0, b]), 0.5 * (rel[1, a] + rel[1, b]), 0.5 * (rel[2, a] + rel[2, b]),
            0.5 * np.sqrt(gx * gx + gy * gy + gz * gz))


@njit(**HELPER)
def _rest_vt(rest, v, a, b, c):
    u, vv, w = closest_on_triangle(
        rest[v, 0], rest[v, 1], rest[v, 2], rest[a, 0], rest[a, 1], rest[a, 2],
        rest[b, 0], rest[b, 1], rest[b, 2], rest[c, 0], rest[c, 1], rest[c, 2])
    dx = rest[v, 0] - (u * rest[a, 0] + vv * rest[b, 0] + w * rest[c, 0])
    dy = rest[v, 1] - (u * rest[a, 1] + vv * rest[b, 1] + w * rest[c, 1])
    dz = rest[v, 2] - (u * rest[a, 2] + vv * rest[b, 2] + w * rest[c, 2])
    return np.sqrt(dx * dx + dy * dy + dz * dz)


@njit(**HELPER)
def _rest_ee(rest, a, b, c, d):
    s, t = closest_segments(
        rest[a, 0], rest[a, 1], rest[a, 2], rest[b, 0], rest[b, 1], rest[b, 2],
        rest[c, 0], rest[c, 1], rest[c, 2], rest[d, 0], rest[d, 1], rest[d, 2])
    dx = (rest[a, 0] + s * (rest[b, 0] - rest[a, 0])) - (rest[c, 0] + t * (rest[d, 0] - rest[c, 0]))
    dy = (rest[a, 1] + s * (rest[b, 1] - rest[a, 1])) - (rest[c, 1] + t * (rest[d, 1] - rest[c, 1]))
    dz = (rest[a, 2] + s * (rest[b, 2] - rest[a, 2])) - (rest[c, 2] + t * (rest[d, 2] - rest[c, 2]))
    return np.sqrt(dx * dx + dy * dy + dz * dz)


@njit(**HELPER)
def _near_triangles(triangles, t, T, near_start, near):
    """Near triangles (no contacts between them): a corner of one equals a
    corner of the other or is joined to one by a short edge (mesh.near,
    SelfCollision's NEAR_ALTITUDES)."""
    for i in range(3):
        v = triangles[t, i]
        for k in range(3):
            w = triangles[T, k]
            if v == w:
                return True
            for j in range(near_start[v], near_start[v + 1]):
                if near[j] == w:
                    return True
    return False


@njit(**HELPER)
def _boxes_overlap(box, a, b):
    return not (box[a, 0] > box[b, 3] or box[b, 0] > box[a, 3] or box[a, 1] > box[b, 4]
                or box[b, 1] > box[a, 4] or box[a, 2] > box[b, 5] or box[b, 2] > box[a, 5])


@njit(**HELPER)
def _canonical_vt(P, T, v, triangles, vtri_start, vtri, box, near_start, near, apart):
    """P is the lowest triangle around v that shares no vertex with T (among
    those the broad phase pairs with T). apart: v and T lie in different
    connected components, so no triangle around v is near T and boxes alone
    decide (no ring tests). Callers pass apart as a constant, True or False:
    each compiles its own variant, the apart one without the ring tests
    (a run-time flag made live detection between layers slower)."""
    for j in range(vtri_start[v], vtri_start[v + 1]):
        t = vtri[j]
        if t >= P:
            return True
        if (apart or not _near_triangles(triangles, t, T, near_start, near)) and _boxes_overlap(box, t, T):
            return False
    return True


@njit(**HELPER)
def _pair_before(t1, t2, A, B):
    lo = min(t1, t2)
    hi = max(t1, t2)
    return lo < A or (lo == A and hi < B)


@njit(**HELPER)
def _canonical_ee(A, B, ea, eb, triangles, edge_tris, box, near_start, near, apart):
    """(A, B) is the lowest pair of triangles around the two edges that
    share no vertex (apart: as in _canonical_vt)."""
    for i in range(edge_tris.shape[1]):
        t1 = edge_tris[ea, i]
        if t1 < 0:
            continue
        for j in range(edge_tris.shape[1]):
            t2 = edge_tris[eb, j]
            if t2 < 0:
                continue
            if (_pair_before(t1, t2, A, B) and (apart or not _near_triangles(triangles, t1, t2, near_start, near))
                    and _boxes_overlap(box, t1, t2)):
                return False
    return True


@njit(**HELPER)
def _canonical_pp(A, B, v, w, triangles, vtri_start, vtri, box, near_start, near):
    for i in range(vtri_start[v], vtri_start[v + 1]):
        t1 = vtri[i]
        for j in range(vtri_start[w], vtri_start[w + 1]):
            t2 = vtri[j]
            if (_pair_before(t1, t2, A, B) and not _near_triangles(triangles, t1, t2, near_start, near)
                    and _boxes_overlap(box, t1, t2)):
                return False
    return True


@njit(**HELPER)
def narrow_pair(A, B, mode, pos, rel, box, sph, mesh, regions, out, count):
    """Every feature pair of triangles A and B (which share no vertex), each
    emitted exactly once.

    A feature pair is found from every pair of triangles around its features
    that share no vertex; it is emitted only by the lowest such triangle pair
    (canonical ordering, checked after the distance test so it costs only
    for contacts). Features are excluded only when no such triangle pair
    exists (a vertex on the triangle, edges sharing an end): neighbours two
    rings apart still get contacts, so the cloth cannot crumple through itself
    at the scale of one element; they rarely come within the thickness, and
    pairs that were that close at rest are held at their rest distance.

    Between two connected components (tri_comp: layers, separate cloths) no
    triangle pair is near, so the canonical test is box tests alone and runs
    before the distance test: each feature pair's distance is then computed
    once, not once per triangle pair around it (two layers within reach
    everywhere: the live layered detection ~0.7x). Within a component the
    canonical test (ring tests) costs more than the distance test and runs
    only for contacts.
    """
    tri_region = mesh.tri_region
    rA = tri_region[A]
    rB = tri_region[B]
    thick = 0.5 * (regions.thickness[rA] + regions.thickness[rB])
    fric = np.sqrt(regions.friction[rA] * regions.friction[rB])
    cons = max(regions.conservativeness[rA], regions.conservativeness[rB])
    reach = thick + regions.margin * thick
    layA = regions.layers[rA]
    layB = regions.layers[rB]
    layered = layA >= 0 and layB >= 0 and layA != layB
    apart = mesh.tri_comp[A] != mesh.tri_comp[B]
    pair = Pair(A, B, thick, fric, cons, reach, layered, apart)
    if mode == MODE_POINT_POINT:
        return _point_point_contacts(pair, pos, rel, box, mesh, out, count)
    count = _vertex_triangle_contacts(pair, pos, rel, box, sph, mesh, regions.layers, out, count)
    if mode != MODE_FULL:
        return count
    return _edge_edge_contacts(pair, pos, rel, box, mesh, regions.layers, out, count)


@njit(inline="always", **HELPER)
def _point_point_contacts(pair, pos, rel, box, mesh, out, count):
    """MODE_POINT_POINT: the corners of A against the corners of B, the
    normal from B's corner to A's at step start."""
    A, B, thick, fric, cons, reach, layered, apart = pair
    rest, triangles, vtri_start, vtri, near_start, near = (mesh.rest, mesh.triangles, mesh.vtri_start, mesh.vtri,
                                                         mesh.near_start, mesh.near)
    for k in range(3):
        v = triangles[A, k]
        px = pos[0, v]
        py = pos[1, v]
        pz = pos[2, v]
        for m in range(3):
            w = triangles[B, m]
            dx = px - pos[0, w]
            dy = py - pos[1, w]
            dz = pz - pos[2, w]
            d0 = np.sqrt(dx * dx + dy * dy + dz * dz)
            if d0 > 1e-12:
                nx, ny, nz = dx / d0, dy / d0, dz / d0
            else:
                nx, ny, nz = 0.0, 0.0, 1.0
            close = (rel[0, v] - rel[0, w]) * nx + (rel[1, v] - rel[1, w]) * ny + (rel[2, v] - rel[2, w]) * nz
            if d0 < reach or d0 + cons * close < reach:
                if not _canonical_pp(A, B, v, w, triangles, vtri_start, vtri, box, near_start, near):
                    continue
                rx = rest[v, 0] - rest[w, 0]
                ry = rest[v, 1] - rest[w, 1]
                rz = rest[v, 2] - rest[w, 2]
                target = min(thick, np.sqrt(rx * rx + ry * ry + rz * rz))
                count = _emit(out, count, KIND_POINT_POINT, v, w, -1, -1, nx, ny, nz, -1, target, fric)
    return count


@njit(inline="always", **HELPER)
def _vertex_triangle_contacts(pair, pos, rel, box, sph, mesh, layers, out, count):
    """The corners of each triangle against the other one; the side the
    vertex started on is stored (between layers: the side the layer order
    says, where the layers face the same way)."""
    A, B, thick, fric, cons, reach, layered, apart = pair
    rest, triangles, tri_region = mesh.rest, mesh.triangles, mesh.tri_region
    vtri_start, vtri, near_start, near = mesh.vtri_start, mesh.vtri, mesh.near_start, mesh.near
    for side in range(2):
        T = B if side == 0 else A
        P = A if side == 0 else B
        a = np.uint64(triangles[T, 0])
        b = np.uint64(triangles[T, 1])
        c = np.uint64(triangles[T, 2])
        for k in range(3):
            v = np.uint64(triangles[P, k])
            px = pos[0, v]
            py = pos[1, v]
            pz = pos[2, v]
            # Cheap reject: the vertex against T's bounding sphere and motion
            # (|s| - r - cons (|m| + dev) > slack reach, squared: one root).
            sx = px - sph[T, 0]
            sy = py - sph[T, 1]
            sz = pz - sph[T, 2]
            mx = rel[0, v] - sph[T, 4]
            my = rel[1, v] - sph[T, 5]
            mz = rel[2, v] - sph[T, 6]
            lim = reach * 1.01 + 1e-6 + sph[T, 3] + cons * (np.sqrt(mx * mx + my * my + mz * mz) + sph[T, 7])
            if sx * sx + sy * sy + sz * sz > lim * lim:
                continue
            if apart and not _canonical_vt(P, T, v, triangles, vtri_start, vtri, box, near_start, near, True):
                continue
            u, vv, ww = closest_on_triangle(px, py, pz, pos[0, a], pos[1, a], pos[2, a],
                                             pos[0, b], pos[1, b], pos[2, b], pos[0, c], pos[1, c], pos[2, c])
            qx = u * pos[0, a] + vv * pos[0, b] + ww * pos[0, c]
            qy = u * pos[1, a] + vv * pos[1, b] + ww * pos[1, c]
            qz = u * pos[2, a] + vv * pos[2, b] + ww * pos[2, c]
            dx = px - qx
            dy = py - qy
            dz = pz - qz
            d0 = np.sqrt(dx * dx + dy * dy + dz * dz)
            if d0 > reach + cons * (abs(rel[0, v]) + abs(rel[1, v]) + abs(rel[2, v])
                                    + abs(rel[0, a]) + abs(rel[1, a]) + abs(rel[2, a])
                                    + abs(rel[0, b]) + abs(rel[1, b]) + abs(rel[2, b])
                                    + abs(rel[0, c]) + abs(rel[1, c]) + abs(rel[2, c])):
                continue
            # T's normal only where it is needed: a vertex on the triangle,
            # or a contact (most pairs that get here are neither).
            framed = d0 <= 1e-12
            tnx = tny = tnz = 0.0
            if framed:
                _, _, _, _, _, _, tnx, tny, tnz = tri_frame(pos, a, b, c)
                nx, ny, nz = tnx, tny, tnz
            else:
                nx, ny, nz = dx / d0, dy / d0, dz / d0
            rqx = u * rel[0, a] + vv * rel[0, b] + ww * rel[0, c]
            rqy = u * rel[1, a] + vv * rel[1, b] + ww * rel[1, c]
            rqz = u * rel[2, a] + vv * rel[2, b] + ww * rel[2, c]
            close = (rel[0, v] - rqx) * nx + (rel[1, v] - rqy) * ny + (rel[2, v] - rqz) * nz
            if d0 < reach or d0 + cons * close < reach:
                if not apart and not _canonical_vt(P, T, v, triangles, vtri_start, vtri, box, near_start, near,
                                                   False):
                    continue
                if not framed:
                    _, _, _, _, _, _, tnx, tny, tnz = tri_frame(pos, a, b, c)
                facing = False
                if layered:
                    # The layer order holds where the two layers face the same
                    # way; where the inner one is folded back under the outer
                    # (their normals disagree), forcing the outer vertex to its
                    # normal side would push it through the fold: the side at
                    # step start decides there, as for unlayered cloth.
                    _, _, _, _, _, _, pnx, pny, pnz = tri_frame(pos, np.uint64(triangles[P, 0]),
                                                                np.uint64(triangles[P, 1]), np.uint64(triangles[P, 2]))
                    facing = pnx * tnx + pny * tny + pnz * tnz > 0.0
                h = dx * tnx + dy * tny + dz * tnz
                if h == 0.0:
                    # In the plane: it came from the side it is moving away from.
                    h = -((rel[0, v] - rqx) * tnx + (rel[1, v] - rqy) * tny + (rel[2, v] - rqz) * tnz)
                sgn = 1.0 if h >= 0.0 else -1.0
                if facing:
                    # Outer layer (higher order) stays on the normal side of the inner layer.
                    want = 1.0 if layers[tri_region[P]] > layers[tri_region[T]] else -1.0
                    if want * h > -LAYER_DEPTH * thick:
                        sgn = want
                target = min(thick, _rest_vt(rest, v, a, b, c))
                count = _emit(out, count, KIND_VERTEX_TRIANGLE, v, a, b, c, sgn, 0.0, 0.0, T, target, fric)
    return count


@njit(inline="always", **HELPER)
def _edge_edge_contacts(pair, pos, rel, box, mesh, layers, out, count):
    """The sides of A against the sides of B; the normal is stored in A's
    frame (between layers: B's face normal with the layer order's sign)."""
    A, B, thick, fric, cons, reach, layered, apart = pair
    rest, triangles, tri_region, tri_edges, edges = (mesh.rest, mesh.triangles, mesh.tri_region, mesh.tri_edges,
                                                     mesh.edges)
    edge_tris, near_start, near = mesh.edge_tris, mesh.near_start, mesh.near
    # edge-edge. Each edge's bounding sphere and motion once per pair (not
    # once per edge pair: nine pairs share six edges).
    eA = (_edge_sphere(pos, rel, edges, tri_edges[A, 0]), _edge_sphere(pos, rel, edges, tri_edges[A, 1]),
          _edge_sphere(pos, rel, edges, tri_edges[A, 2]))
    eB = (_edge_sphere(pos, rel, edges, tri_edges[B, 0]), _edge_sphere(pos, rel, edges, tri_edges[B, 1]),
          _edge_sphere(pos, rel, edges, tri_edges[B, 2]))
    slack = reach * 1.01 + 1e-6
    for ka in range(3):
        ea = tri_edges[A, ka]
        a = np.uint64(edges[ea, 0])
        b = np.uint64(edges[ea, 1])
        sa = eA[ka]
        for kb in range(3):
            eb = tri_edges[B, kb]
            c = np.uint64(edges[eb, 0])
            d = np.uint64(edges[eb, 1])
            sb = eB[kb]
            # Cheap reject: the edges' bounding spheres and motions
            # (|s| - r_a - r_b - cons (|m| + dev_a + dev_b) > slack reach,
            # squared: one root).
            d2, motion = sphere_gap(sa, sb)
            lim = slack + sa[3] + sb[3] + cons * motion
            if d2 > lim * lim:
                continue
            if apart and not _canonical_ee(A, B, ea, eb, triangles, edge_tris, box, near_start, near, True):
                continue
            s, t = closest_segments(pos[0, a], pos[1, a], pos[2, a], pos[0, b], pos[1, b], pos[2, b],
                                     pos[0, c], pos[1, c], pos[2, c], pos[0, d], pos[1, d], pos[2, d])
            dx = (pos[0, a] + s * (pos[0, b] - pos[0, a])) - (pos[0, c] + t * (pos[0, d] - pos[0, c]))
            dy = (pos[1, a] + s * (pos[1, b] - pos[1, a])) - (pos[1, c] + t * (pos[1, d] - pos[1, c]))
            dz = (pos[2, a] + s * (pos[2, b] - pos[2, a])) - (pos[2, c] + t * (pos[2, d] - pos[2, c]))
            d0 = np.sqrt(dx * dx + dy * dy + dz * dz)
            rdx = (rel[0, a] + s * (rel[0, b] - rel[0, a])) - (rel[0, c] + t * (rel[0, d] - rel[0, c]))
            rdy = (rel[1, a] + s * (rel[1, b] - rel[1, a])) - (rel[1, c] + t * (rel[1, d] - rel[1, c]))
            rdz = (rel[2, a] + s * (rel[2, b] - rel[2, a])) - (rel[2, c] + t * (rel[2, d] - rel[2, c]))
            if d0 > 1e-12:
                nx, ny, nz = dx / d0, dy / d0, dz / d0
            else:
                # Crossing edges: the direction across both.
                e1x = pos[0, b] - pos[0, a]
                e1y = pos[1, b] - pos[1, a]
                e1z = pos[2, b] - pos[2, a]
                e2x = pos[0, d] - pos[0, c]
                e2y = pos[1, d] - pos[1, c]
                e2z = pos[2, d] - pos[2, c]
                nx = e1y * e2z - e1z * e2y
                ny = e1z * e2x - e1x * e2z
                nz = e1x * e2y - e1y * e2x
                ln = np.sqrt(nx * nx + ny * ny + nz * nz)
                if ln < 1e-20:
                    continue
                nx /= ln
                ny /= ln
                nz /= ln
            close = rdx * nx + rdy * ny + rdz * nz
            if d0 < reach or d0 + cons * close < reach:
                if not apart and not _canonical_ee(A, B, ea, eb, triangles, edge_tris, box, near_start, near,
                                                   False):
                    continue
                ux_, uy_, uz_, vx_, vy_, vz_, fnx, fny, fnz = tri_frame(
                    pos, np.uint64(triangles[A, 0]), np.uint64(triangles[A, 1]), np.uint64(triangles[A, 2]))
                if layered:
                    # Edge of A outside B's layer: the normal points the way A's
                    # layer lies from B's (B's face normal, with the layer's
                    # sign), where the layers face the same way (see above)
                    # and the edge is less than LAYER_DEPTH thicknesses on the
                    # wrong side.
                    sgn = 1.0 if layers[tri_region[A]] > layers[tri_region[B]] else -1.0
                    _, _, _, _, _, _, bnx, bny, bnz = tri_frame(
                        pos, np.uint64(triangles[B, 0]), np.uint64(triangles[B, 1]), np.uint64(triangles[B, 2]))
                    side = (nx * bnx + ny * bny + nz * bnz) * sgn
                    if (fnx * bnx + fny * bny + fnz * bnz > 0.0 and side < 0.0
                            and side * d0 > -LAYER_DEPTH * thick):
                        # B's normal, not the closest points' direction
                        # reversed: edges apart mostly along the layers
                        # (side near 0) had a gap of -d0 along the reversed
                        # one, and were pulled across the whole distance (a
                        # contact predicted 17 cm away moved its edge 9 cm
                        # in one substep on the demo's skirts).
                        nx, ny, nz = sgn * bnx, sgn * bny, sgn * bnz
                # Stored in A's frame, so a cached contact turns with the cloth.
                cu = nx * ux_ + ny * uy_ + nz * uz_
                cv = nx * vx_ + ny * vy_ + nz * vz_
                cn = nx * fnx + ny * fny + nz * fnz
                target = min(thick, _rest_ee(rest, a, b, c, d))
                count = _emit(out, count, KIND_EDGE_EDGE, a, b, c, d, cu, cv, cn, A, target, fric)
    return count
