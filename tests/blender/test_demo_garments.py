"""The demo's sewn garments (tools/demo.py) on its character, reduced to the
frames where the seams close: the flat panels start centimetres apart and
end sewn shut around the body, checked on the positions Drape writes back
with the demo's own collider oracle (mathutils.bvhtree on the capsules'
surfaces)."""

import bpy
import numpy as np
import pytest

from drape.scene import runtime

from .test_collider_fit import _demo


def _world(obj):
    local = runtime.dense_positions_local(obj).astype(np.float64)
    m = np.array(obj.matrix_world, np.float64)
    return local @ m[:3, :3].T + m[:3, 3]


@pytest.mark.slow
def test_the_demo_tshirt_and_skirt_sew_shut_around_the_character(empty_scene):
    demo = _demo()
    scene = empty_scene
    frames = demo.DRESS_FRAMES   # standing: the seams have closed, the walk not begun
    scene.frame_start, scene.frame_end = 1, frames
    rig = demo.add_metarig()
    demo.animate_walk(rig, frames)
    scene.frame_set(1)
    demo.add_body(rig)
    capsules = demo.make_capsules(rig)
    shirt = demo.dress_sewn(demo.add_tshirt(rig), "", gravity_off=True)
    skirt = demo.dress_sewn(demo.add_sewn_skirt(rig), "waist")
    start = {}
    for obj in (shirt, skirt):
        co = np.empty(3 * len(obj.data.vertices))
        obj.data.vertices.foreach_get("co", co)
        start[obj.name] = demo.seam_gaps(obj, co.reshape(-1, 3))
        # Modelled apart: front and back panels more than 0.3 m apart at every stitch.
        assert start[obj.name].min() > 0.3
    # Each garment is checked when it stands sewn: the shirt while it still
    # floats under the sewing force (its gravity comes on at
    # SHIRT_GRAVITY_FRAME and its landing on the shoulders opens the seams'
    # ends by a few millimetres for a few frames), the skirt, pinned at the
    # waist and hanging all along, at the last standing frame.
    when = {shirt.name: demo.SHIRT_GRAVITY_FRAME - 1, skirt.name: frames}
    for f in range(1, frames + 1):
        scene.frame_set(f)
        for obj in (shirt, skirt):
            if when[obj.name] != f:
                continue
            assert not [t for icon, t in runtime.messages(obj) if icon == 'ERROR']
            x = _world(obj)
            assert np.all(np.isfinite(x))
            gap = demo.seam_gaps(obj, x)
            assert len(gap) == len(start[obj.name])
            assert gap.max() <= 1e-3, f"{obj.name}: a seam {gap.max() * 1000:.2f} mm open at frame {f}"
            dg = bpy.context.evaluated_depsgraph_get()
            surfaces = demo.collider_surfaces(scene, dg, capsules)
            assert len(surfaces) == len(capsules)
            assert sum(demo.penetrating(x, *s) for s in surfaces) == 0
