"""Plain data the solver takes: parameters, per-step inputs, colliders, errors.

Units are Blender's: metres, seconds, kilograms. Compliance is the inverse of
stiffness (XPBD's alpha); each constraint class documents its own unit below.
"""

from dataclasses import dataclass

import numpy as np

from . import kernels as _kernels


_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


class SolverError(ValueError):
    """Input the solver cannot use, or a step that produced NaN/Inf.

    The message names the array or parameter at fault; a rejected input
    leaves the model and state untouched.
    """


@dataclass
class ClothParams:
    """Solver settings. May change between steps without rebuilding the model.

    Compliances (XPBD alpha, 0 = infinitely stiff; the solver uses
    alpha~ = compliance / h^2 with h the substep):
      stretch_compliance, shear_compliance, tether_compliance, pin_compliance:
          m/N, for distance constraints C = |xa - xb| - rest (metres), energy
          C^2 / (2 compliance). Per constraint, not per unit area.
      bend_compliance: 1/(N m), for Bergou's isometric bending with
          C = |sum_i k_i x_i| (dimensionless; k_i = cotangent weights scaled by
          sqrt(3 / (A0 + A1))), energy C^2 / (2 compliance) = the discrete
          mean-curvature bending energy with stiffness 1/compliance in N m.
    Shear: quads get two distance constraints on their diagonals (both, so the
    bracing is symmetric). Triangle-only meshes have no diagonals and get no
    separate shear constraints: their triangle edges are all structural, so
    shear is resisted by stretch_compliance (stiffer than a quad mesh's shear).
    N-gons get no shear constraints either.
    Threads: one cloth is solved on one thread (intra-cloth threads stall
    when another process holds a core); run several cloths in parallel.
    Damping (stretch_damping, ...): Rayleigh damping per class, the
    dimensionless gamma of XPBD's damped update; it resists the rate of
    constraint violation within a substep, 0 = none, ~0.01-1 typical (it
    also resists each substep's gravity prediction, so a damped cloth sags
    slightly less at rest). Damping > 0 or iterations > 1 use the general
    kernels; the default (undamped, 1 iteration) uses faster ones with the
    XPBD denominators precomputed per constraint.
    """

    substeps: int = 2
    iterations: int = 1
    gravity: tuple = (0.0, 0.0, -9.81)

    stretch_compliance: float = 1e-7
    shear_compliance: float = 1e-5
    bend_compliance: float = 1e4
    tether_compliance: float = 0.0
    stretch_damping: float = 0.0
    shear_damping: float = 0.0
    bend_damping: float = 0.0
    tether_damping: float = 0.0

    tethers: bool = True
    # Long-range stretch limits: pairs 4 and 12 edges apart along the
    # mesh's straightest paths may not be farther apart than their rest path
    # length times tether_scale (with the tethers' compliance). Keeps cloth
    # from stretching where a collider shoves it or it hangs over an
    # obstacle, which tethers to the pins cannot see.
    stretch_limits: bool = True
    # Tether length = tether_scale * geodesic rest distance to the anchor pin.
    tether_scale: float = 1.0

    # Soft pins (0 < weight < 1): compliance = pin_compliance * (1 - w) / w,
    # so w -> 1 is rigid and w -> 0 is free. m/N.
    pin_compliance: float = 1e-3

    # Linear air drag towards the wind velocity, 1/s (0 = none).
    air_drag: float = 0.0
    # Aerodynamic model on triangles (used when StepInputs.wind_velocity is
    # given): force = 0.5 rho A |u|^2 cos(theta) (Cd u_hat + Cl n_perp), u the
    # air velocity relative to the triangle.
    air_density: float = 1.2
    drag_coefficient: float = 1.0
    lift_coefficient: float = 0.5

    # Colliders: contact offset (m) added to capsule radii and planes.
    collision_margin: float = 0.005
    friction_static: float = 0.5
    friction_kinetic: float = 0.3

    # Speed limit, m/s (0 or inf = none).
    max_velocity: float = 50.0

    # Not read by the solver: every cloth is solved on one thread whatever
    # this says (see above), and validate() does not check it.
    threads: int = 1

    def validate(self):
        if int(self.substeps) < 1:
            raise SolverError(f"ClothParams.substeps must be >= 1, got {self.substeps}")
        if int(self.iterations) < 1:
            raise SolverError(f"ClothParams.iterations must be >= 1, got {self.iterations}")
        g = np.asarray(self.gravity, dtype=np.float64)
        if g.shape != (3,) or not np.all(np.isfinite(g)):
            raise SolverError(f"ClothParams.gravity must be 3 finite numbers, got {self.gravity!r}")
        for name in (
            "stretch_compliance", "shear_compliance", "bend_compliance", "tether_compliance",
            "stretch_damping", "shear_damping", "bend_damping", "tether_damping",
            "pin_compliance", "air_drag", "air_density", "drag_coefficient",
            "lift_coefficient", "collision_margin", "friction_static", "friction_kinetic",
            "tether_scale",
        ):
            v = float(getattr(self, name))
            if not np.isfinite(v) or v < 0.0:
                raise SolverError(f"ClothParams.{name} must be finite and >= 0, got {v}")
        if float(self.max_velocity) < 0 or np.isnan(float(self.max_velocity)):
            raise SolverError(f"ClothParams.max_velocity must be >= 0, got {self.max_velocity}")


def _as_vec3(name, a, k=None):
    arr = np.asarray(a, dtype=np.float32)
    if arr.ndim == 1 and arr.shape == (3,) and k is not None:
        arr = np.broadcast_to(arr, (k, 3))
    if arr.ndim != 2 or arr.shape[1] != 3 or (k is not None and arr.shape[0] != k):
        want = f"({k}, 3)" if k is not None else "(k, 3)"
        raise SolverError(f"{name} must have shape {want}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise SolverError(f"{name} contains NaN or Inf")
    return np.ascontiguousarray(arr)


@dataclass
class Capsules:
    """k capsules (round cones), end points at step start (a0, b0) and end (a1, b1).

    a0, b0, a1, b1: (k, 3) world space. radius_a, radius_b: (k,) radius at the
    a and b ends (metres). Transforms are interpolated linearly across
    substeps. A capsule with a == b is a sphere.
    """

    a0: np.ndarray
    b0: np.ndarray
    a1: np.ndarray
    b1: np.ndarray
    radius_a: np.ndarray
    radius_b: np.ndarray

    def packed(self):
        """(k, 14) float32: a0, b0, a1, b1, radius_a, radius_b."""
        # Called every step. Float arrays of the right shapes, one dtype:
        # one compiled pass (kernels.pack_capsules); anything else goes the
        # general way below.
        a0, b0, a1, b1, ra, rb = self.a0, self.b0, self.a1, self.b1, self.radius_a, self.radius_b
        if (type(a0) is np.ndarray and type(b0) is np.ndarray and type(a1) is np.ndarray
                and type(b1) is np.ndarray and type(ra) is np.ndarray and type(rb) is np.ndarray):
            dt = a0.dtype
            k = a0.shape[0] if a0.ndim == 2 else -1
            if ((dt == _F64 or dt == _F32) and b0.dtype == dt and a1.dtype == dt and b1.dtype == dt
                    and ra.dtype == dt and rb.dtype == dt and a0.shape == b0.shape == a1.shape == b1.shape
                    == (k, 3) and ra.shape == rb.shape == (k,)):
                out = np.empty((k, 14), dtype=np.float32)
                bad = _kernels.pack_capsules(a0, b0, a1, b1, ra, rb, out)
                if bad & 1:
                    raise SolverError("Capsules contain NaN or Inf")
                if bad & 2:
                    raise SolverError("Capsules radius_a/radius_b must be >= 0")
                return out
        # The general way: few numpy calls (the values are converted by the
        # assignments, checked by one float64 sum: NaN/Inf propagate, and
        # float32 values cannot overflow it).
        try:
            shape = np.shape(self.a0)
            k = shape[0] if len(shape) == 2 else -1
            out = np.empty((max(k, 0), 14), dtype=np.float32)
            for col, name in ((0, "a0"), (3, "b0"), (6, "a1"), (9, "b1")):
                v = getattr(self, name)
                if np.shape(v) != (k, 3):
                    raise SolverError(f"Capsules.{name} must have shape (k, 3) like a0 {shape}, got {np.shape(v)}")
                out[:, col:col + 3] = v
            out[:, 12] = self.radius_a
            out[:, 13] = self.radius_b
        except (TypeError, ValueError) as exc:
            if isinstance(exc, SolverError):
                raise
            raise SolverError(f"Capsules: arrays must be (k, 3) end points and (k,) radii ({exc})") from None
        if not np.isfinite(out.sum(dtype=np.float64)):
            raise SolverError("Capsules contain NaN or Inf")
        if k > 0 and out[:, 12:14].min() < 0:
            raise SolverError("Capsules radius_a/radius_b must be >= 0")
        return out


@dataclass
class Planes:
    """k infinite planes (half-spaces; the cloth stays on the normal's side).

    point0, normal0: (k, 3) at step start; point1, normal1 at step end
    (default: same as start). Normals need not be unit length.
    """

    point0: np.ndarray
    normal0: np.ndarray
    point1: np.ndarray = None
    normal1: np.ndarray = None

    def packed(self):
        """(k, 12) float32: point0, unit normal0, point1, unit normal1."""
        p0 = _as_vec3("Planes.point0", self.point0)
        k = p0.shape[0]
        n0 = _as_vec3("Planes.normal0", self.normal0, k)
        p1 = p0 if self.point1 is None else _as_vec3("Planes.point1", self.point1, k)
        n1 = n0 if self.normal1 is None else _as_vec3("Planes.normal1", self.normal1, k)
        out = np.empty((k, 12), dtype=np.float32)
        for col, v, nm in ((0, p0, None), (3, n0, "normal0"), (6, p1, None), (9, n1, "normal1")):
            if nm is not None:
                ln = np.linalg.norm(v, axis=1)
                if np.any(ln < 1e-12):
                    raise SolverError(f"Planes.{nm} has a zero-length normal")
                v = v / ln[:, None]
            out[:, col:col + 3] = v
        return out


@dataclass
class StepInputs:
    """What changes per step. Every field is optional.

    pin_targets: (n, 3) positions of pinned vertices at the END of the step
        (the start is the previous step's end; rows of unpinned vertices are
        ignored). None = pins stay where they are.
    pin_weight: (n,) 0..1, to add, release or re-weight pins without a
        rebuild. None = unchanged.
    capsules, planes: colliders with start/end transforms.
    wind_velocity: (n, 3) or (3,) air velocity, m/s; enables the aerodynamic
        drag/lift model on triangles.
    acceleration: (n, 3) or (3,) extra per-vertex acceleration, m/s^2.
    """

    pin_targets: np.ndarray = None
    pin_weight: np.ndarray = None
    capsules: Capsules = None
    planes: Planes = None
    wind_velocity: np.ndarray = None
    acceleration: np.ndarray = None
