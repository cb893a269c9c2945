"""Every list of bake targets comes from the one registry (bake/targets).

A throwaway target (frames to a NumPy .npy file) is registered here and must
appear, with nothing else edited, in the bake setting's choices, the bake
operator's, the headless tool's ``--target`` and the Bake panel; a bake to it
must run through its record's functions and leave the file they write. Once
it is unregistered it must be gone from all of them again.
"""

import os
from types import SimpleNamespace

import bpy
import numpy as np
import pytest

from drape.bake import headless, install, job as bake_job, targets
from drape.panels import bake as bake_panel

TARGET_ID = 'TEST_NPY'
FRAMES = (1, 4)


def _stream_path(job, item):
    return f"{item.abs_path}.frames.pc2"


def _install(job, item):
    from drape.bake import pc2

    samples = np.array(pc2.samples(item.writer.tmp_path))
    item.writer.discard()

    def write():
        with open(item.abs_path, "wb") as fh:
            np.save(fh, samples)

    job.replace_cache_file(item, write)
    install.record(item.obj, TARGET_ID, job.frame_start, job.frame_end, item.vertices, item.filepath)


def _check(obj, frames):
    return None if obj.drape_bake.baked_target == TARGET_ID else "not baked"


@pytest.fixture
def throwaway(addon):
    target = targets.BakeTarget(
        id=TARGET_ID, label="NumPy test file", description="Frames as one .npy array (a test target)",
        number=900, extension=".npy", stream_path=_stream_path, install=_install, check=_check)
    targets.register(target)
    try:
        yield target
    finally:
        targets.unregister(TARGET_ID)


def _mesh(name="Sheet"):
    bpy.ops.wm.read_factory_settings(use_empty=True)
    mesh = bpy.data.meshes.new(name)
    mesh.from_pydata([(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0)], [], [(0, 1, 2, 3)])
    obj = bpy.data.objects.new(name, mesh)
    bpy.context.scene.collection.objects.link(obj)
    bpy.context.view_layer.objects.active = obj
    return obj


def _settable(obj, target_id):
    try:
        obj.drape_bake.target = target_id
    except TypeError:
        return False
    return obj.drape_bake.target == target_id


def _headless_choices():
    (action,) = [a for a in headless.parser()._actions if a.dest == "target"]
    return tuple(action.choices)


class _Layout:
    """Records what the panel draws: the properties and the label texts."""

    def __init__(self, log):
        self.log = log

    def _child(self, *_args, **_kw):
        return _Layout(self.log)

    column = row = box = _child

    def prop(self, data, name, **_kw):
        self.log.append(("prop", name))

    def label(self, text="", **_kw):
        self.log.append(("label", text))

    def operator(self, idname, **_kw):
        self.log.append(("operator", idname))
        return SimpleNamespace()


def _panel(obj):
    log = []
    bake_panel._draw(_Layout(log), SimpleNamespace(active_object=obj))
    return log


def test_a_registered_target_is_offered_everywhere_and_bakes(throwaway, tmp_path):
    obj = _mesh()
    assert _settable(obj, TARGET_ID), "the bake setting does not offer the registered target"
    assert TARGET_ID in _headless_choices()
    assert headless._parse(["--target", TARGET_ID.lower()]).target == TARGET_ID
    assert ("prop", "folder") in _panel(obj), "the panel asks no cache folder of a target that writes a file"

    # The bake operator offers it, and the job writes through the record's functions.
    blend = tmp_path / "shot.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    obj = bpy.data.objects["Sheet"]
    rest = np.array([v.co[:] for v in obj.data.vertices], np.float32)
    previous = bake_job.set_frame_source(lambda o: rest + np.float32(0.1) * bpy.context.scene.frame_current)
    try:
        assert bpy.ops.drape.bake(objects='ACTIVE', target=TARGET_ID, frame_range='CUSTOM',
                                  frame_start=FRAMES[0], frame_end=FRAMES[1]) == {'FINISHED'}
    finally:
        bake_job.set_frame_source(previous)
    st = obj.drape_bake
    assert (st.baked_target, st.baked_filepath) == (TARGET_ID, "//drape_cache/Sheet.npy")
    frames = np.load(os.path.join(tmp_path, "drape_cache", "Sheet.npy"))
    want = np.stack([rest + np.float32(0.1) * f for f in range(FRAMES[0], FRAMES[1] + 1)])
    np.testing.assert_allclose(frames, want, atol=1e-6, rtol=0)
    assert ("label", f"Baked to NumPy test file: frames {FRAMES[0]}-{FRAMES[1]}") in _panel(obj)


def test_an_unregistered_target_is_offered_nowhere(throwaway):
    obj = _mesh()
    targets.unregister(TARGET_ID)
    assert not _settable(obj, TARGET_ID)
    assert TARGET_ID not in _headless_choices()
    with pytest.raises(SystemExit):
        headless._parse(["--target", TARGET_ID])
    previous = bake_job.set_frame_source(lambda o: None)  # any mesh passes the operator's poll
    try:
        with pytest.raises(TypeError, match=TARGET_ID):
            bpy.ops.drape.bake(target=TARGET_ID)
    finally:
        bake_job.set_frame_source(previous)
    assert targets.ids() == ('SHAPE_KEYS', 'PC2', 'ALEMBIC')


def test_the_panel_asks_a_folder_only_of_targets_that_write_files(addon):
    obj = _mesh()
    for target in targets.registered():
        obj.drape_bake.target = target.id
        assert (("prop", "folder") in _panel(obj)) == bool(target.extension), target.id


def test_a_target_id_or_number_is_taken_once(throwaway):
    with pytest.raises(ValueError, match="registered already"):
        targets.register(throwaway)
    twin = targets.BakeTarget(**{**throwaway.__dict__, "id": "TEST_TWIN"})
    with pytest.raises(ValueError, match="number 900 is taken"):
        targets.register(twin)
