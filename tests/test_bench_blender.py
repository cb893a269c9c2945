"""The comparison with Blender's Cloth (benchmarks/bench_blender.py) reports
only what it measured: its metric code against independent results (the
analytic strain of a scaled sheet, a crossing count known by construction, a
penetration depth placed by hand, a fall integrated step by step), a row that
claims a figure it did not compute is refused, and tiny scenes of each system
(Drape's solver, Blender's Cloth, Drape's add-on) come out with every quality
column measured by the same code or null with the reason. The full benchmark
is not run here."""

import math
import os
import sys
import types

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import bench_blender as bb  # noqa: E402
import blender_scenes as bs  # noqa: E402


def _metrics(sheet, crossing_frames=()):
    return bb.RunMetrics(sheet, crossing_frames)


# ----------------------------------------------------------------- the metric functions

@pytest.mark.parametrize("scale", [1.03, 0.9])
def test_uniformly_scaled_sheet_has_the_analytic_strain(scale):
    sheet = bs.Sheet(6)
    m = _metrics(sheet)
    m.add(2, sheet.rest * scale)   # every edge is `scale` times its rest length
    row = m.as_dict()
    assert row["strain_mean"] == pytest.approx(abs(scale - 1), abs=1e-6)
    assert row["strain_p99"] == pytest.approx(abs(scale - 1), abs=1e-6)
    assert row["strain_max"] == pytest.approx(abs(scale - 1), abs=1e-6)


def test_sheet_stretched_along_one_axis_has_the_analytic_mean_and_max():
    # Stretching x by s strains the r (r + 1) horizontal edges by s - 1 and
    # leaves the as many vertical ones at rest: mean (s - 1) / 2, max s - 1.
    sheet = bs.Sheet(5)
    s = 1.08
    x = sheet.rest.copy()
    x[:, 0] *= s
    m = _metrics(sheet)
    m.add(2, x)
    m.add(3, sheet.rest)             # a frame at rest: the run mean halves, the worst frame stays
    row = m.as_dict()
    assert row["strain_max"] == pytest.approx(s - 1, abs=1e-6)
    assert row["strain_p99"] == pytest.approx(s - 1, abs=1e-6)
    assert row["strain_mean"] == pytest.approx((s - 1) / 2 / 2, abs=1e-6)


def _pierced_sheet(k, through=True):
    """A 4x4-quad sheet in the plane y = 0 and k small upright triangles, each
    at the centroid of a different sheet triangle: piercing it (through=True)
    or standing beside the plane. Returns a sheet-like record and the positions."""
    sheet = bs.Sheet(4)
    tris = bb.Q.triangulate(sheet.face_indices, sheet.face_sizes)
    rng = np.random.default_rng(3)
    picked = rng.choice(len(tris), size=k, replace=False)
    pos = [sheet.rest]
    faces = [sheet.face_indices]
    sizes = [sheet.face_sizes]
    n = sheet.n
    d = 0.004   # much smaller than the 25 cm quads: each small triangle meets one sheet triangle at most
    for t in picked:
        c = sheet.rest[tris[t]].mean(axis=0)
        y0 = -d if through else d
        pos.append(np.array([[c[0] - d, y0, c[2]], [c[0] + d, y0, c[2]], [c[0], y0 + 2 * d, c[2] + d]]))
        faces.append(np.arange(n, n + 3))
        sizes.append(np.array([3]))
        n += 3
    rest = np.concatenate(pos)
    mesh = types.SimpleNamespace(rest=rest, face_indices=np.concatenate(faces), face_sizes=np.concatenate(sizes),
                                 pin_weight=np.zeros(len(rest)), n=len(rest))
    return mesh, rest


@pytest.mark.parametrize("k", [1, 5])
def test_crossings_count_the_pairs_placed_by_construction(k):
    mesh, x = _pierced_sheet(k)
    m = _metrics(mesh, crossing_frames=(2,))
    m.add(2, x)
    row = m.as_dict()
    assert row["crossings_max"] == k
    assert row["crossings_by_frame"] == {"2": k}

    clear, x_clear = _pierced_sheet(k, through=False)
    assert bb.crossing_pairs(x_clear, bb.Q.triangulate(clear.face_indices, clear.face_sizes)) == 0


def test_penetration_is_the_depth_placed_inside_the_sphere():
    centre = np.array([0.1, -0.2, 0.7])
    r = 0.15
    rng = np.random.default_rng(7)
    u = rng.normal(size=(6, 3))
    u /= np.linalg.norm(u, axis=1)[:, None]
    depths = np.array([0.0125, 0.003, 0.0005])
    inside = centre + u[:3] * (r - depths)[:, None]
    outside = centre + u[3:] * np.array([r + 1e-4, r + 0.02, 2 * r])[:, None]
    depth, count = bb.sphere_penetration(np.concatenate([inside, outside]), centre, r)
    assert depth == pytest.approx(0.0125, abs=1e-12)
    assert count == 3
    assert bb.sphere_penetration(outside, centre, r) == (0.0, 0)


def test_pin_drift_is_the_largest_distance_from_the_targets():
    sheet = bs.Sheet(4)
    x = sheet.rest.copy()
    pinned = np.flatnonzero(sheet.pin_weight >= 1)
    x[pinned[2]] += [0.003, 0.0, 0.004]    # 5 mm
    x[pinned[0]] += [0.0, 0.001, 0.0]
    x[-1] += [1.0, 0.0, 0.0]               # a free vertex moves as it likes
    m = _metrics(sheet)
    m.add(2, x, sphere_centre=np.array([0.0, 5.0, 0.0]))
    assert m.as_dict()["pin_drift_max_mm"] == pytest.approx(5.0, abs=1e-6)


def test_free_fall_fits_recover_gravity_and_drag_of_a_fall_integrated_step_by_step():
    g, k = 5.7, 0.8
    h = 1e-5
    t_samples = np.arange(1, 25) / 24.0
    v = x = 0.0
    drops, t = [], 0.0
    for ts in t_samples:           # explicit midpoint steps of dv/dt = g - k v, not the closed form
        while t < ts - 1e-12:
            dt = min(h, ts - t)
            vm = v + 0.5 * dt * (g - k * v)
            x += dt * vm
            v += dt * (g - k * vm)
            t += dt
        drops.append(x)
    assert bb.fit_linear_drag(t_samples, drops, g) == pytest.approx(k, rel=1e-3)
    undamped = 0.5 * g * t_samples ** 2
    assert bb.fit_free_fall_gravity(t_samples, undamped) == pytest.approx(g, rel=1e-9)
    assert bb.fit_linear_drag(t_samples, undamped, g) == pytest.approx(0.0, abs=1e-3)


# ----------------------------------------------------------------- rows report what they computed

def _row(metrics):
    return {"scene": "t", "simulator": "drape", "vertices": 49, "substeps": 4, **metrics.as_dict()}


def test_a_crossing_frame_the_run_did_not_reach_is_null_with_the_reason():
    sheet = bs.Sheet(6)
    m = _metrics(sheet, crossing_frames=(3, 5))
    for f in (2, 3, 4):
        m.add(f, sheet.rest, sphere_centre=np.array([0.0, 1.0, 0.0]))
    row = bb.check_row(_row(m))
    assert row["crossings_max"] is None
    assert row["reason"]["crossings_max"].startswith("not computed") and "5" in row["reason"]["crossings_max"]
    assert row["strain_max"] == 0.0 and row["measured"]["frames"] == 3   # a measured 0 stays a 0


def test_a_row_without_crossing_frames_reports_none_and_says_why():
    sheet = bs.Sheet(6)
    m = _metrics(sheet)
    m.add(2, sheet.rest)            # no collider this frame either
    row = bb.check_row(_row(m))
    assert row["crossings_max"] is None and row["penetration_max_mm"] is None
    assert row["vertices_inside_max"] is None
    assert all(row["reason"][c].startswith("not computed")
               for c in ("crossings_max", "penetration_max_mm", "vertices_inside_max"))


def test_check_row_refuses_a_figure_that_was_not_measured():
    sheet = bs.Sheet(6)
    m = _metrics(sheet, crossing_frames=(9,))
    m.add(2, sheet.rest, sphere_centre=np.array([0.0, 1.0, 0.0]))
    good = bb.check_row(_row(m))

    claimed = dict(good, crossings_max=0)              # a crossing count nobody counted, printed as 0
    with pytest.raises(ValueError, match="crossings_max"):
        bb.check_row(claimed)
    no_reason = dict(good)
    no_reason["reason"] = {}
    with pytest.raises(ValueError, match="crossings_max"):
        bb.check_row(no_reason)
    unmeasured = dict(good, measured={"frames": 0, "crossing_frames": []})
    with pytest.raises(ValueError, match="strain_mean"):
        bb.check_row(unmeasured)
    missing = {k: v for k, v in good.items() if k != "pin_drift_max_mm"}
    with pytest.raises(ValueError, match="pin_drift_max_mm"):
        bb.check_row(missing)
    nan = dict(good, strain_p99=math.nan)
    with pytest.raises(ValueError, match="strain_p99"):
        bb.check_row(nan)


# ----------------------------------------------------------------- tiny scenes of each system

FRAMES = 4
CROSSING_FRAMES = (3, FRAMES)


def _check_system_row(rec, simulator):
    assert rec["simulator"] == simulator
    bb.check_row(rec)
    for c in bb.QUALITY_COLUMNS:
        assert rec[c] is not None, (simulator, c, rec.get("reason"))
    assert rec["measured"]["frames"] == FRAMES - 1
    assert rec["crossings_by_frame"].keys() == {str(f) for f in CROSSING_FRAMES}
    assert rec["pin_drift_max_mm"] < 1.0


def test_drape_rows_of_a_tiny_scene_carry_every_column(capsys):
    match = bb.Match(gravity=5.7, air_drag=0.8)
    sheet = bs.Sheet(8)
    case = bb.DrapeCase("tiny", sheet, FRAMES, match, 4, crossing_frames=CROSSING_FRAMES).run()
    assert isinstance(case.metrics, bb.RunMetrics)
    assert case.params.gravity == (0.0, 0.0, -5.7) and case.params.air_drag == 0.8
    rec = case.record()
    _check_system_row(rec, "drape")
    # The same scene run past no crossing frame: null with the reason, not 0.
    short = bb.DrapeCase("tiny", sheet, FRAMES, match, 4, crossing_frames=(FRAMES + 5,)).run().record()
    assert short["crossings_max"] is None and short["reason"]["crossings_max"].startswith("not computed")
    assert '"crossings_max": null' in capsys.readouterr().out


@pytest.mark.blender
def test_blender_and_addon_rows_of_a_tiny_scene_carry_every_column():
    pytest.importorskip("bpy")
    match = bb.Match(gravity=5.7, air_drag=0.8, sphere_segments=16, sphere_rings=8)
    sheet = bs.Sheet(8)
    blender = bb.BlenderCase("tiny", sheet, FRAMES, match, 2, crossing_frames=CROSSING_FRAMES).run()
    addon = bb.AddonCase("tiny", sheet, FRAMES, match, substeps=2, crossing_frames=CROSSING_FRAMES).run()
    for case, simulator in ((blender, "blender_cloth"), (addon, "drape_addon")):
        assert isinstance(case.metrics, bb.RunMetrics)
        _check_system_row(case.record(), simulator)

    import bpy
    obj = bpy.data.objects["sheet"]         # the add-on's scene, the last one built
    assert obj.drape.air_drag == pytest.approx(0.8)
    assert obj.drape.gravity_scale * np.linalg.norm(bpy.context.scene.gravity) == pytest.approx(5.7, rel=1e-5)


@pytest.mark.blender
def test_blender_scene_keeps_the_matched_contact_distances():
    pytest.importorskip("bpy")
    import bpy
    match = bb.Match()
    obj = bb.build_blender(bs.Sheet(4), 3, 5, True, match)
    cloth = obj.modifiers["Cloth"]
    outer = bpy.data.objects["sphere"].collision.thickness_outer
    assert cloth.collision_settings.distance_min + outer == pytest.approx(match.collision_margin, abs=1e-6)
    assert cloth.collision_settings.self_distance_min == pytest.approx(match.self_distance, abs=1e-6)
    assert cloth.settings.mass == pytest.approx(match.mass_per_vertex)
    assert len(bpy.data.objects["sphere"].data.polygons) == match.sphere_segments * match.sphere_rings


def test_equal_quality_search_takes_the_cheapest_substeps_at_or_below_the_target(capsys):
    """On a tiny Drape-only scene (a Drape run at 8 substeps stands in for the
    target): the matched row is the first probe at or below the target on the
    criterion, a criterion no probe meets is null with the reason, and the
    default-settings ratio printed beside the match is the default row's."""
    import json
    match = bb.Match(gravity=5.7, air_drag=0.8)
    sheet = bs.Sheet(8)
    cross = (FRAMES,)
    bb.RESULTS.clear()
    target = bb.DrapeCase("tiny", sheet, FRAMES, match, 8, crossing_frames=cross).run().record()
    target.update(quality=5, self_collision=False)
    default = bb.DrapeCase("tiny", sheet, FRAMES, match, 2, crossing_frames=cross).run()
    default_rec = default.record(vs=target)
    unreachable = dict(target, strain_mean=-1.0)          # no run has a negative strain
    criteria = {"equal_strain": bb.STRAIN_COLUMNS, "never": ("strain_mean",)}
    candidates = [2, 4, 8, 16]

    def make(n):
        return default if n == 2 else bb.DrapeCase("tiny", sheet, FRAMES, match, n, crossing_frames=cross)

    found, probes = bb.substep_search(make, candidates, target, {"equal_strain": bb.STRAIN_COLUMNS})
    first = next(p["substeps"] for p in probes
                 if p["strain_mean"] <= target["strain_mean"] and p["strain_p99"] <= target["strain_p99"])
    assert found["equal_strain"].params.substeps == first <= 8
    assert len(default.per_run) == 1                       # the default row is not re-timed by the search
    found2, probes2 = bb.substep_search(make, candidates, unreachable, {"never": ("strain_mean",)})
    assert found2["never"] is None and len(probes2) == len(candidates)
    found["never"] = None
    rows = bb.equal_quality_rows("tiny", 1, target, default_rec, found, probes, candidates, criteria, "t")
    assert rows["equal_strain"]["substeps"] == first
    assert rows["equal_strain"]["speedup_vs_blender_default_settings"] == default_rec["speedup_vs_blender"]
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    never = [r for r in printed if r.get("comparison", "").startswith("never")]
    assert never and never[0]["speedup_vs_blender"] is None and never[0]["reason"].startswith("not computed")
