"""The cloth model (built once per cloth) and its simulation state."""

import numpy as np

from . import topology
from .config import as_f32, as_u32
from .colliders import collider_scratch
from .colliders.edges import surface_edges
from .constraints import BendingConstraints, DistanceConstraints, Tethers
from .constraints.hierarchy import StretchHierarchy
from .constraints.pressure import PressureConstraint
from .constraints.sewing import SewingConstraints
from .constraints.shrink import RestScale
from .constraints.skinned import SkinnedConstraints
from .params import ClothParams, SolverError




class State:
    """Positions and velocities, structure of arrays float32 (3, n), world space.

    pin_targets holds the pin targets at the end of the last step (the start
    of the next one). seams: (stitches,) uint8, 1 where a stitch has closed
    (constraints/sewing.py; None until the first step with stitches)."""

    def __init__(self, positions, velocities, pin_targets, seams=None):
        self.positions = positions
        self.velocities = velocities
        self.pin_targets = pin_targets
        self.seams = seams

    def positions_aos(self):
        """(n, 3) float32 copy of the positions."""
        return np.ascontiguousarray(self.positions.T)

    def velocities_aos(self):
        return np.ascontiguousarray(self.velocities.T)

    def copy(self):
        return State(self.positions.copy(), self.velocities.copy(), self.pin_targets.copy(),
                     None if self.seams is None else self.seams.copy())


class Model:
    """Everything derived once from the rest mesh, plus the current pins.

    Public attributes others rely on: n, rest_positions (n, 3) float32,
    triangles (t, 3) int32 (fan triangulation of the polygons), region (n,)
    int32, mass (n,) float32, pin_weight (n,) float32, self_collision (None or
    an object with detect(pos, vel, dt, gravity) and solve(pos, prev_pos)).
    """

    def __init__(self, rest_positions, face_indices, face_sizes, mass, pin_weight, region):
        n = len(rest_positions)
        self.n = n
        self.rest_positions = as_f32(rest_positions)
        self.face_indices = np.asarray(face_indices, dtype=np.int64)
        self.face_sizes = np.asarray(face_sizes, dtype=np.int64)
        self.mass = as_f32(mass)
        self.region = np.ascontiguousarray(region, dtype=np.int32)
        self.self_collision = None

        self.triangles = topology.triangulate(self.face_indices, self.face_sizes)
        struct = topology.structural_edges(self.face_indices, self.face_sizes)
        diag = topology.quad_diagonals(self.face_indices, self.face_sizes)
        if len(diag) and len(struct):
            # A quad diagonal that is also some polygon's edge stays structural.
            skey = struct[:, 0] * n + struct[:, 1]
            diag = diag[~np.isin(diag[:, 0] * n + diag[:, 1], skey)]
        self.stretch = DistanceConstraints(struct, self.rest_positions, compliance="a_stretch")
        self.shear = DistanceConstraints(diag, self.rest_positions, compliance="a_shear")
        # Long-range stretch limits (unilateral, solved when params.stretch_limits),
        # three quarters of a correction per substep: at full strength they
        # fight the frozen self contacts of crushed cloth and pump energy in
        # (tests/solver/test_selfcollision_scenarios.py's crushed pile).
        limit_pairs, limit_rest = topology.stretch_limit_pairs(self.rest_positions, struct)
        # As stiff as the tethers and scaled like them.
        self.limits = DistanceConstraints(limit_pairs, self.rest_positions, rest=limit_rest, relaxation=0.75,
                                          compliance="a_tether", scale="tether_scale", switch="use_limits")
        self.bend = BendingConstraints(self.rest_positions, self.triangles)
        # Multilevel stretch (constraints/hierarchy.py), coarsened from the
        # pinned vertices first.
        fine = np.concatenate([self.stretch.pairs, self.shear.pairs])
        self.hierarchy = StretchHierarchy(n, fine, np.concatenate([self.stretch.rest, self.shear.rest]),
                                          np.asarray(pin_weight, np.float32).ravel() >= 1.0)

        t = self.triangles.astype(np.int64)
        tri_edges = topology.unique_pairs(np.concatenate([t[:, 0], t[:, 1], t[:, 2]]),
                                          np.concatenate([t[:, 1], t[:, 2], t[:, 0]]))
        parts = [p for p in (struct, diag, tri_edges) if len(p)]
        if parts:
            allp = np.concatenate(parts)
            self.graph_edges = topology.unique_pairs(allp[:, 0], allp[:, 1])
        else:
            self.graph_edges = np.zeros((0, 2), np.int64)
        self.tris_soa = as_u32(self.triangles.T) if len(self.triangles) else np.zeros((3, 0), np.uint32)
        # The triangle edges and faces the capsule contacts of edges and faces visit.
        self.surface = surface_edges(self.triangles, self.rest_positions)

        # Garment authoring (constraints/sewing, pressure, skinned, shrink):
        # inactive until set_sewing / set_uv / set_garment_weights and params.
        self.sewing = SewingConstraints(n)
        self.pressure = PressureConstraint(self.rest_positions, self.triangles, self.tris_soa)
        self.skinned = SkinnedConstraints(n)
        self.rest_scale = RestScale(self)

        # Solver scratch (one step at a time per model).
        self.prev = np.zeros((3, n), dtype=np.float32)
        self.hit = np.zeros(n, dtype=np.int32)
        self.entry = np.zeros((9, n), dtype=np.float32)
        self.contact = np.zeros((7, n), dtype=np.float32)
        # Per vertex: >= 0 = collides with capsule colliders grown by this
        # much, -1 = capsules ignored (planes still apply); see
        # set_collider_mask and set_collider_offset. The kernels read it.
        self.collider_offset = np.zeros(n, dtype=np.float32)
        self.collider_offset_max = 0.0
        self.targets_scratch = np.zeros((3, n), dtype=np.float32)
        self._collider_scratch = collider_scratch(n, 0, 0)
        # Bumped whenever the pins (and with them masses, tethers) change:
        # step() caches per-model kernel arguments against it.
        self.pin_version = 0
        self.pin_weight = None
        self.set_pin_weight(pin_weight)

    @property
    def constraints(self):
        """The constraint sets in the order the substep loop takes their
        records (loop._run's stretch, shear, bend, tether, limits, sewing,
        pressure, skinned, hierarchy)."""
        return (self.stretch, self.shear, self.bend, self.tethers, self.limits, self.sewing, self.pressure,
                self.skinned, self.hierarchy)

    # -- pins ---------------------------------------------------------------

    def set_pin_weight(self, pin_weight):
        """Add, release or re-weight pins without a rebuild: inverse masses,
        the per-constraint copies and the tethers follow."""
        w = np.asarray(pin_weight, dtype=np.float32).ravel()
        if w.shape != (self.n,):
            raise SolverError(f"pin_weight must have shape ({self.n},), got {np.shape(pin_weight)}")
        if not np.all(np.isfinite(w)):
            raise SolverError("pin_weight contains NaN or Inf")
        if np.any(w < -1e-6) or np.any(w > 1 + 1e-6):
            raise SolverError(f"pin_weight must lie in 0..1, got range {w.min()}..{w.max()}")
        w = np.clip(w, 0.0, 1.0)
        if self.pin_weight is not None and np.array_equal(w, self.pin_weight):
            return False
        self.pin_weight = w
        self.pin_version += 1
        kinematic = w >= 1.0
        self.kinematic = as_u32(np.flatnonzero(kinematic))
        self.soft = as_u32(np.flatnonzero((w > 0.0) & ~kinematic))
        self.soft_weight = w[self.soft].astype(np.float32)
        self.soft_lam = np.zeros((3, len(self.soft)), dtype=np.float32)
        self.inv_mass = np.where(kinematic, 0.0, 1.0 / self.mass).astype(np.float32)
        self.stretch.set_inverse_masses(self.inv_mass)
        self.shear.set_inverse_masses(self.inv_mass)
        self.limits.set_inverse_masses(self.inv_mass)
        self.hierarchy.set_inverse_masses(self.inv_mass)
        self.bend.set_inverse_masses(self.inv_mass)
        self.sewing.set_inverse_masses(self.inv_mass)
        self.pressure.set_inverse_masses(self.inv_mass)
        self.skinned.set_inverse_masses(self.inv_mass)
        self.tethers = Tethers(self.rest_positions, self.graph_edges, self.kinematic, self.inv_mass,
                               triangles=self.triangles)
        return True

    # -- garment authoring -----------------------------------------------------

    def set_sewing(self, pairs):
        """Stitch vertex pairs (m, 2) of different panels (Blender's loose
        edges); None or empty removes them. Raises SolverError and changes
        nothing for a pair inside one panel or at a vertex in no polygon."""
        sewing = SewingConstraints(self.n, pairs, self.face_indices, self.face_sizes, self.rest_positions)
        sewing.set_inverse_masses(self.inv_mass)
        self.sewing = sewing
        self.pin_version += 1   # step() rebuilds its cached records

    def set_uv(self, corner_uv):
        """The UV map, one (u, v) per polygon corner (Blender's loop order),
        that warp and weft settings follow; None removes it."""
        self.rest_scale.set_uv(corner_uv)
        self.pin_version += 1

    def set_garment_weights(self, **weights):
        """Per-vertex (n,) weights, 0..1: shrink, stretch, shear, bend
        (painted stiffness and shrink, constraints/shrink.py), pressure (where
        pressure acts), max_distance, backstop (constraints/skinned.py). A
        name given None goes back to its default. Raises SolverError and
        changes nothing on bad weights."""
        rest = {k: weights.pop(k) for k in ("shrink", "stretch", "shear", "bend") if k in weights}
        pressure = weights.pop("pressure", False)
        skinned = {k: weights.pop(k) for k in ("max_distance", "backstop") if k in weights}
        if weights:
            raise SolverError(f"unknown garment weights {sorted(weights)}")
        n = self.n
        for name, w in list(rest.items()) + list(skinned.items()) + [("pressure", pressure)]:
            if w is None or w is False:
                continue
            a = np.asarray(w, dtype=np.float64).ravel()
            if a.shape != (n,) or not np.all(np.isfinite(a)) or a.min(initial=0) < 0:
                raise SolverError(f"{name} weights must have shape ({n},) and be finite and >= 0")
        if rest:
            self.rest_scale.set_weights(**rest)
        if pressure is not False:
            self.pressure.set_weight(np.ones(n, np.float32) if pressure is None else pressure)
        if skinned:
            ones = np.ones(n, np.float32)
            self.skinned.set_weights(
                distance=None if "max_distance" not in skinned else
                (ones if skinned["max_distance"] is None else skinned["max_distance"]),
                backstop=None if "backstop" not in skinned else
                (ones if skinned["backstop"] is None else skinned["backstop"]))
        self.pin_version += 1

    def garment_general(self, params):
        """True when a garment setting needs loop.run_general's kernels."""
        return bool(len(self.sewing) or params.pressure or params.max_distance > 0 or params.backstop_radius > 0)

    # -- collider mask ---------------------------------------------------------

    def set_collider_mask(self, mask):
        """Choose which vertices collide with capsule colliders: mask (n,)
        bool or 0/1 integers, True = collides (the default for every vertex).
        A False vertex passes through capsules but still collides with planes
        (the ground always wins) and with cloth in self collision: the outer
        layer of layered clothing rests on the inner layer, not on the body.
        Raises SolverError and changes nothing on a bad mask."""
        m = np.asarray(mask)
        if m.shape != (self.n,):
            raise SolverError(f"collider mask must have shape ({self.n},), got {m.shape}")
        if m.dtype != np.bool_:
            if not (np.issubdtype(m.dtype, np.integer) or np.issubdtype(m.dtype, np.floating)) \
                    or not np.all((m == 0) | (m == 1)):
                raise SolverError("collider mask must be bool or 0/1 values (1 = collides with capsules)")
        self._store_collider_offset(np.where(m.astype(bool), np.maximum(self.collider_offset, 0.0), -1.0))

    @property
    def collider_mask(self):
        """(n,) uint8: 1 = the vertex collides with capsules, 0 = it ignores them."""
        return (self.collider_offset >= 0).astype(np.uint8)

    def set_collider_offset(self, offset):
        """Grow every capsule by `offset` metres (a number or one per vertex,
        finite, >= 0) for these vertices: an outer layer of clothing rests on
        the body at the inner layers' thickness instead of being squeezed onto
        the same surface as them. Vertices masked off capsules stay masked.
        Raises SolverError and changes nothing on a bad offset."""
        o = np.asarray(offset, dtype=np.float64)
        if o.ndim == 0:
            o = np.full(self.n, float(o))
        if o.shape != (self.n,):
            raise SolverError(f"collider offset must be a number or have shape ({self.n},), got {o.shape}")
        if not np.all(np.isfinite(o)) or np.any(o < 0):
            raise SolverError("collider offset must be finite and >= 0 (metres)")
        self._store_collider_offset(np.where(self.collider_offset < 0, -1.0, o))

    def _store_collider_offset(self, values):
        """The one place collider_offset changes; its maximum (the capsule
        boxes' growth, read every step) is kept with it, not recomputed per step."""
        self.collider_offset[:] = values
        self.collider_offset_max = float(max(self.collider_offset.max(initial=0.0), 0.0))

    def soft_pin_compliance(self, params):
        w = self.soft_weight
        return as_f32(params.pin_compliance * (1.0 - w) / np.maximum(w, 1e-12))

    # -- state ----------------------------------------------------------------

    def new_state(self, positions=None, velocities=None):
        """A state at rest (or at the given (n, 3) positions), velocities zero."""
        p = self.rest_positions if positions is None else np.asarray(positions, dtype=np.float32)
        if p.shape != (self.n, 3) or not np.all(np.isfinite(p)):
            raise SolverError(f"positions must be finite with shape ({self.n}, 3)")
        pos = np.ascontiguousarray(p.T, dtype=np.float32)
        vel = np.zeros((3, self.n), dtype=np.float32)
        if velocities is not None:
            v = np.asarray(velocities, dtype=np.float32)
            if v.shape != (self.n, 3) or not np.all(np.isfinite(v)):
                raise SolverError(f"velocities must be finite with shape ({self.n}, 3)")
            vel[:] = v.T
        return State(pos, vel, pos.copy())

    def bending_energy(self, positions, compliance=1.0):
        return self.bend.energy(positions, compliance)


def build_model(rest_positions, face_indices, face_sizes, mass, pin_weight, params=None, region=None):
    """Build a cloth model once from arrays.

    rest_positions: (n, 3) world-space rest positions.
    face_indices: flat polygon corner vertex indices (Blender's order).
    face_sizes: (f,) corners per polygon (>= 3); quads stay quads.
    mass: (n,) kg per vertex (see vertex_masses); <= 0 entries get the mean
        of the positive ones.
    pin_weight: (n,) 0..1; 1 = kinematic, 0 < w < 1 = soft attachment.
    params: ClothParams (only validated here; every setting may change later).
    region: (n,) int per-vertex region id for self collision (default 0).
    Raises SolverError naming the array at fault.
    """
    if params is not None:
        params.validate()
    rest = np.asarray(rest_positions, dtype=np.float64)
    if rest.ndim != 2 or rest.shape[1] != 3:
        raise SolverError(f"rest_positions must have shape (n, 3), got {rest.shape}")
    n = rest.shape[0]
    if n == 0:
        raise SolverError("the mesh has no vertices")
    if not np.all(np.isfinite(rest)):
        raise SolverError("rest_positions contains NaN or Inf")
    fi = np.asarray(face_indices).ravel()
    fs = np.asarray(face_sizes).ravel()
    if fi.size and not np.issubdtype(fi.dtype, np.integer):
        raise SolverError(f"face_indices must be integers, got {fi.dtype}")
    if fs.size and not np.issubdtype(fs.dtype, np.integer):
        raise SolverError(f"face_sizes must be integers, got {fs.dtype}")
    fi = fi.astype(np.int64)
    fs = fs.astype(np.int64)
    if np.any(fs < 3):
        raise SolverError(f"face_sizes must all be >= 3 (polygon {int(np.argmax(fs < 3))} has {fs[fs < 3][0]})")
    if int(fs.sum()) != len(fi):
        raise SolverError(f"face_sizes sum to {int(fs.sum())} but face_indices has {len(fi)} entries")
    if len(fi) and (fi.min() < 0 or fi.max() >= n):
        raise SolverError(f"face_indices out of range 0..{n - 1} (found {fi.min()}..{fi.max()})")
    m = np.asarray(mass, dtype=np.float64).ravel()
    if m.shape != (n,):
        raise SolverError(f"mass must have shape ({n},), got {np.shape(mass)}")
    if not np.all(np.isfinite(m)):
        raise SolverError("mass contains NaN or Inf")
    positive = m > 0
    if not positive.all():
        m = m.copy()
        m[~positive] = m[positive].mean() if positive.any() else 1e-3
    if region is None:
        region = np.zeros(n, dtype=np.int32)
    region = np.asarray(region).ravel()
    if region.shape != (n,):
        raise SolverError(f"region must have shape ({n},), got {np.shape(region)}")
    return Model(rest, fi, fs, m, pin_weight, region)


def default_params():
    return ClothParams()
