"""Self and cloth-cloth collision with predictive contacts.

One `SelfCollision` per model. The step calls it twice:

- ``detect(pos, vel, dt, gravity)`` once at step start. Every vertex's whole
  step is predicted (``vel * dt + gravity * dt**2``) and taken relative to the
  cloth's mean displacement, so a cloth carried along as a whole produces no
  candidates. Triangles' swept boxes, fattened by half the thickness plus the
  margin, go through the broad phase (by default "patch": patches of the
  rest mesh, see ``broad_phase`` for the others); surviving triangle pairs
  that are not near (below) are tested feature by feature (the narrow phase):

  * point-point (regions set to ``MODE_POINT_POINT``), storing the normal at
    step start;
  * vertex-triangle, storing only the side the vertex started on (or, between
    layers, the side the layer order says);
  * edge-edge, storing the normal (in the frame of a triangle of the first
    edge, so it turns with the cloth).

  A contact is made when the pair is already within ``thickness * (1 +
  margin)`` or when its closing speed along the separating direction at step
  start, scaled by ``conservativeness``, would bring it that close before step
  end (the talk's dynamic collision radius). Contacts are then frozen for the
  whole step.

- ``solve(pos, prev_pos)`` in every substep iteration: Jacobi. Each contact
  computes its vertices' corrections from the positions as they are when the
  call starts; then each vertex averages its own corrections. The result does
  not depend on thread count or order. Friction (Coulomb, position level)
  uses the motion since ``prev_pos``.

- ``untangle(pos)`` once at step end while ``recover`` is set (the
  default): edges the step left through triangles are pushed back out, each
  to a consistent side (untangle.py: the part a closed intersection contour
  cuts off goes back, the layer order decides between layers), where this
  step's contacts are, and over the whole cloth once crossings are found
  there (``untangle_everywhere``: always the whole cloth). Frozen
  contacts keep a vertex on the side it started the step on, so without
  this a vertex that once went through stays through.

Exactly once: each triangle pair is visited once (canonical A < B, and, in
the grid, only in the lowest cell both boxes overlap). A feature pair (a
vertex and a triangle, two edges, two points) is met from every pair of
triangles around its features and is emitted only by the lowest such pair
that is not near and whose boxes overlap (checked after the distance test, so
it costs only for contacts). Near triangle pairs are skipped and get no
contacts: those sharing a corner, and those with a corner of one joined to a
corner of the other by a short edge, one on a triangle narrower than
NEAR_ALTITUDES contact distances (within two rings on a mesh that is fine
for its thickness; on a coarse one the next row of triangles gets contacts,
so a tight fold holds). A pair that
was closer than the thickness at rest is only held at its rest distance.

Regions: ``region`` gives every vertex a region id (one per cloth object after
`merge_meshes`, or per vertex group). ``modes[i, j]`` (i >= j, the lower
triangle; the upper one is ignored) chooses ``MODE_OFF``, ``MODE_POINT_POINT``
or ``MODE_FULL`` between regions i and j; ``modes[i, i]`` is region i's self
collision. Triangles belong to the region most of their corners are in (the
lowest on a three-way tie).

Layers: ``layers[r]`` (>= 0, or -1 for none) orders regions from inside out.
Between two layered regions, vertex-triangle contacts put the outer vertex on
the front (normal) side of an inner triangle and the inner vertex behind an
outer triangle (edge-edge contacts likewise), whatever side they started on,
so tangled layers come apart the right way. That holds where the two layers
face the same way and the feature is less than LAYER_DEPTH (one) thickness on
the wrong side; a fold of the inner layer, or a deeper tangle, keeps the side
it had at step start (forcing those through tore garments apart). Faces must
point outwards (Blender's default for a garment modelled around a body).

Caching: ``cache_contacts(pos, radius=...)`` detects once with a generous
radius and then every ``detect`` reuses those contacts (no detection at all)
until ``clear_cache()``. The contacts keep their features, so they hold
layers that stay together and slide less than a triangle against each
other (a jacket over a shirt, a lining); where the layers slide or part
further, use live detection. On the self-collision bench's layered sheets,
pinned along a capsule that swings 0.25 m every 0.6 s, the layers part by up
to 28 cm and contacts cached at rest let them cross from frame 11 on.

The package, in the order a step runs it: topology.py (built once per
model: near triangles, components, patches), broad.py (the broad phase),
narrow.py (contact generation), solve.py (the Jacobi solve), cache.py
(cached contacts' fans), untangle.py (intersection recovery); beside them
constants.py (kinds, modes, limits, kernel options), records.py (the named records the kernels take) and
geometry.py (closest points, frames). This module holds SelfCollision,
which drives them.
"""

import time
from collections import namedtuple

import numba
import numpy as np

from .broad import (FLAT_ALTITUDES, detect_grid, detect_patches, detect_patches_threaded, patch_work,
                    step_displacement, thread_work)
from .cache import NO_FANS, strip_fans, vt_distances
from .constants import (KIND_EDGE_EDGE, KIND_POINT_POINT, KIND_VERTEX_TRIANGLE, MODE_FULL, MODE_OFF,
                        MODE_POINT_POINT)
from .records import Contacts, Mesh, Patches, Regions
from .solve import build_vertex_slots, filter_rows, solve_parallel, solve_serial, solve_work
from .untangle import untangle as _untangle
from .layer_order import order_layers as _order_layers
from .topology import build_patches, patch_far_pairs, patch_vertices, triangle_components, triangle_rings

try:  # the core's error type when it is there
    from ..params import SolverError as _Error
except ImportError:  # pragma: no cover
    _Error = ValueError

__all__ = [
    "SelfCollision", "merge_meshes", "MergedMeshes", "triangulate",
    "MODE_OFF", "MODE_POINT_POINT", "MODE_FULL",
    "KIND_POINT_POINT", "KIND_VERTEX_TRIANGLE", "KIND_EDGE_EDGE", "solve_serial",
]

# Cached contacts between two layers: vertex-triangle contacts kept per
# vertex and facing layer (see cache_contacts).
_CACHED_VT_PER_VERTEX = 3

# slot_delta before the parallel solve has run (solve_args).
_NO_SLOTS = np.zeros((0, 4, 3), dtype=np.float32)
# A cloth of at least this many patches (about patch_size triangles each)
# detects on several threads when the step may use them (threads > 1 in
# detect); a smaller one stays serial, where a parallel region's start
# costs about what the second thread saves (benchmarks/bench_selfcollision.py,
# the "detect_threads" rows).
DETECT_SPLIT_MIN_PATCHES = 64
# Triangles whose corners are joined by a short edge are near, and get no
# contacts between them. An edge is short when a triangle on it has an
# altitude under this many contact distances (thickness * (1 + margin)):
# on a mesh that fine a corner's neighbour lies within the contact distance
# of the triangles beside it wherever the cloth bends. Where the triangles
# are wider the neighbour stays farther from them (beside them by about an
# altitude) until the cloth folds back over itself, so there only triangles
# that share a corner are near, and a tight fold of a coarse mesh cannot
# pass the next row of triangles through the row before it
# (tests/solver/test_selfcollision_crush.py, the folded strip). Where one
# of two patches touches such an edge, the flat test takes one altitude
# (broad.py), which still skips flat neighbours of that width.
NEAR_ALTITUDES = 2.0

MergedMeshes = namedtuple("MergedMeshes", "positions face_indices face_sizes region vertex_offset")


def triangulate(face_indices, face_sizes):
    """Fan-triangulate polygons (Blender's corner order) into (t, 3) int32."""
    face_indices = np.asarray(face_indices, dtype=np.int64).ravel()
    face_sizes = np.asarray(face_sizes, dtype=np.int64).ravel()
    if np.any(face_sizes < 3):
        raise _Error("face_sizes: every polygon needs at least 3 corners")
    if face_sizes.sum() != face_indices.size:
        raise _Error(f"face_sizes add up to {face_sizes.sum()} corners, face_indices has {face_indices.size}")
    starts = np.concatenate([[0], np.cumsum(face_sizes)[:-1]])
    ntri = face_sizes - 2
    face_of = np.repeat(np.arange(face_sizes.size), ntri)
    k = np.arange(ntri.sum()) - np.repeat(np.cumsum(ntri) - ntri, ntri)
    s = starts[face_of]
    tris = np.stack([face_indices[s], face_indices[s + 1 + k], face_indices[s + 2 + k]], axis=1)
    return tris.astype(np.int32)


def merge_meshes(meshes):
    """Concatenate several cloth meshes into one model's arrays.

    meshes: sequence of (positions (n_i, 3), face_indices, face_sizes) or
    (positions, triangles (t_i, 3)). Returns MergedMeshes(positions (N, 3)
    float32, face_indices (flat, offset), face_sizes, region (N,) int32 with
    region i for mesh i, vertex_offset (len + 1,) where mesh i's vertices are
    ``vertex_offset[i]:vertex_offset[i + 1]``).
    """
    positions, faces, sizes, region, offsets = [], [], [], [], [0]
    for i, mesh in enumerate(meshes):
        if len(mesh) == 3:
            p, fi, fs = mesh
            fi = np.asarray(fi, dtype=np.int64).ravel()
            fs = np.asarray(fs, dtype=np.int64).ravel()
        elif len(mesh) == 2:
            p, tri = mesh
            tri = np.asarray(tri, dtype=np.int64)
            if tri.ndim != 2 or tri.shape[1] != 3:
                raise _Error(f"mesh {i}: triangles must have shape (t, 3), got {tri.shape}")
            fi = tri.ravel()
            fs = np.full(tri.shape[0], 3, dtype=np.int64)
        else:
            raise _Error(f"mesh {i}: give (positions, face_indices, face_sizes) or (positions, triangles)")
        p = np.asarray(p, dtype=np.float32)
        if p.ndim != 2 or p.shape[1] != 3:
            raise _Error(f"mesh {i}: positions must have shape (n, 3), got {p.shape}")
        if fi.size and (fi.min() < 0 or fi.max() >= p.shape[0]):
            raise _Error(f"mesh {i}: face index out of range 0..{p.shape[0] - 1}")
        if fs.sum() != fi.size:
            raise _Error(f"mesh {i}: face_sizes add up to {fs.sum()}, face_indices has {fi.size}")
        positions.append(p)
        faces.append(fi + offsets[-1])
        sizes.append(fs)
        region.append(np.full(p.shape[0], i, dtype=np.int32))
        offsets.append(offsets[-1] + p.shape[0])
    return MergedMeshes(
        np.concatenate(positions).astype(np.float32),
        np.concatenate(faces).astype(np.int32),
        np.concatenate(sizes).astype(np.int32),
        np.concatenate(region),
        np.asarray(offsets, dtype=np.int64),
    )


def _per_region(name, value, n_regions, lo=0.0):
    arr = np.asarray(value, dtype=np.float32)
    if arr.ndim == 0:
        arr = np.full(n_regions, float(arr), dtype=np.float32)
    if arr.shape != (n_regions,):
        raise _Error(f"self collision {name}: give one number or one per region ({n_regions}), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < lo):
        raise _Error(f"self collision {name} must be finite and >= {lo}, got {arr}")
    return arr


class SelfCollision:
    """Self and cloth-cloth contacts of one model (see the module docstring).

    rest_positions (n, 3), triangles (t, 3): the model's rest mesh.
    region (n,) ints 0..R-1 (default all 0).
    thickness (m), friction (Coulomb mu), conservativeness (>= 0, 1 = the
    linear prediction, more = more contacts): a number or one per region.
    modes: (R, R) ints, lower triangle used (default MODE_FULL everywhere).
    layers: (R,) ints, -1 = not layered (default none).
    inv_mass: (n,) inverse masses (0 = pinned; default 1 everywhere). The
    array is kept by reference, so runtime pin changes written into it apply.
    margin: contacts are made within thickness * (1 + margin).
    broad_phase: "patch" (default: small connected patches with normal-cone
    culling of flat neighbourhoods, then sweep and prune) or "grid" (uniform
    grid over triangles): the same contacts; benchmarks/bench_selfcollision.py
    times both.
    patch_size, flat_cos: about how many triangles per patch (patches are
    grown inside the cells of a grid over the rest shape sized for that many,
    at most 4x as many); a union of neighbouring patches whose normals all
    lie within acos(flat_cos) of one axis counts as flat.
    parallel: numba threads for the solve (detection splits by the threads
    detect is given).
    """

    def __init__(self, rest_positions, triangles, region=None, *, thickness=0.005, friction=0.2,
                 conservativeness=1.5, modes=None, layers=None, inv_mass=None, margin=0.25,
                 broad_phase="patch", parallel=False, patch_size=48, flat_cos=0.7):
        rest = np.ascontiguousarray(np.asarray(rest_positions, dtype=np.float32))
        if rest.ndim != 2 or rest.shape[1] != 3:
            raise _Error(f"self collision: rest_positions must have shape (n, 3), got {rest.shape}")
        if not np.all(np.isfinite(rest)):
            raise _Error("self collision: rest_positions contain NaN or Inf")
        n = rest.shape[0]
        tri = np.ascontiguousarray(np.asarray(triangles, dtype=np.int32))
        if tri.ndim != 2 or tri.shape[1] != 3:
            raise _Error(f"self collision: triangles must have shape (t, 3), got {tri.shape}")
        if tri.size and (tri.min() < 0 or tri.max() >= n):
            raise _Error(f"self collision: triangle index out of range 0..{n - 1}")
        if region is None:
            region = np.zeros(n, dtype=np.int32)
        region = np.ascontiguousarray(np.asarray(region, dtype=np.int32))
        if region.shape != (n,) or (n and region.min() < 0):
            raise _Error(f"self collision: region must be (n,) = ({n},) ids >= 0, got {region.shape}")
        n_regions = int(region.max()) + 1 if n else 1
        if broad_phase not in ("patch", "grid"):
            raise _Error(f"self collision: broad_phase must be 'patch' or 'grid', got {broad_phase!r}")
        self.patch_size = int(patch_size)
        self.flat_cos = float(flat_cos)
        self.n = n
        self.rest = rest
        self.triangles = tri
        self.region = region
        self.n_regions = n_regions
        self.broad_phase = broad_phase
        self.parallel = bool(parallel)
        self._threaded_key = None   # solver.threads.compile_key of detect_patches_threaded for these records
        self.detect_threads = 1     # workers of the last detection (1: the serial one)
        self.margin = float(margin)
        if not (self.margin >= 0.0):
            raise _Error(f"self collision: margin must be >= 0, got {margin}")
        self.set_params(thickness=thickness, friction=friction, conservativeness=conservativeness,
                        modes=modes, layers=layers)
        self.inv_mass = (np.ones(n, dtype=np.float32) if inv_mass is None
                         else np.asarray(inv_mass, dtype=np.float32))
        if self.inv_mass.shape != (n,):
            raise _Error(f"self collision: inv_mass must have shape ({n},), got {self.inv_mass.shape}")
        self._build_topology()
        self._acc = np.zeros(4 * n, dtype=np.float32)   # the serial solve's per-vertex sums
        # and the vertices they touch (one spare: _scatter writes an item
        # before it decides whether to count it)
        self._touched = np.empty(n + 1, dtype=np.uint32)
        self._capacity = max(64, 2 * len(tri))
        self._alloc(self._capacity)
        self._set_contacts(0)
        self.cached = False
        self.detect_ms = 0.0
        self.solve_ms = 0.0
        self.candidates = 0
        self.narrow_pairs = 0
        self._build_untangle()

    @classmethod
    def from_model(cls, model, **kwargs):
        """Build from a solver model (rest_positions, triangles, region, inverse masses)."""
        inv_mass = kwargs.pop("inv_mass", None)
        if inv_mass is None:
            for name in ("inv_mass", "inverse_mass"):
                if getattr(model, name, None) is not None:
                    inv_mass = getattr(model, name)
                    break
        return cls(model.rest_positions, model.triangles, getattr(model, "region", None),
                   inv_mass=inv_mass, **kwargs)

    @classmethod
    def from_mesh(cls, rest_positions, face_indices, face_sizes, region=None, **kwargs):
        """Build from polygons (fan-triangulated)."""
        return cls(rest_positions, triangulate(face_indices, face_sizes), region, **kwargs)

    # ------------------------------------------------------------ settings

    def set_params(self, thickness=None, friction=None, conservativeness=None, modes=None, layers=None):
        """Change per-region settings between steps. A thickness that turns
        an edge short or long (NEAR_ALTITUDES) remakes which triangles are near
        (_build_near, milliseconds); nothing else is rebuilt."""
        R = self.n_regions
        if thickness is not None:
            value = _per_region("thickness", thickness, R)
            if np.any(value <= 0):
                raise _Error(f"self collision thickness must be > 0, got {value}")
            self.thickness = value
            if hasattr(self, "_short"):
                self._build_near()
        if friction is not None:
            self.friction = _per_region("friction", friction, R)
        if conservativeness is not None:
            self.conservativeness = _per_region("conservativeness", conservativeness, R)
        if modes is not None or not hasattr(self, "modes"):
            m = np.full((R, R), MODE_FULL, dtype=np.int8) if modes is None else np.asarray(modes)
            if m.shape != (R, R) or not np.all(np.isin(m, (MODE_OFF, MODE_POINT_POINT, MODE_FULL))):
                raise _Error(f"self collision modes must be ({R}, {R}) with values 0 (off), 1 (point-point), "
                             f"2 (full mesh), got shape {m.shape}")
            self.modes = np.ascontiguousarray(m.astype(np.int8))
        if layers is not None or not hasattr(self, "layers"):
            lay = np.full(R, -1, dtype=np.int32) if layers is None else np.asarray(layers, dtype=np.int32)
            if lay.shape != (R,) or np.any(lay < -1):
                raise _Error(f"self collision layers must be one int >= -1 per region ({R}), got {lay}")
            self.layers = np.ascontiguousarray(lay)

    def set_inv_mass(self, inv_mass):
        inv_mass = np.asarray(inv_mass, dtype=np.float32)
        if inv_mass.shape != (self.n,):
            raise _Error(f"self collision: inv_mass must have shape ({self.n},), got {inv_mass.shape}")
        self.inv_mass = inv_mass

    # ------------------------------------------------------------ topology

    def _build_topology(self):
        tri = self.triangles
        n = self.n
        nt = tri.shape[0]
        # Edges of the triangulation, each once (sorted endpoints).
        te = np.stack([tri, np.roll(tri, -1, axis=1)], axis=2).reshape(-1, 2).astype(np.int64)
        te.sort(axis=1)
        key = te[:, 0] * max(n, 1) + te[:, 1]
        uniq, inverse = np.unique(key, return_inverse=True)
        self.edges = np.ascontiguousarray(np.stack([uniq // max(n, 1), uniq % max(n, 1)], axis=1).astype(np.int32))
        self.tri_edges = np.ascontiguousarray(inverse.reshape(nt, 3).astype(np.int32))
        # The edges between two vertices: _build_near makes the adjacency
        # of the short ones.
        self._adj_edges = self.edges[self.edges[:, 0] != self.edges[:, 1]]
        self.tri_comp = triangle_components(tri, n)
        # Vertex -> triangles (ascending) and edge -> its first two triangles,
        # for the canonical emission rule.
        tv = tri.reshape(-1).astype(np.int64)
        order = np.argsort(tv, kind="stable")
        self.vtri = np.ascontiguousarray((order // 3).astype(np.int32))
        vs = np.zeros(n + 1, dtype=np.int64)
        np.add.at(vs, tv + 1, 1)
        self.vtri_start = np.cumsum(vs)
        et = np.full((len(self.edges), 2), -1, dtype=np.int32)
        fe = self.tri_edges.reshape(-1).astype(np.int64)
        order = np.argsort(fe, kind="stable")
        fe_sorted = fe[order]
        first = np.searchsorted(fe_sorted, np.arange(len(self.edges)))
        rank = np.arange(len(fe_sorted)) - first[fe_sorted]
        keep = rank < 2
        et[fe_sorted[keep], rank[keep]] = (order[keep] // 3).astype(np.int32)
        self.edge_tris = np.ascontiguousarray(et)
        # Each edge's width: the smallest altitude of the triangles on it
        # (_build_near's measure of a coarse mesh).
        c = self.rest[tri].astype(np.float64).reshape(-1, 3, 3)
        sides = c[:, [1, 2, 0]] - c
        longest = np.linalg.norm(sides, axis=2).max(axis=1, initial=0.0)
        altitude = np.linalg.norm(np.cross(sides[:, 0], sides[:, 1]), axis=1) / np.maximum(longest, 1e-30)
        on_edge = et[self.edges[:, 0] != self.edges[:, 1]]
        self._adj_width = np.where(on_edge >= 0, altitude[np.maximum(on_edge, 0)], np.inf).min(axis=1)
        # Triangle region: the majority of its corners, else the lowest.
        r = self.region[tri] if nt else np.zeros((0, 3), np.int32)
        tri_region = np.min(r, axis=1) if nt else np.zeros(0, np.int32)
        maj = np.where(r[:, 1] == r[:, 2], r[:, 1], tri_region) if nt else tri_region
        maj = np.where(r[:, 0] == r[:, 1], r[:, 0], maj) if nt else maj
        maj = np.where(r[:, 0] == r[:, 2], r[:, 0], maj) if nt else maj
        self.tri_region = np.ascontiguousarray(maj.astype(np.int32))
        corners = self.rest[tri]   # (nt, 3, 3): the patches' seed order and cells both start here
        # Patches are seeded in the Morton order of the rest centroids.
        if nt:
            c = corners.mean(axis=1)
            lo = c.min(axis=0)
            span = max(float((c.max(axis=0) - lo).max()), 1e-9)
            q = np.clip(((c - lo) / span * 1023).astype(np.int64), 0, 1023)
            code = np.zeros(nt, dtype=np.int64)
            for bit in range(10):
                for ax in range(3):
                    code |= ((q[:, ax] >> bit) & 1) << (3 * bit + ax)
            seed_order = np.argsort(code, kind="stable").astype(np.int32)
        else:
            seed_order = np.zeros(0, np.int32)
        self._pstart, self._ptris, self._pnstart, self._pnbr = build_patches(
            tri, self.tri_edges, len(self.edges), n, seed_order, self._patch_cells(corners),
            4 * self.patch_size, self.patch_size // 2)
        self._pvstart, self._pverts, self._patch_of = patch_vertices(self._pstart, self._ptris, tri, n)
        self._disp = np.empty((3, n), np.float32)
        self._short = None
        self._build_near()

    def _build_near(self):
        """Which triangles are near (get no contacts between them): those
        sharing a corner, or with corners joined by a short edge, one with a
        triangle narrower than NEAR_ALTITUDES contact distances (the
        thickness of its ends' regions, with the margin). Made again when a
        thickness change turns an edge short or long (set_params), with what
        depends on it: the rings, the patches' own far pairs, the flat
        test's altitudes."""
        e, n, tri = self._adj_edges, self.n, self.triangles
        reach = self.thickness.astype(np.float64) * (1.0 + self.margin)
        limit = NEAR_ALTITUDES * np.maximum(reach[self.region[e[:, 0]]], reach[self.region[e[:, 1]]])
        short = self._adj_width < limit
        if self._short is not None and np.array_equal(short, self._short):
            return
        self._short = short
        e = e[short]
        a = np.concatenate([e[:, 0], e[:, 1]])
        b = np.concatenate([e[:, 1], e[:, 0]])
        order = np.argsort(a, kind="stable")
        near = np.ascontiguousarray(b[order].astype(np.int32))
        near_start = np.zeros(n + 1, dtype=np.int64)
        np.add.at(near_start, a + 1, 1)
        self.near_start, self.near = np.cumsum(near_start), near
        self.ring_start, self.ring = triangle_rings(tri, self.near_start, self.near, n)
        self._fstart, self._fpair = patch_far_pairs(self._pstart, self._ptris, tri, self.ring_start,
                                                       self.ring, n)
        # The flat test's bound, per patch: a triangle of a patch whose
        # vertices' edges are all short and one that is not near it are more
        # than two rings apart, FLAT_ALTITUDES smallest altitudes across a
        # flat union; elsewhere they need only share no corner: one altitude.
        touches_long = np.zeros(n, dtype=bool)
        touches_long[self._adj_edges[~short].reshape(-1)] = True
        ends = self._pvstart
        pv = (np.add.reduceat(touches_long[self._pverts[:ends[-1]]].astype(np.int32), ends[:-1])
              if ends[-1] > 0 else np.zeros(len(ends) - 1, np.int32))
        flat_alt = np.where(pv > 0, 1.0, FLAT_ALTITUDES).astype(np.float32)
        # Fresh stamps: one left by a wider ring would hide a pair.
        self._patch_work = tuple(patch_work(n, len(tri), len(self._pstart) - 1))
        self._tw = None
        # Plain tuples of the records' fields for the kernels (see broad.detect_patches).
        self._mesh = tuple(Mesh(self.rest, tri, self.tri_edges, self.edges, self.edge_tris, self.tri_region,
                                self.tri_comp, self.vtri_start, self.vtri, self.near_start, self.near,
                                self.ring_start, self.ring))
        self._patches = tuple(Patches(self._pstart, self._ptris, self._pnstart, self._pnbr, self._fstart, self._fpair,
                                      self._pvstart, self._pverts, self._patch_of, np.float32(self.flat_cos),
                                      np.ascontiguousarray(flat_alt)))

    def _patch_cells(self, corners):
        """Per triangle, its cell in a grid over the rest shape whose cells
        hold about patch_size triangles: patches are grown inside one cell,
        so they come out compact (a breadth-first patch capped by size alone
        ends ragged, and its box then overlaps patches it does not touch).
        corners: (nt, 3, 3) rest positions of the triangles' corners."""
        nt = corners.shape[0]
        if nt == 0:
            return np.zeros(0, np.int64)
        p = corners.astype(np.float64)
        area = 0.5 * np.linalg.norm(np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]), axis=1)
        c = p.mean(axis=1)
        lo = c.min(axis=0)
        span = float((c.max(axis=0) - lo).max())
        a = float(area[area > 0].mean()) if np.any(area > 0) else 0.0
        h = np.sqrt(self.patch_size * a) if a > 0 else span
        if not h > 0:
            return np.zeros(nt, np.int64)
        g = np.floor((c - lo) / h).astype(np.int64)
        return np.unique(g, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)

    # ------------------------------------------------------------ contacts

    def _alloc(self, cap):
        self._out_vertex = np.empty((cap, 4), dtype=np.int32)
        self._out_kind = np.empty(cap, dtype=np.int8)
        self._out_normal = np.empty((cap, 3), dtype=np.float32)
        self._out_frame = np.empty(cap, dtype=np.int32)
        self._out_target = np.empty(cap, dtype=np.float32)
        self._out_friction = np.empty(cap, dtype=np.float32)
        self._out = tuple(Contacts(self._out_vertex, self._out_kind, self._out_normal, self._out_frame,
                                   self._out_target, self._out_friction))
        self._capacity = cap

    def _set_contacts(self, count):
        if count == 0 and getattr(self, "count", -1) == 0 and hasattr(self, "_filter_rows"):
            return  # still none: the empty arrays stand (6 us a step saved)
        self.count = count
        self.contact_vertex = self._out_vertex[:count]
        self.contact_kind = self._out_kind[:count]
        self.contact_normal = self._out_normal[:count]
        self.contact_frame = self._out_frame[:count]
        self.contact_target = self._out_target[:count]
        self.contact_friction = self._out_friction[:count]
        # Each active contact's corrections, for the parallel solve's gather
        # only (the serial scatter reads them where pass 1 left them): made
        # when it first runs after this detect.
        self._slot_delta = _NO_SLOTS
        self._slot_active = np.zeros(count, dtype=np.uint8)
        self._filter_rows = filter_rows(self.contact_vertex, self.contact_kind, self.contact_normal)
        self._solve_work = solve_work(count)
        # Each vertex's contact slots, for the parallel solve's gather only:
        # built when it first runs after this detect.
        self._vertex_slots = None
        # Strip fans (cache_contacts only): none.
        self._fans = NO_FANS

    def _thread_work(self, workers):
        """Per-worker scratch for the threaded detection (made again when
        the number of workers or the room changes), its per-detect rows
        zeroed."""
        tw = getattr(self, "_tw", None)
        if tw is None or tw.fill.shape[0] != workers or tw.kind.shape[1] != self._capacity:
            npatch = len(self._pstart) - 1
            tw = self._tw = thread_work(self.n, len(self.triangles), npatch, workers, self._capacity)
        # The two-ring stamps need no clearing: a triangle stamps its own
        # ring before it reads a stamp, and a stamp left by an earlier detect
        # names a triangle whose ring the vertex is in.
        tw.ready.fill(0)
        tw.fill.fill(0)
        tw.claim.fill(0)
        return tw

    def _threaded_args(self, threads, pos, disp, regions, stats):
        """detect_patches_threaded's arguments when `threads` > 1, the cloth
        has at least DETECT_SPLIT_MIN_PATCHES patches, numba has 2 threads or
        more on this thread and that kernel is compiled
        (solver.threads.start_compile: the serial kernel until then, and
        for good if it fails; the same contacts either way), else None.
        One worker per thread, at most `threads` of numba's."""
        if self.broad_phase != "patch" or threads < 2 or len(self._pstart) - 1 < DETECT_SPLIT_MIN_PATCHES:
            return None
        # numba's count on this thread (1 inside solver.threads.run_all's
        # jobs): asked only here, so a small cloth never starts numba's threads.
        workers = min(int(threads), numba.get_num_threads())
        if workers < 2:
            return None
        from .. import threads as _threads

        if not _threads.start_compile(self._threaded_key_for(pos, regions, stats, workers)):
            return None
        return (pos, disp, self._mesh, regions, self._patches, self._patch_work,
                tuple(self._thread_work(workers)), self._out, stats)

    def _threaded_key_for(self, pos, regions, stats, workers):
        if self._threaded_key is None:
            from .. import threads as _threads

            # Typed once (about a detection's time): the records keep their
            # types. Compiled as detect_patches is (the step calls detect
            # outside jit.compiled_fast), so the two make the same contacts
            # bit for bit.
            probe = (pos, self._disp, self._mesh, regions, self._patches, self._patch_work,
                     tuple(self._thread_work(workers)), self._out, stats)
            self._threaded_key = _threads.compile_key(detect_patches_threaded, probe, fast=False)
        return self._threaded_key

    def compile_threaded_detection(self):
        """Compile (or load from numba's cache) the threaded detection for
        this cloth's records on this thread, now, whatever its size
        (scene/warmup_child.py, so that a large cloth's first play loads
        it). Returns whether it compiled."""
        from .. import threads as _threads

        regions = tuple(Regions(self.modes, self.thickness, self.friction, self.conservativeness, self.layers,
                                np.float32(self.margin)))
        pos = np.zeros((3, self.n), np.float32)
        return _threads.compile_now(self._threaded_key_for(pos, regions, np.zeros(2, np.int64), 2))

    def _run_detect(self, pos, disp, margin, threads=1):
        stats = np.zeros(2, dtype=np.int64)
        regions = tuple(Regions(self.modes, self.thickness, self.friction, self.conservativeness, self.layers,
                                np.float32(margin)))
        while True:
            threaded = self._threaded_args(threads, pos, disp, regions, stats)
            self.detect_threads = 1 if threaded is None else threaded[6][13].shape[0]   # ThreadWork.fill
            if threaded is not None:
                count = detect_patches_threaded(*threaded)
            elif self.broad_phase == "patch":
                count = detect_patches(pos, disp, self._mesh, regions, self._patches, self._patch_work, self._out,
                                       stats)
            else:
                count = detect_grid(pos, disp, self._mesh, regions, self._out, stats)
            if count <= self._capacity:
                break
            self._alloc(int(count * 1.5) + 64)
        self.candidates = int(stats[0])
        self.narrow_pairs = int(stats[1])
        self._set_contacts(count)
        return count

    def _check(self, pos, name):
        if pos.shape != (3, self.n) or pos.dtype != np.float32:
            raise _Error(f"self collision: {name} must be float32 (3, {self.n}), got {pos.dtype} {pos.shape}")

    def detect(self, pos, vel, dt, gravity, threads=1):
        """Find this step's contacts (once per step, at step start) and freeze them.

        pos, vel: float32 (3, n) at step start; dt: the step; gravity (3,).
        threads: the threads the cloth may use (its resolved setting): with
        2 or more, a cloth of DETECT_SPLIT_MIN_PATCHES patches or more
        splits the patch broad phase over numba's threads on this thread
        (the contacts are the same bytes for any count). With cached contacts this does nothing.
        Returns the contact count.
        """
        if self.cached:
            self.detect_ms = 0.0
            self.solve_ms = 0.0
            return self.count
        t0 = time.perf_counter()
        self._check(pos, "pos")
        self._check(vel, "vel")
        g = np.asarray(gravity, dtype=np.float32).reshape(3)
        if not step_displacement(pos, vel, np.float32(dt), g[0], g[1], g[2], self._disp):
            raise _Error("self collision: positions or velocities contain NaN or Inf")
        count = self._run_detect(pos, self._disp, self.margin, int(threads))
        self.detect_ms = (time.perf_counter() - t0) * 1e3
        self.solve_ms = 0.0
        return count

    def cache_contacts(self, pos, radius=None, vel=None, dt=0.0, gravity=(0.0, 0.0, 0.0), between_regions=False):
        """Detect once now, with contacts made within ``radius`` (default 4x
        the thickness), and reuse them every step without detection until
        ``clear_cache()``. Contacts only push when violated, so a generous
        radius costs solve time, not wrong behaviour. between_regions: keep
        only contacts between different regions (layers of a garment), and
        between two layered regions only vertex-triangle ones (each vertex's
        three nearest triangles of the other layer)."""
        self._check(pos, "pos")
        if radius is None:
            radius = 4.0 * float(self.thickness.max())
        margin = max(float(radius) / float(self.thickness.min()) - 1.0, self.margin)
        disp = (np.zeros_like(pos) if vel is None else
                vel * np.float32(dt) + np.asarray(gravity, np.float32).reshape(3, 1) * np.float32(dt * dt))
        self.cached = False
        count = self._run_detect(pos, disp, margin)
        if between_regions:
            # Layered garments: keep only contacts across regions (the
            # layers), so the solve stays cheap; a cloth's own folds would
            # need live detection anyway.
            v = self.contact_vertex
            kind = self.contact_kind
            r0 = self.region[v[:, 0]]
            r1 = self.region[np.where(kind == KIND_EDGE_EDGE, v[:, 2], v[:, 1])]
            across = r0 != r1
            # Between two layers most cached contacts are edge-edge pairs of
            # parallel edges (three times the vertex-triangle ones), and the
            # solve pays for each every iteration: drop them. The
            # vertex-triangle contacts hold parallel layers apart, and the
            # layer order fixes their side. On the swung layered bench scene
            # (25,678 contacts in full, 6,912 vertex-triangle, 3,738 kept)
            # this kept 0 intersecting triangle pairs and no outer vertex
            # behind the inner layer over the first 40 frames (the full set:
            # 20 pairs at frame 20); keeping the nearest one or two triangles
            # per vertex let 80 pairs or some vertices through.
            lay0 = self.layers[r0]
            lay1 = self.layers[r1]
            layered = across & (lay0 >= 0) & (lay1 >= 0) & (lay0 != lay1)
            keep_mask = across & ~(layered & (kind == KIND_EDGE_EDGE))
            # Of the vertex-triangle ones, each vertex keeps its three nearest
            # triangles of the facing layer (the solve re-finds the closest
            # point on each, so the layers may slide by part of a triangle).
            idx = np.flatnonzero(layered & (kind == KIND_VERTEX_TRIANGLE))
            if idx.size:
                dist = vt_distances(pos, v, kind)[idx]
                key = v[idx, 0].astype(np.int64) * self.n_regions + r1[idx]
                order = np.lexsort((dist, key))
                ks = key[order]
                first = np.searchsorted(ks, ks)
                rank = np.arange(ks.size) - first
                keep_mask[idx[order[rank >= _CACHED_VT_PER_VERTEX]]] = False
            keep = np.flatnonzero(keep_mask)
            for arr in (self._out_vertex, self._out_kind, self._out_normal, self._out_frame,
                        self._out_target, self._out_friction):
                arr[:len(keep)] = arr[keep]
            count = len(keep)
        self._fans_first(count)
        self.cached = True
        return count

    def _fans_first(self, count):
        """Cached contacts: the vertices' strip fans (strip_fans: three
        vertex-triangle contacts against triangles joined edge to edge, as a
        vertex's nearest triangles of a facing layer are) first, fan after
        fan for each of the three places, then the other contacts in their
        order. The solve's filter then reads a fan's five corners once
        instead of nine corners for its three contacts."""
        fans, order, sign = strip_fans(self._out_vertex[:count], self._out_kind[:count], self.n)
        if order.size:
            rest = np.ones(count, dtype=bool)
            rest[order] = False
            perm = np.concatenate([order, np.flatnonzero(rest)])
            for arr in (self._out_vertex, self._out_kind, self._out_normal, self._out_frame,
                        self._out_target, self._out_friction):
                arr[:count] = arr[perm]
        self._set_contacts(count)
        self._fans = fans
        # The filter's sides of the fans' contacts, for their triangles'
        # corners in strip order (c_s, c_s+1, c_s+2): rows 1-3 keep each
        # triangle's own corner order, so from here on these rows are only
        # right read with self._fans (as pass 1 reads them).
        self._filter_rows[4, :order.size] *= sign

    def clear_cache(self):
        self.cached = False

    # ------------------------------------------------------------ recovery

    def _build_untangle(self):
        """What untangle() keeps: each vertex's piece (connected mesh) and
        its size, the hash grid's cell (the mean rest edge), scratch."""
        n = self.n
        parent = np.arange(n, dtype=np.int64)
        e = self.edges
        if len(e):
            # Connected pieces by repeated label propagation over the edges.
            lab = np.arange(n, dtype=np.int64)
            while True:
                m = np.minimum(lab[e[:, 0]], lab[e[:, 1]])
                new = lab.copy()
                np.minimum.at(new, e[:, 0], m)
                np.minimum.at(new, e[:, 1], m)
                new = new[new]
                if np.array_equal(new, lab):
                    break
                lab = new
            parent = lab
        self._piece = np.ascontiguousarray(parent)
        self._piece_size = np.bincount(parent, minlength=n).astype(np.int64)
        lengths = np.linalg.norm(self.rest[e[:, 0]] - self.rest[e[:, 1]], axis=1) if len(e) else np.ones(1)
        self._cell = np.float32(max(1.0 * float(lengths.mean()), 1e-6))
        self._vertex_region = self.region
        cap = max(256, len(self.triangles))
        self._cross_edge = np.empty(cap, np.int32)
        self._cross_tri = np.empty(cap, np.int32)
        self._all_active = np.ones(n, np.uint8)
        self.recover = True
        self.untangle_passes = 6
        self.untangle_everywhere = False
        # Where the contacts' vertices show crossings, find and push them over
        # the whole cloth: a contour found only in part (crossings whose
        # triangle has no corner in a contact) cuts off no region, and the
        # pushes then pick sides edge by edge. Limited to the contacts, a
        # 48x48 sheet crushed between walls kept 35-57 crossing pairs for the
        # last 100 frames (30 ms of pushes a step); widened, it has none from
        # the end of the squeeze on, at 5-8 ms a step.
        self.untangle_widen = True
        self._untangled = None
        self._known = np.zeros(n, np.uint8)   # 1: _untangled holds the last call's end
        self.crossings_found = 0
        self.crossings_left = 0
        self.untangle_ms = 0.0
        # Layer-order recovery (layer_order.py, off: not yet measured on the
        # bench scenes), before the untangling,
        # where two layered regions collide: the border edges (one
        # triangle) and their ends, where no side is trusted.
        self.order_layers = False
        self.layer_passes = 2
        self.layer_pushes = 0
        self.layer_wrong = 0
        self.layer_ms = 0.0
        border = np.ascontiguousarray((self.edge_tris[:, 1] < 0).astype(np.uint8))
        bv = np.zeros(n, np.uint8)
        bv[self.edges[border == 1, 0]] = 1
        bv[self.edges[border == 1, 1]] = 1
        self._border_edge = border
        self._border_vertex = bv
        self._moved = np.zeros(n, np.uint8)
        self._track = np.full(n, -1, np.int32)

    def _layered(self):
        """Do two layered regions with different layers collide?"""
        lay = self.layers
        for i in range(self.n_regions):
            for j in range(i):
                if lay[i] >= 0 and lay[j] >= 0 and lay[i] != lay[j] and self.modes[i, j] != MODE_OFF:
                    return True
        return False

    def restore_layers(self, pos, x0=None, known=None, passes=None):
        """Layer-order recovery (layer_order.py): pos (3, n) float32 in
        place; x0 the positions at step start where known (default: the
        last untangle's end). Marks the moved vertices in self._moved.
        Returns the pushes made."""
        t0 = time.perf_counter()
        self._moved[:] = 0
        self.layer_skips = np.zeros(6, np.int64)
        if x0 is None:
            x0 = self._untangled if self._untangled is not None else pos
            known = self._known if self._untangled is not None else np.zeros(self.n, np.uint8)
        passes = self.layer_passes if passes is None else int(passes)
        wrong, pushes = _order_layers(pos, x0, known, self.inv_mass, self.triangles, self.tri_edges, self.edge_tris,
                                      self.tri_region, self._vertex_region, self.layers, self.modes, self.thickness,
                                      self._border_edge, self._border_vertex, self.vtri_start, self.vtri, self._track,
                                      self._cell, passes, self._moved,
                                      self.layer_skips)
        self.layer_wrong = int(wrong)
        self.layer_pushes = int(pushes)
        self.layer_ms = (time.perf_counter() - t0) * 1e3
        return self.layer_pushes

    def untangle(self, pos, everywhere=None, passes=None):
        """Push the edges that pass through triangles back out (untangle.py):
        pos (3, n) float32 in place. Only where this step's contacts are
        (the cloth near itself), or everywhere (everywhere=True, or the
        attribute untangle_everywhere). Returns the crossings found in the
        first pass; crossings_left is what the last pass left (-1: not
        counted after the last push)."""
        t0 = time.perf_counter()
        everywhere = self.untangle_everywhere if everywhere is None else everywhere
        pushed = 0
        layered = self.order_layers and self._layered()
        if layered:
            pushed = self.restore_layers(pos)
        else:
            self.layer_pushes = self.layer_wrong = 0
            self.layer_ms = 0.0
        if everywhere:
            active = self._all_active
        else:
            if self.count == 0 and not pushed:
                self.crossings_found = self.crossings_left = 0
                if layered:
                    # The next call's step start (the layer pass's reach).
                    if self._untangled is None:
                        self._untangled = pos.copy()
                    else:
                        self._untangled[:] = pos
                    self._known[:] = 1
                else:
                    self._untangled = None
                self.untangle_ms = (time.perf_counter() - t0) * 1e3
                return 0
            active = np.zeros(self.n, np.uint8)
            v = self.contact_vertex
            active[v[:, 0]] = 1
            active[v[:, 1]] = 1
            full = self.contact_kind != KIND_POINT_POINT
            active[v[full, 2]] = 1
            active[v[full, 3]] = 1
            if pushed:
                active |= self._moved
        passes = self.untangle_passes if passes is None else int(passes)
        # The cloth as the last call left it (the sides edges came from).
        if self._untangled is None:
            self._untangled = pos.copy()
            self._known[:] = 0
        before = self._untangled
        found, left = self._untangle_over(pos, before, active, passes)
        if found and self.untangle_widen and active is not self._all_active:
            # The rest of each contour (the first passes pushed only what they
            # saw): the whole cloth, from the same step start.
            _, left = self._untangle_over(pos, before, self._all_active, passes)
        self.crossings_found = int(found)
        self.crossings_left = int(left)
        # The sides the next call's new crossings go back to.
        self._untangled[:] = pos
        self._known[:] = 1
        self.untangle_ms = (time.perf_counter() - t0) * 1e3
        return int(found)

    def _untangle_over(self, pos, before, active, passes):
        while True:
            found, left = _untangle(pos, before, self._known, self.inv_mass, self.triangles, self.edges,
                                    self.tri_edges, self.tri_region, self._vertex_region, self.layers, self.thickness,
                                    self._piece, self._piece_size, active, self._cell, passes, self._cross_edge,
                                    self._cross_tri)
            if found <= len(self._cross_edge):
                return found, left
            # More crossings than room: grow (the pass that overflowed pushed
            # only those that fit) and go on.
            self._cross_edge = np.empty(int(found * 1.5), np.int32)
            self._cross_tri = np.empty(int(found * 1.5), np.int32)

    def solve_args(self):
        """The arguments after (pos, prev_pos) of
        ``selfcollision.solve_serial(pos, prev_pos, *sc.solve_args())``,
        which does what ``solve`` does single-threaded and can be called from
        another njit function (the compiled step does). The contact arrays
        change with every detect: take them again after each ``detect``.
        Their slot_delta is an empty stand-in until the parallel solve has
        run (the serial one does not read it)."""
        return (self.inv_mass, self.contact_vertex, self.contact_kind, self.contact_normal,
                self.contact_frame, self.triangles, self.contact_target, self.contact_friction,
                self._slot_delta, self._slot_active, self._filter_rows, self._fans, self._solve_work,
                self._touched, self._acc)

    def solve(self, pos, prev_pos):
        """One Jacobi pass over the frozen contacts; pos (3, n) is updated in place."""
        if self.count == 0:
            return
        t0 = time.perf_counter()
        if self.parallel:
            if self._vertex_slots is None:
                self._vertex_slots = build_vertex_slots(self.contact_vertex, self.contact_kind, self.n)
                # Pass 1 writes every contact the gather reads (the active ones).
                self._slot_delta = np.empty((self.count, 4, 3), dtype=np.float32)
            # All but the serial solve's scratch (touched vertices, sums).
            solve_parallel(pos, prev_pos, *self.solve_args()[:-2], *self._vertex_slots)
        else:
            solve_serial(pos, prev_pos, *self.solve_args())
        self.solve_ms += (time.perf_counter() - t0) * 1e3

    def contact_keys(self):
        """Canonical (kind, features...) tuples of the current contacts (for tests and tools)."""
        keys = []
        for kind, v in zip(self.contact_kind.tolist(), self.contact_vertex.tolist()):
            if kind == KIND_POINT_POINT:
                keys.append((kind,) + tuple(sorted(v[:2])))
            elif kind == KIND_VERTEX_TRIANGLE:
                keys.append((kind, v[0]) + tuple(sorted(v[1:])))
            else:
                e1 = tuple(sorted(v[:2]))
                e2 = tuple(sorted(v[2:]))
                keys.append((kind,) + min(e1, e2) + max(e1, e2))
        return keys
