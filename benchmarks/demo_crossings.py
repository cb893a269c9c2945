"""Crossing triangle pairs of the demo's layered skirts, summed over every 6th
frame of a baked out/demo.blend made with `tools/demo.py --layered-skirts`:
between the skirt and the overskirt, within each. The frame-72 counts `make demo` prints are one sample of a chaotic
result (the pair is chaotic in rounding); the sums over
the walk, over a few `tools/demo.py --nudge-gravity` runs, are what to compare.

    .venv/bin/python benchmarks/demo_crossings.py [out/demo.blend]

Prints one line per checked frame and one JSON line with the sums.
"""

import json
import os
import sys

import bpy
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quality  # noqa: E402


def world_mesh(name):
    """(n, 3) world positions and (t, 3) triangles of the evaluated object,
    split as Blender splits the deformed faces (tools/demo.py's world_mesh
    returns polygons, which quality.triangulate fans: another split, other
    counts: compare sums taken with this one only)."""
    ob = bpy.data.objects[name]
    ev = ob.evaluated_get(bpy.context.evaluated_depsgraph_get())
    me = ev.to_mesh()
    try:
        co = np.empty(len(me.vertices) * 3, np.float32)
        me.vertices.foreach_get("co", co)
        m = np.array(ev.matrix_world, dtype=np.float64)
        co = co.reshape(-1, 3).astype(np.float64) @ m[:3, :3].T + m[:3, 3]
        me.calc_loop_triangles()
        tri = np.empty(len(me.loop_triangles) * 3, np.int64)
        me.loop_triangles.foreach_get("vertices", tri)
    finally:
        ev.to_mesh_clear()
    return co, tri.reshape(-1, 3)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "out", "demo.blend")
    bpy.ops.wm.open_mainfile(filepath=os.path.abspath(path))
    if "Overskirt" not in bpy.data.objects:
        sys.exit(f"drape: {path} has no layered skirts (no 'Overskirt'); make it with "
                 "'.venv/bin/python tools/demo.py --layered-skirts'.")
    scene = bpy.context.scene
    sums = dict(between=0, within_skirt=0, within_overskirt=0)
    for frame in range(6, 73, 6):
        scene.frame_set(frame)
        a, ta = world_mesh("Skirt")
        b, tb = world_mesh("Overskirt")
        between, sa, sb = quality.crossings_between(a, ta, b, tb)
        sums["between"] += between
        sums["within_skirt"] += sa
        sums["within_overskirt"] += sb
        print(f"frame {frame}: between {between}, within skirt {sa}, within overskirt {sb}", file=sys.stderr)
    print(json.dumps(dict(scene="demo_skirts_crossings_every_6th_frame", **sums)))


if __name__ == "__main__":
    main()
