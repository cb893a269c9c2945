"""Point Cache (PC2): a PC2 file in the cache folder, played back by a Mesh
Cache modifier at Drape's place in the modifier stack."""

from ...scene import compat
from .. import install
from . import BakeTarget


def stream_path(job, item):
    """The final file's own name: the writer renames its temporary file over it at the swap."""
    return item.abs_path


def install_modifier(obj, filepath, start, end, vertices):
    """A Mesh Cache modifier that overwrites positions with the PC2 samples:
    sample 0 at ``start``, one sample per scene frame, linear in between."""
    mod = obj.modifiers.new(install.MODIFIER_NAME, 'MESH_CACHE')
    mod.cache_format = 'PC2'
    mod.filepath = filepath
    mod.deform_mode = 'OVERWRITE'
    mod.interpolation = 'LINEAR'
    mod.time_mode = 'FRAME'
    mod.play_mode = 'SCENE'
    mod.frame_start = float(start)
    mod.frame_scale = 1.0
    mod.forward_axis = 'POS_Y'
    mod.up_axis = 'POS_Z'
    compat.mesh_cache_flip_set(mod, (False, False, False))
    mod.factor = 1.0
    install.place(obj, mod, install.insertion_index(obj))
    install.record(obj, TARGET.id, start, end, vertices, filepath)


def _install(job, item):
    job.replace_cache_file(item, item.writer.commit)
    install_modifier(item.obj, item.filepath, job.frame_start, job.frame_end, item.vertices)


TARGET = BakeTarget(
    id='PC2', label="Point Cache (PC2)", number=1, extension=".pc2",
    description="A PC2 file next to the .blend, played back by a Mesh Cache modifier",
    stream_path=stream_path, install=_install, check=install.check_modifier)
