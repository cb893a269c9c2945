"""A bake as a small state machine: ``validate`` → ``begin`` → ``step`` per
frame → ``finish`` (or ``abort``). The modal operator calls ``step`` from a
timer, the background bake and the headless tool call :meth:`BakeJob.run`.
What differs between shape keys, PC2 and Alembic is in each target's record
(:mod:`.targets`); the job calls it and has no branch per target.

Nothing the user owns changes until ``finish``: frames go to temporary PC2
files, an earlier bake is only hidden (and put back on abort), and the final
swap happens once every object's data is complete. The swap itself is a
transaction: everything it edits is kept aside first (:class:`_Stash`) and
put back if any step of it fails, whatever the exception.

Cache files are never deleted by a bake: the saved .blend (or another one)
may still play the old file. Which .blend files play which cache files is
kept in a small registry in each cache folder (:data:`REGISTRY_NAME`), updated
when a file is saved or opened and when a bake completes; a bake never writes
over a file another known .blend plays, and :func:`unused_caches` lists what
no known .blend plays any more, for the clean-up operator.

A child Blender (:func:`run_child`) runs what could take the process down
with it (Blender's Alembic exporter on a full disk) and the check of a saved
.blend.
"""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import bpy
import numpy as np

from . import install, pc2, targets

# The package root (this file is <root>/bake/job.py): a child Blender loads
# the bake modules from here by path, whatever the package is called.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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


def describe(exc):
    """One line for any exception: a BakeError is already a sentence, anything
    else (a changed API, a bug) keeps its type so it can be reported."""
    if isinstance(exc, BakeError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def is_cloth(obj):
    settings = getattr(obj, "drape", None)
    return obj.type == 'MESH' and bool(getattr(settings, "enabled", False))


def safe_filename(name):
    keep = "".join(c if (c.isalnum() or c in "-_.") else "_" for c in name)
    return keep.strip(".") or "object"


# --- which .blend files play which cache files ----------------------------------

REGISTRY_NAME = ".drape_cache_users.json"
# Folders whose registry the open file may have claims in: the ones its bakes
# were in when it was opened, saved or baked in this session.
_known_folders = set()


def _blend_path(path=None):
    path = bpy.data.filepath if path is None else path
    return os.path.abspath(path) if path else ""


def read_users(folder):
    """{cache file name: [absolute .blend paths that play it]} for ``folder``;
    a name is in it once a Drape bake wrote that file. An unreadable registry
    reads as empty: nothing in the folder is then known to be unused."""
    path = os.path.join(folder, REGISTRY_NAME)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        print(f"Drape: ignoring the unreadable cache registry {path}: {exc}")
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        return {}
    return {str(name): [str(b) for b in users] for name, users in files.items() if isinstance(users, list)}


def _write_users(folder, files):
    path = os.path.join(folder, REGISTRY_NAME)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"version": 1, "files": files}, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        print(f"Drape: could not update the cache registry {path}: {exc.strerror or exc}")


def referenced_caches():
    """The absolute paths of the cache files the open file's bakes play."""
    out = set()
    for obj in bpy.data.objects:
        st = getattr(obj, "drape_bake", None)
        if st is not None and st.baked_filepath and obj.library is None:
            out.add(install.abspath(st.baked_filepath))
    return out


def record_references(blend=None):
    """The .blend at ``blend`` (default: the open file), just saved or opened,
    plays exactly the caches the open file plays: its claims in every folder
    it may have claims in are set to that."""
    blend = _blend_path(blend)
    if not blend:
        return
    by_folder = {}
    for path in referenced_caches():
        by_folder.setdefault(os.path.dirname(path), set()).add(os.path.basename(path))
    _known_folders.update(by_folder)
    for folder in sorted(_known_folders):
        if not os.path.isdir(folder):
            continue
        files = read_users(folder)
        wanted = by_folder.get(folder, set())
        changed = _forget_missing(files)
        for name in wanted:
            users = files.setdefault(name, [])
            if blend not in users:
                users.append(blend)
                changed = True
        for name, users in files.items():
            if name not in wanted and blend in users:
                users.remove(blend)
                changed = True
        if changed:
            _write_users(folder, files)


def _forget_missing(files):
    """Drops the users that no longer exist (a .blend deleted, or a
    temporary name saved and renamed); True if any was dropped."""
    changed = False
    for users in files.values():
        alive = [b for b in users if os.path.isfile(b)]
        if len(alive) != len(users):
            users[:] = alive
            changed = True
    return changed


def _claim(paths, blend):
    """Registers freshly baked files as Drape's, played by ``blend`` (if saved)."""
    by_folder = {}
    for path in paths:
        by_folder.setdefault(os.path.dirname(path), []).append(os.path.basename(path))
    for folder, names in by_folder.items():
        _known_folders.add(folder)
        files = read_users(folder)
        changed = _forget_missing(files)
        for name in names:
            users = files.get(name)
            if users is None:
                users = files[name] = []
                changed = True
            if blend and blend not in users:
                users.append(blend)
                changed = True
        if changed:
            _write_users(folder, files)


def other_users(path, blend=None):
    """The existing .blend files other than ``blend`` (default: the open
    file) that Drape knows play the cache file ``path``."""
    blend = _blend_path(blend)
    users = read_users(os.path.dirname(path)).get(os.path.basename(path), [])
    return [b for b in users if b != blend and os.path.isfile(b)]


def unused_caches(folder):
    """Cache files in ``folder`` that a Drape bake wrote and that neither the
    open file nor any existing .blend Drape knows of plays; sorted paths.
    Files Drape has no record of are never listed (a .blend saved elsewhere
    may play them)."""
    folder = os.path.abspath(folder)
    playing = referenced_caches()
    out = []
    for name, users in read_users(folder).items():
        path = os.path.join(folder, name)
        if not os.path.isfile(path) or path in playing:
            continue
        if any(os.path.isfile(b) for b in users):
            continue
        out.append(path)
    return sorted(out)


def delete_unused_caches(folder):
    """Deletes :func:`unused_caches` and their registry entries; returns the paths."""
    gone = []
    for path in unused_caches(folder):
        try:
            os.unlink(path)
        except OSError as exc:
            print(f"Drape: could not delete {path}: {exc.strerror or exc}")
            continue
        gone.append(path)
    if gone:
        files = read_users(folder)
        for path in gone:
            files.pop(os.path.basename(path), None)
        _write_users(os.path.abspath(folder), files)
    return gone


# --- a child Blender ---------------------------------------------------------------

def child_command(code, args):
    """The command that runs ``code`` in a fresh, background Blender: this
    Blender's own binary, or for the bpy module this Python (which imports
    bpy). ``code`` reads its arguments after ``--`` in ``sys.argv``."""
    args = [str(a) for a in args]
    if bpy.app.binary_path:
        return [bpy.app.binary_path, "--background", "--factory-startup", "--python-exit-code", "1",
                "--python-expr", code, "--", *args]
    return [sys.executable, "-c", code, "--", *args]


def run_child(code, args, timeout=3600):
    """Runs ``code`` in a child Blender; returns (returncode, output tail).
    A negative returncode is the signal that ended it (SIGABRT: -6)."""
    try:
        proc = subprocess.run(child_command(code, args), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        return None, f"no answer after {exc.timeout:.0f} s"
    except OSError as exc:
        return None, f"could not start a child Blender: {exc.strerror or exc}"
    return proc.returncode, (proc.stdout[-2000:] + proc.stderr[-2000:]).strip()


def exit_reason(code):
    if code is None:
        return "did not finish"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    if code == 134:  # an abort, seen through a shell
        return "was killed by SIGABRT"
    return f"exited with status {code}"


# Loads the bake modules from the package root by path (the package name
# differs between a checkout and an installed extension).
CHILD_PRELUDE = """
import importlib.util, json, sys
argv = sys.argv[sys.argv.index("--") + 1:]
root = argv.pop(0)
spec = importlib.util.spec_from_file_location("drape_child", root + "/__init__.py",
                                              submodule_search_locations=[root])
pkg = importlib.util.module_from_spec(spec)
sys.modules["drape_child"] = pkg
spec.loader.exec_module(pkg)
import bpy
"""

def free_bytes(folder):
    try:
        st = os.statvfs(folder)
    except (OSError, AttributeError):
        return None
    return st.f_bavail * st.f_frsize


# --- progress ------------------------------------------------------------------------

# A frame this much slower than the others (and over a second) is taken to
# have compiled the solver (numba, first run after installing) rather than
# simulated: it is left out of the rate the time left is estimated from.
_SLOW_FACTOR = 10.0
_SLOW_SECONDS = 1.0


def slow_frames(frame_times):
    """Indices of frames that took much longer than the others (compilation).
    The reference is the lower median, so one fast and one slow frame
    already tell the slow one apart."""
    times = np.asarray(frame_times, dtype=np.float64)
    if times.size < 2:
        return []
    mid = (times.size - 1) // 2
    reference = float(np.partition(times, mid)[mid])
    return [int(i) for i in np.flatnonzero((times > _SLOW_SECONDS) & (times > _SLOW_FACTOR * reference))]


def eta_seconds(frame_times, done, total, elapsed):
    """Seconds left for ``total - done`` frames, or None while unknown.

    The rate is wall time since the bake started (so the time between frames,
    UI redraws and writes, counts) less the frames that compiled the solver,
    over the frames that remain."""
    if done <= 0:
        return None
    slow = slow_frames(frame_times[:done])
    steady = done - len(slow)
    if steady <= 0:
        return None
    spent = max(float(elapsed) - sum(frame_times[i] for i in slow), 0.0)
    return spent / steady * (total - done)


def format_duration(seconds):
    if seconds is None:
        return "?"
    if seconds < 10:
        return f"{seconds:.1f} s"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


# --- the bake ------------------------------------------------------------------------

@dataclass
class _Item:
    obj: object
    name: str
    target: str
    vertices: int             # per frame: the mesh's at Drape's place in the stack
    mesh_vertices: int = 0    # the mesh's own (a change mid-bake stops it)
    filepath: str = ""        # as stored in Blender ('//' relative when asked)
    abs_path: str = ""
    writer: object = None     # PC2Writer: every target streams its frames to a temporary PC2
    tmp_file: str = ""        # a target's own temporary file (the Alembic export), removed on abort
    object_path: str = ""     # the Alembic node the modifier reads
    note: str = ""            # why the file has another name than the object's
    stash: object = None
    keep: str = ""            # a hard link to the cache file this bake writes over
    committed: bool = False   # the new cache file is at abs_path


class _Stash:
    """What a bake may change on one object, kept from ``begin`` until every
    object's swap succeeded: the mesh with its shape keys and attributes (a
    copy), the action of its shape keys (a copy), every modifier's
    visibility and the bake settings; at the swap, the old bake's modifier
    (renamed aside, so its cache file datablock keeps its user). Restoring
    uses only plain bpy calls, none of the bake's own helpers, so it holds
    when one of those is what failed."""

    ASIDE = " (previous)"

    def __init__(self, obj):
        self.obj = obj
        st = obj.drape_bake
        self.settings = {p.identifier: getattr(st, p.identifier) for p in st.bl_rna.properties
                         if p.identifier != "rna_type" and not p.is_readonly}
        self.visibility = [(m.name, m.show_viewport, m.show_render) for m in obj.modifiers]
        self.mesh_name = obj.data.name
        self.action_uids = {a.session_uid for a in bpy.data.actions}
        keys = obj.data.shape_keys
        self.key_name = keys.name if keys is not None else None
        self.layout = _mesh_layout(obj.data)
        self.key_states = [(kb.mute, kb.value) for kb in keys.key_blocks] if keys is not None else []
        anim = keys.animation_data if keys is not None else None
        self.action = None  # (name, session_uid, copy)
        if anim is not None and anim.action is not None:
            self.action = (anim.action.name, anim.action.session_uid, anim.action.copy())
        self.mesh = obj.data.copy()
        backup_anim = self.mesh.shape_keys.animation_data if self.mesh.shape_keys is not None else None
        if backup_anim is not None:
            # The copy must not hold the action: the free would keep an old
            # bake's action alive and the new one would get another name.
            # Re-assigned on restore, Blender picks the same slot by its name.
            backup_anim.action = None
        self.had_modifier = obj.modifiers.get(install.MODIFIER_NAME) is not None
        self.modifier = None
        self.swapped = False  # the swap began: keys, actions, attributes may have changed

    def set_aside(self):
        """Renames the old bake's modifier out of the swap's way."""
        old = self.obj.modifiers.get(install.MODIFIER_NAME)
        if old is not None:
            old.name = install.MODIFIER_NAME + self.ASIDE
            self.modifier = old.name

    def commit(self):
        """The swap succeeded: drop what was kept aside."""
        obj = self.obj
        if self.modifier is not None:
            mod = obj.modifiers.get(self.modifier)
            if mod is not None:
                _remove_modifier(obj, mod)
        bpy.data.meshes.remove(self.mesh)
        if self.action is not None:
            bpy.data.actions.remove(self.action[2])

    def discard(self):
        """The object is gone: only the copies go."""
        bpy.data.meshes.remove(self.mesh)
        if self.action is not None:
            bpy.data.actions.remove(self.action[2])

    def restore(self):
        """The bake failed or was cancelled: put the object back exactly as
        it was. While the shape keys and attributes are still the same ones
        (a cancel, a failure before the swap) they are set back in place, so
        the mesh stays the same datablock; once the swap began the copies
        take the place of the mesh and the action."""
        obj = self.obj
        try:
            obj.name
        except ReferenceError:  # deleted during the bake
            self.discard()
            return
        mod = obj.modifiers.get(install.MODIFIER_NAME)
        if mod is not None and (self.modifier is not None or not self.had_modifier):
            _remove_modifier(obj, mod)  # the new bake's (the old one is aside, or there was none)
        if self.modifier is not None:
            old = obj.modifiers.get(self.modifier)
            if old is not None:
                old.name = install.MODIFIER_NAME
        for name, show_viewport, show_render in self.visibility:
            m = obj.modifiers.get(name)
            if m is not None:
                m.show_viewport, m.show_render = show_viewport, show_render
        mesh = obj.data
        copy = self.action[2] if self.action is not None else None
        in_place = not self.swapped and _mesh_layout(mesh) == self.layout
        if in_place:
            keys = mesh.shape_keys
            for kb, (mute, value) in zip(keys.key_blocks if keys is not None else (), self.key_states):
                if kb.mute != mute:
                    kb.mute = mute
                if kb.value != value:
                    kb.value = value
            self.discard()
        else:
            mesh.user_remap(self.mesh)
            bpy.data.meshes.remove(mesh)
            self.mesh.name = self.mesh_name
            if self.key_name is not None and self.mesh.shape_keys is not None:
                self.mesh.shape_keys.name = self.key_name
        for action in list(bpy.data.actions):
            if action.session_uid not in self.action_uids and action != copy and action.users == 0:
                bpy.data.actions.remove(action)
        if self.action is not None and not in_place:
            name, uid, copy = self.action
            changed = next((a for a in bpy.data.actions if a.session_uid == uid), None)
            if changed is not None:
                changed.user_remap(copy)
                bpy.data.actions.remove(changed)
            copy.name = name
            self.mesh.shape_keys.animation_data.action = copy
        st = obj.drape_bake
        for key, value in self.settings.items():
            if getattr(st, key) != value:
                setattr(st, key, value)


def _vertices_at_drape(obj):
    """How many vertices a frame of ``obj``'s bake holds: those of the mesh
    at Drape's place in the stack (what the modifiers above it make of the
    mesh), the mesh's own without a Drape modifier."""
    from ..scene import meshdata, writeback

    if writeback.find_modifier(obj) is None:
        return len(obj.data.vertices)
    return meshdata.vertex_count_at_drape(obj, bpy.context.evaluated_depsgraph_get())


def _mesh_layout(mesh):
    """What a bake adds or removes on a mesh: its name, its shape keys (by
    name, in order) and its attributes."""
    keys = mesh.shape_keys
    return (mesh.name, keys.name if keys is not None else None,
            tuple(kb.name for kb in keys.key_blocks) if keys is not None else (),
            tuple(sorted(a.name for a in mesh.attributes)))


def _remove_modifier(obj, mod):
    cache = getattr(mod, "cache_file", None)
    obj.modifiers.remove(mod)
    if cache is not None and cache.users == 0:
        bpy.data.batch_remove([cache])  # cache_files has no remove()


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
        self.t0 = None
        self._saved_frame = (scene.frame_current, scene.frame_subframe)
        self._source = None
        # The headless tool saves after the bake: the cache files the bake
        # wrote over are kept until it knows the save held (release_files),
        # or put back when it did not (put_back_files).
        self.keep_replaced = False

    # -- checks that change nothing ---------------------------------------
    def validate(self):
        self.items = []
        if not self.objects:
            raise BakeError("Nothing to bake: no Drape cloth among the chosen objects")
        if self.frame_end < self.frame_start:
            raise BakeError(f"Empty frame range {self.frame_start}..{self.frame_end}: "
                            "the end frame is before the start frame")
        taken = set()
        for obj in self.objects:
            if obj.type != 'MESH':
                raise BakeError(f"'{obj.name}' is not a mesh")
            target_id = self.target or obj.drape_bake.target
            target = targets.get(target_id)
            if target is None:
                raise BakeError(f"'{obj.name}': unknown bake target {target_id!r} "
                                f"(known: {', '.join(targets.ids())})")
            item = _Item(obj=obj, name=obj.name, target=target_id, vertices=_vertices_at_drape(obj),
                         mesh_vertices=len(obj.data.vertices))
            if target.validate is not None:
                target.validate(obj)
            if target.writes_file:
                folder = self.folder if self.folder is not None else obj.drape_bake.folder
                folder = folder or "//drape_cache/"
                if folder.startswith("//") and not bpy.data.filepath:
                    raise BakeError(f"'{obj.name}': the cache folder '{folder}' is relative to the .blend, "
                                    "which is not saved yet: save the file or choose an absolute folder")
                self._choose_file(item, folder, taken)
                taken.add(item.abs_path)
            self.items.append(item)
        self._source = frame_source()
        return self

    def _choose_file(self, item, folder, taken):
        """The object's name in ``folder``, unless another .blend Drape knows
        of plays that file (or a file Drape has no record of is there and
        this object's bake is not it): then the first free ``<name>_<k>``.
        Writing over the file this .blend alone plays is a re-bake."""
        blend = _blend_path()
        st = item.obj.drape_bake
        own = install.abspath(st.baked_filepath) if st.baked_filepath else ""
        base, ext = safe_filename(item.obj.name), targets.get(item.target).extension
        first, first_why = None, ""
        for k in range(1, 10000):
            name = f"{base}{ext}" if k == 1 else f"{base}_{k}{ext}"
            stored = folder.rstrip("/\\") + "/" + name if folder.startswith("//") else os.path.join(folder, name)
            path = install.abspath(stored)
            if path in taken:
                continue
            users = read_users(os.path.dirname(path)).get(name)
            if users is None:
                free = not os.path.exists(path) or path == own
                why = "is there and Drape has no record of which .blend plays it"
            else:
                others = [b for b in users if b != blend and os.path.isfile(b)]
                free = not others
                why = f"is played by {', '.join(others)}"
            if free:
                item.filepath, item.abs_path = stored, path
                if first is not None:
                    item.note = f"'{item.name}': {first} {first_why}: baking to {name} instead"
                return
            if first is None:
                first, first_why = path, why
        raise BakeError(f"'{item.name}': no free cache file name in {folder}")

    # -- opening temporary storage ------------------------------------------
    def begin(self):
        if not self.items:
            self.validate()
        try:
            for item in self.items:
                item.stash = _Stash(item.obj)
            for item in self.items:
                if item.note and self.log is not None:
                    self.log(item.note)
                item.writer = self._open_writer(item)
            for item in self.items:
                st = item.obj.drape_bake
                if st.baked or st.baked_target or item.obj.modifiers.get(install.MODIFIER_NAME):
                    # The old bake is hidden so the live simulation runs; the
                    # stash puts it back on abort.
                    install.suspend(item.obj)
        except BaseException:
            self.abort()
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
        gigabytes), where the target says: next to the final file for a
        target that writes one."""
        target = targets.get(item.target)
        if target.writes_file:
            self._check_folder(item)
        path = target.stream_path(self, item)
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
        if self.log is not None:
            slow = self.index <= 3 and (self.index - 1) in slow_frames(self.frame_times)
            if self.index == self.total or self.index % 10 == 0 or self.index == 1 or slow:
                self.log(self.progress_text())
        return self.index >= self.total

    def _capture(self, item):
        try:
            obj_name = item.obj.name
        except ReferenceError:
            raise BakeError(f"'{item.name}' was deleted during the bake") from None
        if obj_name != item.name:
            item.name = obj_name
        if len(item.obj.data.vertices) != item.mesh_vertices:
            raise BakeError(f"'{item.name}': its mesh changed from {item.mesh_vertices} to "
                            f"{len(item.obj.data.vertices)} vertices during the bake")
        try:
            # The source reads the context's scene (its current frame): the
            # baked scene, which need not be the window's.
            with bpy.context.temp_override(scene=self.scene):
                positions = self._source(item.obj)
        except RuntimeError as exc:  # scene.runtime: no result for this frame, with the reason
            raise BakeError(f"'{item.name}': no simulated result at frame "
                            f"{self.scene.frame_current} of scene '{self.scene.name}': {exc}") from exc
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

    def elapsed(self):
        return time.perf_counter() - self.t0 if self.t0 is not None else 0.0

    def may_compile(self):
        """True before the first simulated frames: on the first run after
        installing, one of them compiles the solver (minutes, not ms)."""
        return self.index < min(self.total, 3) and not slow_frames(self.frame_times)

    def starting_text(self):
        names = ", ".join(i.name for i in self.items)
        return (f"Drape bake {names}: frame {self.schedule[self.index]} ({self.index + 1}/{self.total}), "
                f"{format_duration(self.elapsed())} elapsed; the first run after installing compiles "
                "the solver (a few minutes)")

    def progress_text(self):
        frame = self.schedule[min(self.index, self.total) - 1] if self.index else self.schedule[0]
        ms = self.ms_per_frame()
        elapsed = self.elapsed()
        left = eta_seconds(self.frame_times, self.index, self.total, elapsed)
        names = ", ".join(i.name for i in self.items)
        text = (f"Drape bake {names}: frame {frame} ({self.index}/{self.total}), "
                f"{ms:.1f} ms/frame, {format_duration(left)} left, {format_duration(elapsed)} elapsed")
        slow = slow_frames(self.frame_times)
        if slow:
            text += (f"; compiling the solver (first run) took "
                     f"{format_duration(sum(self.frame_times[i] for i in slow))}")
        return text

    # -- the whole bake in one go ---------------------------------------------
    def run(self):
        """Validates, steps every frame and finishes; on any failure
        everything is as before and the exception is raised again."""
        from ..scene import warmup

        warmup.wait_for(self.scene)  # the frame handler skips frames while the solver compiles
        self.validate()
        self.begin()
        try:
            while not self.step():
                pass
        except BaseException:
            self.abort()
            raise
        self.finish()
        return self

    # -- the end ------------------------------------------------------------
    def finish(self):
        """Completes the temporary data, then swaps it in for every object;
        if any of that fails, everything is put back as it was."""
        try:
            for item in self.items:
                try:
                    item.writer.finish()
                except OSError as exc:
                    raise BakeError(f"'{item.name}': finishing {item.writer.tmp_path} failed: "
                                    f"{exc.strerror or exc}") from exc
                prepare = targets.get(item.target).prepare
                if prepare is not None:
                    prepare(self, item)
            for item in self.items:
                item.stash.set_aside()
            for item in self.items:
                self._swap(item)
        except BaseException:
            self.abort()
            raise
        for item in self.items:
            item.stash.commit()
            item.stash = None
        if not self.keep_replaced:
            self.release_files()
        self.done = True
        self._restore_frame()
        blend = _blend_path()
        _claim([i.abs_path for i in self.items if i.abs_path], blend)
        if self.log is not None:
            self.log(f"Drape bake done: {len(self.items)} object(s), frames "
                     f"{self.frame_start}..{self.frame_end}, {self.ms_per_frame():.1f} ms/frame, "
                     f"{format_duration(self.elapsed())}")

    def _roll_back(self):
        """Puts every object back as it was before ``begin`` (last first) and
        the cache files the swaps wrote over."""
        for item in reversed(self.items):
            if item.stash is not None:
                try:
                    item.stash.restore()
                except ReferenceError:  # the object was deleted during the bake
                    pass
                except Exception as exc:  # noqa: BLE001 - restore the others all the same
                    print(f"Drape: could not fully restore '{item.name}': {describe(exc)}")
                item.stash = None
        self.put_back_files()

    def release_files(self):
        """The bake is kept: the cache files it wrote over can go."""
        for item in self.items:
            if item.keep:
                _unlink_quietly(item.keep)
            item.keep = ""

    def put_back_files(self):
        """Puts back the cache files the bake wrote over and removes the
        ones it added (the .blend that would have played them was not saved)."""
        for item in self.items:
            if item.keep:
                try:
                    if os.path.exists(item.abs_path) and os.path.samefile(item.keep, item.abs_path):
                        # The new file never went in (rename() between two links
                        # of one file does nothing): only the link goes.
                        os.unlink(item.keep)
                    else:
                        os.replace(item.keep, item.abs_path)
                except OSError as exc:
                    print(f"Drape: could not put back {item.abs_path} (kept as {item.keep}): {exc}")
            elif item.committed:
                _unlink_quietly(item.abs_path)
            item.keep, item.committed = "", False

    def replace_cache_file(self, item, put_in_place):
        """``put_in_place()`` puts the new cache file at ``item.abs_path``;
        the file it replaces is kept until the bake is kept (or put back)."""
        self._keep_old_file(item)
        put_in_place()
        item.committed = True

    def _keep_old_file(self, item):
        """A hard link to the file the bake writes over, so a failed swap can
        put it back; on a file system without links, a copy."""
        if not os.path.isfile(item.abs_path):
            return
        keep = f"{item.abs_path}.keep-{os.getpid()}"
        _unlink_quietly(keep)
        try:
            os.link(item.abs_path, keep)
        except OSError:
            import shutil

            shutil.copy2(item.abs_path, keep)
        item.keep = keep

    def _swap(self, item):
        item.stash.swapped = True
        install.free(item.obj)
        targets.get(item.target).install(self, item)

    def _drop(self):
        for item in self.items:
            if item.writer is not None:
                item.writer.discard()
            if item.tmp_file and os.path.exists(item.tmp_file):
                _unlink_quietly(item.tmp_file)

    def abort(self):
        """Drops everything captured and puts the objects, the old bakes,
        their files and the frame back."""
        self._roll_back()
        self._drop()
        self._restore_frame()

    def _restore_frame(self):
        frame, sub = self._saved_frame
        try:
            self.scene.name
        except ReferenceError:  # the scene itself went away (another file was loaded)
            return
        if (self.scene.frame_current, self.scene.frame_subframe) != (frame, sub):
            self.scene.frame_set(frame, subframe=sub)


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        print(f"Drape: could not remove {path}: {exc.strerror or exc}")


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


def run_blocking(scene, objects, frame_start, frame_end, target=None, folder=None, log=print,
                 keep_replaced=False):
    """Bakes in one go (background mode, headless tool). Raises BakeError
    (or whatever failed); on any failure everything is as before.
    ``keep_replaced``: see :attr:`BakeJob.keep_replaced`."""
    job = BakeJob(scene, objects, frame_start, frame_end, target=target, folder=folder, log=log)
    job.keep_replaced = keep_replaced
    return job.run()
