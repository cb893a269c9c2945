"""Drape against Blender's own Cloth modifier, measured in one run on one machine,
at equal load and at equal quality.

The scene (benchmarks/blender_scenes.py): a square sheet hanging from its
pinned top row, a sphere swinging through it, 24 fps. Blender bakes it through
``scene.frame_set`` (bpy module, Cloth modifier with a pin group, a Collision
modifier on a UV sphere keyed on every frame); Drape runs the same arrays
through its solver API (one frame = 1/24 s, one step of N substeps) and, in
the ``drape_addon`` rows, as the add-on driven by ``scene.frame_set``.

How the scenes are matched (the ``matching`` line says it with the figures of
the run):
- mass: 0.3 kg per vertex for both (Blender's default; the add-on gets the
  areal density that gives the same total);
- gravity and air damping: Blender's Cloth runs in its own time per frame, so
  an unpinned sheet's free fall in Blender is measured first (with air damping
  0 and with Blender's setting), fitted to x(t) of a linearly damped fall, and
  Drape gets that acceleration and that drag rate (air_drag, 1/s; the
  add-on's settling and air resistance stay on: they act on motion relative
  to the pins, not on a free fall); Drape's own
  free fall under those settings is printed beside Blender's;
- collider: the same sphere (Blender: a 32 x 16 UV sphere, its faces within
  1.5 mm of the true one) at the same contact distance: Blender's defaults
  (cloth distance 15 mm + the collider's outer thickness 20 mm; with less than
  about 15 mm in all the swinging sphere goes through Blender's sheet) and
  Drape's collision margin set to their sum;
- self collision: Blender's self distance = Drape's self thickness;
- bending: each system keeps its default; a cantilever strip at the scene's
  mass droops the same under ten times the bending in both (printed), so
  bending carries no measurable load here.

Every system row carries the same quality columns, computed by the same code
from the positions of every frame (crossings at fixed frames): edge strain
|l / rest - 1| over the structural edges (run mean of the per-frame mean, worst
per-frame 99th percentile, max), crossing triangle pairs (tests/oracles.py's
exact intersecting-pairs oracle, triangles that share no vertex), penetration
into the true sphere (max depth, vertices inside), pin drift (max distance of
a pinned vertex from its target). A figure that was not measured is null, with
the reason under ``reason``; check_row() refuses a row that breaks this.

Equal quality: Drape is run at a list of substep counts (same run, same
frames); ``equal_strain`` rows take the cheapest whose strain (run mean and
99th percentile) is at or below Blender's at quality 5, ``equal_quality`` rows
the cheapest at or below it on every column (strain, penetration, crossings).
Each prints its speed ratio beside the default-settings ratio.

    make bench-blender                  # the default run (several minutes)
    .venv/bin/python benchmarks/bench_blender.py --quick      # smoke run (~1 min)
    .venv/bin/python benchmarks/bench_blender.py --no-blender # Drape only

Timings exclude reading positions back and computing the metrics. The
machine may be shared: figures are medians and noisy.
"""

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
import blender_scenes as bs  # noqa: E402
import oracles  # noqa: E402  (the exact intersecting-pairs oracle the tests use)
import quality as Q  # noqa: E402  (topology helpers: polygon edges, fan triangulation)

OUT_DIR = os.path.join(ROOT, "out")
RESULTS = []

SYSTEMS = ("drape", "drape_addon", "blender_cloth")
# Every row of a system carries each of these, a number or null with a reason.
QUALITY_COLUMNS = ("strain_mean", "strain_p99", "strain_max", "crossings_max",
                   "penetration_max_mm", "vertices_inside_max", "pin_drift_max_mm")
# What each column needs to have been measured ("frames": per-frame samples, "crossings": crossing frames).
_NEEDS = {"strain_mean": "frames", "strain_p99": "frames", "strain_max": "frames",
          "crossings_max": "crossing_frames", "penetration_max_mm": "frames",
          "vertices_inside_max": "frames", "pin_drift_max_mm": "frames"}


def emit(record):
    if record.get("simulator") in SYSTEMS and "search" not in record:
        check_row(record)
    RESULTS.append(record)
    print(json.dumps(record), flush=True)


def log(msg):
    print(f"# {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- quality metrics
#
# One implementation for every system: the bench hands each of them the
# (n, 3) positions of a frame, whatever produced them.

def edge_strain(positions, edges, rest_length):
    """|l / rest - 1| per edge (0 = rest length; stretch and compression alike)."""
    p = np.asarray(positions, dtype=np.float64)
    length = np.linalg.norm(p[edges[:, 0]] - p[edges[:, 1]], axis=1)
    return np.abs(length / rest_length - 1.0)


def strain_stats(strain):
    """(mean, 99th percentile, max) of one frame's edge strains."""
    return float(strain.mean()), float(np.percentile(strain, 99.0)), float(strain.max())


def sphere_penetration(positions, centre, radius):
    """(deepest penetration in metres, 0 if none; vertices strictly inside) of
    the positions into the sphere."""
    d = np.linalg.norm(np.asarray(positions, dtype=np.float64) - np.asarray(centre, dtype=np.float64), axis=1)
    depth = radius - d
    inside = depth > 0.0
    return (float(depth[inside].max()) if inside.any() else 0.0), int(inside.sum())


def pin_drift(positions, pinned, targets):
    """Largest distance (m) of a pinned vertex from its target; 0 without pins."""
    if len(pinned) == 0:
        return 0.0
    p = np.asarray(positions, dtype=np.float64)[pinned]
    return float(np.linalg.norm(p - targets, axis=1).max())


def crossing_pairs(positions, triangles):
    """Triangle pairs that share no vertex and intersect (tests/oracles.py, exact)."""
    return int(len(oracles.intersecting_triangle_pairs(positions, triangles)))


class RunMetrics:
    """The quality of one run, from the positions of each frame it was given.

    crossing_frames: the frames whose crossings are counted (the same frames
    for every system of a comparison); a row whose run did not reach one of
    them reports crossings as null, with the reason."""

    def __init__(self, sheet, crossing_frames=(), radius=None):
        self.edges = Q.polygon_edges(sheet.face_indices, sheet.face_sizes)
        rest = np.asarray(sheet.rest, dtype=np.float64)
        self.rest_length = np.linalg.norm(rest[self.edges[:, 0]] - rest[self.edges[:, 1]], axis=1)
        self.triangles = Q.triangulate(sheet.face_indices, sheet.face_sizes)
        self.pinned = np.flatnonzero(np.asarray(sheet.pin_weight) >= 1.0)
        self.pin_targets = rest[self.pinned]
        self.radius = bs.SPHERE_RADIUS if radius is None else radius
        self.crossing_frames = tuple(sorted(set(int(f) for f in crossing_frames)))
        self.frames = []
        self.strain = []        # (mean, p99, max) per frame
        self.penetration = []   # (depth m, vertices inside) per frame
        self.drift = []
        self.crossings = {}     # frame -> crossing pairs

    def add(self, frame, positions, sphere_centre=None):
        """One frame's positions; sphere_centre None = no collider this frame."""
        self.frames.append(int(frame))
        self.strain.append(strain_stats(edge_strain(positions, self.edges, self.rest_length)))
        if sphere_centre is not None:
            self.penetration.append(sphere_penetration(positions, sphere_centre, self.radius))
        self.drift.append(pin_drift(positions, self.pinned, self.pin_targets))
        if frame in self.crossing_frames:
            self.crossings[int(frame)] = crossing_pairs(positions, self.triangles)

    def as_dict(self):
        row, reason = {}, {}
        if self.strain:
            s = np.asarray(self.strain)
            row.update(strain_mean=round(float(s[:, 0].mean()), 6), strain_p99=round(float(s[:, 1].max()), 6),
                       strain_max=round(float(s[:, 2].max()), 6))
            row["pin_drift_max_mm"] = round(1e3 * max(self.drift), 3)
        else:
            for c in ("strain_mean", "strain_p99", "strain_max", "pin_drift_max_mm"):
                row[c] = None
                reason[c] = "not computed: no frame of this run was measured"
        if self.penetration:
            pen = np.asarray(self.penetration)
            row["penetration_max_mm"] = round(1e3 * float(pen[:, 0].max()), 3)
            row["vertices_inside_max"] = int(pen[:, 1].max())
        else:
            for c in ("penetration_max_mm", "vertices_inside_max"):
                row[c] = None
                reason[c] = "not computed: no frame with the collider was measured"
        missing = [f for f in self.crossing_frames if f not in self.crossings]
        if not self.crossing_frames:
            row["crossings_max"] = None
            reason["crossings_max"] = "not computed: this row counts no crossings (no crossing frames)"
        elif missing:
            row["crossings_max"] = None
            reason["crossings_max"] = f"not computed: the run did not reach frame(s) {missing}"
        else:
            row["crossings_max"] = max(self.crossings.values())
        row["crossings_by_frame"] = {str(f): n for f, n in sorted(self.crossings.items())}
        row["measured"] = {"frames": len(self.frames), "crossing_frames": sorted(self.crossings)}
        if reason:
            row["reason"] = reason
        return row


def check_row(row):
    """Raise ValueError unless every quality column of a system row is either
    a number backed by a measurement (frames measured; crossing frames
    counted) or null with a 'not computed: ...' reason."""
    name = f"{row.get('simulator')} row ({row.get('scene')}, {row.get('vertices')} vertices, " \
           f"{row.get('substeps')} substeps)"
    measured = row.get("measured") or {}
    reasons = row.get("reason") or {}
    for col in QUALITY_COLUMNS:
        if col not in row:
            raise ValueError(f"{name}: quality column {col!r} is missing")
        value = row[col]
        if value is None:
            if not str(reasons.get(col, "")).startswith("not computed"):
                raise ValueError(f"{name}: {col} is null without a 'not computed: ...' reason")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name}: {col} = {value!r} is not a finite number")
        need = _NEEDS[col]
        if need == "frames" and not measured.get("frames"):
            raise ValueError(f"{name}: {col} = {value!r} but no frame was measured")
        if need == "crossing_frames":
            counted = measured.get("crossing_frames") or []
            by_frame = row.get("crossings_by_frame") or {}
            if not counted or set(map(str, counted)) != set(by_frame):
                raise ValueError(f"{name}: {col} = {value!r} but no crossing frame was counted")
            if value != max(by_frame.values()):
                raise ValueError(f"{name}: {col} = {value!r} is not the max of the counted frames {by_frame}")
    return row


# --------------------------------------------------------------------------- matching the scenes

def fit_free_fall_gravity(t, drop):
    """Least-squares g of drop = g t^2 / 2 (an undamped fall from rest)."""
    t = np.asarray(t, dtype=np.float64)
    d = np.asarray(drop, dtype=np.float64)
    return float(2.0 * (d * t * t).sum() / (t ** 4).sum())


def damped_fall(t, g, k):
    """Drop at time t of a point falling from rest under g with linear drag k (1/s)."""
    t = np.asarray(t, dtype=np.float64)
    if k <= 0.0:
        return 0.5 * g * t * t
    return g / k * (t - (1.0 - np.exp(-k * t)) / k)


def fit_linear_drag(t, drop, g):
    """The drag rate k (1/s) whose damped fall under g matches the drops over
    the run (least squares, golden-section search in log k)."""
    t = np.asarray(t, dtype=np.float64)
    d = np.asarray(drop, dtype=np.float64)

    def err(logk):
        return float(((damped_fall(t, g, math.exp(logk)) - d) ** 2).sum())

    lo, hi = math.log(1e-4), math.log(1e3)
    phi = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - phi * (hi - lo), lo + phi * (hi - lo)
    fa, fb = err(a), err(b)
    for _ in range(120):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - phi * (hi - lo)
            fa = err(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + phi * (hi - lo)
            fb = err(b)
    k = math.exp(0.5 * (lo + hi))
    return 0.0 if err(math.log(1e-4)) <= err(math.log(k)) else k


@dataclasses.dataclass
class Match:
    """How Drape's scene is matched to Blender's (see the module docstring)."""

    mass_per_vertex: float = bs.BLENDER_VERTEX_MASS
    gravity: float = 9.81                 # m/s^2 Drape gets
    air_drag: float = None                # 1/s Drape gets; None = the add-on's default
    blender_air_damping: float = 1.0      # Blender's Cloth default
    # Blender's defaults: cloth distance 15 mm + collider outer thickness 20 mm;
    # Drape's collision margin gets the sum.
    collision_margin: float = 0.035
    blender_collider_outer: float = 0.02
    self_distance: float = 0.004          # Drape's default self thickness = Blender's self distance
    sphere_segments: int = 32
    sphere_rings: int = 16
    how: dict = dataclasses.field(default_factory=dict)

    @property
    def blender_distance_min(self):
        return self.collision_margin - self.blender_collider_outer

    def describe(self):
        return {
            "mass": f"{self.mass_per_vertex} kg per vertex for both",
            "gravity_m_s2": round(self.gravity, 4), "drape_air_drag_per_s": self.air_drag,
            "blender_air_damping": self.blender_air_damping,
            "collider": (f"sphere r={bs.SPHERE_RADIUS} m; Blender UV sphere {self.sphere_segments}x"
                         f"{self.sphere_rings} (faces within {1e3 * self.facet_gap():.2f} mm of the sphere), "
                         f"Blender's contact distance {self.blender_distance_min:g} + collider outer thickness "
                         f"{self.blender_collider_outer:g} = Drape's collision margin {self.collision_margin:g} m"),
            "self_distance_m": self.self_distance, **self.how,
        }

    def facet_gap(self):
        """How far inside the true sphere the UV sphere's faces can lie (m)."""
        return bs.SPHERE_RADIUS * (1.0 - math.cos(math.pi / self.sphere_segments) *
                                   math.cos(math.pi / (2 * self.sphere_rings)))


def _free_sheet():
    sheet = bs.Sheet(2)
    sheet.pin_weight = np.zeros(sheet.n)
    return sheet


def blender_free_fall(air_damping, mass, frames=bs.FPS + 1):
    """(t, drop) of an unpinned 3x3-vertex sheet in Blender's Cloth (quality 5, no colliders)."""
    import bpy
    sheet = _free_sheet()
    obj, sphere = bs.build_blender_scene(sheet, frames, quality=5, mass_per_vertex=mass)
    bpy.data.objects.remove(sphere, do_unlink=True)
    cloth = obj.modifiers["Cloth"]
    cloth.settings.vertex_group_mass = ""
    cloth.settings.air_damping = air_damping
    cloth.collision_settings.use_collision = False
    scene = bpy.context.scene
    z = []
    for f in range(1, frames + 1):
        scene.frame_set(f)
        z.append(float(bs.evaluated_positions(obj)[:, 2].mean()))
    z = np.asarray(z)
    return np.arange(1, frames) / bs.FPS, z[0] - z[1:]


def drape_free_fall(params, frames=bs.FPS + 1):
    """(t, drop) of the same unpinned sheet in Drape's solver."""
    solver = drape_api()
    sheet = _free_sheet()
    model = solver.build_model(sheet.rest, sheet.face_indices, sheet.face_sizes,
                               np.full(sheet.n, bs.BLENDER_VERTEX_MASS), sheet.pin_weight, params)
    state = model.new_state()
    z0 = float(state.positions_aos()[:, 2].mean())
    drop = []
    for _ in range(1, frames):
        solver.step(model, state, None, 1.0 / bs.FPS, params)
        drop.append(z0 - float(state.positions_aos()[:, 2].mean()))
    return np.arange(1, frames) / bs.FPS, np.asarray(drop)


class Strip:
    """A horizontal strip of 1 cm quads clamped along its first two columns (a cantilever)."""

    def __init__(self, length=20, width=4, h=0.01):
        xs, ys = np.arange(length + 1) * h, np.arange(width + 1) * h
        yy, xx = np.meshgrid(ys, xs, indexing="ij")
        self.rest = np.stack([xx.ravel(), yy.ravel(), np.full(xx.size, 1.0)], axis=1)
        side = length + 1
        r, c = np.meshgrid(np.arange(width), np.arange(length), indexing="ij")
        v0 = (r * side + c).ravel()
        self.quads = np.stack([v0, v0 + 1, v0 + side + 1, v0 + side], axis=1).astype(np.int64)
        self.face_indices = self.quads.ravel()
        self.face_sizes = np.full(len(self.quads), 4, dtype=np.int64)
        self.pin_weight = (xx.ravel() < 1.5 * h).astype(np.float64)
        self.tip = xx.ravel() > (length - 0.5) * h
        self.n = len(self.rest)


def blender_cantilever_droop(bending, mass, frames=73):
    import bpy
    strip = Strip()
    obj, sphere = bs.build_blender_scene(strip, frames, quality=5, mass_per_vertex=mass)
    bpy.data.objects.remove(sphere, do_unlink=True)
    obj.modifiers["Cloth"].settings.bending_stiffness = bending
    obj.modifiers["Cloth"].settings.air_damping = 10.0
    obj.modifiers["Cloth"].collision_settings.use_collision = False
    for f in range(1, frames + 1):
        bpy.context.scene.frame_set(f)
    return 1.0 - float(bs.evaluated_positions(obj)[strip.tip, 2].mean())


def drape_cantilever_droop(params, mass, frames=73):
    solver = drape_api()
    strip = Strip()
    p = dataclasses.replace(params, air_drag=10.0)
    model = solver.build_model(strip.rest, strip.face_indices, strip.face_sizes, np.full(strip.n, mass),
                               strip.pin_weight, p)
    state = model.new_state()
    for _ in range(frames - 1):
        solver.step(model, state, None, 1.0 / bs.FPS, p)
    return 1.0 - float(state.positions_aos()[strip.tip, 2].mean())


def match_scenes(use_blender):
    """Measure Blender's free fall and fit Drape's gravity and drag to it;
    check that bending carries no load in either. Returns a Match."""
    m = Match()
    if not use_blender:
        m.how["gravity_and_drag"] = "not matched: no bpy; Drape keeps 9.81 m/s^2 and its default air drag"
        return m
    with bs.stdout_to_stderr():
        t, d0 = blender_free_fall(0.0, m.mass_per_vertex)
        _, d1 = blender_free_fall(m.blender_air_damping, m.mass_per_vertex)
    m.gravity = fit_free_fall_gravity(t, d0)
    m.air_drag = round(fit_linear_drag(t, d1, m.gravity), 4)
    params = drape_params(drape_api(), match=m)
    _, dd = drape_free_fall(params)
    m.how["gravity_and_drag"] = (
        "fitted to Blender's free fall of an unpinned sheet (air damping 0, then "
        f"{m.blender_air_damping:g}) at {bs.FPS} fps: Drape gets its acceleration and drag rate")
    m.how["free_fall_drop_1s_m"] = {"blender_air_0": round(float(d0[-1]), 4),
                                    "blender": round(float(d1[-1]), 4), "drape": round(float(dd[-1]), 4)}
    with bs.stdout_to_stderr():
        b = [blender_cantilever_droop(s, m.mass_per_vertex) for s in (0.5, 5.0)]
    stiff = dataclasses.replace(params, bend_compliance=params.bend_compliance / 10.0)
    dr = [drape_cantilever_droop(p, m.mass_per_vertex) for p in (params, stiff)]
    m.how["bending"] = ("each system's default (Blender bending 0.5, Drape bend compliance "
                        f"{params.bend_compliance:g} 1/(N m)); 20 cm cantilever droop at the scene's mass, "
                        "default vs 10x stiffer bending")
    m.how["cantilever_droop_m"] = {"blender": [round(x, 4) for x in b], "drape": [round(x, 4) for x in dr]}
    return m


# --------------------------------------------------------------------------- Drape side

def drape_api():
    from drape import solver
    return solver


# Object.drape property -> ClothParams field, as scene/params.py maps them for the add-on.
_ADDON_FIELDS = {
    "substeps": "substeps", "iterations": "iterations",
    "stretch_compliance": "stretch_compliance", "shear_compliance": "shear_compliance",
    "bend_compliance": "bend_compliance", "tether_compliance": "tether_compliance",
    "stretch_damping": "stretch_damping", "shear_damping": "shear_damping", "bend_damping": "bend_damping",
    "tethers": "tethers", "tether_scale": "tether_scale", "pin_compliance": "pin_compliance",
    "stretch_limits": "stretch_limits", "stretch_hierarchy": "stretch_hierarchy",
    "air_drag": "air_drag", "settle_damping": "settle_damping", "settle_speed": "settle_speed",
    "air_resistance": "air_resistance", "wind_drag": "drag_coefficient", "wind_lift": "lift_coefficient",
    "thickness": "collision_margin", "friction": "friction_kinetic",
}


def addon_defaults():
    """The defaults an artist gets from Object.drape (properties.py), read from the
    property definitions so the benchmark follows the add-on; {} without bpy."""
    try:
        from drape import properties
    except Exception:
        return {}
    out = {}
    for name, prop in properties.DrapeClothSettings.__annotations__.items():
        kw = getattr(prop, "keywords", None)
        if kw is not None and "default" in kw and "get" not in kw:
            out[name] = kw["default"]
    return out


def drape_params(solver, substeps=None, match=None):
    """ClothParams with the add-on's defaults (what Object.drape starts with:
    its settling and air resistance too), with the scene's matched gravity
    and air drag."""
    d = addon_defaults()
    names = {f.name for f in dataclasses.fields(solver.ClothParams)}
    values = {field: d[prop] for prop, field in _ADDON_FIELDS.items() if prop in d and field in names}
    if "static_friction" in d and "friction" in d and "friction_static" in names:
        values["friction_static"] = max(d["static_friction"], d["friction"])
    if values.get("stretch_hierarchy") is False:
        values["stretch_hierarchy"] = None   # unticked: automatic, as scene/params.py passes it
    params = solver.ClothParams(**values)
    if substeps is not None:
        params.substeps = substeps
    if match is not None:
        params.gravity = (0.0, 0.0, -float(match.gravity))
        if match.air_drag is not None:
            params.air_drag = float(match.air_drag)
        params.collision_margin = float(match.collision_margin)
    return params


def self_collision_settings(match=None):
    d = addon_defaults()
    thickness = match.self_distance if match is not None else d.get("self_thickness", 0.004)
    return {"thickness": thickness, "friction": d.get("self_friction", 0.2),
            "conservativeness": d.get("self_conservativeness", 1.0)}


def sphere_capsules(solver, c0, c1):
    """The sphere as a zero-length capsule moving from c0 (step start) to c1 (step end)."""
    r = np.array([bs.SPHERE_RADIUS])
    return solver.Capsules(a0=c0[None], b0=c0[None], a1=c1[None], b1=c1[None],
                           radius_a=r, radius_b=r)


def run_drape(sheet, frames, params, steps_per_frame, crossing_frames=(), self_collision=False,
              match=None, with_metrics=True):
    """One run: build, step frames 2..frames. Returns (ms per frame list, RunMetrics or None)."""
    solver = drape_api()
    mass = np.full(sheet.n, (match or Match()).mass_per_vertex)
    model = solver.build_model(sheet.rest, sheet.face_indices, sheet.face_sizes, mass,
                               sheet.pin_weight, params)
    if self_collision:
        from drape.solver.selfcollision import SelfCollision
        model.self_collision = SelfCollision.from_model(model, **self_collision_settings(match))
    state = model.new_state()
    dt = 1.0 / bs.FPS / steps_per_frame
    pins = sheet.rest.astype(np.float32)
    metrics = RunMetrics(sheet, crossing_frames) if with_metrics else None
    frame_ms = []
    for f in range(2, frames + 1):
        t0 = time.perf_counter()
        for s in range(steps_per_frame):
            fa = f - 1 + s / steps_per_frame
            fb = f - 1 + (s + 1) / steps_per_frame
            inputs = solver.StepInputs(pin_targets=pins,
                                       capsules=sphere_capsules(solver, bs.sphere_center(fa),
                                                                bs.sphere_center(fb)))
            solver.step(model, state, inputs, dt, params)
        frame_ms.append((time.perf_counter() - t0) * 1000.0)
        if metrics is not None:
            metrics.add(f, state.positions_aos(), bs.sphere_center(f))
    return frame_ms, metrics


def run_drape_addon(sheet, frames, match, substeps=None, crossing_frames=(), with_metrics=True):
    """Drape as the add-on inside Blender: scene.frame_set drives its runtime (read the
    evaluated pin targets and colliders, step, write the result back for the viewport)."""
    import bpy
    from drape.scene import runtime
    with bs.stdout_to_stderr():
        obj = bs.build_drape_addon_scene(sheet, frames, mass_per_vertex=match.mass_per_vertex, substeps=substeps)
        scene = bpy.context.scene
        g = float(np.linalg.norm(scene.gravity))
        obj.drape.gravity_scale = match.gravity / g
        if match.air_drag is not None:
            obj.drape.air_drag = match.air_drag
        obj.drape.thickness = match.collision_margin
        scene.frame_set(1)
    metrics = RunMetrics(sheet, crossing_frames) if with_metrics else None
    frame_ms, step_ms = [], []
    for f in range(2, frames + 1):
        t0 = time.perf_counter()
        scene.frame_set(f)
        frame_ms.append((time.perf_counter() - t0) * 1000.0)
        entry = runtime.get(obj)
        if entry is None or entry.error:
            raise RuntimeError(f"Drape add-on did not simulate frame {f}: {entry and entry.error}")
        step_ms.append(entry.last_step_ms)
        if metrics is not None:
            metrics.add(f, bs.evaluated_positions(obj), bs.sphere_center(f))
    return frame_ms, step_ms, metrics, obj.drape.substeps


# --------------------------------------------------------------------------- Blender side

def build_blender(sheet, frames, quality, self_collision, match):
    """Blender's scene with the matched collider: the fine UV sphere, contact
    distance + collider outer thickness = Drape's margin, self distance = Drape's."""
    import bpy
    with bs.stdout_to_stderr():
        obj, sphere = bs.build_blender_scene(sheet, frames, quality=quality, self_collision=self_collision,
                                             mass_per_vertex=match.mass_per_vertex,
                                             sphere_segments=match.sphere_segments,
                                             sphere_rings=match.sphere_rings)
        cloth = obj.modifiers["Cloth"]
        cloth.settings.air_damping = match.blender_air_damping
        cloth.collision_settings.distance_min = match.blender_distance_min
        cloth.collision_settings.self_distance_min = match.self_distance
        sphere.collision.thickness_outer = match.blender_collider_outer
        bpy.context.scene.frame_set(1)
    return obj


def run_blender(sheet, frames, quality, self_collision, match, crossing_frames=(), with_metrics=True):
    """One bake through scene.frame_set; returns (ms per frame list, RunMetrics or None)."""
    import bpy
    obj = build_blender(sheet, frames, quality, self_collision, match)
    scene = bpy.context.scene
    metrics = RunMetrics(sheet, crossing_frames) if with_metrics else None
    frame_ms = []
    for f in range(2, frames + 1):
        t0 = time.perf_counter()
        scene.frame_set(f)
        frame_ms.append((time.perf_counter() - t0) * 1000.0)
        if metrics is not None:
            metrics.add(f, bs.evaluated_positions(obj), bs.sphere_center(f))
    return frame_ms, metrics


def blender_threads():
    try:
        import bpy
        return int(bpy.context.scene.render.threads)
    except Exception:
        return os.cpu_count()


def _median_of_means(per_run):
    return statistics.median(statistics.fmean(r) for r in per_run)


# --------------------------------------------------------------------------- cases

class Case:
    """Runs of one system on one scene; the metrics come from the first run
    (the runs are deterministic), the time from the median of the runs."""

    simulator = None

    def __init__(self, scene_name, sheet, frames, match, crossing_frames=(), note=None):
        self.scene_name, self.sheet, self.frames, self.match = scene_name, sheet, frames, match
        self.crossing_frames, self.note = tuple(crossing_frames), note
        self.per_run, self.metrics = [], None

    def run(self):
        first = not self.per_run
        ms, m = self._run(with_metrics=first)
        self.per_run.append(ms)
        if first:
            self.metrics = m
        return self

    @property
    def ms_per_frame(self):
        return _median_of_means(self.per_run)

    def base(self):
        return {"scene": self.scene_name, "simulator": self.simulator, "vertices": self.sheet.n,
                "frames": self.frames - 1, "runs": len(self.per_run), "fps": bs.FPS,
                "ms_per_frame_median": round(self.ms_per_frame, 4),
                "ms_per_frame_runs": [round(statistics.fmean(r), 4) for r in self.per_run]}

    def quality(self):
        return self.metrics.as_dict()

    def record(self, vs=None, **extra):
        rec = self.base()
        if vs is not None:
            rec["vs"] = f"blender_cloth quality {vs['quality']}" + (" self collision" if vs["self_collision"] else "")
            rec["blender_ms_per_frame"] = vs["ms_per_frame_median"]
            rec["speedup_vs_blender"] = round(vs["ms_per_frame_median"] / self.ms_per_frame, 2)
            rec["blender_quality"] = {c: vs[c] for c in QUALITY_COLUMNS}
        note = extra.pop("note", None) or self.note
        rec.update(extra)
        rec.update(self.quality())
        if note:
            rec["note"] = note
        emit(rec)
        return rec


class BlenderCase(Case):
    simulator = "blender_cloth"

    def __init__(self, scene_name, sheet, frames, match, quality=5, self_collision=False, **kw):
        super().__init__(scene_name, sheet, frames, match, **kw)
        self.quality_setting, self.self_collision = quality, self_collision

    def _run(self, with_metrics):
        return run_blender(self.sheet, self.frames, self.quality_setting, self.self_collision, self.match,
                           self.crossing_frames, with_metrics)

    def base(self):
        rec = super().base()
        rec.update(quality=self.quality_setting, substeps=self.quality_setting,
                   self_collision=self.self_collision, threads=blender_threads())
        return rec


class DrapeCase(Case):
    simulator = "drape"

    def __init__(self, scene_name, sheet, frames, match, substeps, steps_per_frame=1, self_collision=False, **kw):
        super().__init__(scene_name, sheet, frames, match, **kw)
        self.params = drape_params(drape_api(), substeps, match)
        self.steps_per_frame, self.self_collision = steps_per_frame, self_collision

    def _run(self, with_metrics):
        return run_drape(self.sheet, self.frames, self.params, self.steps_per_frame, self.crossing_frames,
                         self.self_collision, self.match, with_metrics)

    def base(self):
        rec = super().base()
        p = self.params
        rec.update(substeps=p.substeps, iterations=p.iterations, steps_per_frame=self.steps_per_frame,
                   self_collision=self.self_collision, tethers=bool(p.tethers), threads=1,
                   ms_per_step_median=round(self.ms_per_frame / self.steps_per_frame, 4))
        return rec


class AddonCase(Case):
    simulator = "drape_addon"

    def __init__(self, scene_name, sheet, frames, match, substeps=None, **kw):
        super().__init__(scene_name, sheet, frames, match, **kw)
        self.substeps, self.step_ms = substeps, []

    def _run(self, with_metrics):
        ms, steps, m, self.substeps = run_drape_addon(self.sheet, self.frames, self.match, self.substeps,
                                                      self.crossing_frames, with_metrics)
        self.step_ms.append(statistics.fmean(steps))
        return ms, m

    def base(self):
        rec = super().base()
        rec.update(substeps=self.substeps, steps_per_frame=1, self_collision=False, threads=1,
                   ms_per_step_median=round(statistics.median(self.step_ms), 4))
        return rec


def paired(runs, blender, drape):
    """Blender and Drape runs alternated (B, D, B, D, ...) so that a busy
    neighbour on a shared machine weighs on both alike. `blender` may be None."""
    for _ in range(runs):
        if blender is not None:
            blender.run()
        drape.run()
    return blender, drape


def at_or_below(q, target, columns):
    """True where every column of q is measured and <= the target's (measured) value."""
    return all(q.get(c) is not None and target.get(c) is not None and q[c] <= target[c] for c in columns)


STRAIN_COLUMNS = ("strain_mean", "strain_p99")
ALL_COLUMNS = ("strain_mean", "strain_p99", "penetration_max_mm", "crossings_max")


def substep_search(make_case, candidates, target, criteria):
    """Run make_case(n) once per substep count in ascending order until a run is
    at or below the target on each criterion (name -> columns). Returns
    ({criterion: case or None}, probes): the cheapest case per criterion."""
    found = {name: None for name in criteria}
    probes = []
    for n in sorted(candidates):
        case = make_case(n)
        if not case.per_run:      # a case already measured (the default row) keeps its runs
            case.run()
        q = case.quality()
        hit = {name: at_or_below(q, target, cols) for name, cols in criteria.items()}
        probes.append({"substeps": n, "ms_per_frame": round(case.ms_per_frame, 3),
                       **{c: q[c] for c in QUALITY_COLUMNS}, "at_or_below": hit})
        log(f"drape substeps {n}: {case.ms_per_frame:.2f} ms/frame, strain mean {q['strain_mean']} "
            f"p99 {q['strain_p99']}, crossings {q['crossings_max']}, penetration {q['penetration_max_mm']} mm")
        for name in criteria:
            if found[name] is None and hit[name]:
                found[name] = case
        if all(c is not None for c in found.values()):
            break
    return found, probes


def equal_quality_rows(scene_name, runs, blender_rec, default_rec, found, probes, candidates, criteria, label):
    """Emit the search line and one row per criterion: the matched Drape case
    with its ratio beside the default-settings row's ratio (or null, with the reason)."""
    emit({"scene": scene_name, "simulator": "drape", "search": f"substeps_at_or_below_blender_{label}",
          "vertices": blender_rec["vertices"], "frames": blender_rec["frames"], "candidates": sorted(candidates),
          "criteria": {k: list(v) for k, v in criteria.items()},
          "blender_quality": {c: blender_rec[c] for c in QUALITY_COLUMNS}, "probes": probes})
    default_ratio = default_rec["speedup_vs_blender"]
    out = {}
    for name, cols in criteria.items():
        case = found[name]
        if case is None:
            emit({"scene": scene_name, "comparison": f"{name} vs blender_cloth {label}", "vertices": blender_rec["vertices"],
                  "matched_substeps": None, "speedup_vs_blender": None,
                  "speedup_vs_blender_default_settings": default_ratio,
                  "reason": f"not computed: no substep count in {sorted(candidates)} is at or below Blender on {list(cols)}"})
            continue
        while len(case.per_run) < runs:
            case.run()
        out[name] = case.record(vs=blender_rec, equal_quality=name, matched_on=list(cols),
                                speedup_vs_blender_default_settings=default_ratio,
                                default_substeps=default_rec["substeps"],
                                note=f"the cheapest substep count of {sorted(candidates)} at or below Blender "
                                     f"on {', '.join(cols)}")
    return out


def two_corner_sheet(res):
    """The benchmark sheet pinned at the two ends of its top row only."""
    sheet = bs.Sheet(res)
    sheet.pin_weight = np.zeros(sheet.n)
    sheet.pin_weight[[0, res]] = 1.0
    return sheet


def warm_drape():
    """Compile the solver's kernels once so the timed runs measure steps, not numba."""
    t0 = time.perf_counter()
    sheet = bs.Sheet(8)
    m = Match()
    run_drape(sheet, 3, drape_params(drape_api(), match=m), 1, crossing_frames=(3,), match=m)
    if drape_has_self_collision():
        run_drape(sheet, 3, drape_params(drape_api(), match=m), 1, self_collision=True, match=m)
    return time.perf_counter() - t0


def drape_has_self_collision():
    try:
        from drape.solver import selfcollision  # noqa: F401
        return True
    except ImportError:
        return False


def print_table():
    """A readable table of the system rows on stderr (the JSON lines are the record)."""
    head = f"{'scene':22} {'system':14} {'verts':>6} {'sub':>4} {'sc':>3} {'ms/frame':>9} {'x vs B':>7} " \
           f"{'strain mean':>11} {'p99':>8} {'max':>8} {'cross':>6} {'pen mm':>7} {'pin mm':>7}  case"
    log(head)
    for r in RESULTS:
        if r.get("simulator") not in SYSTEMS or "search" in r:
            continue

        def f(v, fmt):
            return "null" if v is None else format(v, fmt)
        log(f"{r['scene'][:22]:22} {r['simulator']:14} {r['vertices']:>6} {r.get('substeps', ''):>4} "
            f"{'y' if r.get('self_collision') else 'n':>3} {r['ms_per_frame_median']:>9.2f} "
            f"{f(r.get('speedup_vs_blender'), '.1f') if 'vs' in r else '':>7} "
            f"{f(r['strain_mean'], '.5f'):>11} {f(r['strain_p99'], '.4f'):>8} {f(r['strain_max'], '.3f'):>8} "
            f"{f(r['crossings_max'], 'd'):>6} {f(r['penetration_max_mm'], '.2f'):>7} "
            f"{f(r['pin_drift_max_mm'], '.2f'):>7}  {r.get('equal_quality') or r.get('note', '')[:40]}")


# --------------------------------------------------------------------------- the run

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: few frames, 1 run, small sizes")
    ap.add_argument("--no-blender", action="store_true", help="Drape cases only")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--frames", type=int, default=48, help="frames of the 10k cases (24 fps)")
    ap.add_argument("--out", default=OUT_DIR)
    ap.add_argument("--two-corners-only", action="store_true",
                    help="only the comparison on the sheet pinned at its two top corners")
    args = ap.parse_args(argv)

    quick = args.quick
    runs = 1 if quick else args.runs
    frames = 12 if quick else args.frames
    sc_frames = 6 if quick else SELF_COLLISION_FRAMES
    big_frames = 4 if quick else BIG_FRAMES
    use_blender = not args.no_blender and bs.blender_available()
    os.makedirs(args.out, exist_ok=True)
    t_start = time.perf_counter()
    load_start = [round(x, 2) for x in os.getloadavg()]

    compile_s = warm_drape()
    log(f"drape kernels compiled/loaded in {compile_s:.2f} s")
    match = match_scenes(use_blender)
    default_substeps = drape_params(drape_api()).substeps
    emit({"scene": "matching", **match.describe()})
    log(f"matching: {json.dumps(match.describe())}")

    sheet10 = bs.Sheet(30 if quick else 100)
    cross10 = (frames // 2, frames)
    S = "hanging_sheet_sphere"
    candidates = [4, 8, 16] if quick else SUBSTEP_CANDIDATES

    # 0. A 50 x 50 sheet pinned at its two top corners only, the same sphere:
    # the pull crosses the sheet between the pins, where a whole pinned row
    # hides an unconverged solve.
    corners_sheet = two_corner_sheet(20 if quick else 50)
    corners_frames = 24 if quick else 96
    SC = "two_corner_sheet_sphere"
    cross_c = (corners_frames // 2, corners_frames)
    bc, dc = paired(runs, BlenderCase(SC, corners_sheet, corners_frames, match, 5, crossing_frames=cross_c,
                                      note="Blender Cloth defaults, quality 5, pinned at two corners")
                    if use_blender else None,
                    DrapeCase(SC, corners_sheet, corners_frames, match, default_substeps, crossing_frames=cross_c,
                              note="Drape with the add-on defaults, pinned at two corners"))
    bcr = bc.record() if bc is not None else None
    dcr = dc.record(vs=bcr, equal_quality="default_settings")
    if bcr is not None:
        criteria = {"equal_strain": STRAIN_COLUMNS, "equal_quality": ALL_COLUMNS}
        found, probes = substep_search(
            lambda n: dc if n == default_substeps else DrapeCase(SC, corners_sheet, corners_frames, match, n,
                                                                 crossing_frames=cross_c),
            candidates, bcr, criteria)
        equal_quality_rows(SC, runs, bcr, dcr, found, probes, candidates, criteria, "quality_5_two_corners")
    if args.two_corners_only:
        print_table()
        return 0

    # 1. Blender at its default quality 5 against Drape at the add-on's defaults, on the matched scene.
    b5, d_def = paired(runs, BlenderCase(S, sheet10, frames, match, 5, crossing_frames=cross10,
                                         note="Blender Cloth defaults, quality 5, matched scene") if use_blender else None,
                       DrapeCase(S, sheet10, frames, match, default_substeps, crossing_frames=cross10,
                                 note="Drape with the add-on defaults, matched scene"))
    b5r = b5.record() if b5 is not None else None
    d_def_r = d_def.record(vs=b5r, equal_quality="default_settings")

    # 2. Drape as the add-on: scene.frame_set with the live runtime (the whole frame, as an artist gets it).
    if use_blender:
        addon = AddonCase(S, sheet10, frames, match, crossing_frames=cross10,
                          note="drape.cloth_add on the sheet, sphere as a capsule collider; ms per frame = "
                               "scene.frame_set (read inputs, step, write back)")
        for _ in range(runs):
            addon.run()
        addon.record(vs=b5r, equal_quality="default_settings")

    # 3. Equal quality: the cheapest substep count at or below Blender quality 5.
    if b5r is not None:
        criteria = {"equal_strain": STRAIN_COLUMNS, "equal_quality": ALL_COLUMNS}
        found, probes = substep_search(
            lambda n: d_def if n == default_substeps else DrapeCase(S, sheet10, frames, match, n,
                                                                    crossing_frames=cross10),
            candidates, b5r, criteria)
        matched = equal_quality_rows(S, runs, b5r, d_def_r, found, probes, candidates, criteria, "quality_5")
        if "equal_strain" in matched:
            n = matched["equal_strain"]["substeps"]
            addon_eq = AddonCase(S, sheet10, frames, match, substeps=n, crossing_frames=cross10,
                                 note=f"the add-on at the solver's equal-strain substeps ({n})")
            for _ in range(runs):
                addon_eq.run()
            addon_eq.record(vs=b5r, equal_quality="equal_strain",
                            speedup_vs_blender_default_settings=round(
                                b5r["ms_per_frame_median"] / addon.ms_per_frame, 2))

    # 4. Self collision at an equal distance (Blender's self distance = Drape's self thickness).
    if drape_has_self_collision():
        cross_sc = (sc_frames // 2 + 1, sc_frames)
        bsc, dsc = paired(runs, BlenderCase(S, sheet10, sc_frames, match, 5, self_collision=True,
                                            crossing_frames=cross_sc,
                                            note=f"self collision on, self distance {match.self_distance} m")
                          if use_blender else None,
                          DrapeCase(S, sheet10, sc_frames, match, default_substeps, self_collision=True,
                                    crossing_frames=cross_sc,
                                    note=f"self collision on, self thickness {match.self_distance} m"))
        bscr = bsc.record() if bsc is not None else None
        dsc_r = dsc.record(vs=bscr, equal_quality="default_settings")
        if bscr is not None:
            criteria = {"equal_strain": STRAIN_COLUMNS, "equal_quality": ALL_COLUMNS}
            sc_candidates = [4, 8] if quick else SC_SUBSTEP_CANDIDATES
            found, probes = substep_search(
                lambda n: dsc if n == default_substeps else DrapeCase(S, sheet10, sc_frames, match, n,
                                                                      self_collision=True,
                                                                      crossing_frames=cross_sc),
                sc_candidates, bscr, criteria)
            equal_quality_rows(S, runs, bscr, dsc_r, found, probes, sc_candidates, criteria,
                               "quality_5_self_collision")
    else:
        log("drape self collision not available: skipped")

    # 5. 40k vertices (Blender costs seconds per frame: a few frames).
    sheet40 = bs.Sheet(60 if quick else 200)
    b40, d40 = paired(runs, BlenderCase(S, sheet40, big_frames, match, 5, crossing_frames=(big_frames,),
                                        note=f"{big_frames - 1} frames only") if use_blender else None,
                      DrapeCase(S, sheet40, big_frames, match, default_substeps, crossing_frames=(big_frames,),
                                note=f"the same {big_frames - 1} frames"))
    b40r = b40.record() if b40 is not None else None
    d40.record(vs=b40r, equal_quality="default_settings")

    # 6. Scaling curve: Drape 1k..100k, Blender up to 40k (10k and 40k from the cases above).
    drape_sizes = [31, 50, 100, 150, 200, 250, 316] if not quick else [20, 40]
    blender_sizes = {31: (24, runs), 50: (24, runs), 150: (9, 1)} if not quick else {20: (6, 1)}
    known = {} if quick else {100: b5r, 200: b40r}
    scaling_frames = 12 if quick else 24
    for res in drape_sizes:
        sh = bs.Sheet(res)
        vs = known.get(res)
        if use_blender and res in blender_sizes:
            bf, br = blender_sizes[res]
            blender = BlenderCase("scaling", sh, bf, match, 5, crossing_frames=(bf,),
                                  note=f"{bf - 1} frames, {br} run(s)")
            for _ in range(br):
                blender.run()
            vs = blender.record()
        drape = DrapeCase("scaling", sh, scaling_frames, match, default_substeps, crossing_frames=(scaling_frames,),
                          note=f"{scaling_frames - 1} frames, default settings")
        for _ in range(runs):
            drape.run()
        drape.record(vs=vs, equal_quality="default_settings")

    emit({"scene": "summary", "total_s": round(time.perf_counter() - t_start, 1),
          "load_average_start": load_start, "load_average_end": [round(x, 2) for x in os.getloadavg()],
          "drape_compile_s": round(compile_s, 2), "machine_cores": os.cpu_count(),
          "note": "medians of runs; a shared machine makes them noisy"})
    print_table()
    path = os.path.join(args.out, "bench_blender.jsonl")
    with open(path, "w") as fh:
        for r in RESULTS:
            fh.write(json.dumps(r) + "\n")
    log(f"wrote {path}")
    try:
        sys.path.insert(0, os.path.join(ROOT, "tools"))
        import plot_bench
        png = plot_bench.plot(RESULTS, os.path.join(args.out, "bench_scaling.png"))
        log(f"wrote {png}")
    except ImportError as exc:
        log(f"no plot ({exc}); install matplotlib (requirements-dev.txt) for out/bench_scaling.png")
    return 0


SUBSTEP_CANDIDATES = [4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128]
SC_SUBSTEP_CANDIDATES = [4, 8, 16, 32]
SELF_COLLISION_FRAMES = 25     # Blender self collision costs about a second per frame at 10k vertices
BIG_FRAMES = 7                 # 40k vertices (seconds per frame in Blender): 6 simulated frames

if __name__ == "__main__":
    sys.exit(main())
