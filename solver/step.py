"""step(): advance a cloth state by dt, reading like the pipeline.

predict -> colliders (swept contacts) -> [stretch, shear, bend, tether, soft
pins, self contacts, colliders] x iterations -> velocities, for each substep.
"""

import math

import numpy as np

from . import kernels as K
from .jit import compiled_fast
from .params import _F32, _F64, ClothParams, SolverError

_EMPTY_CAPS = np.zeros((0, 14), dtype=np.float32)
_EMPTY_PLANES = np.zeros((0, 12), dtype=np.float32)
_NO_LIST = np.zeros(0, dtype=np.uint32)
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
        if not K.rows_from_points(value, out):
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


def _config(params, h):
    cfg = np.zeros(K.C_SIZE, dtype=np.float32)
    cfg[K.C_H] = h
    cfg[K.C_GX:K.C_GZ + 1] = params.gravity
    cfg[K.C_A_STRETCH] = params.stretch_compliance
    cfg[K.C_A_SHEAR] = params.shear_compliance
    cfg[K.C_A_BEND] = params.bend_compliance
    cfg[K.C_A_TETHER] = params.tether_compliance
    cfg[K.C_D_STRETCH] = params.stretch_damping
    cfg[K.C_D_SHEAR] = params.shear_damping
    cfg[K.C_D_BEND] = params.bend_damping
    cfg[K.C_D_TETHER] = params.tether_damping
    cfg[K.C_TETHER_SCALE] = params.tether_scale
    cfg[K.C_AIR_DRAG] = params.air_drag
    cfg[K.C_AIR_DENSITY] = params.air_density
    cfg[K.C_CD] = params.drag_coefficient
    cfg[K.C_CL] = params.lift_coefficient
    cfg[K.C_MARGIN] = params.collision_margin
    cfg[K.C_MU_S] = params.friction_static
    cfg[K.C_MU_K] = params.friction_kinetic
    cfg[K.C_MAXV] = min(float(params.max_velocity), 3e38) if np.isfinite(params.max_velocity) else 0.0
    cfg[K.C_USE_TETHERS] = 1.0 if params.tethers else 0.0
    cfg[K.C_USE_LIMITS] = 1.0 if params.stretch_limits else 0.0
    cfg[K.C_SUBSTEPS] = int(params.substeps)
    cfg[K.C_ITERATIONS] = int(params.iterations)
    return cfg


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
    cached = getattr(model, "_cfg_cache", None)
    if cached is None or cached[0] != key:
        params.validate()
    dt = float(dt)
    if not math.isfinite(dt) or dt <= 0.0:
        raise SolverError(f"dt must be a positive finite number of seconds, got {dt}")
    n = model.n
    substeps = int(params.substeps)
    h = dt / substeps

    # ---- validate and convert inputs (nothing is modified before this ends)
    pin_weight = targets = caps = planes = accel = wind = None
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
    if pin_weight is not None:
        old = model.pin_weight
        if model.set_pin_weight(pin_weight):
            # Newly pinned vertices start from where they are.
            new = (old == 0) & (model.pin_weight > 0)
            state.pin_targets[:, new] = state.positions[:, new]

    if cached is None or cached[0] != key or cached[1] != dt or cached[2] != model.pin_version:
        cfg = _config(params, h)
        # alpha~ exactly as the kernels compute it (float32), for the fast paths.
        inv_h2 = np.float32(1.0) / (np.float32(h) * np.float32(h))
        model.stretch.refresh_coefficients(float(cfg[K.C_A_STRETCH] * inv_h2))
        model.shear.refresh_coefficients(float(cfg[K.C_A_SHEAR] * inv_h2))
        model.bend.refresh_coefficients(float(cfg[K.C_A_BEND] * inv_h2))
        # The stretch limits are as stiff as the tethers and scaled like them.
        model.limits.refresh_coefficients(float(cfg[K.C_A_TETHER] * inv_h2))
        model.limits.coef[:, 2] = model.limits.rest * np.float32(params.tether_scale)
        soft_alpha = model.soft_pin_compliance(params) / np.float32(h * h)
        # Tether coefficients w / (w + alpha~) for the undamped fast kernel.
        tw = model.tether_w
        t_alpha = np.float32(cfg[K.C_A_TETHER] * inv_h2)
        t_den = tw + t_alpha
        tether_coef = np.where(t_den > 0, tw / np.where(t_den > 0, t_den, 1), 0).astype(np.float32)
        tether = (model.tether_vertex, model.tether_anchor, model.tether_length, tw, tether_coef)
        if len(model.limits) == 0:
            cfg[K.C_USE_LIMITS] = 0.0
        cfg[K.C_BEND_CURVED] = 1.0 if np.any(model.bend.rest != 0) else 0.0
        constraints = (model.stretch.packed(), model.shear.packed(), model.bend.packed(), tether,
                       model.limits.packed())
        # step_fast takes only the fast kernels' (record offsets,
        # coefficients); the tethers with their record offsets too.
        fast = (tuple((c[8], c[7]) for c in constraints[:3])
                + (tether + (model.tether_vertex_rec, model.tether_anchor_rec), (constraints[4][8], constraints[4][7])))
        # The default settings (one iteration, undamped stretch/shear/bend;
        # no wind, checked per step) run a kernel that holds only the fast
        # paths: less to compile. Decided here, once: comparing the float32
        # config items with 0 cost ~1.7 us each in numpy, every step.
        default = bool(cfg[K.C_ITERATIONS] == 1 and cfg[K.C_D_STRETCH] == 0 and cfg[K.C_D_SHEAR] == 0
                       and cfg[K.C_D_BEND] == 0)
        # Everything that stays the same while params, dt and pins do.
        model._cfg_cache = cached = (key, dt, model.pin_version, cfg, soft_alpha, constraints, fast, default)
    cfg, soft_alpha, (stretch, shear, bend, tether, limits) = cached[3], cached[4], cached[5]
    cfg[K.C_USE_ACCEL] = 1.0 if accel is not None else 0.0
    cfg[K.C_COFF_MAX] = model.collider_offset_max
    cfg[K.C_USE_WIND] = 1.0 if wind is not None else 0.0
    accel = _NO_FIELD if accel is None else accel
    wind = _NO_FIELD if wind is None else wind
    caps = _EMPTY_CAPS if caps is None else caps
    planes = _EMPTY_PLANES if planes is None else planes
    pin_start = state.pin_targets
    pin_end = pin_start if targets is None else targets
    pins = (model.kinematic, model.soft, soft_alpha, pin_start, pin_end)
    scratch = model._collider_scratch
    if scratch[0].shape[0] != caps.shape[0] or scratch[2].shape[0] != planes.shape[0]:
        scratch = model._collider_scratch = K.collider_scratch(n, caps.shape[0], planes.shape[0])
    cap0, cap1, plane1 = scratch[:3]
    pos, vel, prev = state.positions, state.velocities, model.prev
    sc = model.self_collision

    default = cached[7] and wind is _NO_FIELD
    # A SelfCollision solved single-threaded runs inside the compiled step;
    # any other self_collision hook (detect/solve) runs between the substeps.
    fused_sc = sc is not None and hasattr(sc, "solve_args") and not getattr(sc, "parallel", False)
    if default and (sc is None or fused_sc):
        self_contacts = None
        if sc is not None:
            # Contacts found once against the whole step's predicted motion,
            # solved inside the compiled step every substep.
            sc.detect(pos, vel, dt, np.asarray(params.gravity, dtype=np.float32))
            if sc.count:
                self_contacts = sc.solve_args()
        with _FAST:
            bad = K.step_fast(pos, vel, prev, model.inv_mass, cfg, accel, pins, caps, planes, scratch,
                              model.hit, model.entry, model.collider_offset, model.contact, *cached[6],
                              model.soft_lam, self_contacts)
    elif sc is None:
        with _FAST:
            bad = K.step_fused(pos, vel, prev, model.inv_mass, cfg, accel, wind, model.tris_soa, pins,
                               caps, planes, scratch, model.hit, model.entry, model.collider_offset,
                               model.contact, stretch, shear, bend, tether, limits, model.soft_lam)
    else:
        # Self collision: contacts found once against the whole step's
        # predicted motion, solved every iteration before the colliders.
        sc.detect(pos, vel, dt, np.asarray(params.gravity, dtype=np.float32))
        has_contacts = caps.shape[0] + planes.shape[0] > 0
        clist = np.empty(n, dtype=np.uint32)
        ccount = 0
        bad = 0
        for sub in range(substeps):
            t1 = K.begin_substep(pos, vel, prev, model.inv_mass, cfg, accel, wind, model.tris_soa, pins,
                                 caps, planes, cap0, cap1, plane1, model.hit, model.entry,
                                 model.collider_offset, sub, stretch, shear, bend, model.soft_lam)
            for _ in range(int(params.iterations)):
                with _FAST:
                    K.iterate_substep(pos, prev, model.inv_mass, cfg, stretch, shear, bend, tether, limits, pins,
                                      model.soft_lam, t1)
                sc.solve(pos, prev)
                if has_contacts:
                    ccount = K.project_colliders(pos, model.inv_mass, cap1, plane1, cfg[K.C_MARGIN],
                                                 model.hit, model.entry, model.contact, model.collider_offset,
                                                 _NO_LIST, -1, cfg[K.C_COFF_MAX], clist, ccount)
            bad += K.finish_substep(pos, prev, vel, cfg, model.contact, clist, ccount)
            ccount = 0
            if bad:
                break
    if targets is not None:
        state.pin_targets[:] = targets
    if bad:
        raise SolverError(
            f"the step produced NaN/Inf at {bad} vertices (dt={dt}, substeps={substeps}, "
            f"iterations={params.iterations}); the cloth state is invalid, reset it. "
            "Check for extreme compliance, masses or collider motion.")
    return state
