"""Plain data the solver takes: parameters, per-step inputs, errors (the
collider records are in colliders/).

Units are Blender's: metres, seconds, kilograms. Compliance is the inverse of
stiffness (XPBD's alpha); each constraint class documents its own unit below.
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np

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
    # Multilevel stretch (constraints/hierarchy.py): coarse levels of the
    # mesh solved first each iteration, their corrections interpolated down.
    # Holds cloth pinned in several places or hung from a point without
    # tethers, and leaves the vertices in contact with any collider and
    # their neighbours alone (hierarchy.contact_gate). None (the default):
    # with the tethers off on a pinned cloth it runs in place of the stretch
    # limits, if those are on (without tethers the limits alone let a sheet hung by two
    # corners stretch its corner edges many times over; the multilevel
    # stretch holds it to about 20 % at 100 x 100, for a cheaper step).
    # True or False: on or off whatever the tethers, the limits as
    # stretch_limits says. Not on with the tethers by default: in place of the stretch
    # limits it leaves sheets hung by two edges at a higher mean strain,
    # beside them the step costs about 45 % more, and at 2 substeps an arm
    # capsule spinning at 3.5 m/s through a hanging sheet can bring a point
    # of it about a millimetre past its thickness (one scene of five in a
    # sweep of speeds and lengths).
    stretch_hierarchy: Optional[bool] = None
    # Tether length = tether_scale * geodesic rest distance to the anchor pin.
    tether_scale: float = 1.0

    # Soft pins (0 < weight < 1): compliance = pin_compliance * (1 - w) / w,
    # so w -> 1 is rigid and w -> 0 is free. m/N.
    pin_compliance: float = 1e-3

    # Linear air drag towards the wind velocity, 1/s (0 = none).
    air_drag: float = 0.0
    # Settling damping, once a step: each vertex's velocity relative to the
    # cloth's motion (its pins', or its centre of mass's without pins)
    # decays at settle_damping * settle_speed / (settle_speed + speed), 1/s:
    # plain drag below settle_speed (m/s) that stops the last swings, a
    # deceleration of at most settle_damping * settle_speed (m/s^2) above
    # it. 0 = none.
    settle_damping: float = 0.0
    settle_speed: float = 0.1
    # Air resistance, once a step: each triangle's motion across its own
    # plane, relative to the cloth's motion as settle_damping takes it (its
    # pins', or its centre of mass's), meets the drag of still air,
    # 0.5 * air_density * air_resistance * |u_n| u_n per unit area:
    # air_resistance is the drag coefficient (about 1 for a sheet moving
    # face on; 0 = none). Quadratic in speed, so it stops the swing of a hit
    # sheet and a flapping corner and barely touches slow motion; the
    # cloth's travel with its pins, or its fall, is not slowed. Off in steps
    # given a wind field (the wind model drags against the wind instead).
    air_resistance: float = 0.0
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
    # Collider contacts of the cloth's edges and faces, not only its vertices
    # (capsules: colliders/edges.py; boxes: their edges and corners; mesh
    # colliders: their sharp edges): off, a collider can cut between
    # vertices.
    edge_contacts: bool = True

    # Speed limit, m/s (0 or inf = none).
    max_velocity: float = 50.0

    # Garment authoring (all off by default; see constraints/sewing.py,
    # shrink.py, pressure.py, skinned.py and Model.set_sewing / set_garment_weights).
    # Sewing: the model's stitches (Model.set_sewing) are distance
    # constraints of this compliance (m/N), of rest length 0 where the two
    # borders meet vertex for vertex, each pulling with at most
    # sewing_max_force newtons (0 = no limit) until the seam closes; a
    # closed seam holds under any load (constraints/sewing.py).
    sewing_compliance: float = 0.0
    sewing_max_force: float = 0.0
    # Rest lengths scale by 1 - shrink (negative grows); with a shrink group,
    # shrink + (shrink_max - shrink) * weight. shrink_warp / shrink_weft
    # shrink further along the UV map's U and V axes (Model.set_uv).
    shrink: float = 0.0
    shrink_max: float = 0.0
    shrink_warp: float = 0.0
    shrink_weft: float = 0.0
    # Painted stiffness: a vertex of weight w in the class's group is
    # 1 + (max - 1) w times as stiff (Blender's property weights: the base
    # stiffness at weight 0, max times it at weight 1).
    stretch_weight_max: float = 1.0
    shear_weight_max: float = 1.0
    bend_weight_max: float = 1.0
    # Anisotropic stretch: an edge running along U has stretch_compliance *
    # warp_compliance_scale, along V * weft_compliance_scale, between them
    # cos^2 / sin^2 blended (needs Model.set_uv).
    warp_compliance_scale: float = 1.0
    weft_compliance_scale: float = 1.0
    # Pressure: a closed mesh keeps pressure_volume times its rest volume,
    # with pressure_compliance (m^5/N: volume error in m^3 per pascal of
    # the pressure that holds it, 0 = incompressible).
    pressure: bool = False
    pressure_volume: float = 1.0
    pressure_compliance: float = 0.0
    # Skinned constraints (m, 0 = off): each vertex stays within
    # max_distance (times its weight) of its animated position (the pin
    # targets), and outside a sphere of backstop_radius whose surface lies
    # backstop_distance behind the animated surface.
    max_distance: float = 0.0
    backstop_distance: float = 0.0
    backstop_radius: float = 0.0
    # CPU threads for stepping this cloth beside others (threads.step_all),
    # for the parallel passes around the step and a large cloth's
    # self-collision detection; 0 = every core. The results are the same
    # for any value.
    threads: int = 0

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
            "tether_scale", "settle_damping", "air_resistance",
            "sewing_compliance", "sewing_max_force", "pressure_volume", "pressure_compliance",
            "max_distance", "backstop_distance", "backstop_radius",
            "stretch_weight_max", "shear_weight_max", "bend_weight_max",
            "warp_compliance_scale", "weft_compliance_scale",
        ):
            v = float(getattr(self, name))
            if not np.isfinite(v) or v < 0.0:
                raise SolverError(f"ClothParams.{name} must be finite and >= 0, got {v}")
        for name in ("shrink", "shrink_max", "shrink_warp", "shrink_weft"):
            v = float(getattr(self, name))
            if not np.isfinite(v) or v >= 1.0:
                raise SolverError(f"ClothParams.{name} must be finite and < 1 (1 shrinks to nothing), got {v}")
        if int(self.threads) != self.threads or int(self.threads) < 0:
            raise SolverError(f"ClothParams.threads must be a whole number >= 0, got {self.threads}")
        v = float(self.settle_speed)
        if not np.isfinite(v) or v <= 0.0:
            raise SolverError(f"ClothParams.settle_speed must be finite and > 0, got {v}")
        if float(self.max_velocity) < 0 or np.isnan(float(self.max_velocity)):
            raise SolverError(f"ClothParams.max_velocity must be >= 0, got {self.max_velocity}")


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
    boxes: oriented (optionally rounded) box colliders with start/end
        transforms (colliders.box.Boxes).
    meshes: a list of colliders.MeshCollider (triangles at step start and
        end); the step then runs the general loop.
    """

    pin_targets: np.ndarray = None
    pin_weight: np.ndarray = None
    capsules: "Capsules" = None
    planes: "Planes" = None
    wind_velocity: np.ndarray = None
    acceleration: np.ndarray = None
    boxes: "Boxes" = None
    meshes: list = None
