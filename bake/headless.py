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
  --object NAME      bake this object (repeat for several); default: every Drape cloth of the scene
  --target T         a bake target (SHAPE_KEYS, PC2, ALEMBIC); default: each object's own setting
  --start N --end N  frame range; default: the object's bake settings (the baked scene's range by default)
  --folder DIR       cache folder for PC2/Alembic ('//' = next to the saved .blend: the
                     output's with --output); default: each object's own (next to the output)
  --scene NAME       scene to bake, at its own frames (default: the file's active scene)
  --output PATH      save to PATH instead of over the input .blend; the input and the
                     caches it plays are not touched
  --threads N        CPU threads for the cloths' steps (0 = every core); default: each
                     cloth's Threads setting (0 there = Blender's, which ``blender -t N`` sets)
  --frame-source F.py:FUNC   advanced/testing: take positions from FUNC(obj) instead of the simulation

One line of progress every 10 frames on stdout. Exit status 0 when baked and
saved, 1 when the bake or the save failed (with the reason on stderr; the
input, its caches and any earlier output are then as they were), 2 for a
usage error. One object (or shot) per farm job keeps jobs independent; the
cache file names come from the object names (with ``_2``... when another
.blend plays that name already).

Every save is verified: written to a temporary name in the destination
folder, opened in a child Blender that checks the baked objects are in it,
then renamed over the destination.
"""

import argparse
import importlib.util
import json
import os
import sys


def parser():
    """The command line; ``--target`` offers every registered bake target."""
    from . import targets

    p = argparse.ArgumentParser(prog="bake_headless.py", description="Bake Drape cloth and save the .blend")
    p.add_argument("blend", nargs="?", help="the .blend (bpy module only; Blender takes it before --python)")
    p.add_argument("--object", action="append", default=[], help="object to bake (repeatable)")
    p.add_argument("--target", type=str.upper, choices=targets.ids(),
                   help="; ".join(f"{t.id}: {t.label}" for t in targets.registered())
                   + "; default: each object's own setting")
    p.add_argument("--start", type=int)
    p.add_argument("--end", type=int)
    p.add_argument("--folder")
    p.add_argument("--scene")
    p.add_argument("--output")
    p.add_argument("--frame-source")
    p.add_argument("--threads", type=_thread_count, metavar="N",
                   help="CPU threads for the steps (0 = every core); default: each cloth's Threads setting")
    return p


def _thread_count(text):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"--threads must be a whole number >= 0, got {text!r}")
    return value


def _parse(argv):
    return parser().parse_args(argv)


def _load_source(spec):
    path, _, func = spec.rpartition(":")
    module_spec = importlib.util.spec_from_file_location("drape_frame_source", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, func)


def _verify_code():
    from . import job as job_mod

    return job_mod.CHILD_PRELUDE + """
from drape_child.bake import targets
blend, expected = argv[0], json.loads(argv[1])
bpy.ops.wm.open_mainfile(filepath=blend)
found = {}
for name, want in expected.items():
    obj = bpy.data.objects.get(name)
    if obj is None:
        found[name] = "missing"
        continue
    target = targets.get(want["target"])
    problem = target.check(obj, want["frames"]) if target is not None else f"unknown target {want['target']}"
    if problem:
        found[name] = problem
print("DRAPE_VERIFY " + json.dumps(found))
sys.exit(1 if found else 0)
"""


def _staging_name(path, what):
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.drape-{what}-{os.getpid()}.blend")


def _remove(path):
    for p in (path, path + "@"):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
        except OSError as exc:
            print(f"bake_headless: could not remove {p}: {exc.strerror or exc}", file=sys.stderr)


def _save_verified(bpy, job, destination):
    """Saves the open file to ``destination``: a copy at a temporary name in
    the same folder, opened by a child Blender that checks the baked objects,
    then renamed over it. Returns None, or the reason it failed (the
    destination is then as it was)."""
    from . import job as job_mod

    tmp = _staging_name(destination, "save")
    expected = {i.name: {"target": i.target, "frames": len(job.frames)} for i in job.items}
    try:
        try:
            bpy.ops.wm.save_as_mainfile(filepath=tmp, copy=True, relative_remap=True)
        except RuntimeError as exc:
            return f"saving {tmp} failed: {exc}"
        if not os.path.isfile(tmp):
            return f"saving {tmp} failed: Blender wrote no file"
        with open(tmp, "rb") as fh:
            magic = fh.read(7)
        # A .blend starts with "BLENDER", or zstd's magic when compressed.
        if magic != b"BLENDER" and magic[:4] != b"\x28\xb5\x2f\xfd":
            return f"{tmp} is not a .blend (it starts with {magic!r})"
        code, output = job_mod.run_child(_verify_code(), [job_mod.PACKAGE_ROOT, tmp, json.dumps(expected)],
                                         timeout=1800)
        if code != 0:
            detail = [ln for ln in output.splitlines() if ln.startswith("DRAPE_VERIFY ") or "rror" in ln]
            return (f"the saved file {tmp} does not open as a complete bake: the check "
                    f"{job_mod.exit_reason(code)}" + (f" ({detail[-1]})" if detail else ""))
        try:
            os.replace(tmp, destination)
        except OSError as exc:
            return f"renaming {tmp} to {destination} failed: {exc.strerror or exc}"
        return None
    finally:
        _remove(tmp)


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
    source_blend = bpy.data.filepath
    scene = bpy.data.scenes.get(args.scene) if args.scene else bpy.context.scene
    if scene is None:
        print(f"bake_headless: no scene named '{args.scene}' in {source_blend}", file=sys.stderr)
        return 2
    if args.threads is not None:
        from ..solver import threads

        threads.set_override(args.threads)
    if args.frame_source:
        job_mod.set_frame_source(_load_source(args.frame_source))
    if args.object:
        missing = [n for n in args.object if bpy.data.objects.get(n) is None]
        if missing:
            print(f"bake_headless: no object named {', '.join(repr(n) for n in missing)} in "
                  f"{source_blend}", file=sys.stderr)
            return 2
        objects = [bpy.data.objects[n] for n in args.object]
        outside = [o.name for o in objects if scene.objects.get(o.name) is None]
        if outside:
            print(f"bake_headless: {', '.join(repr(n) for n in outside)} not in scene '{scene.name}' "
                  f"(give --scene)", file=sys.stderr)
            return 2
        not_cloth = [o.name for o in objects if not (job_mod.is_cloth(o) or args.frame_source)]
        if not_cloth:
            print(f"bake_headless: {', '.join(repr(n) for n in not_cloth)} is not a Drape cloth", file=sys.stderr)
            return 2
    else:
        objects = [o for o in scene.objects if job_mod.is_cloth(o)]
    destination = os.path.abspath(args.output) if args.output else source_blend
    if not os.path.isdir(os.path.dirname(destination)):
        print(f"bake_headless: no folder {os.path.dirname(destination)} for {destination}", file=sys.stderr)
        return 2
    default_start, default_end = job_mod.frame_range(scene, objects[0] if objects else None)
    start = args.start if args.start is not None else default_start
    end = args.end if args.end is not None else default_end
    print(f"bake_headless: {source_blend}: baking {', '.join(o.name for o in objects) or 'nothing'} "
          f"in scene '{scene.name}' frames {start}..{end}", flush=True)

    # The input on disk plays the caches it plays now: a bake must not write over them.
    job_mod.record_references(source_blend)
    stage = ""
    if destination != source_blend:
        # Re-based on the output's folder first, so '//' (the folder
        # setting, --folder, the file's other relative paths) means next to the output.
        stage = _staging_name(destination, "stage")
        try:
            bpy.ops.wm.save_as_mainfile(filepath=stage, relative_remap=True)
        except RuntimeError as exc:
            _remove(stage)
            print(f"bake_headless: cannot write next to {destination}: {exc}; nothing saved, "
                  f"{destination} and the caches are as they were", file=sys.stderr, flush=True)
            return 1
    try:
        try:
            job = job_mod.run_blocking(scene, objects, start, end, target=args.target, folder=args.folder,
                                       log=lambda line: print(line, flush=True), keep_replaced=True)
        except Exception as exc:  # noqa: BLE001 - any failure: exit 1 with the reason
            if not isinstance(exc, job_mod.BakeError):
                import traceback

                traceback.print_exc()
            print(f"bake_headless: bake failed, nothing saved: {job_mod.describe(exc)}",
                  file=sys.stderr, flush=True)
            return 1
        failure = _save_verified(bpy, job, destination)
        if failure is not None:
            job.put_back_files()
            print(f"bake_headless: {failure}; nothing saved, {destination} and the caches are as they were",
                  file=sys.stderr, flush=True)
            return 1
        job.release_files()
    finally:
        if stage:
            _remove(stage)
    # The destination plays the new caches (this also forgets the claims the
    # temporary names made when they were saved).
    job_mod.record_references(destination)
    print(f"bake_headless: saved {destination}", flush=True)
    return 0
