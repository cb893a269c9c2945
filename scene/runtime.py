"""Live preview: one solver state per cloth object, advanced by the timeline.

The registry maps ``Object.drape.uid`` (a random id stored on the object, so
it survives renames, undo and save/reload; a duplicated object gets a fresh
one) to a :class:`ClothRuntime`: one per cloth, or one shared by every cloth
with "Collide with other cloths" on (one model, one self-collision region per
object, so they collide with each other; the first by name gives the solver
settings, each keeps its own mesh, density and pins). It never holds bpy objects, only arrays, so
deleting, undoing or reloading can't leave it pointing at freed data.

``frame_change_post`` (a @persistent handler, added in register() and removed
in unregister()) drives it, in the UI and in background mode alike:

* at the scene's start frame the cloth resets (fresh state, cache dropped);
* one frame forward steps the solver once (a skipped frame during playback:
  one step per frame, with pin targets and colliders interpolated);
* a frame already simulated is shown from the in-memory cache (scrubbing back);
* a frame before the cache shows the un-simulated mesh;
* when topology or a rest-state setting changes (``params.rebuild_key``), or
  the modifiers above Drape's modifier or its place in the stack do, the
  model is rebuilt and the cache restarts at the current frame; every other
  setting (stiffness, damping, friction, wind response...) is read every step.

The simulated mesh is the mesh as evaluated at Drape's place in the stack
(``meshdata.sample``): its rest shape is that mesh where the cache starts, its
pin targets that mesh every frame. A topology there that changes between
frames (an animated Decimate above Drape) stops the cloth with a message.
Positions, lengths and gravity reach the solver in metres (the scene's Unit
Scale); results go back to the object's local space in its units.

The result is written as described in ``writeback``. An object whose
``drape_bake.baked`` is true is not simulated (it plays its bake).

Errors an artist can cause while playing never escape the handler: each is a
message naming the object and the setting, kept on the runtime (the panel
shows :func:`messages`) and printed once while it stands. A bad setting or
input (a NaN typed into a field, a collider or wind field gone non-finite, a
NaN coordinate in the evaluated mesh) is found before anything is changed:
the cloth holds its last frame and goes on from there once it is fixed. A
pin or mass group that vanishes mid-play (renamed, deleted) is reported and
the cloth keeps the last pins it read until the group is back or it is reset.
Anything that fails inside a step stops the cloth until the start frame.
"""

import random
import time

import bpy
import numpy as np
from bpy.app.handlers import persistent

from . import colliders as colliders_mod
from . import compat, meshdata, params, warmup, wind, writeback
from . import garment
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


class Member:
    """One cloth object inside a simulation: where its simulated vertices sit
    in the model and how its dense mesh is rebuilt from them."""

    def __init__(self, uid, name, source):
        self.uid = uid
        self.name = name
        self.source = source
        self.key = None
        self.dense_count = 0
        self.binding = None        # PROXY/AUTO: dense vertices bound to the coarse surface
        # PROXY/AUTO: coarse vertices bound to the dense surface (pins come from the dense mesh)
        self.pin_triangle = self.pin_corners = self.pin_bary = None
        self.pin_skin = None       # (weighted coarse indices, dense sub-vertices, their binding)
        self.coarse_rest = self.dense_rest = self.dense_tris = None
        self.start = 0             # its simulated vertices: model rows start:stop
        self.stop = 0
        self.frames = {}           # frame -> (m, 3) float32, object local space
        self.prev_targets = None
        self.kept_pin_weight = None  # the dense pin weights last read while the pin group existed
        self.counts = None           # vertices, faces, corners of the mesh at Drape's place in the stack
        self.unit = 1.0              # metres per Blender unit (the scene's Unit Scale)
        self.warning = None          # a vanished pin / mass group, while it is missing
        # PROXY/AUTO with max distance or a backstop (scene/garment.py): every
        # coarse vertex gets the dense mesh's animated surface as its target.
        self.track_all = False


class ClothRuntime:
    """Live solver state and cache of one simulation: a single cloth, or
    every cloth with "Collide with other cloths" on, concatenated into one
    model with one self-collision region per object (cloth-cloth contacts)."""

    def __init__(self, members):
        self.members = members
        self.key = None
        self.model = None
        self.state = None
        self.first_frame = None
        self.last_frame = None
        self.prev_colliders = None
        self.builds = 0
        self.steps = 0
        self.error = None
        self.retry = False         # the error came before anything changed: re-checked every frame
        self.last_step_ms = 0.0
        self.last_read_ms = 0.0
        self.last_write_ms = 0.0
        self.last_skin_ms = 0.0

    def member(self, uid):
        for m in self.members:
            if m.uid == uid:
                return m
        raise KeyError(uid)

    @property
    def warnings(self):
        """Problems the cloth simulates on through (a vanished group)."""
        return [m.warning for m in self.members if m.warning]

    @property
    def frames(self):
        """The first (for a single cloth: the only) member's cached frames."""
        return self.members[0].frames

    @property
    def cache_range(self):
        frames = self.members[0].frames
        if not frames:
            return None
        return (min(frames), max(frames))


def get(obj):
    """The live runtime simulating ``obj`` (shared by a cloth-cloth group) or None."""
    if obj is None or obj.type != 'MESH':
        return None
    return _registry.get(obj.drape.uid)


def drop(obj):
    """Forget ``obj``'s live cache (its whole collision group's) and show its
    un-simulated mesh; the others in the group rebuild on the next frame."""
    if obj is not None and obj.type == 'MESH':
        sim = _registry.pop(obj.drape.uid, None)
        if sim is not None:
            for m in sim.members:
                _registry.pop(m.uid, None)
        writeback.clear_result(obj)


def clear():
    _registry.clear()
    _standing.clear()


def messages(obj):
    """What the panel shows about ``obj``'s simulation: ``(icon, text)``
    pairs, the error first (the messages the console got once)."""
    sim = get(obj)
    if sim is None:
        return []
    out = [('ERROR', sim.error)] if sim.error else []
    return out + [('ERROR', text) for text in sim.warnings]


def dense_positions_local(obj):
    """The dense, skinned result of the current frame, object local space,
    (m, 3) float32: what the viewport shows. Raises RuntimeError with the
    reason when the current frame has no simulated result."""
    frame = bpy.context.scene.frame_current
    sim = get(obj)
    if sim is None:
        raise RuntimeError(f"'{obj.name}' has no live Drape simulation (is it a Drape cloth, and has the "
                           f"timeline moved since it was enabled?)")
    if sim.error:
        raise RuntimeError(sim.error)
    result = sim.member(obj.drape.uid).frames.get(frame)
    if result is None:
        raise RuntimeError(f"'{obj.name}' has no simulated result for frame {frame} (cache: {sim.cache_range})")
    return result


# --------------------------------------------------------------------------- reading


def _topology_key(obj):
    mesh = obj.data
    return (mesh.name, len(mesh.vertices), len(mesh.polygons), len(mesh.loops))


def _stack_key(obj):
    """What decides the simulated mesh in the modifier stack: Drape's place
    and the modifiers above it (moving Drape or adding a Subdivision Surface
    above it while playing rebuilds at the current frame)."""
    above, _below = meshdata.modifiers_around(obj)
    return (writeback.modifier_index(obj),
            tuple((m.name, m.type, m.show_viewport, m.show_render) for m in above))


def _full_key(obj, scene=None):
    s = obj.drape
    proxy_key = ()
    if s.sim_source == 'PROXY' and s.proxy is not None and s.proxy.type == 'MESH':
        proxy_key = _topology_key(s.proxy)
    # A Drape modifier removed by hand is put back by a rebuild (pins are read through it).
    has_modifier = writeback.find_modifier(obj) is not None
    unit = meshdata.unit_scale(scene) if scene is not None else 1.0
    return (obj.drape.uid, params.rebuild_key(obj), _topology_key(obj), proxy_key, has_modifier,
            _stack_key(obj), round(unit, 12))


def _sim_key(objs, scene=None):
    return tuple(_full_key(o, scene) for o in objs)


def _interpolate(member, dense_values):
    """Per-vertex values of the dense mesh at the coarse vertices' bound points."""
    return (dense_values[member.pin_corners] * member.pin_bary).sum(axis=1).astype(np.float32)


def _pin_skin(member, weighted):
    """A binding of only the weighted coarse vertices to the part of the dense
    mesh under them (their triangles and every triangle touching those
    triangles' corners, so the smooth normals there are exact): per frame it
    costs what the collar costs, not what the whole dense mesh costs."""
    from ..solver import skinning

    tris = member.dense_tris
    used = tris[member.pin_triangle[weighted]]
    touching = np.isin(tris, np.unique(used)).any(axis=1)
    sub_tris = tris[touching]
    verts, remapped = np.unique(sub_tris, return_inverse=True)
    binding = skinning.bind(member.dense_rest[verts], remapped.reshape(-1, 3).astype(np.int32),
                            member.coarse_rest[weighted])
    return weighted, verts, binding


def _member_frame(member, dense):
    """Pin targets (world) and pin weights for a member's simulated vertices.

    A proxy or simplified mesh gets both from the dense mesh: each coarse
    vertex is bound (once) to the dense surface like a dense vertex is to the
    coarse one, and the weighted ones ride on it with the same Phong
    reconstruction, so the collar of a coarse cape turns with the chest;
    weights are the dense weights interpolated at the bound points. The
    artist pins once, on the render mesh."""
    if member.source == 'SELF':
        return dense.positions, dense.pin_weight
    from ..solver import skinning

    weight = _interpolate(member, dense.pin_weight)
    weighted = np.arange(weight.size) if member.track_all else np.flatnonzero(weight > 0.0)
    if weighted.size == 0:
        return member.prev_targets, weight
    if member.pin_skin is None or not np.array_equal(member.pin_skin[0], weighted):
        member.pin_skin = _pin_skin(member, weighted)  # pins grabbed or released: rebind (small)
    _, verts, binding = member.pin_skin
    targets = np.array(member.prev_targets, np.float32, copy=True)
    targets[weighted] = skinning.skin(binding, dense.positions[verts])
    return targets, weight


def _missing_groups(obj):
    """The pin / mass group names set on the cloth that ``obj`` no longer has."""
    s = obj.drape
    return [(what, name) for what, name in (("pin group", s.pin_group), ("mass group", s.mass_group))
            if name and obj.vertex_groups.get(name) is None]


def _check_sample(obj, dense):
    """Raise DrapeInputError (``retry``) for evaluated input the solver cannot use."""
    if not np.isfinite(meshdata.matrix_np(dense.matrix)).all():
        raise DrapeInputError(f"'{obj.name}': its transform is not finite (a NaN or infinite Location, "
                              f"Rotation or Scale, or its parent's or constraints')", name=obj.name, retry=True)
    count, words = meshdata.nonfinite_vertices(dense.positions)
    if count:
        raise DrapeInputError(f"'{obj.name}': {words} in the evaluated mesh (from its vertices, shape keys, "
                              f"modifiers or animation above the Drape modifier)", name=obj.name, retry=True)
    if not np.isfinite(dense.pin_weight.sum(dtype=np.float64)):
        raise DrapeInputError(f"'{obj.name}': pin group '{obj.drape.pin_group}' has NaN weights",
                              name=obj.name, setting="Pin group", retry=True)


def _sample(obj, member, depsgraph):
    """The member's evaluated mesh now, checked; with its pin group gone the
    last pin weights read stand in (and the member carries a warning)."""
    dense = meshdata.sample(obj, depsgraph, unit=member.unit)
    if dense.counts != member.counts:
        raise DrapeInputError(meshdata.topology_changed_message(obj, member.counts, dense.counts,
                                                                depsgraph.scene.frame_current), name=obj.name)
    missing = _missing_groups(obj)
    _check_sample(obj, dense)
    pin_missing = any(what == "pin group" for what, _ in missing)
    if pin_missing and member.kept_pin_weight is not None:
        dense.pin_weight = member.kept_pin_weight
    elif not pin_missing:
        member.kept_pin_weight = dense.pin_weight
    if missing:
        groups = " and ".join(f"{what} '{name}'" for what, name in missing)
        keeps = " and ".join("its last pins" if what == "pin group" else "its masses" for what, _ in missing)
        member.warning = (f"'{obj.name}': {groups} {'is' if len(missing) == 1 else 'are'} missing (renamed or "
                          f"deleted?): the cloth keeps {keeps} until the group is back or the simulation is "
                          f"reset")
    else:
        member.warning = None
    return dense


def _targets(sim, objs, samples):
    if len(objs) == 1:
        targets, weight = _member_frame(sim.members[0], samples[0])
        sim.members[0].prev_targets = np.asarray(targets, np.float32)
        return sim.members[0].prev_targets, weight
    parts = [_member_frame(m, d) for m, d in zip(sim.members, samples)]
    for m, (t, _) in zip(sim.members, parts):
        m.prev_targets = np.asarray(t, np.float32)
    return (np.concatenate([np.asarray(t, np.float32) for t, _ in parts]),
            np.concatenate([w for _, w in parts]))


def _build_member(obj, depsgraph, unit=1.0):
    """One object's simulated mesh: (member, rest, faces, sizes, mass, pin weight)."""
    solver = _solver()
    settings = obj.drape
    if writeback.needs_setup(obj):
        writeback.ensure_modifier(obj)
        depsgraph.update()  # the stored pin/mass attributes exist only after re-evaluation
    member = Member(obj.drape.uid, obj.name, settings.sim_source)
    member.unit = unit
    dense = meshdata.sample(obj, depsgraph, unit=unit, topology=True)
    dense_topo = dense.topology  # the mesh at Drape's place: what the modifiers above make of it
    member.dense_count = dense.positions.shape[0]
    member.counts = dense.counts
    _check_sample(obj, dense)
    member.kept_pin_weight = dense.pin_weight
    if member.source == 'SELF':
        rest, faces, sizes = dense.positions, dense_topo.face_indices, dense_topo.face_sizes
        mass_w, pin_w = dense.mass_weight, dense.pin_weight
    else:
        if member.source == 'PROXY':
            # The proxy as modelled (its own modifiers are not used), placed by its
            # object transform: it should overlap the cloth where the cache starts.
            proxy = settings.proxy
            proxy_topo = meshdata.Topology(proxy.data)
            rest = meshdata.to_world(meshdata.local_positions(proxy.data), proxy.matrix_world, unit)
            faces, sizes = proxy_topo.face_indices, proxy_topo.face_sizes
        else:
            try:
                from .simmesh import simplify
            except ImportError as exc:
                raise DrapeInputError(f"'{obj.name}': automatic simplification is not available ({exc})") from exc
            try:
                rest, faces, sizes, _weights = simplify(
                    dense.positions, dense_topo.face_indices, dense_topo.face_sizes,
                    {"pin": dense.pin_weight, "mass": dense.mass_weight}, settings.vertex_budget, name=obj.name)
            except DrapeInputError:
                raise
            except ValueError as exc:  # its messages start with the object's name
                raise DrapeInputError(str(exc), name=obj.name, setting="Vertex budget") from exc
            rest = np.ascontiguousarray(rest, np.float32)
            faces = np.ascontiguousarray(faces, np.int32)
            sizes = np.ascontiguousarray(sizes, np.int32)
        from ..solver import skinning

        member.prev_targets = rest = np.ascontiguousarray(rest, np.float32)
        member.coarse_rest = rest
        member.dense_rest = dense.positions.copy()
        member.dense_tris = dense_topo.triangles()
        full = skinning.bind(dense.positions, member.dense_tris, rest)
        member.pin_triangle = full.triangle
        member.pin_corners = full.coarse_triangles[full.triangle]
        bary = np.asarray(full.bary)  # (3, c) in the solver's layout; (c, 3) accepted too
        member.pin_bary = bary if bary.shape == member.pin_corners.shape else np.ascontiguousarray(bary.T)
        _, pin_w = _member_frame(member, dense)
        mass_w = _interpolate(member, dense.mass_weight)
        member.binding = skinning.bind(np.ascontiguousarray(rest, np.float32), skinning.triangulate(faces, sizes),
                                       dense.positions, dense_pinned=dense.pin_weight >= 0.999)
    mass = solver.vertex_masses(rest, faces, sizes, settings.areal_density, weight=np.maximum(mass_w, 1e-2))
    member.prev_targets = np.asarray(rest, np.float32)
    return member, np.asarray(rest, np.float32), faces, sizes, mass, pin_w


def _build(objs, scene, depsgraph):
    """A fresh simulation of ``objs`` at the current frame (raises DrapeInputError)."""
    problems = []
    for obj in objs:
        problems += meshdata.check_cloth(obj, depsgraph)
    if problems:
        raise DrapeInputError("; ".join(problems), name=objs[0].name)
    solver = _solver()
    try:
        return _build_checked(objs, scene, depsgraph, solver)
    except solver.SolverError as exc:
        raise DrapeInputError(params.solver_message(objs[0], exc), name=objs[0].name) from exc


def _build_checked(objs, scene, depsgraph, solver):
    prev_colliders = colliders_mod.read(scene, depsgraph)  # a bad collider fails before the build
    lead = objs[0].drape
    unit = meshdata.unit_scale(scene)
    parts = [_build_member(obj, depsgraph, unit) for obj in objs]
    members = [p[0] for p in parts]
    sim = ClothRuntime(members)
    offset = 0
    for m, (_, rest, *_rest) in zip(members, parts):
        m.start, m.stop = offset, offset + rest.shape[0]
        offset = m.stop
    prm = params.cloth_params(lead, scene, solver)
    if len(parts) == 1:
        _, rest, faces, sizes, mass, pin_w = parts[0]
        region = None
    else:
        rest = np.concatenate([p[1] for p in parts])
        faces = np.concatenate([np.asarray(p[2], np.int64) + m.start for p, m in zip(parts, members)])
        sizes = np.concatenate([np.asarray(p[3], np.int64) for p in parts])
        mass = np.concatenate([p[4] for p in parts])
        pin_w = np.concatenate([p[5] for p in parts])
        region = np.concatenate([np.full(m.stop - m.start, i, np.int32) for i, m in enumerate(members)])
    sim.model = solver.build_model(rest, faces, sizes, mass, pin_w, prm, region=region)
    garment.apply(sim.model, objs, members, depsgraph)   # stitches, garment groups, UVs
    if lead.self_collision or len(parts) > 1:
        from ..solver.selfcollision import SelfCollision

        sim.model.self_collision = SelfCollision.from_model(sim.model, **_self_params(objs, unit))
    sim.state = sim.model.new_state()
    sim.key = _sim_key(objs, scene)
    sim.builds = 1
    sim.prev_colliders = prev_colliders
    return sim


def _self_params(objs, unit=1.0):
    """Self-collision settings from the lead cloth (the thickness in metres:
    ``unit`` metres per Blender unit); with several cloths in one model, each
    object's layer orders its region (read every step, no rebuild)."""
    settings = objs[0].drape
    out = dict(thickness=max(settings.self_thickness * unit, 1e-5), friction=settings.self_friction,
               conservativeness=settings.self_conservativeness)
    if len(objs) > 1:
        out["layers"] = np.array([o.drape.layer for o in objs], dtype=np.int32)
    return out


def _layer_offsets(layers, thickness):
    """Per region: how much farther out than the body capsules it rests, one
    self-collision thickness per layer below it (the distinct layer numbers
    under its own; -1 = no layer, no offset)."""
    ordered = sorted({int(v) for v in layers if v >= 0})
    return [thickness * ordered.index(int(v)) if v >= 0 else 0.0 for v in layers]


def _set_layer_offsets(sim, self_params):
    """Layered cloths in one model: each region's capsules grow by the inner
    layers' thickness (Model.set_collider_offset), so an outer layer pressed
    onto the body by a leg rests on the inner one instead of being pushed to
    the same capsule surface (the colliders are solved last and would win
    over the layer order: layered skirts cross each other as soon as the legs
    move). Set only when the layers or the thickness change."""
    layers = self_params.get("layers")
    if layers is None:
        return
    key = (tuple(int(v) for v in layers), float(self_params["thickness"]))
    if getattr(sim, "layer_offset_key", None) == key:
        return
    per_region = _layer_offsets(layers, key[1])
    offset = np.concatenate([np.full(m.stop - m.start, off) for m, off in zip(sim.members, per_region)])
    sim.model.set_collider_offset(offset)
    sim.layer_offset_key = key


def _sync_contact_cache(sim, objs, lead):
    """The lead's "Cache contacts": found once, from the pose the next step
    starts from (the start frame, after a build or a reset), and reused every
    step without detection; switched off, live detection resumes. Between
    several cloths only contacts across them are kept (the layers of a
    garment; SelfCollision.cache_contacts)."""
    sc = sim.model.self_collision
    if lead.self_cache and not sc.cached:
        sc.cache_contacts(sim.state.positions, between_regions=len(objs) > 1)
    elif not lead.self_cache and sc.cached:
        sc.clear_cache()


def _reset(sim, objs, scene, depsgraph):
    """Back to the current pose with zero velocity, cache dropped; the model
    (rest lengths, colouring, tethers) is reused."""
    samples = [_sample(o, m, depsgraph) for o, m in zip(objs, sim.members)]
    prev_colliders = colliders_mod.read(scene, depsgraph)
    targets, _ = _targets(sim, objs, samples)
    sim.state = sim.model.new_state(positions=targets)
    if sim.model.self_collision is not None:
        sim.model.self_collision.clear_cache()   # cached again from this pose (_sync_contact_cache)
    for m in sim.members:
        m.frames.clear()
    sim.prev_colliders = prev_colliders
    sim.error = None
    return samples


# --------------------------------------------------------------------------- stepping


def _skin_all(sim, samples):
    """Every member's simulated positions (world, metres), skinned onto its
    dense mesh (proxy/automatic): the solver only, no bpy, so it runs beside
    the other simulations' (_Advance.run). Returns (parts, skin ms)."""
    coarse = sim.state.positions_aos()
    t = time.perf_counter()
    parts = []
    for m, dense in zip(sim.members, samples):
        part = coarse[m.start:m.stop]
        if m.binding is not None:
            from ..solver import skinning

            part = skinning.skin(m.binding, part, pin_targets=dense.positions)
        parts.append(part)
    return parts, (time.perf_counter() - t) * 1e3


def _show_all(sim, objs, samples, frame, skinned=None):
    """Skin (proxy/automatic; ``skinned``: _skin_all's result when done
    already), go to object space, cache and write every member."""
    parts, skin_ms = _skin_all(sim, samples) if skinned is None else skinned
    t = time.perf_counter()
    for obj, m, dense, part in zip(objs, sim.members, samples, parts):
        local = meshdata.to_local(part, dense.matrix, m.unit)
        m.frames[frame] = local
        writeback.write_result(obj, local)
    sim.last_skin_ms, sim.last_write_ms = skin_ms, (time.perf_counter() - t) * 1e3


class _Advance:
    """One frame forward of one simulation, in three parts: ``read`` (on
    Blender's thread: everything is read and checked before anything
    changes), ``run`` (the solver steps and the skinning, no bpy: several
    simulations' runs go side by side in threads.run_all) and ``finish`` (on
    Blender's thread again: write, bookkeeping)."""

    def __init__(self, sim, objs, scene, depsgraph, frame):
        self.sim, self.objs, self.frame = sim, objs, frame
        self.read(scene, depsgraph)

    def read(self, scene, depsgraph):
        sim, objs, frame = self.sim, self.objs, self.frame
        solver = _solver()
        lead = objs[0].drape
        gap = frame - sim.last_frame
        t0 = time.perf_counter()
        # A bad input raises here and leaves the cloth where it stands.
        samples = [_sample(o, m, depsgraph) for o, m in zip(objs, sim.members)]
        col_end = colliders_mod.read(scene, depsgraph)
        air = None
        if wind.wind_fields(scene):
            air = wind.wind_velocity(scene, depsgraph, sim.state.positions.T, frame, unit=sim.members[0].unit)
        prm = params.cloth_params(lead, scene, solver)
        prev_t = (np.concatenate([m.prev_targets for m in sim.members]) if len(objs) > 1
                  else sim.members[0].prev_targets)
        targets, pin_w = _targets(sim, objs, samples)
        if sim.model.self_collision is not None:  # thickness, friction... change without a rebuild
            self_params = _self_params(objs, sim.members[0].unit)
            sim.model.self_collision.set_params(**self_params)
            _set_layer_offsets(sim, self_params)
            _sync_contact_cache(sim, objs, lead)
        dt = scene.render.fps_base / scene.render.fps
        col_start = sim.prev_colliders
        self.inputs = []
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
            inputs.boxes = colliders_mod.box_inputs(c0, c1, solver)
            inputs.meshes = colliders_mod.mesh_inputs(c0, c1, solver)
            self.inputs.append(inputs)
        self.samples, self.col_end, self.dt, self.params = samples, col_end, dt, prm
        self.read_ms = (time.perf_counter() - t0) * 1e3

    @property
    def cost(self):
        """About how long run takes, relative to the others (threads.run_all
        starts the long ones first): its last step's time when it has one
        (self collision costs more than the vertex count says), else an
        estimate from its vertices and substeps; in nanoseconds."""
        per_step = self.sim.last_step_ms * 1e6
        if not per_step > 0.0:
            per_step = (_solver_threads().NS_PER_VERTEX_SUBSTEP * self.sim.model.n
                        * max(1, int(self.params.substeps)))
        return per_step * len(self.inputs)

    def run(self):
        """The steps, then the skinning of the result; the solver only.
        Returns the wall time per step (ms)."""
        solver = _solver()
        sim = self.sim
        t = time.perf_counter()
        for inputs in self.inputs:
            solver.step(sim.model, sim.state, inputs, self.dt, self.params)
            sim.steps += 1
        step_ms = (time.perf_counter() - t) * 1e3 / len(self.inputs)
        self.skinned = _skin_all(sim, self.samples)
        return step_ms

    def finish(self, step_ms, exc=None):
        """Show the frame, or raise what the steps raised (named for the artist)."""
        sim, objs = self.sim, self.objs
        if exc is not None:
            if isinstance(exc, _solver().SolverError):
                raise DrapeInputError(params.solver_message(objs[0], exc, objs), name=objs[0].name) from exc
            raise exc
        sim.prev_colliders = self.col_end
        _show_all(sim, objs, self.samples, self.frame, self.skinned)
        sim.last_step_ms = step_ms
        sim.last_read_ms = self.read_ms
        sim.last_frame = self.frame


def _advance(sim, objs, scene, depsgraph, frame, later=None):
    """Step ``sim`` to ``frame``; with a list ``later``, read only and append
    the rest of the work (an _Advance) to it for update_scene to finish."""
    work = _Advance(sim, objs, scene, depsgraph, frame)
    if later is not None:
        later.append(work)
        return
    with _solver_threads().numba_threads(work.params.threads):
        try:
            step_ms, exc = work.run(), None
        except Exception as err:  # noqa: BLE001 - finish names it for the artist
            step_ms, exc = 0.0, err
        work.finish(step_ms, exc)


def _solver_threads():
    from ..solver import threads

    return threads


def update_sim(objs, scene, depsgraph, taken=None, later=None):
    """Bring the preview of ``objs`` (one cloth, or one cloth-cloth group) to
    ``scene.frame_current``. Raises DrapeInputError on bad input (``retry``:
    nothing was changed). With a list ``later``, a frame that needs solver
    steps is only read, and its work appended (see _advance)."""
    frame = scene.frame_current
    for obj in objs:
        ensure_uid(obj, taken)
    lead = objs[0]
    sim = _registry.get(lead.drape.uid)
    start = scene.frame_start
    key = _sim_key(objs, scene)
    if sim is not None and sim.error and not sim.retry and frame != start and sim.key == key:
        return sim  # a failed cloth retries from the start frame, or when what it is built from changes
    params.check_settings(objs, scene)  # a bad setting is reported before anything changes
    if sim is not None and (sim.model is None or sim.key != key or (sim.error and not sim.retry)):
        sim = None  # never built, topology, a rest-state setting or the group changed, or failed
    if sim is not None:
        sim.error, sim.retry = None, False  # raised again below while it stands
    if sim is not None and frame == start and (sim.last_frame != start or len(sim.frames) > 1):
        if any(_missing_groups(o) for o in objs):
            sim = None  # reset with a group gone: the build says which
        else:
            samples = _reset(sim, objs, scene, depsgraph)
            _show_all(sim, objs, samples, frame)
            sim.first_frame = sim.last_frame = frame
            return sim
    if sim is None:
        old = _registry.get(lead.drape.uid)
        try:
            sim = _build(objs, scene, depsgraph)
        except Exception:
            for obj in objs:
                _registry.pop(obj.drape.uid, None)
                writeback.clear_result(obj)
            raise
        for obj in objs:
            _registry.pop(obj.drape.uid, None)
        if old is not None:
            sim.builds = old.builds + 1
        for obj in objs:
            _registry[obj.drape.uid] = sim
        samples = [_sample(o, m, depsgraph) for o, m in zip(objs, sim.members)]
        _show_all(sim, objs, samples, frame)
        sim.first_frame = sim.last_frame = frame
        return sim
    if frame in sim.frames:  # simulated before: scrubbing back shows it
        for obj, m in zip(objs, sim.members):
            writeback.write_result(obj, m.frames[frame])
        return sim
    gap = frame - sim.last_frame
    if frame < sim.first_frame or gap < 0:
        for obj in objs:
            writeback.clear_result(obj)
        return sim
    if gap > MAX_CATCH_UP:
        raise DrapeInputError(f"'{lead.name}': jumped {gap} frames past the last simulated frame "
                              f"{sim.last_frame}; play from there or from the start frame", name=lead.name)
    _advance(sim, objs, scene, depsgraph, frame, later)
    return sim


def update(obj, scene, depsgraph, taken=None):
    """Bring one cloth's preview to the current frame (see update_sim)."""
    return update_sim([obj], scene, depsgraph, taken)


def _units(scene):
    """The simulations to run: every cloth with "Collide with other cloths"
    on forms one group (sorted by name), every other cloth runs alone."""
    group, singles, idle = [], [], []
    for obj in scene.objects:
        if obj.type != 'MESH' or not obj.drape.enabled:
            continue
        if obj.mode == 'EDIT' or is_baked(obj):
            idle.append(obj)
        elif obj.drape.cloth_collision:
            group.append(obj)
        else:
            singles.append([obj])
    group.sort(key=lambda o: o.name)
    units = singles + ([group] if len(group) > 1 else [[o] for o in group])
    return units, idle


def _message(exc, objs):
    """The text of an error met while playing, naming the object."""
    if isinstance(exc, DrapeInputError):
        return str(exc)  # written with the name of the object it is about
    name = objs[0].name
    if type(exc).__name__ == "SolverError":
        return params.solver_message(objs[0], exc)
    if isinstance(exc, ValueError):
        return f"'{name}': {exc}"
    untested = compat.failure_message(exc)
    if untested != str(exc):  # an API this Blender no longer has: one line naming the version
        return untested
    return f"'{name}': Drape failed ({type(exc).__name__}: {exc})"


def _record(objs, exc, scene=None):
    """Keep the error of ``objs``'s simulation on its runtime (a stand-in
    runtime when it has none yet)."""
    sim = _registry.get(objs[0].drape.uid)
    if sim is None:
        sim = ClothRuntime([Member(o.drape.uid, o.name, o.drape.sim_source) for o in objs])
        sim.key = _sim_key(objs, scene if scene is not None else bpy.context.scene)
        for o in objs:
            _registry[o.drape.uid] = sim
    retry = isinstance(exc, DrapeInputError) and exc.retry
    if retry and sim.error and not sim.retry:
        sim.model = None  # a failed step left the state unusable: built afresh once this is fixed
    sim.error = _message(exc, objs)
    sim.retry = retry
    return sim


# The wall time of the last frame that stepped, by phase of update_scene
# (ms): reading every simulation, their steps (side by side), showing them.
last_frame_ms = {}

# uid of a simulation's first cloth -> the messages it has printed that still stand.
_standing = {}


def _print_new(uid, sim):
    """Print the messages of ``sim`` that are new: each once while it stands
    (a collider's problem, met by every cloth, once in all), again only after
    it was fixed and came back."""
    now = tuple(([sim.error] if sim.error else []) + sim.warnings)
    before = _standing.get(uid, ())
    elsewhere = {text for other, texts in _standing.items() if other != uid for text in texts}
    for text in now:
        if text not in before and text not in elsewhere:
            print(f"Drape: {text}")
    if now:
        _standing[uid] = now
    else:
        _standing.pop(uid, None)


def update_scene(scene, depsgraph):
    """Advance every Drape cloth of ``scene``; never raises (errors are kept
    on the runtime and printed once). The simulations that step this frame
    (each cloth alone, or a cloth-cloth group) are independent: their solver
    steps run side by side in threads (solver.threads.run_all; as many as the
    largest Threads setting among them asks for), everything that touches
    Blender's data before and after them on this thread."""
    taken = {}
    alive = set()
    units, idle = _units(scene)
    for obj in idle:
        if is_baked(obj):  # its bake plays back through the stack, not the live result
            writeback.clear_result(obj)
        alive.add(obj.drape.uid)
    done = []
    t0 = time.perf_counter()
    for objs in units:
        if not warmup.ready_for(objs, scene):  # still compiling in the background: left as it is
            alive.update(o.drape.uid for o in objs)
            continue
        later = []
        try:
            sim = update_sim(objs, scene, depsgraph, taken, later)
        except Exception as exc:  # noqa: BLE001 - a handler must never raise
            sim, later = _record(objs, exc, scene), []
        done.append((objs, sim, later))
        alive.update(o.drape.uid for o in objs)
    work = [w for _objs, _sim, later in done for w in later]
    t1 = time.perf_counter()
    if work:
        threads = _solver_threads()
        width = max(threads.resolve(w.params.threads) for w in work)
        if len(work) == 1:
            with threads.numba_threads(width):
                outcomes = threads.run_all([work[0].run], 1)
        else:
            outcomes = threads.run_all([w.run for w in work], width, cost=[w.cost for w in work])
        outcome = dict(zip(map(id, work), outcomes))
    t2 = time.perf_counter()
    for objs, sim, later in done:
        if later:
            try:
                with threads.numba_threads(later[0].params.threads):
                    later[0].finish(*outcome[id(later[0])])
            except Exception as exc:  # noqa: BLE001 - a handler must never raise
                sim = _record(objs, exc, scene)
        _print_new(objs[0].drape.uid, sim)
    if work:
        last_frame_ms.update(read=(t1 - t0) * 1e3, steps=(t2 - t1) * 1e3, show=(time.perf_counter() - t2) * 1e3,
                             simulations=len(work))
    _prune(alive)


def _prune(alive_in_scene):
    """Drop runtimes whose object is gone (deleted, undone, another file)."""
    if not _registry and not _standing:
        return
    known = set(alive_in_scene)
    for obj in bpy.data.objects:
        if obj.type == 'MESH' and obj.drape.enabled:
            known.add(obj.drape.uid)
    for uid in list(_registry):
        if uid not in known:
            del _registry[uid]
    for uid in list(_standing):
        if uid not in known:
            del _standing[uid]


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
    if "threads" in getattr(_solver(), "__dict__", {}):  # a pool exists only once solver.threads ran
        _solver_threads().shutdown()
