"""Headless bake: bake Drape cloth in a saved .blend without a UI, then save it.

This module ships inside the extension, so a render-farm node with Drape
installed needs nothing else::

    blender -b shot.blend --python-exit-code 1 --python-expr \
        "import sys, bl_ext.user_default.drape.bake.headless as h; sys.exit(h.main())" \
        -- --object Cape --target PC2 --start 1001 --end 1120

``tools/bake_headless.py`` in a checkout is the same command for the bpy
module or a Blender without the extension installed (it registers Drape from
the checkout first).

Options (after ``--`` with Blender):
  --object NAME      bake this object (repeat for several); default: every Drape cloth
  --target T         SHAPE_KEYS, PC2 or ALEMBIC; default: each object's own setting
  --start N --end N  frame range; default: the object's bake settings (scene range by default)
  --folder DIR       cache folder for PC2/Alembic ('//' = next to the .blend); default: object's
  --scene NAME       scene to bake (default: the file's active scene)
  --output PATH      save to PATH instead of over the input .blend
  --frame-source F.py:FUNC   advanced/testing: take positions from FUNC(obj) instead of the simulation

One line of progress every 10 frames on stdout. Exit status 0 when baked and
saved, 1 when the bake failed (the .blend is then not saved: nothing
changed), 2 for a usage error. One object (or shot) per farm job keeps jobs
independent; the cache file names come from the object names.
"""

import argparse
import importlib.util
import os
import sys


def _parse(argv):
    p = argparse.ArgumentParser(prog="bake_headless.py", description="Bake Drape cloth and save the .blend")
    p.add_argument("blend", nargs="?", help="the .blend (bpy module only; Blender takes it before --python)")
    p.add_argument("--object", action="append", default=[], help="object to bake (repeatable)")
    p.add_argument("--target", type=str.upper, choices=("SHAPE_KEYS", "PC2", "ALEMBIC"))
    p.add_argument("--start", type=int)
    p.add_argument("--end", type=int)
    p.add_argument("--folder")
    p.add_argument("--scene")
    p.add_argument("--output")
    p.add_argument("--frame-source")
    return p.parse_args(argv)


def _load_source(spec):
    path, _, func = spec.rpartition(":")
    module_spec = importlib.util.spec_from_file_location("drape_frame_source", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, func)


def main(argv=None):
    """Bake and save; returns the exit status (0 baked and saved, 1 bake failed, 2 usage)."""
    if argv is None:
        argv = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []
    import bpy

    args = _parse(argv)
    if args.blend is None and not bpy.data.filepath:
        print("bake_headless: give the .blend to bake", file=sys.stderr)
        return 2
    if not hasattr(bpy.types.Object, "drape_bake"):
        print("bake_headless: Drape is not enabled in this Blender (enable the extension, "
              "or run tools/bake_headless.py from a checkout)", file=sys.stderr)
        return 2
    from . import job as job_mod

    if args.blend is not None and os.path.abspath(args.blend) != bpy.data.filepath:
        if not os.path.isfile(args.blend):
            print(f"bake_headless: no such file: {args.blend}", file=sys.stderr)
            return 2
        bpy.ops.wm.open_mainfile(filepath=os.path.abspath(args.blend))
    scene = bpy.data.scenes.get(args.scene) if args.scene else bpy.context.scene
    if scene is None:
        print(f"bake_headless: no scene named '{args.scene}' in {bpy.data.filepath}", file=sys.stderr)
        return 2
    if args.frame_source:
        job_mod.set_frame_source(_load_source(args.frame_source))
    if args.object:
        missing = [n for n in args.object if bpy.data.objects.get(n) is None]
        if missing:
            print(f"bake_headless: no object named {', '.join(repr(n) for n in missing)} in "
                  f"{bpy.data.filepath}", file=sys.stderr)
            return 2
        objects = [bpy.data.objects[n] for n in args.object]
        not_cloth = [o.name for o in objects if not (job_mod.is_cloth(o) or args.frame_source)]
        if not_cloth:
            print(f"bake_headless: {', '.join(repr(n) for n in not_cloth)} is not a Drape cloth", file=sys.stderr)
            return 2
    else:
        objects = [o for o in scene.objects if job_mod.is_cloth(o)]
    default_start, default_end = job_mod.frame_range(scene, objects[0] if objects else None)
    start = args.start if args.start is not None else default_start
    end = args.end if args.end is not None else default_end
    print(f"bake_headless: {bpy.data.filepath}: baking {', '.join(o.name for o in objects) or 'nothing'} "
          f"frames {start}..{end}", flush=True)
    try:
        job_mod.run_blocking(scene, objects, start, end, target=args.target, folder=args.folder,
                             log=lambda line: print(line, flush=True))
    except job_mod.BakeError as exc:
        print(f"bake_headless: bake failed, nothing saved: {exc}", file=sys.stderr, flush=True)
        return 1
    if args.output:
        bpy.ops.wm.save_as_mainfile(filepath=os.path.abspath(args.output))
    else:
        bpy.ops.wm.save_mainfile()
    print(f"bake_headless: saved {bpy.data.filepath}", flush=True)
    return 0
