"""Live preview: one solver state per cloth object, advanced by the timeline.

The registry maps ``Object.drape.uid`` (a random id stored on the object, so
it survives renames, undo and save/reload; a duplicated object gets a fresh
one) to a :class:`ClothRuntime`. It never holds bpy objects, only arrays, so
deleting, undoing or reloading can't leave it pointing at freed data.

``frame_change_post`` (a @persistent handler, added in register() and removed
in unregister()) drives it, in the UI and in background mode alike:

* at the scene's start frame the cloth resets (fresh state, cache dropped);
* one frame forward steps the solver once (a skipped frame during playback:
  one step per frame, with pin targets and colliders interpolated);
* a frame already simulated is shown from the in-memory cache (scrubbing back);
* a frame before the cache shows the un-simulated mesh;
* when topology or a rest-state setting changes (``params.rebuild_key``) the
  model is rebuilt and the cache restarts at the current frame; every other
  setting (stiffness, damping, friction, wind response...) is read every step.

The result is written as described in ``writeback``. An object whose
``drape_bake.baked`` is true is not simulated (it plays its bake).
"""

import random
import time

import bpy
import numpy as np
from bpy.app.handlers import persistent

from . import colliders as colliders_mod
from . import meshdata, params, wind, writeback
from .meshdata import DrapeInputError

# Playback that skips more frames than this does not catch up step by step.
MAX_CATCH_UP = 250

_registry = {}


def _solver():
    from .. import solver

    return solver


def is_baked(obj):
    bake = getattr(obj, "drape_bake", None)
    return bool(bake is not None and getattr(bake, "baked", False))


def is_cloth(obj):
    return obj is not None and obj.type == 'MESH' and obj.drape.enabled


def new_uid():
    return random.randint(1, 2**31 - 1)


def ensure_uid(obj, taken=None):
    """The object's registry key, assigned on first use; a duplicate of
    another object's key (Shift+D copies properties) is replaced."""
    uid = obj.drape.uid
    if uid == 0 or (taken is not None and uid in taken and taken[uid] != obj.name):
        uid = new_uid()
        while taken is not None and uid in taken:
            uid = new_uid()
        obj.drape.uid = uid
    if taken is not None:
        taken[uid] = obj.name
    return uid


class ClothRuntime:
    """Live solver state and cache of one cloth."""

    def __init__(self, uid):
        self.uid = uid
        self.key = None
        self.source = 'SELF'
        self.model = None
        self.state = None
        self.binding = None
        self.coarse_rest = None
        self.pin_binding = None     # PROXY/AUTO: coarse vertices bound to the dense surface
        self.dense_rest = None
        self.dense_count = 0
        self.frames = {}
        self.first_frame = None
        self.last_frame = None
        self.prev_targets = None
        self.prev_colliders = None
        self.builds = 0
        self.steps = 0
        self.error = None
        self.last_step_ms = 0.0
        self.last_read_ms = 0.0
        self.last_write_ms = 0.0
        self.last_skin_ms = 0.0

    @property
    def cache_range(self):
        if not self.frames:
            return None
        return (min(self.frames), max(self.frames))


def get(obj):
    """The live runtime of ``obj`` or None."""
    if obj is None or obj.type != 'MESH':
        return None
    return _registry.get(obj.drape.uid)


def drop(obj):
    """Forget ``obj``'s live cache and show its un-simulated mesh."""
    if obj is not None and obj.type == 'MESH':
        _registry.pop(obj.drape.uid, None)
        writeback.clear_result(obj)


def clear():
    _registry.clear()


def dense_positions_local(obj):
    """The dense, skinned result of the current frame, object local space,
    (m, 3) float32: what the viewport shows. Raises RuntimeError with the
    reason when the current frame has no simulated result."""
    frame = bpy.context.scene.frame_current
    entry = get(obj)
    if entry is None:
        raise RuntimeError(f"'{obj.name}' has no live Drape simulation (is it a Drape cloth, and has the "
                           f"timeline moved since it was enabled?)")
    if entry.error:
        raise RuntimeError(entry.error)
    result = entry.frames.get(frame)
    if result is None:
        rng = entry.cache_range
        raise RuntimeError(f"'{obj.name}' has no simulated result for frame {frame} (cache: {rng})")
    return result


# --------------------------------------------------------------------------- reading


def _topology_key(obj):
    mesh = obj.data
    return (mesh.name, len(mesh.vertices), len(mesh.polygons), len(mesh.loops))


def _full_key(obj):
    s = obj.drape
    proxy_key = ()
    if s.sim_source == 'PROXY' and s.proxy is not None and s.proxy.type == 'MESH':
        proxy_key = _topology_key(s.proxy)
    return (params.rebuild_key(obj), _topology_key(obj), proxy_key)


def _interpolate(binding, dense_values):
    """Per-vertex values of the dense mesh at the bound points (barycentric)."""
    corners = binding.coarse_triangles[binding.triangle]          # (c, 3)
    bary = binding.bary if binding.bary.shape == corners.shape else binding.bary.T
    return (dense_values[corners] * bary).sum(axis=1).astype(np.float32)


def _coarse_frame(entry, obj, depsgraph, dense):
    """Pin targets (world) and pin weights for the simulated vertices.

    A proxy or simplified mesh gets both from the dense mesh: each coarse
    vertex is bound (once, ``pin_binding``) to the dense surface like a dense
    vertex is to the coarse one, and rides on it with the same Phong
    reconstruction, so the collar of a coarse cape turns with the chest;
    weights are the dense weights interpolated with that binding's
    barycentrics. The artist pins once, on the render mesh."""
    if entry.source == 'SELF':
        return dense.positions, dense.pin_weight
    from ..solver import skinning

    weight = _interpolate(entry.pin_binding, dense.pin_weight)
    if not np.any(weight > 0.0):
        return entry.prev_targets, weight
    return skinning.skin(entry.pin_binding, dense.positions), weight


def _build(obj, scene, depsgraph, uid):
    """A fresh runtime for ``obj`` at the current frame (raises DrapeInputError)."""
    problems = meshdata.check_cloth(obj, depsgraph)
    if problems:
        raise DrapeInputError("; ".join(problems))
    solver = _solver()
    settings = obj.drape
    if writeback.needs_setup(obj):
        writeback.ensure_modifier(obj)
        depsgraph.update()  # the stored pin/mass attributes exist only after re-evaluation
    entry = ClothRuntime(uid)
    entry.source = settings.sim_source
    dense = meshdata.sample(obj, depsgraph)
    dense_topo = meshdata.Topology(obj.data)
    entry.dense_count = dense.positions.shape[0]
    entry.dense_rest = dense.positions.copy()
    prm = params.cloth_params(settings, scene, solver)

    if entry.source == 'SELF':
        rest, faces, sizes = dense.positions, dense_topo.face_indices, dense_topo.face_sizes
        mass_w, pin_w = dense.mass_weight, dense.pin_weight
    elif entry.source == 'PROXY':
        # The proxy as modelled (its own modifiers are not used), placed by its
        # object transform: it should overlap the cloth where the cache starts.
        proxy = settings.proxy
        proxy_topo = meshdata.Topology(proxy.data)
        rest = meshdata.to_world(meshdata.local_positions(proxy.data), proxy.matrix_world)
        faces, sizes = proxy_topo.face_indices, proxy_topo.face_sizes
    else:
        try:
            from .simmesh import simplify
        except ImportError as exc:
            raise DrapeInputError(f"'{obj.name}': automatic simplification is not available ({exc})") from exc
        rest, faces, sizes, _weights = simplify(
            dense.positions, dense_topo.face_indices, dense_topo.face_sizes,
            {"pin": dense.pin_weight, "mass": dense.mass_weight}, settings.vertex_budget, name=obj.name)
        rest = np.ascontiguousarray(rest, np.float32)
        faces = np.ascontiguousarray(faces, np.int32)
        sizes = np.ascontiguousarray(sizes, np.int32)
    if entry.source != 'SELF':
        from ..solver import skinning

        entry.prev_targets = rest
        entry.pin_binding = skinning.bind(dense.positions, dense_topo.triangles(), rest)
        _, pin_w = _coarse_frame(entry, obj, depsgraph, dense)
        mass_w = _interpolate(entry.pin_binding, dense.mass_weight)

    mass = solver.vertex_masses(rest, faces, sizes, settings.areal_density, weight=np.maximum(mass_w, 1e-2))
    entry.model = solver.build_model(rest, faces, sizes, mass, pin_w, prm)
    if settings.self_collision:
        from ..solver.selfcollision import SelfCollision

        entry.model.self_collision = SelfCollision.from_model(entry.model, **_self_params(settings))
    entry.state = entry.model.new_state()
    entry.coarse_rest = np.ascontiguousarray(rest, np.float32)
    if entry.source != 'SELF':
        from ..solver import skinning

        triangles = skinning.triangulate(faces, sizes)
        entry.binding = skinning.bind(entry.coarse_rest, triangles, dense.positions,
                                      dense_pinned=dense.pin_weight >= 0.999)
    entry.key = _full_key(obj)
    entry.builds = 1
    entry.prev_targets = rest.astype(np.float32)
    entry.prev_colliders = colliders_mod.read(scene, depsgraph)
    return entry


def _self_params(settings):
    return dict(thickness=max(settings.self_thickness, 1e-5), friction=settings.self_friction,
                conservativeness=settings.self_conservativeness)


def _reset(entry, obj, scene, depsgraph):
    """Back to the current pose with zero velocity, cache dropped; the model
    (rest lengths, colouring, tethers) is reused."""
    dense = meshdata.sample(obj, depsgraph)
    targets, _ = _coarse_frame(entry, obj, depsgraph, dense)
    entry.state = entry.model.new_state(positions=targets)
    entry.frames.clear()
    entry.prev_targets = targets.astype(np.float32)
    entry.prev_colliders = colliders_mod.read(scene, depsgraph)
    entry.error = None
    return entry


# --------------------------------------------------------------------------- stepping


def _dense_result(entry, coarse, dense_world_targets, out=None):
    if entry.binding is None:
        return coarse
    from ..solver import skinning

    return skinning.skin(entry.binding, coarse, out=out, pin_targets=dense_world_targets)


def _show(obj, entry, frame, dense_world, matrix):
    t = time.perf_counter()
    local = meshdata.to_local(dense_world, matrix)
    entry.frames[frame] = local
    writeback.write_result(obj, local)
    return (time.perf_counter() - t) * 1e3


def _advance(entry, obj, scene, depsgraph, frame):
    solver = _solver()
    settings = obj.drape
    gap = frame - entry.last_frame
    t0 = time.perf_counter()
    dense = meshdata.sample(obj, depsgraph)
    if dense.positions.shape[0] != entry.dense_count:
        raise DrapeInputError(f"'{obj.name}': its evaluated vertex count changed "
                              f"({entry.dense_count} -> {dense.positions.shape[0]}); go to the start frame")
    targets, pin_w = _coarse_frame(entry, obj, depsgraph, dense)
    col_end = colliders_mod.read(scene, depsgraph)
    air = None
    if wind.wind_fields(scene):
        air = wind.wind_velocity(scene, depsgraph, entry.state.positions.T, frame)
    prm = params.cloth_params(settings, scene, solver)
    if entry.model.self_collision is not None:  # thickness, friction... change without a rebuild
        entry.model.self_collision.set_params(**_self_params(settings))
    fps = scene.render.fps / scene.render.fps_base
    dt = 1.0 / fps
    read_ms = (time.perf_counter() - t0) * 1e3

    step_ms = 0.0
    prev_t, col_start = entry.prev_targets, entry.prev_colliders
    for k in range(1, gap + 1):
        if gap == 1:
            tgt, c0, c1 = targets, col_start, col_end
        else:
            tgt = prev_t + (targets - prev_t) * (k / gap)
            c0 = colliders_mod.interpolate(col_start, col_end, (k - 1) / gap)
            c1 = colliders_mod.interpolate(col_start, col_end, k / gap)
        capsules, planes = colliders_mod.solver_inputs(c0, c1, solver)
        inputs = solver.StepInputs(pin_targets=tgt, pin_weight=pin_w, capsules=capsules, planes=planes,
                                   wind_velocity=air)
        t = time.perf_counter()
        solver.step(entry.model, entry.state, inputs, dt, prm)
        step_ms += (time.perf_counter() - t) * 1e3
        entry.steps += 1
    entry.prev_targets = np.asarray(targets, np.float32)
    entry.prev_colliders = col_end

    t = time.perf_counter()
    dense_world = _dense_result(entry, entry.state.positions_aos(), dense.positions)
    entry.last_skin_ms = (time.perf_counter() - t) * 1e3
    entry.last_write_ms = _show(obj, entry, frame, dense_world, dense.matrix)
    entry.last_step_ms = step_ms / gap
    entry.last_read_ms = read_ms
    entry.last_frame = frame


def update(obj, scene, depsgraph, taken=None):
    """Bring ``obj``'s preview to ``scene.frame_current``. Raises on bad input."""
    frame = scene.frame_current
    uid = ensure_uid(obj, taken)
    entry = _registry.get(uid)
    start = scene.frame_start
    if entry is not None and entry.key != _full_key(obj):
        entry = None  # topology or a rest-state setting changed
    if entry is not None and entry.error and frame == start:
        entry = None  # a failed cloth retries from the start frame
    if entry is not None and frame == start and (entry.last_frame != start or len(entry.frames) > 1):
        _reset(entry, obj, scene, depsgraph)
        dense = meshdata.sample(obj, depsgraph)
        coarse = entry.state.positions_aos()
        entry.last_write_ms = _show(obj, entry, frame, _dense_result(entry, coarse, dense.positions), dense.matrix)
        entry.first_frame = entry.last_frame = frame
        return entry
    if entry is None:
        old = _registry.pop(uid, None)
        try:
            entry = _build(obj, scene, depsgraph, uid)
        except Exception:
            writeback.clear_result(obj)
            raise
        if old is not None:
            entry.builds = old.builds + 1
        _registry[uid] = entry
        dense = meshdata.sample(obj, depsgraph)
        coarse = entry.state.positions_aos()
        entry.last_write_ms = _show(obj, entry, frame, _dense_result(entry, coarse, dense.positions), dense.matrix)
        entry.first_frame = entry.last_frame = frame
        return entry
    if entry.error:
        return entry
    cached = entry.frames.get(frame)
    if cached is not None:  # simulated before: scrubbing back shows it
        writeback.write_result(obj, cached)
        return entry
    if frame < entry.first_frame:
        writeback.clear_result(obj)
        return entry
    gap = frame - entry.last_frame
    if gap > MAX_CATCH_UP:
        raise DrapeInputError(f"'{obj.name}': jumped {gap} frames past the last simulated frame "
                              f"{entry.last_frame}; play from there or from the start frame")
    if gap < 0:
        # behind the live state but not cached (cache trimmed): restart from the start frame
        writeback.clear_result(obj)
        return entry
    try:
        _advance(entry, obj, scene, depsgraph, frame)
    except Exception as exc:
        entry.error = f"'{obj.name}': {exc}" if obj.name not in str(exc) else str(exc)
        raise
    return entry


def update_scene(scene, depsgraph):
    """Advance every Drape cloth of ``scene``; never raises (errors are kept
    on the runtime and printed once)."""
    taken = {}
    alive = set()
    for obj in scene.objects:
        if obj.type != 'MESH' or not obj.drape.enabled:
            continue
        if obj.mode == 'EDIT':  # its mesh data is being edited: leave it alone
            alive.add(obj.drape.uid)
            continue
        if is_baked(obj):
            writeback.clear_result(obj)
            alive.add(obj.drape.uid)
            continue
        try:
            update(obj, scene, depsgraph, taken)
        except Exception as exc:  # noqa: BLE001 - a handler must never raise
            uid = obj.drape.uid
            entry = _registry.get(uid)
            message = str(exc)
            if entry is None:
                entry = ClothRuntime(uid)
                entry.key = _full_key(obj)
                _registry[uid] = entry
            if entry.error != message:
                print(f"Drape: {message}")
            entry.error = message
        alive.add(obj.drape.uid)
    _prune(alive)


def _prune(alive_in_scene):
    """Drop runtimes whose object is gone (deleted, undone, another file)."""
    if not _registry:
        return
    known = set(alive_in_scene)
    for obj in bpy.data.objects:
        if obj.type == 'MESH' and obj.drape.enabled:
            known.add(obj.drape.uid)
    for uid in list(_registry):
        if uid not in known:
            del _registry[uid]


# --------------------------------------------------------------------------- handlers


@persistent
def _on_frame_change(scene, depsgraph=None):
    if depsgraph is None:
        depsgraph = bpy.context.evaluated_depsgraph_get()
    update_scene(scene, depsgraph)


@persistent
def _on_load(*_args):
    clear()
    # The live cache is gone: show every cloth un-simulated until it plays again.
    for obj in bpy.data.objects:
        if obj.type == 'MESH' and obj.drape.enabled and not is_baked(obj):
            try:
                writeback.clear_result(obj)
            except Exception:  # noqa: BLE001 - library data may be read-only
                pass


@persistent
def _on_undo(*_args):
    _prune(set())


_HANDLERS = (
    ("frame_change_post", _on_frame_change),
    ("load_post", _on_load),
    ("undo_post", _on_undo),
    ("redo_post", _on_undo),
)


def register():
    for name, fn in _HANDLERS:
        handlers = getattr(bpy.app.handlers, name)
        if fn not in handlers:
            handlers.append(fn)


def unregister():
    for name, fn in _HANDLERS:
        handlers = getattr(bpy.app.handlers, name)
        while fn in handlers:
            handlers.remove(fn)
    clear()
