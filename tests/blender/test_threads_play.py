"""Several cloths played at once: their steps run side by side in threads
(scene.runtime.update_scene, solver.threads.run_all), and every frame is
byte for byte what one thread gives. A cloth whose step blows up is
reported and stops; the others go on as they would alone."""

import math

import bpy
import numpy as np

from drape.scene import runtime
from drape.solver import threads


def _grid(name, n, x):
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=n, y_subdivisions=n, size=1.0, location=(x, 0, 1.2),
                                    rotation=(math.pi / 2, 0, 0))
    obj = bpy.context.active_object
    obj.name = name
    co = np.empty(len(obj.data.vertices) * 3, np.float32)
    obj.data.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    top = np.where(co[:, 1] > co[:, 1].max() - 1e-6)[0]
    obj.vertex_groups.new(name="pin").add([int(i) for i in top], 1.0, 'REPLACE')
    return obj


def _sheet(name, n, x, proxy=0):
    """A cloth; with ``proxy``, simulated on a coarser grid and skinned."""
    coarse = _grid(name + " proxy", proxy, x) if proxy else None
    obj = _grid(name, n, x)
    bpy.ops.drape.cloth_add(pin_group="pin")
    if coarse is not None:
        obj.drape.sim_source = 'PROXY'
        obj.drape.proxy = coarse
    return obj


def _scene():
    """Four single cloths of different sizes (one with self collision, one
    simulated on a proxy) and a capsule swinging through them, and a plane
    under them."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, 40
    cloths = [_sheet("A", 20, -1.2), _sheet("B", 14, 0.0), _sheet("C", 9, 1.2), _sheet("D", 24, 2.4, proxy=8)]
    cloths[1].drape.self_collision = True
    bpy.ops.object.select_all(action='DESELECT')
    bpy.ops.drape.collider_add(type='CAPSULE', radius=0.12)
    capsule = bpy.context.active_object
    capsule.scale = (1.0, 4.0, 1.0)
    capsule.rotation_euler = (0, 0, -math.pi / 2)
    for frame, y in ((1, -0.5), (12, 0.4), (24, -0.3)):
        capsule.location = (-2.0, y, 1.0)
        capsule.keyframe_insert("location", frame=frame)
    bpy.ops.mesh.primitive_plane_add(size=8.0, location=(0, 0, 0.3))
    bpy.ops.drape.collider_add(type='PLANE')
    return scene, cloths


def _play(count, frames, blow_up=None):
    scene, cloths = _scene()
    for obj in cloths:
        obj.drape.threads = count
    out = {}
    for f in frames:
        if blow_up is not None and f == blow_up[1]:
            cloths[blow_up[0]].drape.thickness = 1e38
        scene.frame_set(f)
    for obj in cloths:
        sim = runtime.get(obj)
        out[obj.name] = (sim.error, {f: a.tobytes() for f, a in sim.frames.items()})
    return out


def test_cloths_played_on_2_threads_match_1_thread(addon, monkeypatch):
    widths = []
    run_all = threads.run_all

    def recording(jobs, count, cost=None):
        jobs = list(jobs)
        widths.append((len(jobs), threads.resolve(count)))
        return run_all(jobs, count, cost)

    monkeypatch.setattr(threads, "run_all", recording)
    monkeypatch.setattr(threads, "MIN_PARALLEL_COST_NS", 0)  # the pool even for these small cloths
    frames = range(1, 16)
    one = _play(1, frames)
    assert widths and all(w == (4, 1) for w in widths), widths
    widths.clear()
    two = _play(2, frames)
    if threads.available() >= 2:
        assert widths and all(w == (4, 2) for w in widths), widths
    assert one == two
    for name, (error, by_frame) in one.items():
        assert error is None and sorted(by_frame) == list(frames), name
    # The cloths moved (the capsule and gravity): the frames differ.
    assert one["A"][1][1] != one["A"][1][15] and one["C"][1][1] != one["C"][1][15]
    assert len(one["D"][1][15]) == 25 * 25 * 3 * 4 and one["D"][1][1] != one["D"][1][15]  # skinned, dense


def test_a_cloth_that_blows_up_stops_alone(addon, monkeypatch):
    monkeypatch.setattr(threads, "MIN_PARALLEL_COST_NS", 0)
    frames = range(1, 10)
    alone = _play(2, frames)
    failed = _play(2, frames, blow_up=(0, 5))
    error, by_frame = failed["A"]
    assert error is not None and error.startswith("'A': the simulation produced NaN/Inf"), error
    assert sorted(by_frame) == [1, 2, 3, 4]
    assert failed["B"] == alone["B"] and failed["C"] == alone["C"] and failed["D"] == alone["D"]


def test_headless_threads_option_sets_every_cloth_s_count(addon, monkeypatch):
    import pytest

    from drape.bake import headless

    assert headless._parse(["shot.blend", "--threads", "3"]).threads == 3
    assert headless._parse(["shot.blend"]).threads is None
    for bad in ("-1", "two"):
        with pytest.raises(SystemExit) as exit_info:
            headless._parse(["shot.blend", "--threads", bad])
        assert exit_info.value.code == 2
    # What main() does with it: in place of each cloth's own setting.
    widths = []
    run_all = threads.run_all
    monkeypatch.setattr(threads, "run_all", lambda jobs, count, cost=None: widths.append(threads.resolve(count))
                        or run_all(jobs, count, cost))
    try:
        threads.set_override(2)
        _play(1, range(1, 4))
    finally:
        threads.set_override(None)
    assert widths and set(widths) == {min(2, threads.available())}


def test_threads_setting_reaches_the_solver_parameters(empty_scene):
    from drape import solver
    from drape.scene import params

    obj = _sheet("S", 4, 0.0)
    assert obj.drape.threads == 0
    # 0: Blender's own count (Render Properties > Performance).
    empty_scene.render.threads_mode = 'FIXED'
    empty_scene.render.threads = 3
    assert params.cloth_params(obj.drape, empty_scene, solver).threads == 3
    obj.drape.threads = 5
    assert params.cloth_params(obj.drape, empty_scene, solver).threads == 5
