"""``drape.bake``, ``drape.bake_free`` and ``drape.cache_cleanup``.

In the UI the bake is modal: a timer drives one frame per tick so Blender
stays responsive, the window manager's progress bar and the status bar show
frame, ms per frame and time left, Esc cancels. In background mode
(``blender -b``, the bpy module) it blocks and prints progress lines. Either
way a cancelled or failed bake leaves the scene and any earlier bake as they
were (see ``bake.job``), whatever the failure; one that is not Drape's own
error (a changed Blender API, a bug) is reported with its type and its
traceback printed.
"""

import os
import time
import traceback

import bpy
from bpy.props import BoolProperty, EnumProperty, IntProperty, StringProperty

from ..bake import install, job as bake_job, targets
from ..scene import warmup

_OBJECTS = (
    ('ACTIVE', "Active", "The active object"),
    ('SELECTED', "Selected", "The selected Drape cloths"),
    ('ALL', "All", "Every Drape cloth in the scene"),
)
_RANGE = (
    ('OBJECT', "Object settings", "The range in the active object's bake settings"),
    ('SCENE', "Scene", "The scene's frame range"),
    ('CUSTOM', "Custom", "Frame start / end below"),
)
# Frames per timer tick are batched up to this many milliseconds, so a
# light scene does not crawl at the timer's pace and a heavy one still
# answers Esc between frames.
_TICK_BUDGET_MS = 30.0


def bakeable(obj):
    """A Drape cloth; with a custom frame source installed, any mesh."""
    if obj is None or obj.type != 'MESH':
        return False
    return bake_job.is_cloth(obj) or bake_job._frame_source is not None


def chosen_objects(context, which):
    if which == 'ACTIVE':
        obj = context.active_object
        return [obj] if obj is not None else []
    if which == 'SELECTED':
        return [o for o in context.selected_objects if bakeable(o)]
    return [o for o in context.scene.objects if bakeable(o)]


class DRAPE_OT_bake(bpy.types.Operator):
    """Bake the Drape cloth (the dense, skinned mesh) to shape keys, a PC2 point cache or Alembic"""

    bl_idname = "drape.bake"
    bl_label = "Bake Cloth"
    bl_options = {'REGISTER', 'UNDO'}

    objects: EnumProperty(name="Objects", items=_OBJECTS, default='ACTIVE')
    target: EnumProperty(name="Bake to", items=targets.operator_enum_items, default=0)  # 0: 'OBJECT'
    frame_range: EnumProperty(name="Frame range", items=_RANGE, default='OBJECT')
    frame_start: IntProperty(name="Start", default=1, min=0)
    frame_end: IntProperty(name="End", default=250, min=0)
    folder: StringProperty(name="Cache folder", default="", subtype='DIR_PATH',
                           description="Folder for PC2/Alembic files; empty: each object's own setting")

    @classmethod
    def poll(cls, context):
        if context.scene is None:
            cls.poll_message_set("No scene")
            return False
        obj = context.active_object
        if bakeable(obj) or any(bakeable(o) for o in context.scene.objects):
            return True
        cls.poll_message_set("No Drape cloth in the scene to bake: add one with Add Cloth")
        return False

    def _make_job(self, context):
        objects = chosen_objects(context, self.objects)
        for obj in objects:
            if not bakeable(obj):
                raise bake_job.BakeError(f"'{obj.name}' is not a Drape cloth")
        first = objects[0] if objects else None
        if self.frame_range == 'SCENE':
            start, end = context.scene.frame_start, context.scene.frame_end
        elif self.frame_range == 'CUSTOM':
            start, end = self.frame_start, self.frame_end
        else:
            start, end = bake_job.frame_range(context.scene, first)
        target = None if self.target == 'OBJECT' else self.target
        folder = self.folder or None
        log = print if bpy.app.background else None
        return bake_job.BakeJob(context.scene, objects, start, end, target=target, folder=folder, log=log)

    def execute(self, context):
        try:
            job = self._make_job(context).run()
        except Exception as exc:  # noqa: BLE001 - any failure is rolled back and reported
            self._report_failure(exc)
            return {'CANCELLED'}
        self.report({'INFO'}, self._done_text(job))
        return {'FINISHED'}

    def _report_failure(self, exc):
        if not isinstance(exc, bake_job.BakeError):
            traceback.print_exc()
        self.report({'ERROR'}, f"Bake failed, nothing changed: {bake_job.describe(exc)}")

    def invoke(self, context, event):
        if context.window is None:  # background mode (blender -b, the bpy module): block
            return self.execute(context)
        try:
            self._job = self._make_job(context)
            self._job.validate()
            self._job.begin()
        except Exception as exc:  # noqa: BLE001 - any failure is rolled back and reported
            self._report_failure(exc)
            return {'CANCELLED'}
        wm = context.window_manager
        self._timer = wm.event_timer_add(0.001, window=context.window)
        wm.modal_handler_add(self)
        wm.progress_begin(0, self._job.total)
        self._status(context, self._job.starting_text() + "  (Esc cancels)")
        return {'RUNNING_MODAL'}

    def modal(self, context, event):
        job = self._job
        if event.type == 'ESC':
            job.abort()
            self._cleanup(context)
            self.report({'WARNING'}, "Bake cancelled: the scene and any earlier bake are unchanged")
            return {'CANCELLED'}
        if event.type != 'TIMER':
            return {'PASS_THROUGH'}
        if not warmup.ready(warmup.needed_by(context.scene)):
            # The frame handler skips frames while the solver compiles in the background.
            self._status(context, (warmup.status_line(context.scene) or "Compiling the solver…") + "  (Esc cancels)")
            return {'RUNNING_MODAL'}
        try:
            t_end = time.perf_counter() + _TICK_BUDGET_MS / 1e3
            done = job.step()
            # A frame that may compile the solver freezes Blender for minutes:
            # the status says so before it starts (shown while this tick returns).
            while not done and time.perf_counter() < t_end and not job.may_compile():
                done = job.step()
            context.window_manager.progress_update(job.index)
            if not done and job.may_compile():
                self._status(context, job.starting_text() + "  (Esc cancels)")
            else:
                self._status(context, job.progress_text() + "  (Esc cancels)")
            if done:
                job.finish()
        except Exception as exc:  # noqa: BLE001 - any failure is rolled back and reported
            job.abort()
            self._cleanup(context)
            self._report_failure(exc)
            return {'CANCELLED'}
        except BaseException:
            job.abort()
            self._cleanup(context)
            raise
        if not done:
            return {'RUNNING_MODAL'}
        self._cleanup(context)
        self.report({'INFO'}, self._done_text(job))
        return {'FINISHED'}

    @staticmethod
    def _done_text(job):
        names = ", ".join(i.name for i in job.items)
        return (f"Baked {names}: frames {job.frame_start}..{job.frame_end} "
                f"({job.ms_per_frame():.1f} ms/frame)")

    @staticmethod
    def _status(context, text):
        if context.workspace is not None:
            context.workspace.status_text_set(text)
        if context.area is not None:
            context.area.header_text_set(text)

    def _cleanup(self, context):
        wm = context.window_manager
        wm.event_timer_remove(self._timer)
        wm.progress_end()
        if context.workspace is not None:
            context.workspace.status_text_set(None)
        if context.area is not None:
            context.area.header_text_set(None)


class DRAPE_OT_bake_free(bpy.types.Operator):
    """Remove the bake (keys, cache modifier) so the live simulation runs again"""

    bl_idname = "drape.bake_free"
    bl_label = "Free Bake"
    bl_options = {'REGISTER', 'UNDO'}

    objects: EnumProperty(name="Objects", items=_OBJECTS, default='ACTIVE')
    delete_files: BoolProperty(name="Delete cache files", default=False,
                               description="Also delete the PC2/Alembic file from disk (cannot be undone)")

    @classmethod
    def poll(cls, context):
        obj = context.active_object
        if obj is None:
            cls.poll_message_set("No active object: select the baked cloth")
            return False
        if not hasattr(obj, "drape_bake") or not obj.drape_bake.baked_target:
            cls.poll_message_set(f"'{obj.name}' has no Drape bake to free")
            return False
        return True

    def execute(self, context):
        if self.objects == 'ACTIVE':
            objects = [context.active_object] if context.active_object else []
        elif self.objects == 'SELECTED':
            objects = list(context.selected_objects)
        else:
            objects = list(context.scene.objects)
        objects = [o for o in objects if o.type == 'MESH' and o.drape_bake.baked_target]
        if not objects:
            self.report({'WARNING'}, "No baked Drape object to free")
            return {'CANCELLED'}
        kept = []
        for obj in objects:
            delete = self.delete_files
            path = obj.drape_bake.baked_filepath
            if delete and path:
                others = bake_job.other_users(install.abspath(path))
                if others:
                    # Another .blend plays the file: deleting it would break that shot.
                    delete = False
                    kept.append(f"{path} (played by {', '.join(os.path.basename(b) for b in others)})")
            install.free(obj, delete_files=delete)
        self.report({'INFO'}, "Freed the bake of " + ", ".join(o.name for o in objects)
                    + ": live simulation is back on")
        if kept:
            self.report({'WARNING'}, "Kept " + "; ".join(kept))
        return {'FINISHED'}


def _cleanup_folder(context, folder):
    if folder:
        return install.abspath(folder)
    obj = context.active_object
    st = getattr(obj, "drape_bake", None) if obj is not None else None
    path = st.baked_filepath if st is not None and st.baked_filepath else ""
    if path:
        return os.path.dirname(install.abspath(path))
    folder = st.folder if st is not None else "//drape_cache/"
    if folder.startswith("//") and not bpy.data.filepath:
        return ""
    return install.abspath(folder or "//drape_cache/")


class DRAPE_OT_cache_cleanup(bpy.types.Operator):
    """Delete the cache files in the cache folder that Drape baked and that no .blend it knows of plays any more"""

    bl_idname = "drape.cache_cleanup"
    bl_label = "Clean Up Cache Folder"
    bl_options = {'REGISTER'}

    folder: StringProperty(name="Cache folder", default="", subtype='DIR_PATH',
                           description="Folder to clean up; empty: the active object's cache folder")

    @classmethod
    def poll(cls, context):
        folder = _cleanup_folder(context, "")
        if not folder or not os.path.isdir(folder):
            cls.poll_message_set("No cache folder yet: nothing was baked there")
            return False
        return True

    def invoke(self, context, event):
        folder = _cleanup_folder(context, self.folder)
        unused = bake_job.unused_caches(folder) if folder else []
        if not unused:
            self.report({'INFO'}, f"No unused cache files in {folder}")
            return {'CANCELLED'}
        self._unused = unused
        return context.window_manager.invoke_props_dialog(self, width=420)

    def draw(self, context):
        layout = self.layout
        layout.label(text="Delete these cache files (no known .blend plays them)?")
        for path in getattr(self, "_unused", [])[:12]:
            layout.label(text=os.path.basename(path), icon='FILE')

    def execute(self, context):
        folder = _cleanup_folder(context, self.folder)
        if not folder or not os.path.isdir(folder):
            self.report({'WARNING'}, f"No cache folder {folder or '(the .blend is not saved)'}")
            return {'CANCELLED'}
        gone = bake_job.delete_unused_caches(folder)
        if not gone:
            self.report({'INFO'}, f"No unused cache files in {folder}")
            return {'CANCELLED'}
        self.report({'INFO'}, f"Deleted {len(gone)} unused cache file(s) from {folder}: "
                    + ", ".join(os.path.basename(p) for p in gone))
        return {'FINISHED'}


classes = (DRAPE_OT_bake, DRAPE_OT_bake_free, DRAPE_OT_cache_cleanup)
