"""Skin a dense render mesh onto a coarse simulated mesh.

Solver cost follows simulated vertices, visual detail follows rendered ones,
so the solver runs on a coarse mesh and the render mesh rides on it, the way
skeletal skinning rides on bones, with the coarse triangles as the skeleton.

``bind`` runs once: every dense vertex is attached to its closest coarse
triangle (uniform grid, numba, parallel over dense vertices), with
barycentrics and an offset expressed in the local frame of the reconstructed
surface (normal component first, so thickness and small details survive).

``skin`` runs every frame: smooth coarse vertex normals (weighted by the
rest pose's corner angles, like Blender's own; the face normal is weighted
unnormalised by angle / rest area, the same at rest and without a square root
per triangle) are recomputed from the current coarse positions, each coarse triangle is reconstructed as a
Phong-tessellated patch (project the flat barycentric point onto each
corner's tangent plane, blend the three with the barycentrics), the offset is
applied along the interpolated normal and its tangent frame, and pinned dense
vertices take their pin targets.

Shape factor. Phong tessellation is ``flat + alpha * (phong - flat)``. For
any quadratic surface sampled with exact normals the Phong displacement
(alpha = 1) is twice the true height of the surface above the flat triangle
(at an edge midpoint of a circle of radius R and half-angle t: R sin^2 t
versus the sagitta R (1 - cos t)), so alpha = 1 overshoots as much as flat
interpolation undershoots, and alpha = 1/2 is exact to second order.  Cloth
bends almost isometrically, into cylinders and cones, so the default is 1/2.

Dense normals are left to Blender: the runtime and the bakes write positions
only, and Blender recomputes the normals of the evaluated mesh (and of the
shape keys / cached points it plays back), so the artist's shading setup
(smooth/flat faces, sharp edges, normal modifiers) applies unchanged and no
normals have to be computed, stored or baked here.
"""

from dataclasses import dataclass, field
from typing import NamedTuple

import numba
import numpy as np
from numba import njit, prange

from .jit import FAST
from .hardware import prefer_scalar_loads
from .jit import NoAliasCompiler

__all__ = ["Binding", "bind", "skin", "triangulate", "vertex_normals"]

DEFAULT_SHAPE_FACTOR = 0.5
# Below this many dense vertices one thread beats the cost of waking a pool.
_PARALLEL_MIN_VERTICES = 20000
# Dense vertices per call of the serial pass in _skin_parallel.
_CHUNK = 4096
# Tangent-plane fixed-point steps that slide a barycentric point on the Phong
# surface until the dense vertex lies along its interpolated normal.
_REFINE_ITERATIONS = 4


class _SkinData(NamedTuple):
    """Per-binding arrays of the per-frame kernel, in its argument order
    (skin() unpacks it into the call; no per-frame lookups)."""

    tris: np.ndarray           # (3t,) uint32
    corner_weight: np.ndarray  # (3t,) float32: normal weight per corner
    alpha: np.float32          # shape factor
    unit_faces: np.uint8       # 1: normalise face normals per frame
    kind: np.uint8             # 0: no offsets, 1: along the normal only, 2: any
    corners: np.ndarray        # (3, m) uint32: coarse corners, dense order
    bary: np.ndarray           # (3, m) float32, dense order
    offset: np.ndarray         # (3, m) float32, dense order
    coarse: np.ndarray         # (6, c) float32 scratch: positions, unit normals
    pinned: np.ndarray         # (p,) uint32 dense vertices with pin weight > 0
    pin_weight: np.ndarray     # (p,) float32


@dataclass
class Binding:
    """Where each dense vertex sits on the coarse surface (from ``bind``).

    coarse_triangles (t, 3) int32: corners of the coarse triangles.
    triangle (m,) int32: coarse triangle each dense vertex is bound to.
    bary (3, m) float32: barycentrics on that triangle (inside it, sum 1).
    offset (3, m) float32: displacement from the reconstructed surface point,
        row 0 along the interpolated normal (thickness, small details), rows
        1-2 along the triangle's tangent frame: ~0 for vertices over the
        coarse surface, they carry parts that hang outside it (a frill).
    pin_weight (m,) float32 or None: 1 = the dense vertex takes its pin
        target exactly, 0 = skinned, in between = blended.
    shape_factor: Phong blend (see the module docstring).
    Holds per-frame scratch buffers: one Binding is skinned by one thread
    at a time.
    """

    coarse_triangles: np.ndarray
    triangle: np.ndarray
    bary: np.ndarray
    offset: np.ndarray
    pin_weight: np.ndarray | None
    shape_factor: float
    n_coarse: int
    # rest corner angles (t, 3): weights of the per-frame smooth normals
    corner_angle: np.ndarray
    # rest |(b - a) x (c - a)| (t,): skin weights the current (unnormalised)
    # face normal by angle / rest area, which is the angle-weighted unit
    # normal while the triangle keeps its area (cloth barely stretches)
    # without a square root per triangle per frame. None: unit weights.
    rest_double_area: np.ndarray | None = None
    pinned_indices: np.ndarray = field(init=False)
    _scratch: _SkinData = field(init=False, repr=False)

    def __post_init__(self):
        if self.pin_weight is None:
            self.pinned_indices = np.zeros(0, np.int32)
        else:
            self.pinned_indices = np.flatnonzero(self.pin_weight > 0.0).astype(np.int32)
        # One pass over the dense vertices in their own order, as
        # structure-of-arrays rows, so the compiler can vectorise it (the
        # corner reads are gathers, or scalar loads on hosts with slow
        # gathers: see _skin_vertices). It uses the cheapest formula that covers
        # every vertex: no offsets (vertices on the coarse surface), offsets
        # along the normal only, or any (tangential offsets: frills, parts
        # beyond a hem); vertices need no sorting by kind and the output is
        # written in order.
        off = self.offset
        if np.any(off[1:] != 0.0):
            kind = 2
        elif np.any(off[0] != 0.0):
            kind = 1
        else:
            kind = 0
        tris = self.coarse_triangles
        weight = np.asarray(self.corner_angle, np.float64)
        area = None if self.rest_double_area is None else np.asarray(self.rest_double_area, np.float64)
        if area is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                weight = np.where(area[:, None] > 0.0, weight / area[:, None], 0.0)
        pinned = self.pinned_indices
        # The per-frame normal sums visit the triangles four runs apart
        # (every fourth, from four starts): consecutive triangles of a mesh
        # share corners, and each corner's sum is a read-modify-write, so in
        # mesh order each update waited for the one before through memory
        # (45x45 proxy: 16.4 -> 14.4 us; the order of the sums changes the
        # normals by rounding only).
        order = np.argsort(np.arange(tris.shape[0]) % 4, kind="stable")
        self._scratch = _SkinData(
            np.ascontiguousarray(tris[order], dtype=np.uint32).reshape(-1),
            np.ascontiguousarray(weight[order], dtype=np.float32).reshape(-1),
            np.float32(self.shape_factor),
            np.uint8(area is None),
            np.uint8(kind),
            np.ascontiguousarray(tris[self.triangle].T, dtype=np.uint32).reshape(3, -1),
            np.ascontiguousarray(self.bary, dtype=np.float32).reshape(3, -1),
            np.ascontiguousarray(off, dtype=np.float32).reshape(3, -1),
            np.zeros((6, self.n_coarse), np.float32),
            pinned.astype(np.uint32),
            (np.zeros(0, np.float32) if self.pin_weight is None
             else np.ascontiguousarray(self.pin_weight[pinned], dtype=np.float32)),
        )

    @property
    def n_dense(self) -> int:
        return int(self.triangle.shape[0])


# --------------------------------------------------------------------------
# geometry kernels shared by bind and skin (must stay identical: bind stores
# offsets relative to exactly the surface skin rebuilds)
#
# Per frame, one pass over the coarse mesh computes each vertex's smooth
# normal (`_coarse_frame`, for bind and skin).
# The Phong point (alpha-blended with the flat one):
#   S = f - alpha * sum_i w_i n_i ((f - p_i) . n_i),   f = sum_i w_i p_i
# The frame at S: N = normalise(sum_i w_i n_i + 1e-6 F) (the tiny face-normal
# term keeps N finite where corner normals cancel, without a branch),
# T = unit first edge, B = F x T, F = unit face normal; offsets (on, ot, ob)
# place the dense vertex at S + on N + ot T + ob B.
#
# error_model="numpy": no Python zero-division checks in the hot loops.

# float32 constants: a float64 literal would drag the float32 per-frame
# kernels into float64 and conversions (bind's float64 data stays float64).
_FACE_EPS = np.float32(1e-6)
_ONE = np.float32(1.0)
_ZERO = np.float32(0.0)
_TINY = np.float32(1e-30)
# unsigned index arithmetic: int64 literals would make it signed again
_U1 = np.uint64(1)
_U2 = np.uint64(2)
_U3 = np.uint64(3)
_KERNEL = FAST


@njit(inline="always", fastmath=True)
def _closest_on_triangle(qx, qy, qz, ax, ay, az, bx, by, bz, cx, cy, cz):
    """Closest point on triangle abc to q: (squared distance, w0, w1, w2).

    Voronoi-region walk (Ericson, Real-Time Collision Detection 5.1.5), with
    a guard for zero-area triangles so they never produce NaN.
    """
    abx = bx - ax
    aby = by - ay
    abz = bz - az
    acx = cx - ax
    acy = cy - ay
    acz = cz - az
    apx = qx - ax
    apy = qy - ay
    apz = qz - az
    d1 = abx * apx + aby * apy + abz * apz
    d2 = acx * apx + acy * apy + acz * apz
    w0 = 1.0
    w1 = 0.0
    w2 = 0.0
    done = False
    if d1 <= 0.0 and d2 <= 0.0:
        done = True
    if not done:
        bpx = qx - bx
        bpy = qy - by
        bpz = qz - bz
        d3 = abx * bpx + aby * bpy + abz * bpz
        d4 = acx * bpx + acy * bpy + acz * bpz
        if d3 >= 0.0 and d4 <= d3:
            w0, w1, w2 = 0.0, 1.0, 0.0
            done = True
        if not done:
            vc = d1 * d4 - d3 * d2
            if vc <= 0.0 and d1 >= 0.0 and d3 <= 0.0 and d1 - d3 > 0.0:
                v = d1 / (d1 - d3)
                w0, w1, w2 = 1.0 - v, v, 0.0
                done = True
            if not done:
                cpx = qx - cx
                cpy = qy - cy
                cpz = qz - cz
                d5 = abx * cpx + aby * cpy + abz * cpz
                d6 = acx * cpx + acy * cpy + acz * cpz
                if d6 >= 0.0 and d5 <= d6:
                    w0, w1, w2 = 0.0, 0.0, 1.0
                    done = True
                if not done:
                    vb = d5 * d2 - d1 * d6
                    if vb <= 0.0 and d2 >= 0.0 and d6 <= 0.0 and d2 - d6 > 0.0:
                        w = d2 / (d2 - d6)
                        w0, w1, w2 = 1.0 - w, 0.0, w
                        done = True
                    if not done:
                        va = d3 * d6 - d5 * d4
                        if va <= 0.0 and (d4 - d3) >= 0.0 and (d5 - d6) >= 0.0 \
                                and (d4 - d3) + (d5 - d6) > 0.0:
                            w = (d4 - d3) / ((d4 - d3) + (d5 - d6))
                            w0, w1, w2 = 0.0, 1.0 - w, w
                            done = True
                        if not done:
                            denom = va + vb + vc
                            if denom > 1e-300:
                                v = vb / denom
                                w = vc / denom
                                w0, w1, w2 = 1.0 - v - w, v, w
                            else:
                                # Zero area: collinear corners; the best of the
                                # three edges is found by the caller's search
                                # over neighbours, a corner is a safe answer.
                                w0, w1, w2 = 1.0, 0.0, 0.0
    rx = w0 * ax + w1 * bx + w2 * cx - qx
    ry = w0 * ay + w1 * by + w2 * cy - qy
    rz = w0 * az + w1 * bz + w2 * cz - qz
    return rx * rx + ry * ry + rz * rz, w0, w1, w2


# --------------------------------------------------------------------------
# bind


@njit(cache=True)
def _build_grid(px, py, pz, tris, origin, cell, dims):
    """Bin triangles by bounding box into a uniform grid (CSR: start, items)."""
    nx_, ny_, nz_ = dims[0], dims[1], dims[2]
    n_cells = nx_ * ny_ * nz_
    count = np.zeros(n_cells + 1, np.int64)
    n_tris = tris.shape[0]
    lo = np.empty((n_tris, 3), np.int64)
    hi = np.empty((n_tris, 3), np.int64)
    for t in range(n_tris):
        for axis in range(3):
            if axis == 0:
                p = px
            elif axis == 1:
                p = py
            else:
                p = pz
            vmin = min(p[tris[t, 0]], min(p[tris[t, 1]], p[tris[t, 2]]))
            vmax = max(p[tris[t, 0]], max(p[tris[t, 1]], p[tris[t, 2]]))
            i0 = int(np.floor((vmin - origin[axis]) / cell))
            i1 = int(np.floor((vmax - origin[axis]) / cell))
            lo[t, axis] = min(max(i0, 0), dims[axis] - 1)
            hi[t, axis] = min(max(i1, 0), dims[axis] - 1)
        for i in range(lo[t, 0], hi[t, 0] + 1):
            for j in range(lo[t, 1], hi[t, 1] + 1):
                for k in range(lo[t, 2], hi[t, 2] + 1):
                    count[(i * ny_ + j) * nz_ + k + 1] += 1
    for c in range(n_cells):
        count[c + 1] += count[c]
    items = np.empty(count[n_cells], np.int32)
    fill = count[:n_cells].copy()
    for t in range(n_tris):
        for i in range(lo[t, 0], hi[t, 0] + 1):
            for j in range(lo[t, 1], hi[t, 1] + 1):
                for k in range(lo[t, 2], hi[t, 2] + 1):
                    c = (i * ny_ + j) * nz_ + k
                    items[fill[c]] = t
                    fill[c] += 1
    return count, items


@njit(inline="always")
def _cell_index(value, origin, cell, dim):
    i = int(np.floor((value - origin) / cell))
    return min(max(i, 0), dim - 1)


@njit(cache=True, parallel=True, fastmath=True)
def _bind_kernel(px, py, pz, tris, tri_box, coarse, alpha, qx, qy, qz, origin, cell, dims,
                 cell_start, cell_items, iterations, out_tri, out_bary, out_offset):
    """coarse: (6, c) rows of positions and unit smooth normals (_corners)."""
    rx_, ry_, rz_, rnx, rny, rnz = coarse[0], coarse[1], coarse[2], coarse[3], coarse[4], coarse[5]
    ny_ = dims[1]
    nz_ = dims[2]
    for q in prange(qx.shape[0]):
        x = qx[q]
        y = qy[q]
        z = qz[q]
        ci = _cell_index(x, origin[0], cell, dims[0])
        cj = _cell_index(y, origin[1], cell, dims[1])
        ck = _cell_index(z, origin[2], cell, dims[2])
        best = np.inf
        best_t = -1
        b0 = 1.0
        b1 = 0.0
        b2 = 0.0
        ring = 0
        while True:
            i_lo = max(ci - ring, 0)
            i_hi = min(ci + ring, dims[0] - 1)
            j_lo = max(cj - ring, 0)
            j_hi = min(cj + ring, dims[1] - 1)
            k_lo = max(ck - ring, 0)
            k_hi = min(ck + ring, dims[2] - 1)
            for i in range(i_lo, i_hi + 1):
                for j in range(j_lo, j_hi + 1):
                    for k in range(k_lo, k_hi + 1):
                        # Only the shell of this ring; the inside was searched.
                        if max(abs(i - ci), max(abs(j - cj), abs(k - ck))) != ring:
                            continue
                        c = (i * ny_ + j) * nz_ + k
                        for s in range(cell_start[c], cell_start[c + 1]):
                            t = cell_items[s]
                            # A triangle whose box is farther than the best
                            # so far cannot win (and one met again in a
                            # neighbouring cell is rejected here too).
                            gx = max(max(tri_box[t, 0] - x, x - tri_box[t, 3]), 0.0)
                            gy = max(max(tri_box[t, 1] - y, y - tri_box[t, 4]), 0.0)
                            gz = max(max(tri_box[t, 2] - z, z - tri_box[t, 5]), 0.0)
                            if gx * gx + gy * gy + gz * gz >= best:
                                continue
                            a = tris[t, 0]
                            b = tris[t, 1]
                            cc = tris[t, 2]
                            d2, w0, w1, w2 = _closest_on_triangle(
                                x, y, z, px[a], py[a], pz[a], px[b], py[b], pz[b],
                                px[cc], py[cc], pz[cc])
                            if d2 < best:
                                best = d2
                                best_t = t
                                b0 = w0
                                b1 = w1
                                b2 = w2
            # Every triangle not met yet lies in a cell outside the searched
            # box, so at least the distance to that box's open faces away.
            bound = np.inf
            covers = True
            if i_lo > 0:
                bound = min(bound, x - (origin[0] + i_lo * cell))
                covers = False
            if i_hi < dims[0] - 1:
                bound = min(bound, origin[0] + (i_hi + 1) * cell - x)
                covers = False
            if j_lo > 0:
                bound = min(bound, y - (origin[1] + j_lo * cell))
                covers = False
            if j_hi < dims[1] - 1:
                bound = min(bound, origin[1] + (j_hi + 1) * cell - y)
                covers = False
            if k_lo > 0:
                bound = min(bound, z - (origin[2] + k_lo * cell))
                covers = False
            if k_hi < dims[2] - 1:
                bound = min(bound, origin[2] + (k_hi + 1) * cell - z)
                covers = False
            if covers:
                break
            if best_t >= 0 and bound > 0.0 and best <= bound * bound:
                break
            ring += 1

        t = best_t
        a = tris[t, 0]
        b = tris[t, 1]
        c = tris[t, 2]
        # Slide the flat closest point over the Phong surface until the dense
        # vertex lies along the interpolated normal, staying inside the
        # triangle (Gauss-Newton with the flat triangle as the Jacobian).
        for _ in range(iterations):
            (sx, sy, sz, Nx, Ny, Nz, Fx, Fy, Fz, Tx, Ty, Tz,
             fx, fy, fz) = _patch_rows(rx_, ry_, rz_, rnx, rny, rnz, a, b, c, b0, b1, b2, alpha)
            rx = x - sx
            ry = y - sy
            rz = z - sz
            rn = rx * Nx + ry * Ny + rz * Nz
            _, b0, b1, b2 = _closest_on_triangle(
                fx + rx - rn * Nx, fy + ry - rn * Ny, fz + rz - rn * Nz,
                px[a], py[a], pz[a], px[b], py[b], pz[b], px[c], py[c], pz[c])
        (sx, sy, sz, Nx, Ny, Nz, Fx, Fy, Fz, Tx, Ty, Tz,
         fx, fy, fz) = _patch_rows(rx_, ry_, rz_, rnx, rny, rnz, a, b, c, b0, b1, b2, alpha)
        rx = x - sx
        ry = y - sy
        rz = z - sz
        # Solve r = on N + ot T + ob B exactly, so the rest pose comes back to
        # rounding; T, B are orthonormal and orthogonal to F, so on = r.F / N.F.
        det = Nx * Fx + Ny * Fy + Nz * Fz
        if abs(det) > 1e-6:
            on = (rx * Fx + ry * Fy + rz * Fz) / det
        else:
            # The smooth normal lies in the face plane (a fold sharper than
            # the coarse mesh resolves): plain projection, not exact.
            on = rx * Nx + ry * Ny + rz * Nz
        ux = rx - on * Nx
        uy = ry - on * Ny
        uz = rz - on * Nz
        Bx = Fy * Tz - Fz * Ty
        By = Fz * Tx - Fx * Tz
        Bz = Fx * Ty - Fy * Tx
        ot = ux * Tx + uy * Ty + uz * Tz
        ob = ux * Bx + uy * By + uz * Bz
        out_tri[q] = t
        out_bary[0, q] = b0
        out_bary[1, q] = b1
        out_bary[2, q] = b2
        out_offset[0, q] = on
        out_offset[1, q] = ot
        out_offset[2, q] = ob


def _as_points(array, name, n=None):
    points = np.asarray(array, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != 3:
        raise ValueError(f"{name} must be an (n, 3) array, got shape {points.shape}")
    if n is not None and points.shape[0] != n:
        raise ValueError(f"{name} has {points.shape[0]} rows, expected {n}")
    if not np.all(np.isfinite(points)):
        raise ValueError(f"{name} contains NaN or infinite coordinates")
    return points


def _corner_angles(positions, tris):
    """Interior angle (t, 3) float32 of every triangle corner."""
    p = np.asarray(positions, np.float64)[tris]  # (t, 3 corners, 3)
    angles = np.empty(tris.shape, np.float64)
    for corner in range(3):
        u = p[:, (corner + 1) % 3] - p[:, corner]
        v = p[:, (corner + 2) % 3] - p[:, corner]
        angles[:, corner] = np.arctan2(
            np.linalg.norm(np.cross(u, v), axis=1), np.einsum("ij,ij->i", u, v))
    return angles.astype(np.float32)


def _corners(px, py, pz, tris, corner_angle, dtype):
    """(6, c) rows of positions and unit vertex normals weighted by corner
    angle, in dtype (bind: float64): _coarse_frame, as skin computes them."""
    coarse = np.zeros((6, px.shape[0]), dtype)
    _coarse_frame(px, py, pz, np.ascontiguousarray(tris).reshape(-1),
                  np.ascontiguousarray(corner_angle).reshape(-1), 1, coarse)
    return coarse


def bind(coarse_rest, coarse_triangles, dense_rest, dense_pinned=None, *,
         shape_factor=DEFAULT_SHAPE_FACTOR):
    """Attach every dense vertex to its closest coarse triangle.

    coarse_rest (c, 3), coarse_triangles (t, 3) int, dense_rest (m, 3), all in
    the same space; dense_pinned (m,) bool (or 0..1 weights) marks dense
    vertices that follow their pin targets instead of the coarse surface.
    shape_factor: Phong blend, 0 = flat barycentric (see the module doc).
    Returns a ``Binding``. Parallel over dense vertices.
    """
    coarse = _as_points(coarse_rest, "coarse_rest")
    dense = _as_points(dense_rest, "dense_rest")
    tris = np.ascontiguousarray(coarse_triangles, dtype=np.int32)
    if tris.ndim != 2 or tris.shape[1] != 3:
        raise ValueError(
            f"coarse_triangles must be a (t, 3) int array, got shape {tris.shape}; "
            "use solver.skinning.triangulate for polygons")
    if tris.shape[0] == 0:
        raise ValueError("the coarse mesh has no triangles to bind to")
    if tris.min() < 0 or tris.max() >= coarse.shape[0]:
        raise ValueError("coarse_triangles refer to vertices outside coarse_rest")
    if not 0.0 <= shape_factor <= 1.0:
        raise ValueError(f"shape_factor must lie in [0, 1], got {shape_factor}")
    pin_weight = None
    if dense_pinned is not None:
        pin_weight = np.asarray(dense_pinned)
        if pin_weight.shape != (dense.shape[0],):
            raise ValueError(
                f"dense_pinned must have shape ({dense.shape[0]},), got {pin_weight.shape}")
        pin_weight = np.clip(pin_weight.astype(np.float32), 0.0, 1.0)
        if not np.any(pin_weight > 0.0):
            pin_weight = None

    corner_angle = _corner_angles(coarse, tris)
    px, py, pz = (np.ascontiguousarray(coarse[:, i]) for i in range(3))
    coarse_rows = _corners(px, py, pz, tris, corner_angle, np.float64)

    used = coarse[np.unique(tris)]
    lo = used.min(axis=0)
    hi = used.max(axis=0)
    corners = coarse[tris]  # (t, 3, 3)
    tri_extent = (corners.max(axis=1) - corners.min(axis=1)).max(axis=1)
    cell = float(np.mean(tri_extent))
    span = float(np.max(hi - lo))
    if not cell > 0.0:
        cell = span if span > 0.0 else 1.0
    # Cap the grid at a few cells per triangle so huge, sparse bounding boxes
    # (a thin sleeve far from a skirt) never allocate millions of empty cells.
    max_cells = max(64, 8 * tris.shape[0])
    while True:
        dims = np.maximum(np.floor((hi - lo) / cell).astype(np.int64) + 1, 1)
        if int(np.prod(dims)) <= max_cells:
            break
        cell *= 1.5
    cell_start, cell_items = _build_grid(px, py, pz, tris, lo, cell, dims)

    m = dense.shape[0]
    out_tri = np.empty(m, np.int32)
    out_bary = np.empty((3, m), np.float64)
    out_offset = np.empty((3, m), np.float64)
    qx, qy, qz = (np.ascontiguousarray(dense[:, i]) for i in range(3))
    tri_box = np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1)
    _bind_kernel(px, py, pz, tris, tri_box, coarse_rows, float(shape_factor), qx, qy, qz, lo, cell, dims,
                 cell_start, cell_items, _REFINE_ITERATIONS, out_tri, out_bary, out_offset)
    # Offsets below float32 resolution of the scene are rounding noise; zero
    # them so those vertices take skin's cheaper passes.
    size = max(float(np.ptp(dense, axis=0).max()) if len(dense) else 0.0, span, 1e-12)
    out_offset[np.abs(out_offset) < 1e-6 * size] = 0.0
    return Binding(
        coarse_triangles=tris,
        triangle=out_tri,
        bary=out_bary.astype(np.float32),
        offset=out_offset.astype(np.float32),
        pin_weight=pin_weight,
        shape_factor=float(shape_factor),
        n_coarse=int(coarse.shape[0]),
        corner_angle=corner_angle,
        rest_double_area=np.linalg.norm(
            np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]), axis=1),
    )


# --------------------------------------------------------------------------
# skin
#
# The per-frame kernels take arrays only at the top: every helper called in a
# loop is inline="always" and reads arrays the kernel already holds, and the
# counters are unsigned (no negative-index fix-ups). Check the compiled code
# for reference-count calls inside the loops after a change (DEVELOPERS.md).


@njit(**_KERNEL)
def _coarse_frame(px, py, pz, tris, corner_weight, unit_faces, coarse):
    """Coarse positions and unit smooth normals into the rows of `coarse`
    (6, c): x, y, z, nx, ny, nz; flat (3t,) triangles and corner weights.
    Skin calls it every frame (float32, see Binding.corner_weight), bind
    once at rest (float64, angle weights and unit faces, via _corners).

    Angle weights (as Blender's own vertex normals) keep a cylinder's normals
    radial even on a boundary row, where area weights tilt them towards the
    side with more triangles. The angles are the rest pose's: cloth barely
    shears, and acos per corner per frame would cost more than the skinning.

    Rows, not (c, 8) records: filling and normalising rows vectorises (the
    records were written with scatters: 25 -> 18 us for the 45x45 proxy) and
    the dense pass gathers from six rows as fast as from records. The
    positions are copied so the dense pass reads only the binding's arrays
    (`_skin_vertices` declares its arguments disjoint) and AoS input is read
    once.

    With unit_faces == 0 the face normal is left unnormalised and the weight
    is angle / rest double area (Binding.rest_double_area): the same normal
    at rest, no square root per triangle per frame; it drifts from the
    angle-weighted one only as far as triangles change area.
    """
    x, y, z = coarse[0], coarse[1], coarse[2]
    nx, ny, nz = coarse[3], coarse[4], coarse[5]
    nc = np.uint64(px.shape[0])
    for i in range(nc):
        x[i] = px[i]
        y[i] = py[i]
        z[i] = pz[i]
        nx[i] = _ZERO
        ny[i] = _ZERO
        nz[i] = _ZERO
    nt = np.uint64(tris.shape[0]) // np.uint64(3)
    for t in range(nt):
        a = tris[3 * t]
        b = tris[3 * t + 1]
        c = tris[3 * t + 2]
        e1x = x[b] - x[a]
        e1y = y[b] - y[a]
        e1z = z[b] - z[a]
        e2x = x[c] - x[a]
        e2y = y[c] - y[a]
        e2z = z[c] - z[a]
        fx = e1y * e2z - e1z * e2y
        fy = e1z * e2x - e1x * e2z
        fz = e1x * e2y - e1y * e2x
        if unit_faces != 0:
            inv = _ONE / np.sqrt(max(fx * fx + fy * fy + fz * fz, _TINY))
            fx *= inv
            fy *= inv
            fz *= inv
        w = corner_weight[3 * t]
        nx[a] += w * fx
        ny[a] += w * fy
        nz[a] += w * fz
        w = corner_weight[3 * t + 1]
        nx[b] += w * fx
        ny[b] += w * fy
        nz[b] += w * fz
        w = corner_weight[3 * t + 2]
        nx[c] += w * fx
        ny[c] += w * fy
        nz[c] += w * fz
    for i in range(nc):
        sx = nx[i]
        sy = ny[i]
        sz = nz[i]
        inv = _ONE / np.sqrt(max(sx * sx + sy * sy + sz * sz, _TINY))
        nx[i] = sx * inv
        ny[i] = sy * inv
        nz[i] = sz * inv


@njit(inline="always", fastmath=True, error_model="numpy")
def _patch_rows(x, y, z, nx, ny, nz, a, b, c, w0, w1, w2, alpha):
    """Phong point S, unit normal N, face normal F, tangent T and the flat
    point of coarse triangle abc at barycentrics w, from the rows of
    _coarse_frame. Unused results are dropped by the compiler."""
    ax = x[a]
    ay = y[a]
    az = z[a]
    anx = nx[a]
    any_ = ny[a]
    anz = nz[a]
    bx = x[b]
    by = y[b]
    bz = z[b]
    bnx = nx[b]
    bny = ny[b]
    bnz = nz[b]
    cx = x[c]
    cy = y[c]
    cz = z[c]
    cnx = nx[c]
    cny = ny[c]
    cnz = nz[c]
    fx = w0 * ax + w1 * bx + w2 * cx
    fy = w0 * ay + w1 * by + w2 * cy
    fz = w0 * az + w1 * bz + w2 * cz
    da = alpha * w0 * ((fx - ax) * anx + (fy - ay) * any_ + (fz - az) * anz)
    db = alpha * w1 * ((fx - bx) * bnx + (fy - by) * bny + (fz - bz) * bnz)
    dc = alpha * w2 * ((fx - cx) * cnx + (fy - cy) * cny + (fz - cz) * cnz)
    sx = fx - (da * anx + db * bnx + dc * cnx)
    sy = fy - (da * any_ + db * bny + dc * cny)
    sz = fz - (da * anz + db * bnz + dc * cnz)

    e1x = bx - ax
    e1y = by - ay
    e1z = bz - az
    e2x = cx - ax
    e2y = cy - ay
    e2z = cz - az
    Fx = e1y * e2z - e1z * e2y
    Fy = e1z * e2x - e1x * e2z
    Fz = e1x * e2y - e1y * e2x
    inv = _ONE / np.sqrt(max(Fx * Fx + Fy * Fy + Fz * Fz, _TINY))
    Fx *= inv
    Fy *= inv
    Fz *= inv
    nx = w0 * anx + w1 * bnx + w2 * cnx + _FACE_EPS * Fx
    ny = w0 * any_ + w1 * bny + w2 * cny + _FACE_EPS * Fy
    nz = w0 * anz + w1 * bnz + w2 * cnz + _FACE_EPS * Fz
    inv = _ONE / np.sqrt(max(nx * nx + ny * ny + nz * nz, _TINY))
    nx *= inv
    ny *= inv
    nz *= inv
    # e1 is orthogonal to F already; a zero-length edge gives T = 0, which
    # only drops the (tiny) tangential offsets of vertices on that triangle.
    inv = _ONE / np.sqrt(max(e1x * e1x + e1y * e1y + e1z * e1z, _TINY))
    return (sx, sy, sz, nx, ny, nz, Fx, Fy, Fz, e1x * inv, e1y * inv, e1z * inv, fx, fy, fz)


@njit(inline="always", fastmath=True, error_model="numpy")
def _skin_point(x, y, z, nx, ny, nz, alpha, a, b, c, w0, w1, w2, on, ot, ob):
    """Dense position at barycentrics w of coarse triangle abc, offsets (on,
    ot, ob). Branch-free, so numba's reference counts on the rows are pruned;
    a caller passing literal zero offsets gets the terms (and the normal,
    tangent and their square roots) compiled away."""
    (sx, sy, sz, Nx, Ny, Nz, Fx, Fy, Fz, Tx, Ty, Tz,
     _, _, _) = _patch_rows(x, y, z, nx, ny, nz, a, b, c, w0, w1, w2, alpha)
    Bx = Fy * Tz - Fz * Ty
    By = Fz * Tx - Fx * Tz
    Bz = Fx * Ty - Fy * Tx
    return (sx + on * Nx + ot * Tx + ob * Bx,
            sy + on * Ny + ot * Ty + ob * By,
            sz + on * Nz + ot * Tz + ob * Bz)


@njit(inline="always", fastmath=True, error_model="numpy")
def _apply_pins(pinned, pin_weight, targets, out):
    for s in range(np.uint64(pinned.shape[0])):
        q = 3 * np.uint64(pinned[s])
        w = pin_weight[s]
        if w >= _ONE:
            out[q] = targets[q]
            out[q + 1] = targets[q + 1]
            out[q + 2] = targets[q + 2]
        else:
            out[q] += w * (targets[q] - out[q])
            out[q + 1] += w * (targets[q + 1] - out[q + 1])
            out[q + 2] += w * (targets[q + 2] - out[q + 2])


# The dense pass reads each corner through index arrays: NoAliasCompiler
# (solver.jit) lets LLVM vectorise it anyway (it could read what the loop
# wrote), well ahead of the scalar pass on CPUs with fast gathers. Where
# gathers are slow (AMD Zen) its 18 corner reads as gathers cost as much as
# the scalar loads they replace; with prefer_scalar_loads the loads are
# scalar and the arithmetic stays vectorised, the fastest of the three
# (`make bench-simmesh`).
@njit(pipeline_class=NoAliasCompiler, **_KERNEL)
def _skin_vertices(kind, coarse, alpha, corners, bary, offset, out, lo, hi):
    """Dense vertices lo..hi-1, in order, with the cheapest formula that
    covers all of them. Its arguments must not overlap (`NoAliasCompiler`):
    skin() passes the binding's own arrays and its output only.

    Each component is read from a 1-D row: 2-D indexing (with the strides)
    kept the loop scalar. The loop bodies hold no branch and pass no array
    to a helper that has one (numba's reference counts would stay in the
    loop, which then does not vectorise either)."""
    prefer_scalar_loads()
    lo = np.uint64(lo)
    hi = np.uint64(hi)
    x, y, z, nx, ny, nz = coarse[0], coarse[1], coarse[2], coarse[3], coarse[4], coarse[5]
    ca, cb, cc = corners[0], corners[1], corners[2]
    w0, w1, w2 = bary[0], bary[1], bary[2]
    on, ot, ob = offset[0], offset[1], offset[2]
    if kind == 0:
        for k in range(lo, hi):
            px_, py_, pz_ = _skin_point(x, y, z, nx, ny, nz, alpha, ca[k], cb[k], cc[k], w0[k], w1[k], w2[k],
                                        _ZERO, _ZERO, _ZERO)
            q = _U3 * k
            out[q] = px_
            out[q + _U1] = py_
            out[q + _U2] = pz_
    elif kind == 1:
        for k in range(lo, hi):
            px_, py_, pz_ = _skin_point(x, y, z, nx, ny, nz, alpha, ca[k], cb[k], cc[k], w0[k], w1[k], w2[k],
                                        on[k], _ZERO, _ZERO)
            q = _U3 * k
            out[q] = px_
            out[q + _U1] = py_
            out[q + _U2] = pz_
    else:
        for k in range(lo, hi):
            px_, py_, pz_ = _skin_point(x, y, z, nx, ny, nz, alpha, ca[k], cb[k], cc[k], w0[k], w1[k], w2[k],
                                        on[k], ot[k], ob[k])
            q = _U3 * k
            out[q] = px_
            out[q + _U1] = py_
            out[q + _U2] = pz_


@njit(**_KERNEL)
def _skin_serial(pos, tris, corner_weight, alpha, unit_faces, kind, corners, bary, offset,
                 coarse, pinned, pin_weight, targets, out):
    """One frame: pos (3, c) rows (any strides), targets and out (m, 3)
    C-contiguous (targets (0, 3) without pins)."""
    out = out.reshape(out.size)
    _coarse_frame(pos[0], pos[1], pos[2], tris, corner_weight, unit_faces, coarse)
    _skin_vertices(kind, coarse, alpha, corners, bary, offset, out, 0, corners.shape[1])
    _apply_pins(pinned, pin_weight, targets.reshape(targets.size), out)


@njit(parallel=True, **_KERNEL)
def _skin_parallel(pos, tris, corner_weight, alpha, unit_faces, kind, corners, bary, offset,
                   coarse, pinned, pin_weight, targets, out):
    """_skin_serial with the dense pass split over threads in chunks (same
    formulas). Each chunk is a call of _skin_vertices: its own function,
    so it keeps prefer_scalar_loads' tuning (inlined into the prange body,
    which numba outlines, the dense loop gathered and 2 threads were no
    faster than 1 on Zen)."""
    out = out.reshape(out.size)
    _coarse_frame(pos[0], pos[1], pos[2], tris, corner_weight, unit_faces, coarse)
    m = corners.shape[1]
    chunks = (m + _CHUNK - 1) // _CHUNK
    for c in prange(chunks):
        _skin_vertices(kind, coarse, alpha, corners, bary, offset, out, c * _CHUNK, min(m, (c + 1) * _CHUNK))
    _apply_pins(pinned, pin_weight, targets.reshape(targets.size), out)


_NO_TARGETS = np.zeros((0, 3), np.float32)


def _coarse_rows(binding, coarse_positions):
    """coarse_positions as (3, c) float32 rows (a transposed view of (c, 3)
    input; the kernel copies the rows once)."""
    pos = coarse_positions
    if type(pos) is not np.ndarray or pos.dtype != np.float32:
        pos = np.asarray(pos, dtype=np.float32)
    c = binding.n_coarse
    shape = pos.shape
    if shape == (c, 3):
        return pos.T
    if shape == (3, c):
        return pos
    raise ValueError(
        f"coarse_positions must be ({c}, 3) or SoA (3, {c}), got {shape}")


def vertex_normals(positions, triangles):
    """Corner-angle weighted unit vertex normals (n, 3) float32, as skin
    computes them (there with the rest pose's angles)."""
    pos = np.asarray(positions, dtype=np.float32)
    tris = np.ascontiguousarray(triangles, dtype=np.int32)
    px, py, pz = (np.ascontiguousarray(pos[:, i]) for i in range(3))
    rows = _corners(px, py, pz, tris, _corner_angles(pos, tris), np.float32)
    return np.ascontiguousarray(rows[3:6].T)


def skin(binding, coarse_positions, out=None, pin_targets=None):
    """Dense positions (m, 3) float32 from the current coarse positions.

    coarse_positions: (c, 3) or the solver's SoA (3, c), float32 preferred
    (when c == 3 the array is read as (c, 3)). ``out`` (m, 3) float32 is
    filled in place when given. ``pin_targets`` (m, 3): required when the
    binding has pinned dense vertices; only their rows are read.
    Smooth coarse normals and the Phong patches are rebuilt on every call.
    """
    # Checks kept to attribute and shape tests: this runs every frame, and at
    # ~60 us per skin each microsecond of Python shows.
    pos = _coarse_rows(binding, coarse_positions)
    m = binding.n_dense
    if out is None:
        out = np.empty((m, 3), np.float32)
    elif out.shape != (m, 3) or out.dtype != np.float32:
        raise ValueError(f"out must be a ({m}, 3) float32 array, got {out.shape} {out.dtype}")
    targets = _NO_TARGETS
    if binding.pin_weight is not None:
        if pin_targets is None:
            raise ValueError(
                f"the binding pins {binding.pinned_indices.shape[0]} dense vertices; "
                "pass their pin_targets")
        targets = pin_targets
        if (type(targets) is not np.ndarray or targets.dtype != np.float32
                or not targets.flags.c_contiguous):
            targets = np.ascontiguousarray(targets, dtype=np.float32)
        if targets.shape != (m, 3):
            raise ValueError(f"pin_targets must be ({m}, 3), got {targets.shape}")
    kernel = _skin_parallel if m >= _PARALLEL_MIN_VERTICES and numba.get_num_threads() > 1 else _skin_serial
    # The kernel writes flat records: a strided `out` is filled through a copy.
    if out.flags.c_contiguous:
        kernel(pos, *binding._scratch, targets, out)
    else:
        flat_out = np.empty((m, 3), np.float32)
        kernel(pos, *binding._scratch, targets, flat_out)
        out[:] = flat_out
    return out


def triangulate(face_indices, face_sizes):
    """Fan-triangulate polygons (Blender's flat corner list + sizes) -> (t, 3) int32.

    Quads are split along their first diagonal; good enough for binding an
    authored proxy, whose surface Phong tessellation smooths anyway.
    """
    corners = np.asarray(face_indices, dtype=np.int32).ravel()
    sizes = np.asarray(face_sizes, dtype=np.int64).ravel()
    if sizes.sum() != corners.shape[0]:
        raise ValueError(
            f"face_sizes sum to {int(sizes.sum())} corners, face_indices has {corners.shape[0]}")
    if np.any(sizes < 3):
        raise ValueError("every face needs at least 3 corners")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    n_tris = sizes - 2
    face_of_tri = np.repeat(np.arange(sizes.shape[0]), n_tris)
    k = np.arange(n_tris.sum()) - np.repeat(np.cumsum(n_tris) - n_tris, n_tris)
    first = starts[face_of_tri]
    return np.stack(
        [corners[first], corners[first + k + 1], corners[first + k + 2]], axis=1
    ).astype(np.int32)
