"""A bake as a small state machine: ``validate`` → ``begin`` → ``step`` per
frame → ``finish`` (or ``abort``). The modal operator calls ``step`` from a
timer, the background bake and the headless tool call :func:`run_blocking`.

Nothing the user owns changes until ``finish``: frames go to temporary PC2
files or to memory, an earlier bake is only hidden (and put back on abort),
and the final swap happens once every object's data is complete.
"""

import errno
import os
import tempfile
import time
from dataclasses import dataclass, field

import bpy
import numpy as np

from . import install, pc2

TARGET_IDS = ('SHAPE_KEYS', 'PC2', 'ALEMBIC')
_EXTENSIONS = {'PC2': ".pc2", 'ALEMBIC': ".abc"}

# Where the per-frame dense positions come from. ``None``: scene.runtime.
# Tests (and tools) may install any callable ``source(obj) -> (m, 3)`` in
# the object's local space for the scene's current frame.
_frame_source = None


def set_frame_source(source):
    """Installs ``source(obj) -> (m, 3)`` (or ``None`` for scene.runtime);
    returns the previous one."""
    global _frame_source
    previous, _frame_source = _frame_source, source
    return previous


def _runtime_source():
    try:
        from ..scene import runtime
    except ImportError as exc:
        raise BakeError(f"Drape's simulation runtime is not available ({exc})") from exc
    return runtime.dense_positions_local


def frame_source():
    return _frame_source if _frame_source is not None else _runtime_source()


class BakeError(Exception):
    """A problem the user can fix; the message names the object."""


def is_cloth(obj):
    settings = getattr(obj, "drape", None)
    return obj.type == 'MESH' and bool(getattr(settings, "enabled", False))


def safe_filename(name):
    keep = "".join(c if (c.isalnum() or c in "-_.") else "_" for c in name)
    return keep.strip(".") or "object"


@dataclass
class _Item:
    obj: object
    name: str
    target: str
    vertices: int
    filepath: str = ""        # as stored in Blender ('//' relative when asked)
    abs_path: str = ""
    writer: object = None     # PC2Writer: every target streams its frames to a temporary PC2
    memo: dict = field(default_factory=dict)
    alembic_tmp: str = ""
    object_path: str = ""


class BakeJob:
    """Bakes ``objects`` over ``frame_start..frame_end`` (inclusive).

    ``target`` / ``folder``: ``None`` takes each object's own
    ``drape_bake`` settings. Frames from the scene's start up to
    ``frame_start`` are simulated but not recorded (the simulation starts at
    the scene's first frame).
    """

    def __init__(self, scene, objects, frame_start, frame_end, target=None, folder=None, log=None):
        self.scene = scene
        self.objects = list(objects)
        self.frame_start = int(frame_start)
        self.frame_end = int(frame_end)
        self.target = target
        self.folder = folder
        self.log = log
        self.items = []
        self.frames = list(range(self.frame_start, self.frame_end + 1))
        first = min(scene.frame_start, self.frame_start)
        self.schedule = list(range(first, self.frame_end + 1))
        self.index = 0
        self.started = False
        self.done = False
        self.frame_times = []
        self._saved_frame = (scene.frame_current, scene.frame_subframe)
        self._source = None

    # -- checks that change nothing ---------------------------------------
    def validate(self):
        self.items = []
        if not self.objects:
            raise BakeError("Nothing to bake: no Drape cloth among the chosen objects")
        if self.frame_end < self.frame_start:
            raise BakeError(f"Empty frame range {self.frame_start}..{self.frame_end}: "
                            "the end frame is before the start frame")
        for obj in self.objects:
            if obj.type != 'MESH':
                raise BakeError(f"'{obj.name}' is not a mesh")
            target = self.target or obj.drape_bake.target
            if target not in TARGETS_SET:
                raise BakeError(f"'{obj.name}': unknown bake target {target!r}")
            item = _Item(obj=obj, name=obj.name, target=target, vertices=len(obj.data.vertices))
            if target == 'SHAPE_KEYS':
                sharing = [o.name for o in bpy.data.objects if o.data == obj.data and o != obj]
                if sharing:
                    raise BakeError(f"'{obj.name}': its mesh '{obj.data.name}' is shared with "
                                    f"{', '.join(repr(n) for n in sharing)}; shape keys would change them too: "
                                    "make it single-user or bake to PC2/Alembic")
            if target in _EXTENSIONS:
                folder = self.folder if self.folder is not None else obj.drape_bake.folder
                folder = folder or "//drape_cache/"
                if folder.startswith("//") and not bpy.data.filepath:
                    raise BakeError(f"'{obj.name}': the cache folder '{folder}' is relative to the .blend, "
                                    "which is not saved yet: save the file or choose an absolute folder")
                name = safe_filename(obj.name) + _EXTENSIONS[target]
                item.filepath = folder.rstrip("/\\") + "/" + name if folder.startswith("//") \
                    else os.path.join(folder, name)
                item.abs_path = install.abspath(item.filepath)
            self.items.append(item)
        paths = [i.abs_path for i in self.items if i.abs_path]
        if len(paths) != len(set(paths)):
            raise BakeError("Two objects would write the same cache file: give them distinct names")
        self._source = frame_source()
        return self

    # -- opening temporary storage ------------------------------------------
    def begin(self):
        if not self.items:
            self.validate()
        try:
            for item in self.items:
                item.writer = self._open_writer(item)
                if item.target == 'ALEMBIC':
                    item.alembic_tmp = f"{item.abs_path}.tmp-{os.getpid()}.abc"
            for item in self.items:
                st = item.obj.drape_bake
                if st.baked or st.baked_target or item.obj.modifiers.get(install.MODIFIER_NAME):
                    item.memo = install.suspend(item.obj)
        except BaseException:
            self._drop()
            raise
        self.started = True
        self.t0 = time.perf_counter()
        return self

    def _check_folder(self, item):
        folder = os.path.dirname(item.abs_path)
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise BakeError(f"'{item.name}': cannot create the cache folder {folder}: {exc.strerror}") from exc
        if not os.access(folder, os.W_OK):
            raise BakeError(f"'{item.name}': the cache folder {folder} is not writable")

    def _open_writer(self, item):
        """Frames stream to disk, not memory (a long bake of a dense mesh is
        gigabytes): next to the final file for PC2/Alembic, in the system's
        temporary folder for shape keys (read back once, at the swap)."""
        if item.target == 'SHAPE_KEYS':
            index = self.items.index(item)
            path = os.path.join(tempfile.gettempdir(),
                                f"drape_bake_{os.getpid()}_{index}_{safe_filename(item.name)}.pc2")
        else:
            self._check_folder(item)
            path = item.abs_path if item.target == 'PC2' else f"{item.abs_path}.frames.pc2"
        try:
            return pc2.PC2Writer(path, item.vertices, self.frame_start, 1.0)
        except OSError as exc:
            raise BakeError(f"'{item.name}': cannot write {path}: {exc.strerror or exc}") from exc

    # -- one frame ------------------------------------------------------------
    @property
    def total(self):
        return len(self.schedule)

    def step(self):
        """Advances one frame and records it. Returns True when all frames are in."""
        frame = self.schedule[self.index]
        t = time.perf_counter()
        self.scene.frame_set(frame)
        if frame >= self.frame_start:
            for item in self.items:
                self._capture(item)
        self.frame_times.append(time.perf_counter() - t)
        self.index += 1
        if self.log is not None and (self.index == self.total or self.index % 10 == 0 or self.index == 1):
            self.log(self.progress_text())
        return self.index >= self.total

    def _capture(self, item):
        try:
            obj_name = item.obj.name
        except ReferenceError:
            raise BakeError(f"'{item.name}' was deleted during the bake") from None
        if obj_name != item.name:
            item.name = obj_name
        if len(item.obj.data.vertices) != item.vertices:
            raise BakeError(f"'{item.name}': its mesh changed from {item.vertices} to "
                            f"{len(item.obj.data.vertices)} vertices during the bake")
        try:
            positions = self._source(item.obj)
        except RuntimeError as exc:  # scene.runtime: no result for this frame, with the reason
            raise BakeError(f"'{item.name}': no simulated result at frame "
                            f"{self.scene.frame_current}: {exc}") from exc
        if positions is None or np.shape(positions) != (item.vertices, 3):
            raise BakeError(f"'{item.name}': the simulation gave positions of shape "
                            f"{np.shape(positions)}, the mesh has {item.vertices} vertices")
        try:
            item.writer.add(positions)
        except OSError as exc:
            why = "the disk is full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
            raise BakeError(f"'{item.name}': writing {item.writer.tmp_path} failed: {why}") from exc

    def ms_per_frame(self):
        times = self.frame_times[-20:]
        return 1e3 * float(np.median(times)) if times else 0.0

    def progress_text(self):
        frame = self.schedule[min(self.index, self.total) - 1] if self.index else self.schedule[0]
        ms = self.ms_per_frame()
        left = (self.total - self.index) * ms / 1e3
        names = ", ".join(i.name for i in self.items)
        return (f"Drape bake {names}: frame {frame} ({self.index}/{self.total}), "
                f"{ms:.1f} ms/frame, {left:.1f} s left")

    # -- the end ------------------------------------------------------------
    def finish(self):
        """Completes the temporary data, then swaps it in for every object."""
        try:
            for item in self.items:
                try:
                    item.writer.finish()
                except OSError as exc:
                    raise BakeError(f"'{item.name}': finishing {item.writer.tmp_path} failed: "
                                    f"{exc.strerror or exc}") from exc
                if item.target == 'ALEMBIC':
                    try:
                        item.object_path = install.export_alembic(
                            item.obj, self.frames, self._samples(item), item.alembic_tmp)
                    except (OSError, RuntimeError, ValueError) as exc:
                        raise BakeError(f"'{item.name}': Alembic export failed: {exc}") from exc
        except BaseException:
            self.abort()
            raise
        for item in self.items:
            self._swap(item)
        self.done = True
        self._restore_frame()
        if self.log is not None:
            self.log(f"Drape bake done: {len(self.items)} object(s), frames "
                     f"{self.frame_start}..{self.frame_end}, {self.ms_per_frame():.1f} ms/frame")

    def _swap(self, item):
        obj = item.obj
        if item.memo:
            install.resume(obj, item.memo)
        old_file = obj.drape_bake.baked_filepath
        old_abs = install.abspath(old_file) if old_file else ""
        install.free(obj)
        if old_abs and old_abs != item.abs_path and os.path.isfile(old_abs):
            os.unlink(old_abs)
        if item.target == 'SHAPE_KEYS':
            samples = self._samples(item)
            install.install_shape_keys(obj, self.frames, samples)
            del samples  # unmapped before the file goes (Windows refuses otherwise)
            item.writer.discard()
        elif item.target == 'PC2':
            item.writer.commit()
            install.install_pc2(obj, item.filepath, self.frame_start, self.frame_end, item.vertices)
        else:
            item.writer.discard()
            os.replace(item.alembic_tmp, item.abs_path)
            install.install_alembic(obj, item.filepath, item.object_path, self.frame_start,
                                    self.frame_end, item.vertices)

    @staticmethod
    def _samples(item):
        """The finished temporary frames, (frames, n, 3) float32, memory-mapped."""
        return pc2.samples(item.writer.tmp_path)

    def _drop(self):
        for item in self.items:
            if item.writer is not None:
                item.writer.discard()
            if item.alembic_tmp and os.path.exists(item.alembic_tmp):
                os.unlink(item.alembic_tmp)

    def abort(self):
        """Drops everything captured and puts the old bakes and the frame back."""
        self._drop()
        for item in self.items:
            if item.memo:
                try:
                    install.resume(item.obj, item.memo)
                except ReferenceError:
                    pass
                item.memo = {}
        self._restore_frame()

    def _restore_frame(self):
        frame, sub = self._saved_frame
        try:
            self.scene.name
        except ReferenceError:  # the scene itself went away (another file was loaded)
            return
        if (self.scene.frame_current, self.scene.frame_subframe) != (frame, sub):
            self.scene.frame_set(frame, subframe=sub)


TARGETS_SET = frozenset(TARGET_IDS)


def frame_range(scene, obj=None, use_scene_range=None, frame_start=None, frame_end=None):
    """The range asked for: explicit numbers win, then the object's settings."""
    st = obj.drape_bake if obj is not None else None
    if use_scene_range is None:
        use_scene_range = st.use_scene_range if st is not None else True
    if use_scene_range and frame_start is None and frame_end is None:
        return scene.frame_start, scene.frame_end
    start = frame_start if frame_start is not None else (st.frame_start if st else scene.frame_start)
    end = frame_end if frame_end is not None else (st.frame_end if st else scene.frame_end)
    return start, end


def run_blocking(scene, objects, frame_start, frame_end, target=None, folder=None, log=print):
    """Bakes in one go (background mode, headless tool). Raises BakeError;
    on any failure everything is as before."""
    job = BakeJob(scene, objects, frame_start, frame_end, target=target, folder=folder, log=log)
    job.validate()
    job.begin()
    try:
        while not job.step():
            pass
    except BaseException:
        job.abort()
        raise
    job.finish()
    return job
