"""Alembic: an .abc file written by Blender's own exporter, played back by a
Mesh Sequence Cache modifier at Drape's place in the stack (topology and UVs
stay the mesh's own; with modifiers above Drape that change the topology, the
file holds the mesh as it enters Drape, whose vertex count the modifier
meets there).

Blender's Alembic exporter can throw a C++ exception out of a full disk,
which aborts the process: it runs in a child Blender
(:func:`bake.job.run_child`), where an abort is only a failed bake."""

import json
import os
import tempfile

import bpy

from .. import install, job as bake_job
from . import BakeTarget


def stream_path(job, item):
    """Beside the final file; the export goes to ``item.tmp_file`` until the swap."""
    item.tmp_file = f"{item.abs_path}.tmp-{os.getpid()}.abc"
    return f"{item.abs_path}.frames.pc2"


# --- the export ------------------------------------------------------------

def export(obj, frames, positions, tmp_path):
    """Writes the captured frames to ``tmp_path`` with Blender's own Alembic
    exporter. A throwaway scene holds a copy of the mesh (local space,
    identity transform) animated by frame shape keys, so the exporter reads
    exactly the captured positions and steps no simulation."""
    scene = bpy.data.scenes.new("DrapeBake_alembic")
    mesh = obj.data.copy()
    mesh.name = f"{obj.name}Shape"
    # The file's node carries the object's own name: the original steps
    # aside for the few milliseconds of the export.
    real_name = obj.name
    tmp = None
    action = None
    try:
        obj.name = f"{real_name}.drape_bake_tmp"
        tmp = bpy.data.objects.new(real_name, mesh)
        object_path = f"/{_abc_name(tmp.name)}/{_abc_name(mesh.name)}"
        scene.collection.objects.link(tmp)
        if mesh.shape_keys is not None:
            tmp.shape_key_clear()
        action = install.add_frame_keys(tmp, frames, positions)
        scene.frame_start, scene.frame_end = frames[0], frames[-1]
        scene.render.fps = bpy.context.scene.render.fps
        scene.render.fps_base = bpy.context.scene.render.fps_base
        view_layer = scene.view_layers[0]
        tmp.select_set(True, view_layer=view_layer)
        with bpy.context.temp_override(scene=scene, view_layer=view_layer):
            result = bpy.ops.wm.alembic_export(
                filepath=tmp_path, start=frames[0], end=frames[-1], selected=True,
                uvs=True, normals=False, vcolors=False, face_sets=False, apply_subdiv=False,
                triangulate=False, export_custom_properties=False, as_background_job=False,
                evaluation_mode='VIEWPORT', init_scene_frame_range=False, global_scale=1.0,
                flatten=False, use_instancing=False, check_existing=False)
        if 'FINISHED' not in result or not os.path.isfile(tmp_path):
            raise OSError(f"Blender's Alembic exporter did not write {tmp_path}")
    finally:
        key = mesh.shape_keys
        if key is not None and key.animation_data is not None:
            key.animation_data.action = None
        if tmp is not None:
            bpy.data.objects.remove(tmp)
        obj.name = real_name
        bpy.data.scenes.remove(scene)
        bpy.data.meshes.remove(mesh)
        if action is not None and action.users == 0:
            bpy.data.actions.remove(action)
    return object_path


def _abc_name(name):
    # Blender's exporter makes names valid Alembic identifiers this way.
    return "".join("_" if c in " .:" else c for c in name)


# The child gets a saved copy of just the mesh, with the settings the
# shape-key helper writes to.
_CHILD_CODE = """
from drape_child.bake import pc2, settings
from drape_child.bake.targets import alembic
mesh_blend, mesh_name, obj_name, start, end, samples, out, fps, fps_base, answer = argv
bpy.ops.wm.read_factory_settings(use_empty=True)
settings.register()
with bpy.data.libraries.load(mesh_blend) as (src, dst):
    dst.meshes = [mesh_name]
mesh = dst.meshes[0]
obj = bpy.data.objects.new(obj_name, mesh)
bpy.context.scene.render.fps = int(fps)
bpy.context.scene.render.fps_base = float(fps_base)
path = alembic.export(obj, list(range(int(start), int(end) + 1)), pc2.samples(samples), out)
with open(answer, "w") as fh:
    json.dump({"object_path": path}, fh)
"""


def mesh_to_export(obj):
    """The mesh whose topology the file holds: the object's own, or, when a
    modifier above Drape changes the topology, a new mesh made from the
    evaluated mesh at Drape's place (the caller removes it)."""
    from ...scene import meshdata

    if not install.topology_above(obj):
        return obj.data, False
    depsgraph = bpy.context.evaluated_depsgraph_get()
    with meshdata.at_drape_point(obj, depsgraph):
        mesh = bpy.data.meshes.new_from_object(obj.evaluated_get(depsgraph), depsgraph=depsgraph)
    mesh.name = obj.data.name
    for name in [a.name for a in mesh.attributes if a.name.startswith("drape_")]:
        mesh.attributes.remove(mesh.attributes[name])
    return mesh, True


def export_isolated(item, frames):
    """Writes ``item``'s captured frames to ``item.tmp_file`` in a child
    Blender; returns the Alembic object path. Raises BakeError with the reason."""
    obj = item.obj
    tag = f"drape_abc_{os.getpid()}_{bake_job.safe_filename(item.name)}"
    tmp_dir = tempfile.mkdtemp(prefix=tag)
    mesh, made = None, False
    try:
        mesh_blend = os.path.join(tmp_dir, "mesh.blend")
        answer = os.path.join(tmp_dir, "answer.json")
        try:
            mesh, made = mesh_to_export(obj)
            bpy.data.libraries.write(mesh_blend, {mesh}, fake_user=True)
        except (OSError, RuntimeError) as exc:
            raise bake_job.BakeError(f"'{item.name}': could not save the mesh for the Alembic export "
                                     f"({tempfile.gettempdir()}): {exc}") from exc
        render = bpy.context.scene.render
        code, output = bake_job.run_child(bake_job.CHILD_PRELUDE + _CHILD_CODE, [
            bake_job.PACKAGE_ROOT, mesh_blend, mesh.name, obj.name, frames[0], frames[-1],
            item.writer.tmp_path, item.tmp_file, render.fps, render.fps_base, answer])
        if code == 0 and os.path.isfile(answer):
            with open(answer, encoding="utf-8") as fh:
                return json.load(fh)["object_path"]
        folder = os.path.dirname(item.tmp_file)
        why = f"Blender's Alembic exporter {bake_job.exit_reason(code)} writing {item.tmp_file}"
        free = bake_job.free_bytes(folder)
        if free is not None and free < max(1 << 20, 2 * os.path.getsize(item.writer.tmp_path)):
            why += f": the disk is full ({free / 1e6:.1f} MB free in {folder})"
        lines = [ln for ln in output.splitlines() if "EXCEPTION" in ln or "Error" in ln or "error" in ln]
        if lines:
            why += f" ({lines[-1].strip()})"
        raise bake_job.BakeError(f"'{item.name}': {why}; the earlier bake is unchanged")
    finally:
        if made and mesh is not None:
            bpy.data.meshes.remove(mesh)
        for name in os.listdir(tmp_dir):
            try:
                os.unlink(os.path.join(tmp_dir, name))
            except OSError:
                pass
        try:
            os.rmdir(tmp_dir)
        except OSError:
            pass


def _prepare(job, item):
    item.object_path = export_isolated(item, job.frames)


# --- playback ----------------------------------------------------------------

def _open_cache_file(filepath):
    before = set(bpy.data.cache_files)
    result = bpy.ops.cachefile.open(filepath=install.abspath(filepath), relative_path=filepath.startswith("//"))
    new = [c for c in bpy.data.cache_files if c not in before]
    if 'FINISHED' not in result or not new:
        raise OSError(f"Blender could not open the Alembic file {filepath}")
    cache = new[0]
    cache.filepath = filepath
    # The operator leaves one user of its own: only the modifier should
    # hold it, so freeing the bake leaves it unused and removable.
    cache.user_clear()
    return cache


def install_modifier(obj, filepath, object_path, start, end, vertices):
    """A Mesh Sequence Cache modifier reading the positions of the object's
    node in the Alembic file."""
    cache = _open_cache_file(filepath)
    mod = obj.modifiers.new(install.MODIFIER_NAME, 'MESH_SEQUENCE_CACHE')
    mod.cache_file = cache
    mod.object_path = object_path
    mod.read_data = {'VERT'}
    install.place(obj, mod, install.insertion_index(obj))
    obj.drape_bake.baked_cache_file = cache.name
    install.record(obj, TARGET.id, start, end, vertices, filepath)


def _install(job, item):
    item.writer.discard()
    job.replace_cache_file(item, lambda: os.replace(item.tmp_file, item.abs_path))
    install_modifier(item.obj, item.filepath, item.object_path, job.frame_start, job.frame_end, item.vertices)


TARGET = BakeTarget(
    id='ALEMBIC', label="Alembic", number=2, extension=".abc",
    description="An Alembic (.abc) file written by Blender's exporter, played back by a "
                "Mesh Sequence Cache modifier",
    stream_path=stream_path, install=_install, check=install.check_modifier, prepare=_prepare)
