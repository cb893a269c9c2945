"""step(): validate a step's inputs, keep the per-model records that stay
the same between steps, and run the compiled substep loop (loop.py).
"""

import math
import weakref

import numpy as np

from . import loop
from . import threads
from .colliders import collider_scratch
from .colliders.box import PACKED as _BOX_PACKED, box_scratch
from .colliders.mesh import NO_MESHES, mesh_step_args
from .config import new_config
from .integrate import rows_from_points
from .jit import compiled_fast
from .params import _F32, _F64, ClothParams, SolverError

_EMPTY_CAPS = np.zeros((0, 14), dtype=np.float32)
_EMPTY_PLANES = np.zeros((0, 12), dtype=np.float32)
_NO_LIST = np.zeros(0, dtype=np.uint32)
_EMPTY_BOXES = np.zeros((0, _BOX_PACKED), dtype=np.float32)
_NO_BOX_SCRATCH = box_scratch(0, 0)
# Stands in for an absent acceleration or wind field: C-contiguous like the
# real (3, n) ones, so the kernels compile once for both and the row pass
# stays vectorised (a strided (3, 1) view of prev made it 3x slower).
_NO_FIELD = np.zeros((3, 1), dtype=np.float32)
_FAST = compiled_fast()


def _per_vertex(name, value, n, out=None):
    """(n, 3) or (3,) -> (3, n) float32, validated (into `out` if given)."""
    if (type(value) is np.ndarray and value.shape == (n, 3)
            and (value.dtype == _F32 or value.dtype == _F64)):
        # The common case, every step: one compiled pass (numpy's
        # conversion, sum and transposed copy were ~7 us for a few vertices).
        if out is None:
            out = np.empty((3, n), dtype=np.float32)
        if not rows_from_points(value, out):
            raise SolverError(f"{name} contains NaN or Inf")
        return out
    a = np.asarray(value, dtype=np.float32)
    if a.shape == (3,):
        a = np.broadcast_to(a[:, None], (3, n))
        if not np.all(np.isfinite(a[:, 0])):
            raise SolverError(f"{name} contains NaN or Inf")
        return np.ascontiguousarray(a)
    if a.shape != (n, 3):
        raise SolverError(f"{name} must have shape ({n}, 3) or (3,), got {a.shape}")
    # One float64 sum: NaN/Inf propagate and float32 values cannot overflow it.
    if not np.isfinite(a.sum(dtype=np.float64)):
        raise SolverError(f"{name} contains NaN or Inf")
    if out is None:
        return np.ascontiguousarray(a.T)
    out[:] = a.T
    return out


def _params_key(params):
    """Hashable snapshot of the params' values (a step with unchanged params
    skips validation and rebuilding the kernel config)."""
    values = tuple(vars(params).values())
    try:
        hash(values)
        return values
    except TypeError:  # a list or array among them (gravity)
        return tuple(tuple(v) if isinstance(v, (list, tuple, np.ndarray)) else v for v in values)


def stretch_solves(params, pinned):
    """(multilevel stretch on, stretch limits on) for these params: with
    stretch_hierarchy None (automatic) the multilevel stretch runs in place
    of the stretch limits when the tethers are off and some vertex is
    pinned at full weight (pinned), as the tethers' anchors are. With no
    such pin there is nothing for tethers to hold and the limits stay
    (cloth over an obstacle); with the limits off too nothing long-range
    holds the cloth (stretchy fabric)."""
    limits = bool(params.stretch_limits)
    if params.stretch_hierarchy is None:
        auto = limits and pinned and not params.tethers
        return auto, limits and not auto
    return bool(params.stretch_hierarchy), limits


def _config(params, h, pinned):
    """The CONFIG record of params for substep length h."""
    config = new_config()
    c = config[0]
    c["h"] = h
    c["gx"], c["gy"], c["gz"] = params.gravity
    c["a_stretch"] = params.stretch_compliance
    c["a_shear"] = params.shear_compliance
    c["a_bend"] = params.bend_compliance
    c["a_tether"] = params.tether_compliance
    c["d_stretch"] = params.stretch_damping
    c["d_shear"] = params.shear_damping
    c["d_bend"] = params.bend_damping
    c["d_tether"] = params.tether_damping
    c["tether_scale"] = params.tether_scale
    c["air_drag"] = params.air_drag
    c["settle_rate"] = params.settle_damping
    c["settle_speed"] = params.settle_speed
    c["air_res"] = 0.5 * params.air_density * params.air_resistance
    c["air_density"] = params.air_density
    c["cd"] = params.drag_coefficient
    c["cl"] = params.lift_coefficient
    c["margin"] = params.collision_margin
    c["mu_s"] = params.friction_static
    c["mu_k"] = params.friction_kinetic
    c["maxv"] = min(float(params.max_velocity), 3e38) if np.isfinite(params.max_velocity) else 0.0
    c["use_tethers"] = 1.0 if params.tethers else 0.0
    hierarchy, limits = stretch_solves(params, pinned)
    c["use_limits"] = 1.0 if limits else 0.0
    c["use_hierarchy"] = 1.0 if hierarchy else 0.0
    c["use_edges"] = 1.0 if params.edge_contacts else 0.0
    c["substeps"] = int(params.substeps)
    c["iterations"] = int(params.iterations)
    c["a_sew"], c["sew_force"] = params.sewing_compliance, params.sewing_max_force
    c["a_pressure"], c["pressure_volume"] = params.pressure_compliance, params.pressure_volume
    c["use_pressure"] = 1.0 if params.pressure else 0.0
    c["max_distance"] = params.max_distance
    c["backstop_distance"], c["backstop_radius"] = params.backstop_distance, params.backstop_radius
    return config


class _StepCache:
    """What stays the same while the params, dt and pins do (step() keeps
    one per model)."""

    def __init__(self, key, dt, pin_version, config, soft_alpha, records, fast_records, default):
        self.key, self.dt, self.pin_version = key, dt, pin_version
        self.config, self.soft_alpha, self.default = config, soft_alpha, default
        self.per_step = None   # (acceleration given, collider offset max, wind given) in config
        # Plain tuples for the call (see constraints.distance.DistanceRecord).
        self.records = tuple(tuple(r) for r in records)
        self.fast_records = tuple(tuple(r) for r in fast_records)

    def matches(self, key, dt, pin_version):
        return self.key == key and self.dt == dt and self.pin_version == pin_version


_CACHES = weakref.WeakKeyDictionary()


def step(model, state, inputs=None, dt=1.0 / 60.0, params=None):
    """Advance `state` (in place) by dt seconds.

    inputs: StepInputs or None. params: ClothParams (default ClothParams());
    may differ from the build-time params. All inputs are validated before the
    state is touched; a bad input raises SolverError and changes nothing.
    Raises SolverError if the step produced NaN/Inf (then the state is
    invalid and should be reset).
    """
    if params is None:
        params = ClothParams()
    key = _params_key(params)
    cached = _CACHES.get(model)
    if cached is None or cached.key != key:
        params.validate()
    dt = float(dt)
    if not math.isfinite(dt) or dt <= 0.0:
        raise SolverError(f"dt must be a positive finite number of seconds, got {dt}")
    n = model.n
    substeps = int(params.substeps)
    h = dt / substeps

    # ---- validate and convert inputs (nothing is modified before this ends)
    pin_weight = targets = caps = planes = accel = wind = meshes = None
    boxes = None
    if inputs is not None:
        if inputs.pin_weight is not None:
            pin_weight = inputs.pin_weight
        if inputs.pin_targets is not None:
            targets = _per_vertex("pin_targets", inputs.pin_targets, n, model.targets_scratch)
        if inputs.capsules is not None:
            caps = inputs.capsules.packed()
        if inputs.planes is not None:
            planes = inputs.planes.packed()
        if inputs.acceleration is not None:
            accel = _per_vertex("acceleration", inputs.acceleration, n)
        if inputs.wind_velocity is not None:
            wind = _per_vertex("wind_velocity", inputs.wind_velocity, n)
        if getattr(inputs, "boxes", None) is not None:
            boxes = inputs.boxes.packed()
        if inputs.meshes is not None:
            meshes = mesh_step_args(model, inputs.meshes, dt, model.collider_offset_max,
                                    params.collision_margin, state.positions, state.velocities, targets)
    if pin_weight is not None:
        old = model.pin_weight
        if model.set_pin_weight(pin_weight):
            # Newly pinned vertices start from where they are.
            new = (old == 0) & (model.pin_weight > 0)
            state.pin_targets[:, new] = state.positions[:, new]

    if cached is None or not cached.matches(key, dt, model.pin_version):
        cached = _CACHES[model] = _prepare(model, params, key, dt, h)
    config = cached.config
    per_step = (accel is not None, model.collider_offset_max, wind is not None)
    if per_step != cached.per_step:
        # Written only when they change: a field of a structured record
        # costs more to set than the rest of a small cloth's dispatch.
        c = config[0]
        c["use_accel"], c["coff_max"], c["use_wind"] = float(per_step[0]), per_step[1], float(per_step[2])
        cached.per_step = per_step
    accel = _NO_FIELD if accel is None else accel
    wind = _NO_FIELD if wind is None else wind
    caps = _EMPTY_CAPS if caps is None else caps
    planes = _EMPTY_PLANES if planes is None else planes
    pin_start = state.pin_targets
    pin_end = pin_start if targets is None else targets
    pins = (model.kinematic, model.soft, cached.soft_alpha, pin_start, pin_end)
    scratch = model._collider_scratch
    if scratch[0].shape[0] != caps.shape[0] or scratch[2].shape[0] != planes.shape[0]:
        scratch = model._collider_scratch = collider_scratch(n, caps.shape[0], planes.shape[0])
    pos, vel, prev = state.positions, state.velocities, model.prev

    self_contacts = None
    sc = model.self_collision
    if sc is not None:
        # Contacts found once against the whole step's predicted motion,
        # solved inside the compiled step every iteration, before the
        # colliders.
        sc.detect(pos, vel, dt, np.asarray(params.gravity, dtype=np.float32), threads.resolve(params.threads))
        if sc.count:
            self_contacts = sc.solve_args()
    # Box colliders run in run_general only (the default loop stays small).
    box_scr = _NO_BOX_SCRATCH
    if boxes is not None and boxes.shape[0] > 0:
        box_scr = getattr(model, "_box_scratch", None)
        if box_scr is None or box_scr[0].shape[0] != boxes.shape[0]:
            box_scr = model._box_scratch = box_scratch(n, boxes.shape[0])
    else:
        boxes = _EMPTY_BOXES
    if cached.default and wind is _NO_FIELD and boxes.shape[0] == 0 and meshes is None:
        run, records = loop.run, cached.fast_records
        if model.n >= threads.COLOUR_SPLIT_MIN_VERTICES:  # a large cloth: its colours over numba's threads
            run = threads.colour_split(model, cached, params, run)
    else:
        run, records = loop.run_general, cached.records
        if len(model.sewing.t):
            # Which stitches have closed is the state's (State.seams).
            records = records[:5] + (model.sewing.record(records[5], state),) + records[6:]
        if meshes is None:
            meshes = NO_MESHES   # the same compiled run_general as with mesh colliders
    with _FAST:
        bad = run(pos, vel, prev, model.inv_mass, config, accel, wind, model.tris_soa, pins, caps, planes,
                  scratch, model.hit, model.entry, model.collider_offset, model.contact, *records,
                  model.soft_lam, model.surface.arrays(), self_contacts, boxes, box_scr, meshes)
    if sc is not None and sc.recover and not bad:
        # Edges the step left through triangles are pushed back out
        # (selfcollision.untangle), so the next step's contacts start from
        # the right sides.
        sc.untangle(pos)
    if targets is not None:
        state.pin_targets[:] = targets
    if bad:
        raise SolverError(
            f"the step produced NaN/Inf at {bad} vertices (dt={dt}, substeps={substeps}, "
            f"iterations={params.iterations}); the cloth state is invalid, reset it. "
            "Check for extreme compliance, masses or collider motion.")
    return state


def _prepare(model, params, key, dt, h):
    """The config and the constraint records for these params, dt and pins."""
    config = _config(params, h, model.kinematic.shape[0] > 0)
    c = config[0]
    # alpha~ exactly as the kernels compute it (float32), for the fast paths.
    inv_h2 = np.float32(1.0) / (np.float32(h) * np.float32(h))
    model.rest_scale.update(params)   # shrink, painted stiffness, warp/weft (constraints/shrink.py)
    prepared = [constraints.prepare(c, inv_h2) for constraints in model.constraints]
    records = tuple(p[0] for p in prepared)
    fast_records = tuple(p[1] for p in prepared)
    soft_alpha = model.soft_pin_compliance(params) / np.float32(h * h)
    c["edge_reach"] = model.surface.reach
    # The default settings (one iteration, undamped stretch/shear/bend; no
    # wind, checked per step) run loop.run, which holds only the fast
    # kernels: less to compile.
    default = bool(c["iterations"] == 1 and c["d_stretch"] == 0 and c["d_shear"] == 0 and c["d_bend"] == 0)
    default = default and not model.garment_general(params)   # sewing, pressure, skinned: run_general
    return _StepCache(key, dt, model.pin_version, config, soft_alpha, records, fast_records, default)
