"""Compile the solver's kernels into numba's disk cache, in a process of its own.

Started by ``scene.warmup`` with Blender's own Python (never imports bpy)::

    python -I scene/warmup_child.py PACKAGE ROOT SYS_PATH_JSON

It imports the add-on under the name Blender gave it (``PACKAGE``, e.g.
``bl_ext.user_default.drape``) from the folder Blender loaded it from
(``ROOT``, exactly as that process spells it): numba keys a kernel's cache
entry on its source file's absolute path, its qualified name, its first line
and its argument types, and records the defining module's name to rebuild it
on load, so only the same files under the same names give entries that the
add-on's own process then loads instead of compiling.

It then reads group names from stdin, one per line, and for each drives the
solver through the same public calls, with the same dtypes and layouts, that
``scene.runtime`` makes for a live cloth of that kind (a small sheet with
pins, a capsule and a plane; each group's docstring names what it mirrors).
Only solver/ and scene/_kernels.py are imported (the rest of scene/ imports
bpy): what runtime takes from there (``params.cloth_params``, the collider
arrays, the wind kernel's arguments) is mirrored below, and
tests/blender/test_warmup.py plays real scenes of every kind afterwards to
check that nothing is left to compile.
numba compiles what a call needs and writes it to ``NUMBA_CACHE_DIR`` (the
add-on's user folder, inherited from the parent's environment). After each
group it prints one line::

    drape-warmup {"event": "done", "group": ..., "wall_s": ..., "cpu_s": ...,
                  "compiled": ..., "loaded": ...}

(``compiled``: kernel signatures numba compiled, ``loaded``: ones found in
the cache). ``{"event": "ready"}`` comes first, once the imports are done;
``{"event": "error", ...}`` reports a group that raised (the others go on).
End of input ends the process.
"""

import importlib
import importlib.util
import json
import os
import sys
import time
import traceback
import types

PREFIX = "drape-warmup "


def emit(event, **fields):
    sys.stdout.write(PREFIX + json.dumps(dict(event=event, **fields)) + "\n")
    sys.stdout.flush()


def import_package(package, root):
    """The add-on package imported as ``package`` from ``root``, the way
    Blender imports it (parents are bare namespace stand-ins; the add-on's
    ``__init__`` imports nothing from Blender at import time)."""
    if package in sys.modules:
        return sys.modules[package]
    parts = package.split(".")
    for i in range(1, len(parts)):
        name = ".".join(parts[:i])
        if name not in sys.modules:
            stand_in = types.ModuleType(name)
            stand_in.__path__ = []
            sys.modules[name] = stand_in
    spec = importlib.util.spec_from_file_location(package, os.path.join(root, "__init__.py"),
                                                  submodule_search_locations=[root])
    module = importlib.util.module_from_spec(spec)
    sys.modules[package] = module
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- the scene


class _Cloth:
    """The property defaults of ``Object.drape`` (properties.py) that
    ``scene.params.cloth_params`` reads; a group changes the few it needs."""

    substeps = 4
    iterations = 1
    gravity_scale = 1.0
    stretch_compliance = 1e-7
    shear_compliance = 1e-5
    bend_compliance = 1e3
    tether_compliance = 1e-9
    stretch_damping = shear_damping = bend_damping = tether_damping = 0.0
    tethers = True
    tether_scale = 1.0
    stretch_limits = True
    stretch_hierarchy = False
    pin_compliance = 1e-3
    air_drag = 0.1
    settle_damping = 10.0
    settle_speed = 0.1
    air_resistance = 1.0
    wind_drag = 1.0
    wind_lift = 0.3
    thickness = 0.005
    friction = 0.3
    static_friction = 0.5
    self_collision = False
    self_thickness = 0.004
    self_friction = 0.2
    self_conservativeness = 1.5
    areal_density = 0.15

    def __init__(self, **changes):
        for key, value in changes.items():
            setattr(self, key, value)


class _Scene:
    use_gravity = True
    gravity = (0.0, 0.0, -9.81)


def _grid(n, size=1.0, z=1.0):
    """An n x n vertex quad sheet in Blender's corner order: local
    positions (n*n, 3) float32, corner indices and corners per polygon as
    ``meshdata.Topology`` reads them (int32), the pinned top row."""
    import numpy as np

    s = np.linspace(-0.5 * size, 0.5 * size, n)
    xs, ys = np.meshgrid(s, s)
    local = np.stack([xs.ravel(), ys.ravel(), np.full(n * n, z)], axis=1).astype(np.float32)
    i, j = np.meshgrid(np.arange(n - 1), np.arange(n - 1))
    v = (j * n + i).ravel()
    faces = np.stack([v, v + 1, v + n + 1, v + n], axis=1).ravel().astype(np.int32)
    sizes = np.full((n - 1) ** 2, 4, np.int32)
    return local, faces, sizes, np.arange(n * (n - 1), n * n)


class _Env:
    """The imported add-on: its solver and scene/_kernels.py (the other
    scene/ modules import bpy; what runtime takes from them is mirrored
    below, argument types included)."""

    def __init__(self, package):
        self.solver = importlib.import_module(package + ".solver")
        self.loop = importlib.import_module(package + ".solver.loop")
        self.skinning = importlib.import_module(package + ".solver.skinning")
        self.selfcollision = importlib.import_module(package + ".solver.selfcollision")
        self.simplify = importlib.import_module(package + ".solver.simplify")
        self.kernels = importlib.import_module(package + ".scene._kernels")


def _params(env, settings):
    """``params.cloth_params``: the cloth's settings as solver.ClothParams
    (every value goes into the step's float32 config: only which values
    choose the step's path matters, not their Python types)."""
    import dataclasses

    s = settings
    g = _Scene.gravity
    values = dict(
        substeps=s.substeps, iterations=s.iterations, gravity=(g[0] * s.gravity_scale, g[1] * s.gravity_scale,
                                                               g[2] * s.gravity_scale),
        stretch_compliance=s.stretch_compliance, shear_compliance=s.shear_compliance,
        bend_compliance=s.bend_compliance, tether_compliance=s.tether_compliance,
        stretch_damping=s.stretch_damping, shear_damping=s.shear_damping, bend_damping=s.bend_damping,
        tether_damping=s.tether_damping, tethers=s.tethers, tether_scale=s.tether_scale,
        stretch_limits=s.stretch_limits, stretch_hierarchy=s.stretch_hierarchy or None, pin_compliance=s.pin_compliance, air_drag=s.air_drag,
        settle_damping=s.settle_damping, settle_speed=s.settle_speed, air_resistance=s.air_resistance,
        drag_coefficient=s.wind_drag, lift_coefficient=s.wind_lift, collision_margin=s.thickness,
        friction_static=max(s.static_friction, s.friction), friction_kinetic=s.friction,
        self_collision=s.self_collision, self_thickness=s.self_thickness, self_friction=s.self_friction,
        self_conservativeness=s.self_conservativeness)
    names = {f.name for f in dataclasses.fields(env.solver.ClothParams)}
    return env.solver.ClothParams(**{k: v for k, v in values.items() if k in names})


def _sample(env, local, pin, matrix=None):
    """What ``meshdata.sample`` returns: world positions through the affine
    kernel (float32 (n, 3)), pin weights clipped to 0..1, mass weights."""
    import numpy as np

    matrix = np.eye(4) if matrix is None else matrix
    positions = env.kernels.affine(local, np.array(matrix, dtype=np.float64))
    return positions, np.clip(pin, 0.0, 1.0), np.clip(np.ones(local.shape[0], np.float32), 0.0, None)


def _colliders(t):
    """``colliders.read``: name -> (a, b, ra, rb) capsules and (point, normal)
    planes at time ``t``, float64 like the evaluated matrices they come from."""
    import numpy as np

    a = np.array((-0.6, 0.0, 0.6 - 0.01 * t))
    capsules = {"Capsule": (a, a + np.array((1.2, 0.0, 0.0)), 0.15, 0.15)}
    planes = {"Ground": (np.array((0.0, 0.0, -0.5)), np.array((0.0, 0.0, 1.0)))}
    return capsules, planes


def _lerp_colliders(start, end, t):
    """``colliders.interpolate``."""
    import numpy as np

    capsules = {k: (a0 + (a1 - a0) * t, b0 + (b1 - b0) * t, ra, rb)
                for k, ((a0, b0, _, _), (a1, b1, ra, rb)) in
                ((k, (start[0][k], end[0][k])) for k in end[0])}
    planes = {}
    for k, (p1, n1) in end[1].items():
        p0, n0 = start[1][k]
        n = n0 + (n1 - n0) * t
        planes[k] = (p0 + (p1 - p0) * t, n / max(float(np.linalg.norm(n)), 1e-12))
    return capsules, planes


def _solver_colliders(env, start, end):
    """``colliders.solver_inputs``: (Capsules, Planes) of float32 (k, 3) and (k,) arrays."""
    import numpy as np

    solver = env.solver
    names = list(end[0])
    a0 = np.empty((len(names), 3), np.float32)
    b0, a1, b1 = np.empty_like(a0), np.empty_like(a0), np.empty_like(a0)
    ra = np.empty(len(names), np.float32)
    rb = np.empty(len(names), np.float32)
    for i, name in enumerate(names):
        ea, eb, era, erb = end[0][name]
        sa, sb, _, _ = start[0].get(name, end[0][name])
        a0[i], b0[i], a1[i], b1[i], ra[i], rb[i] = sa, sb, ea, eb, era, erb
    capsules = solver.Capsules(a0=a0, b0=b0, a1=a1, b1=b1, radius_a=ra, radius_b=rb)
    pnames = list(end[1])
    p0 = np.empty((len(pnames), 3), np.float32)
    n0, p1, n1 = np.empty_like(p0), np.empty_like(p0), np.empty_like(p0)
    for i, name in enumerate(pnames):
        ep, en = end[1][name]
        sp, sn = start[1].get(name, end[1][name])
        p0[i], n0[i], p1[i], n1[i] = sp, sn, ep, en
    return capsules, solver.Planes(point0=p0, normal0=n0, point1=p1, normal1=n1)


class _Live:
    """One live simulation the way ``runtime._build`` / ``runtime._advance``
    run it: rest from the evaluated mesh, masses, ``build_model``, optional
    self collision, then steps with pin targets, colliders and wind."""

    def __init__(self, env, settings, sheets=1, n=12, self_cache=False, layers=None):
        import numpy as np

        solver = env.solver
        self.env = env
        self.settings = settings
        self.self_cache = self_cache
        self.layers = layers
        parts = []
        for k in range(sheets):
            # Stacked sheets 3 mm apart: cloth-cloth contacts from the start.
            local, faces, sizes, top = _grid(n, z=1.0 + 0.003 * k)
            pin = np.zeros(local.shape[0], np.float32)
            pin[top] = 1.0
            pin[top - n] = 0.5  # soft pins
            rest, pin_w, mass_w = _sample(env, local, pin)
            mass = solver.vertex_masses(rest, faces, sizes, settings.areal_density, weight=np.maximum(mass_w, 1e-2))
            parts.append((local, np.asarray(rest, np.float32), faces, sizes, mass, pin_w))
        self.parts = parts
        prm = _params(env, settings)
        if sheets == 1:
            _, rest, faces, sizes, mass, pin_w = parts[0]
            region = None
        else:
            starts = np.cumsum([0] + [p[1].shape[0] for p in parts])
            rest = np.concatenate([p[1] for p in parts])
            faces = np.concatenate([np.asarray(p[2], np.int64) + s for p, s in zip(parts, starts)])
            sizes = np.concatenate([np.asarray(p[3], np.int64) for p in parts])
            mass = np.concatenate([p[4] for p in parts])
            pin_w = np.concatenate([p[5] for p in parts])
            region = np.concatenate([np.full(p[1].shape[0], i, np.int32) for i, p in enumerate(parts)])
        self.model = solver.build_model(rest, faces, sizes, mass, pin_w, prm, region=region)
        if settings.self_collision or sheets > 1:
            self.model.self_collision = env.selfcollision.SelfCollision.from_model(self.model, **self._self_params())
        self.state = self.model.new_state()
        self.prev_targets = rest
        self.prev_colliders = _colliders(0)
        self.frame = 1
        self.show()

    def _self_params(self):
        """``runtime._self_params``."""
        import numpy as np

        s = self.settings
        out = dict(thickness=max(s.self_thickness, 1e-5), friction=s.self_friction,
                   conservativeness=s.self_conservativeness)
        if len(self.parts) > 1:
            out["layers"] = np.array(self.layers if self.layers is not None else [-1] * len(self.parts),
                                     dtype=np.int32)
        return out

    def show(self):
        """``runtime._show_all``: AoS positions to object space per member."""
        import numpy as np

        coarse = self.state.positions_aos()
        start = 0
        for part in self.parts:
            stop = start + part[1].shape[0]
            self.env.kernels.affine(coarse[start:stop], np.array(np.linalg.inv(np.eye(4)), dtype=np.float64))
            start = stop

    def advance(self, gap=1, wind=False, mesh=False):
        """``runtime._advance`` over ``gap`` frames (mesh: with a deforming
        mesh collider, as ``colliders.mesh_inputs`` gives it)."""
        import numpy as np

        env, solver, model, state = self.env, self.env.solver, self.model, self.state
        self.frame += gap
        prev_t = self.prev_targets
        samples = []
        for local, *_rest in self.parts:
            pin = np.zeros(local.shape[0], np.float32)
            n = int(round(local.shape[0] ** 0.5))
            pin[n * (n - 1):] = 1.0
            pin[n * (n - 2):n * (n - 1)] = 0.5
            m = np.eye(4)
            m[0, 3] = 0.001 * self.frame
            samples.append(_sample(env, local, pin, m))
        if len(samples) == 1:
            targets, pin_w = np.asarray(samples[0][0], np.float32), samples[0][1]
        else:
            targets = np.concatenate([np.asarray(s[0], np.float32) for s in samples])
            pin_w = np.concatenate([s[1] for s in samples])
        self.prev_targets = targets
        col_end = _colliders(self.frame)
        air = None
        if wind:
            air = _wind(env, state.positions.T, self.frame)
        prm = _params(env, self.settings)
        sc = model.self_collision
        if sc is not None:
            self_params = self._self_params()
            sc.set_params(**self_params)
            layers = self_params.get("layers")
            if layers is not None:  # runtime._set_layer_offsets
                model.set_collider_offset(np.concatenate(
                    [np.full(p[1].shape[0], 0.004 * i) for i, p in enumerate(self.parts)]))
            if self.self_cache and not sc.cached:  # runtime._sync_contact_cache
                sc.cache_contacts(state.positions, between_regions=len(self.parts) > 1)
        dt = 1.0 / 24.0
        col_start = self.prev_colliders
        for k in range(1, gap + 1):
            if gap == 1:
                tgt, c0, c1 = targets, col_start, col_end
            else:
                tgt = prev_t + (targets - prev_t) * (k / gap)
                c0 = _lerp_colliders(col_start, col_end, (k - 1) / gap)
                c1 = _lerp_colliders(col_start, col_end, k / gap)
            capsules, planes = _solver_colliders(env, c0, c1)
            inputs = solver.StepInputs(pin_targets=tgt, pin_weight=pin_w, capsules=capsules, planes=planes,
                                       wind_velocity=air)
            if mesh:
                inputs.meshes = _mesh_colliders(env, self.frame - gap + k - 1, self.frame - gap + k)
            solver.step(model, state, inputs, dt, prm)
        self.prev_colliders = col_end
        self.show()


def _mesh_colliders(env, f0, f1):
    """``colliders.mesh_inputs``: one MeshCollider, a box under the sheet
    (float32 world vertices at both frames, int32 triangles) whose top
    breathes."""
    import numpy as np

    corners = np.array([(x, y, z) for z in (0.5, 0.95) for y in (-0.4, 0.4) for x in (-0.4, 0.4)], np.float32)
    tris = np.array([(0, 2, 1), (1, 2, 3), (4, 5, 6), (5, 7, 6), (0, 1, 4), (1, 5, 4), (2, 6, 3), (3, 6, 7),
                     (0, 4, 2), (2, 4, 6), (1, 3, 5), (3, 7, 5)], np.int32)

    def at(f):
        v = corners.copy()
        v[4:, 2] += np.float32(0.01 * np.sin(0.3 * f))
        return v

    return [env.solver.MeshCollider(verts0=at(f0), verts1=at(f1), tris=tris, thickness=0.01, friction=1.0,
                                    two_sided=False, name="Box")]


def _wind(env, points, frame):
    """``wind.wind_velocity``: each Wind field's ``wind.sample_field`` call of
    the wind kernel, argument for argument (points as given: runtime passes
    the solver's (3, n) positions transposed)."""
    import numpy as np

    total = np.zeros((points.shape[0], 3), np.float32)
    for shape, falloff in ((0, 0), (1, 1), (2, 2)):
        m = np.eye(4, dtype=np.float64)
        axis = m[:3, 2] / max(float(np.linalg.norm(m[:3, 2])), 1e-12)
        env.kernels.wind_field_kernel(
            np.asarray(points, np.float32), m[:3, 3].copy(), axis.copy(), shape, falloff,
            float(1.0), float(0.1), bool(True), float(5.0), float(1.0), 0.0, bool(False), float(0.0),
            0, float(2.0), float(0.5), float(1), float(frame), total)
    return total


# --------------------------------------------------------------------------- groups


def group_build(env):
    """Every cloth's first frame: the affine transforms of meshdata,
    vertex_masses, build_model (colouring, tethers, stretch limits) and the
    first frame shown."""
    _Live(env, _Cloth())


def _sweep_lock():
    """A file next to numba's cache held while "step_sweep" compiles (POSIX;
    elsewhere, and without a cache folder, None: one worker does the groups
    in order)."""
    folder = os.environ.get("NUMBA_CACHE_DIR")
    try:
        import fcntl
    except ImportError:
        return None, None
    if not folder:
        return None, None
    os.makedirs(folder, exist_ok=True)
    return fcntl, open(os.path.join(folder, ".drape-warmup-sweep.lock"), "a")


def group_step_sweep(env):
    """The default step's per-vertex pass between substeps and its swept
    capsule contacts (solver.loop.precompile), the longest part of the
    step's compile, side by side with "build" and "step_solve" in the other
    worker."""
    fcntl, lock = _sweep_lock()
    if lock is not None:
        fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        env.loop.precompile("sweep")
    finally:
        if lock is not None:
            lock.close()


def group_step_solve(env):
    """The default step's constraints, collider projection and velocities
    (solver.loop.precompile)."""
    env.loop.precompile("solve")


def group_step(env):
    """The default settings' step (one iteration, no damping, no wind): the
    compiled fast step with pins, a capsule and a plane, one frame and a
    skipped frame (interpolated pins and colliders). Its kernels come from
    "step_sweep" and "step_solve": it waits while another worker still
    compiles the sweep, so that only the loop itself is left to compile."""
    fcntl, lock = _sweep_lock()
    if lock is not None:
        fcntl.flock(lock, fcntl.LOCK_SH)
        lock.close()
    live = _Live(env, _Cloth())
    live.advance()
    live.advance(gap=2)


def group_general(env):
    """Any setting off the default path (iterations > 1 or damping) or a
    Wind field: the general fused step, and the wind field kernel."""
    live = _Live(env, _Cloth(iterations=2, stretch_damping=0.1, bend_damping=0.1))
    live.advance()
    live = _Live(env, _Cloth())
    live.advance(wind=True)


def group_mesh(env):
    """A mesh collider (any settings: it always takes the general step):
    the general fused step with the mesh colliders' kernels (the grid, the
    substep rows, the vertex and edge passes), one frame and a skipped
    frame, default and off-default settings."""
    live = _Live(env, _Cloth())
    live.advance(mesh=True)
    live.advance(gap=2, mesh=True)
    live = _Live(env, _Cloth(iterations=2, stretch_damping=0.1))
    live.advance(mesh=True)


def group_self(env):
    """Self collision and cloth-cloth collision with the default settings:
    detection (serial and threaded), the contacts solved inside the fast
    step, cached contacts (one cloth and between layers), layer offsets."""
    live = _Live(env, _Cloth(self_collision=True))
    live.advance()
    # A large cloth detects on several threads (SelfCollision.detect): the
    # same records' types, whatever this cloth's size.
    live.model.self_collision.compile_threaded_detection()
    live = _Live(env, _Cloth(), sheets=2, layers=[0, 1])
    live.advance()
    live.advance()
    live = _Live(env, _Cloth(self_collision=True), self_cache=True)
    live.advance()
    live = _Live(env, _Cloth(), sheets=2, self_cache=True, layers=[0, 1])
    live.advance()


def group_self_general(env):
    """Self collision with settings off the default path or wind: the
    substep-by-substep loop with the contacts solved between iterations."""
    live = _Live(env, _Cloth(self_collision=True, iterations=2), sheets=2)
    live.advance()
    live = _Live(env, _Cloth(self_collision=True), sheets=2)
    live.advance(wind=True)


def group_skin(env):
    """A proxy or automatic sim mesh (runtime._build_member, _member_frame,
    _pin_skin, _show_all): binding both ways, pin skinning, the dense skin
    (serial, and parallel at the size skinning switches to it), and the
    boundary thinning of the automatic simplification."""
    import numpy as np

    skinning = env.skinning
    parallel_from = int(getattr(skinning, "_PARALLEL_MIN_VERTICES", 20000))
    for dense_n in (24, int(np.ceil(parallel_from ** 0.5)) + 1):
        local, faces, sizes, top = _grid(dense_n)
        pin = np.zeros(local.shape[0], np.float32)
        pin[top] = 1.0
        dense_pos, dense_pin, dense_mass = _sample(env, local, pin)
        tris = _triangles(faces, sizes)
        c_local, c_faces, c_sizes, _ = _grid(8)
        rest = np.ascontiguousarray(_sample(env, c_local, np.zeros(c_local.shape[0], np.float32))[0], np.float32)
        full = skinning.bind(dense_pos, tris, rest)
        pin_triangle = full.triangle
        pin_corners = full.coarse_triangles[full.triangle]
        bary = np.asarray(full.bary)
        pin_bary = bary if bary.shape == pin_corners.shape else np.ascontiguousarray(bary.T)
        weight = (dense_pin[pin_corners] * pin_bary).sum(axis=1).astype(np.float32)
        weighted = np.flatnonzero(weight > 0.0)
        used = tris[pin_triangle[weighted]]
        touching = np.isin(tris, np.unique(used)).any(axis=1)
        verts, remapped = np.unique(tris[touching], return_inverse=True)
        pin_binding = skinning.bind(dense_pos[verts], remapped.reshape(-1, 3).astype(np.int32), rest[weighted])
        targets = np.array(rest, np.float32, copy=True)
        targets[weighted] = skinning.skin(pin_binding, dense_pos[verts])
        binding = skinning.bind(rest, skinning.triangulate(c_faces, c_sizes), dense_pos,
                                dense_pinned=dense_pin >= 0.999)
        solver = env.solver
        mass = solver.vertex_masses(rest, c_faces, c_sizes, 0.15, weight=np.maximum(
            (dense_mass[pin_corners] * pin_bary).sum(axis=1).astype(np.float32), 1e-2))
        prm = _params(env, _Cloth())
        model = solver.build_model(rest, c_faces, c_sizes, mass, weight, prm)
        state = model.new_state()
        solver.step(model, state, solver.StepInputs(pin_targets=targets, pin_weight=weight), 1 / 24, prm)
        coarse = state.positions_aos()
        skinning.skin(binding, coarse[0:coarse.shape[0]], pin_targets=dense_pos)
    labels = np.zeros(local.shape[0], np.int64)
    labels[top] = 1
    env.simplify.thin_boundary(dense_pos, np.asarray(faces, np.int64), np.asarray(sizes, np.int64), 0.5,
                               labels=labels)


def _triangles(faces, sizes):
    """``meshdata.Topology.triangles``: the fan triangulation, (t, 3) int32."""
    import numpy as np

    sizes = sizes.astype(np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    ntri = sizes - 2
    owner = np.repeat(np.arange(sizes.size), ntri)
    k = np.arange(ntri.sum()) - np.repeat(np.cumsum(ntri) - ntri, ntri)
    first = faces[starts[owner]]
    second = faces[starts[owner] + k + 1]
    third = faces[starts[owner] + k + 2]
    return np.stack((first, second, third), axis=1).astype(np.int32)


GROUPS = {
    "step_sweep": group_step_sweep,
    "build": group_build,
    "step_solve": group_step_solve,
    "step": group_step,
    "self": group_self,
    "general": group_general,
    "mesh": group_mesh,
    "skin": group_skin,
    "self_general": group_self_general,
}


# --------------------------------------------------------------------------- counting


def _dispatchers(package):
    """The package's compiled kernels (numba dispatchers at module level)."""
    from numba.core.dispatcher import Dispatcher

    found = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == package or name.startswith(package + ".")):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, Dispatcher):
                found[id(value)] = value
    return list(found.values())


def cache_counts(package):
    """(signatures compiled, signatures loaded from the cache) so far."""
    compiled = loaded = 0
    for d in _dispatchers(package):
        compiled += sum(d.stats.cache_misses.values())
        loaded += sum(d.stats.cache_hits.values())
    return compiled, loaded


def run_group(env, package, name):
    compiled0, loaded0 = cache_counts(package)
    t0, c0 = time.perf_counter(), time.process_time()
    GROUPS[name](env)
    compiled, loaded = cache_counts(package)
    return dict(group=name, wall_s=round(time.perf_counter() - t0, 3), cpu_s=round(time.process_time() - c0, 3),
                compiled=compiled - compiled0, loaded=loaded - loaded0)


def serialise_cache_writes():
    """numba adds a kernel's entry to its index file by reading the index,
    picking the next free data file number and writing both back, without a
    lock: two processes saving two signatures of one kernel at once could
    leave the index naming one's data file for the other's signature. The
    workers take a file lock around that (POSIX; elsewhere the parent runs
    one worker). Returns whether the lock is in place."""
    try:
        import fcntl
    except ImportError:
        return False
    from numba.core import caching

    original = caching.IndexDataCacheFile.save

    def save(self, key, data):
        with open(os.path.join(self._cache_path, ".drape-warmup.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                return original(self, key, data)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    caching.IndexDataCacheFile.save = save
    return True


def main(argv):
    package, root, path = argv[1], argv[2], json.loads(argv[3])
    # Blender's import path (its bundled wheels, the extension's .local
    # site-packages), not this script's folder: scene/ must not shadow
    # top-level modules.
    sys.path[:] = [p for p in path if p]
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        serialise_cache_writes()
        import_package(package, root)
        env = _Env(package)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which compiles in-process
        emit("error", group=None, message=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc())
        return 1
    emit("ready", wall_s=round(time.perf_counter() - t0, 3), cpu_s=round(time.process_time() - c0, 3),
         pid=os.getpid())
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        if name not in GROUPS:
            emit("error", group=name, message=f"unknown group {name!r}")
            continue
        try:
            emit("done", **run_group(env, package, name))
        except Exception as exc:  # noqa: BLE001 - one group failing leaves the others to compile
            emit("error", group=name, message=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
