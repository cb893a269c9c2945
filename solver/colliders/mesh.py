"""Mesh colliders: any triangle mesh (a body, a table, an open plane),
static or deforming, given at the step's start and end and moving linearly
over the substeps.

MeshCollider is the record the caller fills (world-space vertices at step
start and end, triangles, and the collider's thickness, friction and sides);
pack_meshes checks a list of them and packs them for the kernels. Per step,
build_grid keeps the triangles that can come near the cloth (a skirt
meets the hips of a body, not its head) and bins their boxes
(swept over the whole step) in a uniform grid, kept from step to step
while the collider stays still and the cloth near where it was; per substep,
mesh_substep_rows interpolates those triangles to the substep's start and
end (a still collider's once); every iteration, project_meshes pushes each cloth vertex out:

- a vertex over a triangle (its projection inside it) and nearer than the
  thickness on the outer side is pushed out along the triangle's normal;
- a vertex that started the substep on the outer side of a triangle (or
  less than the thickness behind it) and ended behind it, within its prism,
  has crossed it during the substep (the vertex moved, the triangle moved,
  or both): it goes back to the side it started on, to the thickness; of
  several such triangles the one nearest at the substep's start wins (a
  thin part's far side does not pull a vertex through);
- a vertex beside a triangle (past its edges) within the thickness of its
  closest point, on the outer side, is pushed out from that point (convex
  edges and corners).

The outer side is the normal's side (one-sided: closed meshes, or open ones
with a meaningful normal), or for a two-sided collider the side the vertex
started the substep on.
"""

import weakref
from dataclasses import dataclass

import numpy as np
from numba import njit

from ..config import EPS, F0, F1
from ..jit import FLAT, KERNEL as JIT
from ..params import SolverError
from .edges import record_push

# Triangle parameter rows (t, 4): thickness, friction factor, two-sided flag, inner reach.
# Substep rows: tri1 (t, 24) a1, e0 = b1 - a1, e1 = c1 - a1, unit n1, d00,
# d01, d11, 1/den (0 = degenerate), velocity (3), a0 . n1, 1 where an edge of
# the triangle is sharp (see SHARP_COS) or open, the altitudes from a, b and c
# (to their opposite edges); tbox (t, 6) min, max of the triangle over the
# substep, grown.
TRI1_COLS = 24
# How far past a triangle's edges (in barycentric units) its prism reaches.
BARY_TOL = np.float32(1e-3)
# An edge between triangles whose normals differ by more than about 25
# degrees is sharp: the cloth's edges can cut into it between their
# vertices (by less than the sag of a chord over a smoother surface).
SHARP_COS = np.float32(0.9)
# Grid cell edge, in mean triangle box edges: smaller cells hold fewer
# triangles for the vertex pass to scan and cost more to build; 0.6 is the
# cheapest step of 0.45, 0.6, 1.0 and 1.6 on the 20k-triangle body at 2
# substeps (benchmarks/bench_colliders.py).
CELL = 0.6
# Grid: at most this many cells (the cell size grows to fit).
MAX_CELLS = 1 << 21
# The vertex pass tests a grid cell's triangles in chunks of this many
# (the scratch list of those that pass).
GATHER = 256
# Triangles one MeshCollider may have (per grid insertion, int32 indices).
MAX_TRIANGLES = 20_000_000


@dataclass
class MeshCollider:
    """A triangle mesh collider.

    verts0, verts1: (m, 3) world-space vertex positions at step start and
        end (verts1 None: static). tris: (t, 3) vertex indices.
    thickness: distance kept from the surface, m (>= 0), the collider's
        outer thickness; the solver adds the cloth's collision margin.
    friction: factor on the cloth's friction against this collider (1 =
        the cloth's own, 0 = frictionless).
    two_sided: False: the cloth stays on the triangles' normal side (a
        closed mesh with outward normals, or an open one whose normals face
        the cloth); True: on whichever side each vertex starts (open meshes
        with no meaningful outside), at the thickness from either face.
    name: for messages.
    Degenerate (zero-area) triangles are skipped by the kernels.
    """

    verts0: np.ndarray
    tris: np.ndarray
    verts1: np.ndarray = None
    thickness: float = 0.01
    friction: float = 1.0
    two_sided: bool = False
    name: str = "mesh collider"


def _vertices(c, attr, value):
    try:
        a = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise SolverError(f"{c.name}: {attr} must be an (m, 3) array of floats ({exc})") from None
    if a.ndim != 2 or a.shape[1] != 3:
        raise SolverError(f"{c.name}: {attr} must have shape (m, 3), got {a.shape}")
    if not np.isfinite(a.sum(dtype=np.float64)):
        raise SolverError(f"{c.name}: {attr} contains NaN or Inf")
    return a


def pack_meshes(meshes):
    """A list of MeshCollider -> (v0 (m, 3), v1 (m, 3), tris (t, 3) int32,
    tparam (t, 4)) float32 over all of them, or None when there is no triangle
    (degenerate ones stay: the kernels skip them). Raises SolverError naming the collider
    and the field at fault."""
    if isinstance(meshes, MeshCollider):
        meshes = (meshes,)
    v0s, v1s, trs, prs = [], [], [], []
    base = 0
    for c in meshes:
        if not isinstance(c, MeshCollider):
            raise SolverError(f"StepInputs.meshes must hold MeshCollider records, got {type(c).__name__}")
        v0 = _vertices(c, "verts0", c.verts0)
        v1 = v0 if c.verts1 is None else _vertices(c, "verts1", c.verts1)
        if v1.shape != v0.shape:
            raise SolverError(f"{c.name}: verts1 must have the shape of verts0 {v0.shape}, got {v1.shape}")
        try:
            tris = np.asarray(c.tris)
        except (TypeError, ValueError):
            tris = np.zeros((0,))
        if tris.size == 0:
            continue
        if tris.ndim != 2 or tris.shape[1] != 3 or tris.dtype.kind not in "iu":
            raise SolverError(f"{c.name}: tris must be a (t, 3) integer array, got {tris.shape} {tris.dtype}")
        if tris.shape[0] > MAX_TRIANGLES:
            raise SolverError(f"{c.name}: {tris.shape[0]} triangles, more than the {MAX_TRIANGLES} a mesh "
                              "collider may have")
        if tris.min() < 0 or tris.max() >= v0.shape[0]:
            raise SolverError(f"{c.name}: tris index vertices outside 0..{v0.shape[0] - 1}")
        for attr in ("thickness", "friction"):
            value = float(getattr(c, attr))
            if not np.isfinite(value) or value < 0.0:
                raise SolverError(f"{c.name}: {attr} must be finite and >= 0, got {value}")
        th = float(c.thickness)
        v0s.append(v0)
        v1s.append(v1)
        trs.append(tris.astype(np.int32, copy=False) if base == 0 else (tris + base).astype(np.int32))
        pr = np.empty((tris.shape[0], 4), np.float32)
        pr[:, 0] = th
        pr[:, 1] = float(c.friction)
        pr[:, 2] = 1.0 if c.two_sided else 0.0
        pr[:, 3] = max(th, 1e-4)
        prs.append(pr)
        base += v0.shape[0]
    if not trs:
        return None
    if len(trs) == 1:
        return (np.ascontiguousarray(v0s[0]), np.ascontiguousarray(v1s[0]), np.ascontiguousarray(trs[0]), prs[0])
    return (np.concatenate(v0s), np.concatenate(v1s), np.concatenate(trs), np.concatenate(prs))


@njit(**JIT)
def build_grid(v0, v1, tris, tparam, pad, nbr, clo, chi):
    """The triangles that can come near the cloth this step and their
    uniform grid. Kept (sel, int32 indices, ascending): those whose box over
    the whole step (start and end positions, grown by the larger of
    thickness and inner reach, + pad) meets the box clo..chi (where the
    cloth can be this step), and their neighbours across each edge (nbr:
    the sharp-edge test reads their rows). The grid bins the kept boxes, a
    cell edge of CELL mean box sizes, capped at MAX_CELLS. Returns (grid
    (8,) float32: origin, 1/cell, cells along x, y, z, spare; cell_start
    (cells + 1) int32; items int32: triangle indices by cell; tcell (t, 6)
    int32: each kept triangle's lowest and highest cell; sel), or sel empty
    and the rest unset where nothing is kept."""
    t = tris.shape[0]
    box = np.empty((t, 6), np.float32)
    on = np.zeros(t, np.uint8)
    for j in range(t):
        g = max(tparam[j, 0], tparam[j, 3]) + pad
        meets = True
        for c in range(3):
            a = np.float32(3e38)
            b = np.float32(-3e38)
            for k in range(3):
                v = tris[j, k]
                a = min(a, min(v0[v, c], v1[v, c]))
                b = max(b, max(v0[v, c], v1[v, c]))
            box[j, c] = a - g
            box[j, 3 + c] = b + g
            if b + g < clo[c] or a - g > chi[c]:
                meets = False
        if meets:
            on[j] = 1
    for j in range(t):
        if on[j] == 1:
            for c in range(3):
                k = nbr[j, c]
                if k >= 0 and on[k] == 0:
                    on[k] = 2
    sel = np.nonzero(on)[0].astype(np.int32)
    m = sel.shape[0]
    lo = np.full(3, np.float32(3e38), np.float32)
    hi = np.full(3, np.float32(-3e38), np.float32)
    ext = 0.0
    for q in range(m):
        j = sel[q]
        for c in range(3):
            lo[c] = min(lo[c], box[j, c])
            hi[c] = max(hi[c], box[j, 3 + c])
            ext += box[j, 3 + c] - box[j, c]
    if m == 0:
        lo[:] = F0
        hi[:] = F1
    cs = max(CELL * ext / max(3 * m, 1), 1e-6) if m > 0 else 1.0
    while True:
        nx = int((hi[0] - lo[0]) / cs) + 1
        ny = int((hi[1] - lo[1]) / cs) + 1
        nz = int((hi[2] - lo[2]) / cs) + 1
        if nx * ny * nz <= MAX_CELLS:
            break
        cs *= 1.26
    inv = np.float32(1.0 / cs)
    grid = np.zeros(8, np.float32)
    grid[0], grid[1], grid[2], grid[3] = lo[0], lo[1], lo[2], inv
    grid[4], grid[5], grid[6] = nx, ny, nz
    cells = nx * ny * nz
    start = np.zeros(cells + 1, np.int32)
    tcell = np.empty((t, 6), np.int32)
    dims = (nx, ny, nz)
    for q in range(m):
        j = sel[q]
        for c in range(3):
            tcell[j, c] = min(max(int((box[j, c] - lo[c]) * inv), 0), dims[c] - 1)
            tcell[j, 3 + c] = min(max(int((box[j, 3 + c] - lo[c]) * inv), 0), dims[c] - 1)
        for z in range(tcell[j, 2], tcell[j, 5] + 1):
            for y in range(tcell[j, 1], tcell[j, 4] + 1):
                for x in range(tcell[j, 0], tcell[j, 3] + 1):
                    start[(z * ny + y) * nx + x + 1] += 1
    for c in range(cells):
        start[c + 1] += start[c]
    fill = start[:-1].copy()
    items = np.empty(start[cells], np.int32)
    for q in range(m):
        j = sel[q]
        for z in range(tcell[j, 2], tcell[j, 5] + 1):
            for y in range(tcell[j, 1], tcell[j, 4] + 1):
                for x in range(tcell[j, 0], tcell[j, 3] + 1):
                    cell = (z * ny + y) * nx + x
                    items[fill[cell]] = j
                    fill[cell] += 1
    return grid, start, items, tcell, sel


@njit(inline="always", **JIT)
def _lerp3(v0, v1, i, s, t):
    return s * v0[i, 0] + t * v1[i, 0], s * v0[i, 1] + t * v1[i, 1], s * v0[i, 2] + t * v1[i, 2]


@njit(inline="always", **JIT)
def _unit_normal(ux, uy, uz, wx, wy, wz):
    """Unit (u x w) and its length before normalising (0, 0, 0 and 0 for a
    degenerate triangle)."""
    nx = uy * wz - uz * wy
    ny = uz * wx - ux * wz
    nz = ux * wy - uy * wx
    nl = np.sqrt(nx * nx + ny * ny + nz * nz)
    inv = F1 / nl if nl > EPS else F0
    return nx * inv, ny * inv, nz * inv, nl


@njit(**FLAT)
def mesh_substep_rows(v0, v1, tris, tparam, t0, t1, inv_dt, pad, nbr, tri1, tbox, sel, once, vs):
    """The triangles at substep end (tri1: a, edges, unit normal, the
    barycentric constants, velocity, and a0 . n: the plane's offset at
    substep start, for the side a vertex started on; the normal's turn over
    one substep is left out) and their boxes over the substep grown as
    build_grid's (tbox). inv_dt: 1 / the step's length (the velocity).
    nbr: (t, 3) the triangle across each edge (-1: none), for the sharp
    flag. Only the triangles sel lists (build_grid: their neighbours
    among them) get rows. once[0]: 0 every substep (a moving collider), 1
    this once (a still one: its rows do not change), 2 not again. vs:
    (2, m, 3) scratch, the vertices at substep start and end (each is
    shared by about six triangles: interpolated once)."""
    if once[0] == 2:
        return
    if once[0] == 1:
        once[0] = 2
    s0 = F1 - t0
    s1 = F1 - t1
    third = inv_dt / np.float32(3.0)
    for v in range(v0.shape[0]):
        vs[0, v, 0], vs[0, v, 1], vs[0, v, 2] = _lerp3(v0, v1, v, s0, t0)
        vs[1, v, 0], vs[1, v, 1], vs[1, v, 2] = _lerp3(v0, v1, v, s1, t1)
    for q in range(sel.shape[0]):
        j = sel[q]
        ia, ib, ic = tris[j, 0], tris[j, 1], tris[j, 2]
        g = max(tparam[j, 0], tparam[j, 3]) + pad
        ax0, ay0, az0 = vs[0, ia, 0], vs[0, ia, 1], vs[0, ia, 2]
        ax1, ay1, az1 = vs[1, ia, 0], vs[1, ia, 1], vs[1, ia, 2]
        bx1, by1, bz1 = vs[1, ib, 0], vs[1, ib, 1], vs[1, ib, 2]
        cx1, cy1, cz1 = vs[1, ic, 0], vs[1, ic, 1], vs[1, ic, 2]
        ux, uy, uz = bx1 - ax1, by1 - ay1, bz1 - az1
        wx, wy, wz = cx1 - ax1, cy1 - ay1, cz1 - az1
        n1x, n1y, n1z, l1 = _unit_normal(ux, uy, uz, wx, wy, wz)
        d00 = ux * ux + uy * uy + uz * uz
        d01 = ux * wx + uy * wy + uz * wz
        d11 = wx * wx + wy * wy + wz * wz
        den = d00 * d11 - d01 * d01
        ok = l1 > EPS and den > np.float32(1e-12) * d00 * d11
        tri1[j, 0], tri1[j, 1], tri1[j, 2] = ax1, ay1, az1
        tri1[j, 3], tri1[j, 4], tri1[j, 5] = ux, uy, uz
        tri1[j, 6], tri1[j, 7], tri1[j, 8] = wx, wy, wz
        tri1[j, 9], tri1[j, 10], tri1[j, 11] = n1x, n1y, n1z
        tri1[j, 12], tri1[j, 13], tri1[j, 14] = d00, d01, d11
        tri1[j, 15] = F1 / den if ok else F0
        # |u x w| = sqrt(den): each altitude is it over the opposite edge.
        area2 = np.sqrt(max(den, F0))
        tri1[j, 21] = area2 / np.sqrt(max(d00 + d11 - 2 * d01, EPS))
        tri1[j, 22] = area2 / np.sqrt(max(d11, EPS))
        tri1[j, 23] = area2 / np.sqrt(max(d00, EPS))
        vx = (v1[ia, 0] + v1[ib, 0] + v1[ic, 0] - v0[ia, 0] - v0[ib, 0] - v0[ic, 0]) * third
        vy = (v1[ia, 1] + v1[ib, 1] + v1[ic, 1] - v0[ia, 1] - v0[ib, 1] - v0[ic, 1]) * third
        vz = (v1[ia, 2] + v1[ib, 2] + v1[ic, 2] - v0[ia, 2] - v0[ib, 2] - v0[ic, 2]) * third
        tri1[j, 16], tri1[j, 17], tri1[j, 18] = vx, vy, vz
        tri1[j, 19] = ax0 * n1x + ay0 * n1y + az0 * n1z
        bx0, by0, bz0 = vs[0, ib, 0], vs[0, ib, 1], vs[0, ib, 2]
        cx0, cy0, cz0 = vs[0, ic, 0], vs[0, ic, 1], vs[0, ic, 2]
        tbox[j, 0] = min(min(min(ax0, bx0), min(cx0, ax1)), min(bx1, cx1)) - g
        tbox[j, 1] = min(min(min(ay0, by0), min(cy0, ay1)), min(by1, cy1)) - g
        tbox[j, 2] = min(min(min(az0, bz0), min(cz0, az1)), min(bz1, cz1)) - g
        tbox[j, 3] = max(max(max(ax0, bx0), max(cx0, ax1)), max(bx1, cx1)) + g
        tbox[j, 4] = max(max(max(ay0, by0), max(cy0, ay1)), max(by1, cy1)) + g
        tbox[j, 5] = max(max(max(az0, bz0), max(cz0, az1)), max(bz1, cz1)) + g
    for q in range(sel.shape[0]):
        j = sel[q]
        sharp = F0
        for c in range(3):
            k = nbr[j, c]
            if k < 0:
                sharp = F1
            elif (tri1[j, 9] * tri1[k, 9] + tri1[j, 10] * tri1[k, 10] + tri1[j, 11] * tri1[k, 11]) < SHARP_COS:
                sharp = F1
        tri1[j, 20] = sharp


@njit(inline="always", **JIT)
def _cell(x, o, inv, n):
    """The grid cell along one axis of coordinate x (clamped to the grid)."""
    return min(max(np.int64((x - o) * inv), 0), n - 1)


@njit(inline="always", **JIT)
def _closest_on_triangle(px, py, pz, ax, ay, az, abx, aby, abz, acx, acy, acz):
    """Closest point of triangle (a, a + ab, a + ac) to p (Ericson's region
    tests)."""
    apx, apy, apz = px - ax, py - ay, pz - az
    d1 = abx * apx + aby * apy + abz * apz
    d2 = acx * apx + acy * apy + acz * apz
    if d1 <= F0 and d2 <= F0:
        return ax, ay, az
    bpx, bpy, bpz = apx - abx, apy - aby, apz - abz
    d3 = abx * bpx + aby * bpy + abz * bpz
    d4 = acx * bpx + acy * bpy + acz * bpz
    if d3 >= F0 and d4 <= d3:
        return ax + abx, ay + aby, az + abz
    vc = d1 * d4 - d3 * d2
    if vc <= F0 and d1 >= F0 and d3 <= F0:
        v = d1 / (d1 - d3)
        return ax + v * abx, ay + v * aby, az + v * abz
    cpx, cpy, cpz = apx - acx, apy - acy, apz - acz
    d5 = abx * cpx + aby * cpy + abz * cpz
    d6 = acx * cpx + acy * cpy + acz * cpz
    if d6 >= F0 and d5 <= d6:
        return ax + acx, ay + acy, az + acz
    vb = d5 * d2 - d1 * d6
    if vb <= F0 and d2 >= F0 and d6 <= F0:
        w = d2 / (d2 - d6)
        return ax + w * acx, ay + w * acy, az + w * acz
    va = d3 * d6 - d5 * d4
    if va <= F0 and (d4 - d3) >= F0 and (d5 - d6) >= F0:
        w = (d4 - d3) / ((d4 - d3) + (d5 - d6))
        return (ax + abx + w * (acx - abx), ay + aby + w * (acy - aby), az + abz + w * (acz - abz))
    den = F1 / (va + vb + vc)
    v = vb * den
    w = vc * den
    return ax + abx * v + acx * w, ay + aby * v + acy * w, az + abz * v + acz * w


@njit(inline="always", **JIT)
def _gather(items, q0, q1, tbox, lx, ly, lz, ux, uy, uz, single, cx, cy, cz, grid, found):
    """The triangles items[q0:q1] of grid cell (cx, cy, cz) whose box tbox
    meets the box lx..uz, into found; returns how many. Where the box
    spans one cell (single: most cloth vertices) the test has no branch,
    whose outcome no predictor guesses (about a fifth of a cell's
    triangles pass), which halves the cost of the scan. Across several
    cells each pair is kept once: in the cell of the lowest corner both
    boxes share (the substep box lies in the step box the grid binned, so
    the triangle is listed there too)."""
    k = 0
    if single:
        for q in range(q0, q1):
            j = items[q]
            found[k] = j
            k += np.int64((ux >= tbox[j, 0]) & (uy >= tbox[j, 1]) & (uz >= tbox[j, 2]) & (lx <= tbox[j, 3])
                          & (ly <= tbox[j, 4]) & (lz <= tbox[j, 5]))
        return k
    ox, oy, oz, inv = grid[0], grid[1], grid[2], grid[3]
    nx, ny, nz = np.int64(grid[4]), np.int64(grid[5]), np.int64(grid[6])
    for q in range(q0, q1):
        j = items[q]
        if (ux < tbox[j, 0] or uy < tbox[j, 1] or uz < tbox[j, 2] or lx > tbox[j, 3] or ly > tbox[j, 4]
                or lz > tbox[j, 5]):
            continue
        if (cx != _cell(max(lx, tbox[j, 0]), ox, inv, nx) or cy != _cell(max(ly, tbox[j, 1]), oy, inv, ny)
                or cz != _cell(max(lz, tbox[j, 2]), oz, inv, nz)):
            continue
        found[k] = j
        k += 1
    return k


@njit(**FLAT)
def project_meshes(pos, prev, inv_mass, cmask, tparam, tri1, tbox, grid, start, items, tcell, near, contact,
                   clist, ccount, found):
    """Push every cloth vertex out of the mesh colliders (see the module's
    rules), the triangles at substep end tri1 and their substep boxes tbox
    (mesh_substep_rows), binned by build_grid. A vertex
    with cmask < 0 ignores colliders; cmask >= 0 grows the thickness by it.
    contact/clist as for project_colliders_into (friction: the depth is
    scaled by the collider's friction factor). near[i] = 1 where vertex i's
    path box meets the substep box of a triangle with a sharp or open edge
    (the edge pass visits the edges of those), else 0. Returns the new ccount."""
    n = np.uint64(pos.shape[1])
    ox, oy, oz, inv = grid[0], grid[1], grid[2], grid[3]
    nx, ny, nz = np.int64(grid[4]), np.int64(grid[5]), np.int64(grid[6])
    hx = ox + np.float32(nx) / inv
    hy = oy + np.float32(ny) / inv
    hz = oz + np.float32(nz) / inv
    for i in range(n):
        near[i] = 0
        if cmask[i] < F0:
            continue
        off = cmask[i]
        px, py, pz = pos[0, i], pos[1, i], pos[2, i]
        qx, qy, qz = prev[0, i], prev[1, i], prev[2, i]
        lx, ly, lz = min(px, qx), min(py, qy), min(pz, qz)
        ux, uy, uz = max(px, qx), max(py, qy), max(pz, qz)
        if ux < ox or uy < oy or uz < oz or lx > hx or ly > hy or lz > hz:
            continue
        cx0 = min(max(np.int64((lx - ox) * inv), 0), nx - 1)
        cy0 = min(max(np.int64((ly - oy) * inv), 0), ny - 1)
        cz0 = min(max(np.int64((lz - oz) * inv), 0), nz - 1)
        cx1 = min(max(np.int64((ux - ox) * inv), 0), nx - 1)
        cy1 = min(max(np.int64((uy - oy) * inv), 0), ny - 1)
        cz1 = min(max(np.int64((uz - oz) * inv), 0), nz - 1)
        depth = F0
        cnx, cny, cnz = F0, F0, F0
        cvx, cvy, cvz = F0, F0, F0
        best = -1
        best_h0 = np.float32(3e38)
        best_s = F1
        # A path box in one cell (most vertices) meets each triangle once.
        single = cx0 == cx1 and cy0 == cy1 and cz0 == cz1
        for cz in range(cz0, cz1 + 1):
            for cy in range(cy0, cy1 + 1):
                for cx in range(cx0, cx1 + 1):
                    cell = (cz * ny + cy) * nx + cx
                    q0 = start[cell]
                    while q0 < start[cell + 1]:
                        q1 = min(start[cell + 1], q0 + GATHER)
                        k = _gather(items, q0, q1, tbox, lx, ly, lz, ux, uy, uz, single, cx, cy, cz, grid, found)
                        q0 = q1
                        for b in range(k):
                            j = found[b]
                            if tri1[j, 20] != F0:
                                near[i] = 1
                            if tri1[j, 15] == F0 or inv_mass[i] == F0:
                                continue
                            th = tparam[j, 0] + off
                            inner = tparam[j, 3] + off
                            h0 = qx * tri1[j, 9] + qy * tri1[j, 10] + qz * tri1[j, 11] - tri1[j, 19]
                            s = F1
                            if tparam[j, 2] != F0 and h0 < F0:
                                s = -F1
                                h0 = -h0
                            if h0 < -inner:
                                continue
                            wx, wy, wz = px - tri1[j, 0], py - tri1[j, 1], pz - tri1[j, 2]
                            mx, my, mz = s * tri1[j, 9], s * tri1[j, 10], s * tri1[j, 11]
                            h1 = wx * mx + wy * my + wz * mz
                            if h1 >= th:
                                continue
                            d20 = wx * tri1[j, 3] + wy * tri1[j, 4] + wz * tri1[j, 5]
                            d21 = wx * tri1[j, 6] + wy * tri1[j, 7] + wz * tri1[j, 8]
                            bv = (tri1[j, 14] * d20 - tri1[j, 13] * d21) * tri1[j, 15]
                            bw = (tri1[j, 12] * d21 - tri1[j, 13] * d20) * tri1[j, 15]
                            # A little past the edges: a vertex on an edge two
                            # triangles share must not fall between them.
                            if bv >= -BARY_TOL and bw >= -BARY_TOL and bv + bw <= F1 + BARY_TOL:
                                if h1 >= F0:
                                    d = th - h1
                                    px += d * mx
                                    py += d * my
                                    pz += d * mz
                                elif h0 < best_h0:
                                    # Crossed (or started just inside): resolved
                                    # after the others, by the nearest at start.
                                    best, best_h0, best_s = j, h0, s
                                    continue
                                else:
                                    continue
                            else:
                                # Beside the triangle: at least its height and, in
                                # the plane, the most negative barycentric times
                                # that corner's altitude away (no closest point
                                # needed for most neighbours of the one below).
                                bu = F1 - bv - bw
                                dp = max(max(-bu * tri1[j, 21], -bv * tri1[j, 22]), max(-bw * tri1[j, 23], F0))
                                if h1 * h1 + dp * dp >= th * th:
                                    continue
                                kx, ky, kz = _closest_on_triangle(px, py, pz, tri1[j, 0], tri1[j, 1], tri1[j, 2],
                                                                  tri1[j, 3], tri1[j, 4], tri1[j, 5], tri1[j, 6],
                                                                  tri1[j, 7], tri1[j, 8])
                                ex, ey, ez = px - kx, py - ky, pz - kz
                                if ex * mx + ey * my + ez * mz <= F0:
                                    continue
                                dl = np.sqrt(ex * ex + ey * ey + ez * ez)
                                if dl >= th or dl < EPS:
                                    continue
                                d = th - dl
                                mx, my, mz = ex / dl, ey / dl, ez / dl
                                px += d * mx
                                py += d * my
                                pz += d * mz
                            depth += max(d * tparam[j, 1], np.float32(1e-20))
                            cnx, cny, cnz = mx, my, mz
                            cvx, cvy, cvz = tri1[j, 16], tri1[j, 17], tri1[j, 18]
        if best >= 0:
            j = best
            th = tparam[j, 0] + off
            mx, my, mz = best_s * tri1[j, 9], best_s * tri1[j, 10], best_s * tri1[j, 11]
            h1 = (px - tri1[j, 0]) * mx + (py - tri1[j, 1]) * my + (pz - tri1[j, 2]) * mz
            if h1 < th:
                d = th - h1
                px += d * mx
                py += d * my
                pz += d * mz
                depth += max(d * tparam[j, 1], np.float32(1e-20))
                cnx, cny, cnz = mx, my, mz
                cvx, cvy, cvz = tri1[j, 16], tri1[j, 17], tri1[j, 18]
        if depth > F0:
            pos[0, i], pos[1, i], pos[2, i] = px, py, pz
            ccount = record_push(contact, clist, ccount, i, depth, cnx, cny, cnz, cvx, cvy, cvz)
    return ccount


@njit(inline="always", **JIT)
def _clip(lo, hi, fa, fb):
    """The part [lo, hi] of s in [0, 1] where fa + s (fb - fa) >= -BARY_TOL."""
    fa += BARY_TOL
    fb += BARY_TOL
    if fa < F0 and fb < F0:
        return F1, F0
    if fa < F0:
        lo = max(lo, fa / (fa - fb))
    elif fb < F0:
        hi = min(hi, fa / (fa - fb))
    return lo, hi


@njit(**FLAT)
def project_mesh_edges(pos, prev, inv_mass, cmask, edge_start, edge_other, tparam, tri1, tbox, grid, start, items,
                       tcell, near, contact, clist, ccount):
    """Keep the cloth's edges out of the mesh colliders between their
    vertices (a table's edge, a chair's leg thinner than the cloth's
    triangles): each edge is clipped to every nearby triangle's prism, and
    the point of the clipped part nearest the triangle's outer side (one end
    of it: the height is linear along the edge) is held at the thickness by
    the rules of project_meshes, moving both ends by their inverse masses.
    Only triangles with a sharp or open edge (tri1[:, 20]) count: over a
    smooth surface an edge sags into it by no more than its chord's sag.
    Points at the edge's ends are the vertex pass's. Only the edges with an
    end near such a triangle (near, from project_meshes: within the
    thickness of its box) are visited: an edge across a part thinner than the edge whose
    ends are both farther than the thickness from it is not seen. Returns the
    new ccount."""
    n = np.uint64(pos.shape[1])
    ox, oy, oz, inv = grid[0], grid[1], grid[2], grid[3]
    nx, ny, nz = np.int64(grid[4]), np.int64(grid[5]), np.int64(grid[6])
    hx = ox + np.float32(nx) / inv
    hy = oy + np.float32(ny) / inv
    hz = oz + np.float32(nz) / inv
    end_tol = np.float32(0.02)
    for i in range(n):
        if cmask[i] < F0:
            continue
        wa = inv_mass[i]
        for e in range(edge_start[i], edge_start[i + 1]):
            k = edge_other[e]
            if k < i or cmask[k] < F0 or near[i] + near[k] == 0:
                continue
            wb = inv_mass[k]
            if wa + wb == F0:
                continue
            off = max(cmask[i], cmask[k])
            ax, ay, az = pos[0, i], pos[1, i], pos[2, i]
            bx, by, bz = pos[0, k], pos[1, k], pos[2, k]
            lx = min(min(ax, bx), min(prev[0, i], prev[0, k]))
            ly = min(min(ay, by), min(prev[1, i], prev[1, k]))
            lz = min(min(az, bz), min(prev[2, i], prev[2, k]))
            ux = max(max(ax, bx), max(prev[0, i], prev[0, k]))
            uy = max(max(ay, by), max(prev[1, i], prev[1, k]))
            uz = max(max(az, bz), max(prev[2, i], prev[2, k]))
            if ux < ox or uy < oy or uz < oz or lx > hx or ly > hy or lz > hz:
                continue
            cx0 = min(max(np.int64((lx - ox) * inv), 0), nx - 1)
            cy0 = min(max(np.int64((ly - oy) * inv), 0), ny - 1)
            cz0 = min(max(np.int64((lz - oz) * inv), 0), nz - 1)
            cx1 = min(max(np.int64((ux - ox) * inv), 0), nx - 1)
            cy1 = min(max(np.int64((uy - oy) * inv), 0), ny - 1)
            cz1 = min(max(np.int64((uz - oz) * inv), 0), nz - 1)
            moved = False
            for cz in range(cz0, cz1 + 1):
                for cy in range(cy0, cy1 + 1):
                    for cx in range(cx0, cx1 + 1):
                        cell = (cz * ny + cy) * nx + cx
                        for q in range(start[cell], start[cell + 1]):
                            j = items[q]
                            if (ux < tbox[j, 0] or uy < tbox[j, 1] or uz < tbox[j, 2] or lx > tbox[j, 3]
                                    or ly > tbox[j, 4] or lz > tbox[j, 5]):
                                continue
                            if (cx != _cell(max(lx, tbox[j, 0]), ox, inv, nx)
                                    or cy != _cell(max(ly, tbox[j, 1]), oy, inv, ny)
                                    or cz != _cell(max(lz, tbox[j, 2]), oz, inv, nz)):
                                continue
                            if tri1[j, 15] == F0 or tri1[j, 20] == F0:
                                continue
                            th = tparam[j, 0] + off
                            inner = tparam[j, 3] + off
                            n1x, n1y, n1z = tri1[j, 9], tri1[j, 10], tri1[j, 11]
                            # Heights of both ends now and at substep start.
                            ha = (ax - tri1[j, 0]) * n1x + (ay - tri1[j, 1]) * n1y + (az - tri1[j, 2]) * n1z
                            hb = (bx - tri1[j, 0]) * n1x + (by - tri1[j, 1]) * n1y + (bz - tri1[j, 2]) * n1z
                            ga = prev[0, i] * n1x + prev[1, i] * n1y + prev[2, i] * n1z - tri1[j, 19]
                            gb = prev[0, k] * n1x + prev[1, k] * n1y + prev[2, k] * n1z - tri1[j, 19]
                            sg = F1
                            if tparam[j, 2] != F0 and ga + gb < F0:
                                sg = -F1
                            ha, hb, ga, gb = sg * ha, sg * hb, sg * ga, sg * gb
                            if ha >= th and hb >= th:
                                continue
                            # Barycentric coordinates of both ends' projections.
                            d00, d01, d11, idn = tri1[j, 12], tri1[j, 13], tri1[j, 14], tri1[j, 15]
                            wx, wy, wz = ax - tri1[j, 0], ay - tri1[j, 1], az - tri1[j, 2]
                            e0 = wx * tri1[j, 3] + wy * tri1[j, 4] + wz * tri1[j, 5]
                            e1 = wx * tri1[j, 6] + wy * tri1[j, 7] + wz * tri1[j, 8]
                            va = (d11 * e0 - d01 * e1) * idn
                            wa_ = (d00 * e1 - d01 * e0) * idn
                            wx, wy, wz = bx - tri1[j, 0], by - tri1[j, 1], bz - tri1[j, 2]
                            e0 = wx * tri1[j, 3] + wy * tri1[j, 4] + wz * tri1[j, 5]
                            e1 = wx * tri1[j, 6] + wy * tri1[j, 7] + wz * tri1[j, 8]
                            vb = (d11 * e0 - d01 * e1) * idn
                            wb_ = (d00 * e1 - d01 * e0) * idn
                            lo, hi = _clip(F0, F1, va, vb)
                            lo, hi = _clip(lo, hi, wa_, wb_)
                            lo, hi = _clip(lo, hi, F1 - va - wa_, F1 - vb - wb_)
                            if lo > hi:
                                continue
                            s = lo if ha + lo * (hb - ha) <= ha + hi * (hb - ha) else hi
                            if s < end_tol or s > F1 - end_tol:
                                continue
                            h = ha + s * (hb - ha)
                            if h >= th:
                                continue
                            if h < F0 and ga + s * (gb - ga) < -inner:
                                continue  # started behind this face: another face's
                            g = F1 - s
                            den = wa * g * g + wb * s * s
                            lam = (th - h) / den
                            mx, my, mz = sg * n1x, sg * n1y, sg * n1z
                            da = wa * g * lam
                            db = wb * s * lam
                            ax += da * mx
                            ay += da * my
                            az += da * mz
                            bx += db * mx
                            by += db * my
                            bz += db * mz
                            moved = True
                            for end in range(2):
                                v = np.uint64(i) if end == 0 else np.uint64(k)
                                dv = da if end == 0 else db
                                if dv > F0:
                                    contact[0, v], contact[1, v], contact[2, v] = mx, my, mz
                                    if contact[3, v] == F0:
                                        clist[ccount] = v
                                        ccount += 1
                                    contact[3, v] += max(dv * tparam[j, 1], np.float32(1e-20))
                                    contact[4, v], contact[5, v], contact[6, v] = tri1[j, 16], tri1[j, 17], tri1[j, 18]
            if moved:
                pos[0, i], pos[1, i], pos[2, i] = ax, ay, az
                pos[0, k], pos[1, k], pos[2, k] = bx, by, bz
    return ccount


def triangle_neighbours(tris):
    """(t, 3) int32: the triangle across edge (0-1, 1-2, 2-0) of each
    triangle, -1 where none (an open edge) or more than one (non-manifold:
    treated as open)."""
    t = tris.shape[0]
    a = tris.astype(np.int64)
    lo = np.concatenate([np.minimum(a[:, 0], a[:, 1]), np.minimum(a[:, 1], a[:, 2]), np.minimum(a[:, 2], a[:, 0])])
    hi = np.concatenate([np.maximum(a[:, 0], a[:, 1]), np.maximum(a[:, 1], a[:, 2]), np.maximum(a[:, 2], a[:, 0])])
    key = lo * (int(a.max(initial=0)) + 1) + hi
    order = np.argsort(key, kind="stable")
    ks = key[order]
    out = np.full(3 * t, -1, np.int64)
    same = ks[1:] == ks[:-1]
    # Exactly two faces share the edge: not a third before or after.
    pair = same.copy()
    pair[1:] &= ~same[:-1]
    pair[:-1] &= ~same[1:]
    i = np.nonzero(pair)[0]
    e0, e1 = order[i], order[i + 1]
    out[e0] = e1 % t
    out[e1] = e0 % t
    return out.reshape(3, t).T.astype(np.int32).copy()


class _MeshStep:
    """The per-step arrays of one model's mesh colliders, reused while the
    triangles stay."""

    def __init__(self, tris, n):
        t = tris.shape[0]
        self.tris = tris.copy()
        self.nbr = triangle_neighbours(tris)
        self.tri1 = np.zeros((t, TRI1_COLS), np.float32)
        self.tbox = np.zeros((t, 6), np.float32)
        self.near = np.zeros(n, np.uint8)
        self.culled = 0   # triangles the last step left out (build_grid)
        # A still collider's grid, kept while it stays still and the cloth
        # within the box it was culled to: (verts, tparam bytes, pad, lo, hi,
        # build_grid's tuple).
        self.still = None
        self.rows_once = np.zeros(1, np.uint8)   # mesh_substep_rows' once
        self.found = np.zeros(GATHER, np.int32)   # project_meshes' scratch
        self.vs = np.zeros((2, 0, 3), np.float32)   # mesh_substep_rows' scratch
        self.builds = 0


_SCRATCH = weakref.WeakKeyDictionary()
# How far (m) past the cloth's box, besides its travel, triangles stay in
# a step's grid: a vertex thrown farther by its constraints in one step
# than this would not see the triangles beyond.
CULL_MARGIN = 0.1
# A still collider's grid is culled to this much (m) more, so the cloth can
# move a while before it is built again.
STILL_SLACK = 0.25


def mesh_step_args(model, meshes, dt, pad, margin=0.0, pos=None, vel=None, pin_ends=None):
    """The tuple loop.run_general takes for these mesh colliders this step
    (None when there is no triangle): the packed meshes, their grid and the
    substep scratch. pad: the largest collider offset of a vertex. margin:
    the cloth's own collision margin (ClothParams.collision_margin), added
    to every collider's thickness as capsules, planes and boxes add it to
    their distance. pos, vel ((3, n), the cloth at the step's start): only
    the triangles that can come near the cloth this step are binned and
    get substep rows (build_grid: its box, and where its pinned vertices
    go this step, pin_ends (3, n), grown by twice its fastest vertex's
    travel and CULL_MARGIN); without them, all."""
    packed = pack_meshes(meshes)
    if packed is None:
        return None
    v0, v1, tris, tparam = packed
    if margin > 0.0:
        tparam[:, 0] += np.float32(margin)
        tparam[:, 3] = np.maximum(tparam[:, 0], np.float32(1e-4))
    scratch = _SCRATCH.get(model)
    if (scratch is None or scratch.tris.shape != tris.shape or scratch.near.shape[0] != model.n
            or not np.array_equal(scratch.tris, tris)):
        scratch = _SCRATCH[model] = _MeshStep(tris, model.n)
    still = v1 is v0 or np.array_equal(v0, v1)
    if pos is None:
        lo = np.full(3, -3e38, np.float32)
        hi = np.full(3, 3e38, np.float32)
    else:
        reach = CULL_MARGIN + 2.0 * dt * float(np.sqrt((vel.astype(np.float64) ** 2).sum(axis=0).max()))
        lo, hi = pos.min(axis=1), pos.max(axis=1)
        if pin_ends is not None:
            # A pin animated fast from rest drags its cloth farther than the
            # velocities say.
            ends = pin_ends[:, model.pin_weight > 0]
            if ends.shape[1]:
                lo, hi = np.minimum(lo, ends.min(axis=1)), np.maximum(hi, ends.max(axis=1))
        lo = (lo - reach).astype(np.float32)
        hi = (hi + reach).astype(np.float32)
    kept = scratch.still
    if (still and kept is not None and kept[2] == float(pad) and np.all(lo >= kept[3]) and np.all(hi <= kept[4])
            and np.array_equal(kept[0], v0) and kept[1] == tparam.tobytes()):
        # Still, and the cloth inside the box it was culled to: the same grid,
        # and the rows made once.
        built = kept[5]
    else:
        if still and pos is not None:
            lo = lo - np.float32(STILL_SLACK)
            hi = hi + np.float32(STILL_SLACK)
        built = build_grid(v0, v1, tris, tparam, np.float32(pad), scratch.nbr, lo, hi)
        scratch.builds += 1
        scratch.still = (v0.copy(), tparam.tobytes(), float(pad), lo, hi, built) if still else None
        scratch.rows_once[0] = 1 if still else 0
    grid, start, items, tcell, sel = built
    scratch.culled = tris.shape[0] - sel.shape[0]
    if scratch.vs.shape[1] != v0.shape[0]:
        scratch.vs = np.zeros((2, v0.shape[0], 3), np.float32)
    return (v0, v1, tris, tparam, grid, start, items, tcell, scratch.tri1, scratch.tbox, np.float32(1.0 / dt),
            scratch.near, scratch.nbr, sel, scratch.rows_once, scratch.found, scratch.vs)


# mesh_step_args' tuple for no triangle: run_general takes it where a step
# has no mesh collider (the kernels see no triangle and skip), so one
# compiled run_general serves steps with and without mesh colliders (None
# would type, and compile, a second one).
NO_MESHES = (np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32), np.zeros((0, 3), np.int32),
             np.zeros((0, 4), np.float32), np.array((0, 0, 0, 1, 1, 1, 1, 0), np.float32), np.zeros(2, np.int32),
             np.zeros(0, np.int32), np.zeros((0, 6), np.int32), np.zeros((0, TRI1_COLS), np.float32),
             np.zeros((0, 6), np.float32), np.float32(1.0), np.zeros(0, np.uint8), np.zeros((0, 3), np.int32),
             np.zeros(0, np.int32), np.zeros(1, np.uint8), np.zeros(GATHER, np.int32),
             np.zeros((2, 0, 3), np.float32))
