"""``drape.bake`` and ``drape.bake_free``.

In the UI the bake is modal: a timer drives one frame per tick so Blender
stays responsive, the window manager's progress bar and the status bar show
frame, ms per frame and time left, Esc cancels. In background mode
(``blender -b``, the bpy module) it blocks and prints progress lines. Either
way a cancelled or failed bake leaves the scene and any earlier bake as they
were (see ``bake.job``).
"""

import time

import bpy
from bpy.props import BoolProperty, EnumProperty, IntProperty, StringProperty

from ..bake import install, job as bake_job
from ..bake.settings import TARGETS

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
    target: EnumProperty(name="Bake to", items=(('OBJECT', "Object settings",
                                                 "Each object's own bake target"),) + TARGETS,
                         default='OBJECT')
    frame_range: EnumProperty(name="Frame range", items=_RANGE, default='OBJECT')
    frame_start: IntProperty(name="Start", default=1, min=0)
    frame_end: IntProperty(name="End", default=250, min=0)
    folder: StringProperty(name="Cache folder", default="", subtype='DIR_PATH',
                           description="Folder for PC2/Alembic files; empty: each object's own setting")

    @classmethod
    def poll(cls, context):
        if context.scene is None:
            return False
        obj = context.active_object
        return bakeable(obj) or any(bakeable(o) for o in context.scene.objects)

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
            job = self._make_job(context)
            job.validate()
            job.begin()
            try:
                while not job.step():
                    pass
            except BaseException:
                job.abort()
                raise
            job.finish()
        except bake_job.BakeError as exc:
            self.report({'ERROR'}, f"Bake failed, nothing changed: {exc}")
            return {'CANCELLED'}
        self.report({'INFO'}, self._done_text(job))
        return {'FINISHED'}

    def invoke(self, context, event):
        if context.window is None:  # background mode (blender -b, the bpy module): block
            return self.execute(context)
        try:
            self._job = self._make_job(context)
            self._job.validate()
            self._job.begin()
        except bake_job.BakeError as exc:
            self.report({'ERROR'}, f"Bake failed, nothing changed: {exc}")
            return {'CANCELLED'}
        wm = context.window_manager
        self._timer = wm.event_timer_add(0.001, window=context.window)
        wm.modal_handler_add(self)
        wm.progress_begin(0, self._job.total)
        self._status(context, "Drape bake: starting (Esc cancels)")
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
        try:
            t_end = time.perf_counter() + _TICK_BUDGET_MS / 1e3
            done = job.step()
            while not done and time.perf_counter() < t_end:
                done = job.step()
            context.window_manager.progress_update(job.index)
            self._status(context, job.progress_text() + "  (Esc cancels)")
            if done:
                job.finish()
        except bake_job.BakeError as exc:
            job.abort()
            self._cleanup(context)
            self.report({'ERROR'}, f"Bake failed, nothing changed: {exc}")
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
        return obj is not None and hasattr(obj, "drape_bake") and bool(obj.drape_bake.baked_target)

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
        for obj in objects:
            install.free(obj, delete_files=self.delete_files)
        self.report({'INFO'}, "Freed the bake of " + ", ".join(o.name for o in objects)
                    + ": live simulation is back on")
        return {'FINISHED'}


classes = (DRAPE_OT_bake, DRAPE_OT_bake_free)
