"""Shape keys: one shape key per frame in the .blend, keyed so exactly one is
on at each frame (exports as glTF morph-target animation)."""

import os
import tempfile

from .. import install, job as bake_job, pc2
from . import BakeTarget


def validate(obj):
    import bpy

    problem = install.topology_problem(obj, "Shape keys")
    if problem:
        raise bake_job.BakeError(problem)
    sharing = [o.name for o in bpy.data.objects if o.data == obj.data and o != obj]
    if sharing:
        raise bake_job.BakeError(f"'{obj.name}': its mesh '{obj.data.name}' is shared with "
                                 f"{', '.join(repr(n) for n in sharing)}; shape keys would change them too: "
                                 "make it single-user or bake to PC2/Alembic")


def stream_path(job, item):
    """The system's temporary folder: the frames are read back once, at the swap."""
    index = job.items.index(item)
    return os.path.join(tempfile.gettempdir(),
                        f"drape_bake_{os.getpid()}_{index}_{bake_job.safe_filename(item.name)}.pc2")


def install_keys(obj, frames, positions):
    install.add_frame_keys(obj, frames, positions)
    # Shape keys play before every modifier: the rig deformers that drove
    # the pins would move the baked cloth a second time.
    drivers = [m.name for m in install.pin_driver_modifiers(obj) if m.show_viewport or m.show_render]
    install.set_disabled(obj, drivers, True)
    obj.drape_bake.disabled_modifiers = "\n".join(drivers)
    # The artist's own shape keys fed the simulation too (pin targets):
    # muted while the bake plays, back on when it is freed.
    blocks = obj.data.shape_keys.key_blocks
    own = [kb.name for kb in list(blocks)[1:] if not kb.name.startswith(install.KEY_PREFIX) and not kb.mute]
    install.set_muted(obj, own, True)
    obj.drape_bake.muted_keys = "\n".join(own)
    install.record(obj, TARGET.id, frames[0], frames[-1], positions.shape[1])


def _install(job, item):
    samples = pc2.samples(item.writer.tmp_path)  # (frames, n, 3) float32, memory-mapped
    install_keys(item.obj, job.frames, samples)
    del samples  # unmapped before the file goes (Windows refuses otherwise)
    item.writer.discard()


def check(obj, frames):
    keys = obj.data.shape_keys if obj.type == 'MESH' else None
    found = len([k for k in keys.key_blocks if k.name.startswith(install.KEY_PREFIX)]) if keys else 0
    if found != frames:
        return f"{found} baked shape keys, expected {frames}"
    return None


TARGET = BakeTarget(
    id='SHAPE_KEYS', label="Shape Keys", number=0, extension="",
    description="One shape key per frame, keyed so exactly one is on at each frame "
                "(exports as glTF morph-target animation)",
    stream_path=stream_path, install=_install, check=check, validate=validate)
