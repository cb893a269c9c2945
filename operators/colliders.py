"""Collider operators: ``drape.collider_add``, ``drape.collider_remove``,
``drape.capsules_from_armature``."""

import bpy
from bpy.props import BoolProperty, EnumProperty, FloatProperty, StringProperty

from ..scene import armature, runtime


class DRAPE_OT_collider_add(bpy.types.Operator):
    """Make the selected objects capsule or plane colliders, or create a new collider Empty"""

    bl_idname = "drape.collider_add"
    bl_label = "Add Drape Collider"
    bl_options = {'REGISTER', 'UNDO'}

    type: EnumProperty(
        name="Type",
        items=(('CAPSULE', "Capsule", "Segment from the origin along local +Y (length = Y scale)"),
               ('PLANE', "Plane", "Plane through the origin, normal along local +Z")),
        default='CAPSULE',
    )
    radius: FloatProperty(name="Radius", description="Capsule radius at both ends", default=0.1,
                          min=0.0, soft_max=1.0, subtype='DISTANCE')

    @classmethod
    def poll(cls, context):
        if context.mode != 'OBJECT':
            cls.poll_message_set("Switch to Object Mode")
            return False
        return True

    def execute(self, context):
        objs = list(context.selected_objects)
        cloths = [o for o in objs if runtime.is_cloth(o)]
        if cloths:
            names = ", ".join(f"'{o.name}'" for o in cloths)
            what = "is a Drape cloth and cannot also be a collider; deselect it" if len(cloths) == 1 else \
                "are Drape cloths and cannot also be colliders; deselect them"
            self.report({'ERROR'}, f"Nothing changed: {names} {what}")
            return {'CANCELLED'}
        if not objs:
            label = "Drape Capsule" if self.type == 'CAPSULE' else "Drape Plane"
            empty = bpy.data.objects.new(label, None)
            empty.empty_display_type = 'SINGLE_ARROW' if self.type == 'CAPSULE' else 'PLAIN_AXES'
            empty.location = context.scene.cursor.location
            context.collection.objects.link(empty)
            for o in context.selected_objects:
                o.select_set(False)
            empty.select_set(True)
            context.view_layer.objects.active = empty
            objs = [empty]
        for obj in objs:
            c = obj.drape_collider
            c.kind = self.type
            if self.type == 'CAPSULE':
                c.radius_start = c.radius_end = self.radius
        what = "capsule" if self.type == 'CAPSULE' else "plane"
        self.report({'INFO'}, f"Drape {what} collider on " + ", ".join(f"'{o.name}'" for o in objs))
        return {'FINISHED'}


class DRAPE_OT_collider_remove(bpy.types.Operator):
    """Stop the selected objects from being Drape colliders"""

    bl_idname = "drape.collider_remove"
    bl_label = "Remove Drape Collider"
    bl_options = {'REGISTER', 'UNDO'}

    @classmethod
    def poll(cls, context):
        if not any(o.drape_collider.kind != 'NONE' for o in context.selected_objects):
            cls.poll_message_set("Select a Drape collider")
            return False
        return True

    def execute(self, context):
        objs = [o for o in context.selected_objects if o.drape_collider.kind != 'NONE']
        for obj in objs:
            obj.drape_collider.kind = 'NONE'
        self.report({'INFO'}, "Collider removed from " + ", ".join(f"'{o.name}'" for o in objs))
        return {'FINISHED'}


def _armature(context):
    obj = context.active_object
    if obj is not None and obj.type == 'ARMATURE':
        return obj
    for obj in context.selected_objects:
        if obj.type == 'ARMATURE':
            return obj
    return None


class DRAPE_OT_capsules_from_armature(bpy.types.Operator):
    """Make one capsule collider per deform bone of the active armature, following its pose"""

    bl_idname = "drape.capsules_from_armature"
    bl_label = "Capsules from Armature"
    bl_options = {'REGISTER', 'UNDO'}

    only_selected: BoolProperty(name="Selected bones only", default=False,
                                description="Only the armature's selected deform bones")
    min_length: FloatProperty(name="Minimum bone length", default=0.0, min=0.0, soft_max=0.2,
                              subtype='DISTANCE', description="Skip shorter deform bones (fingers, face)")
    radius_scale: FloatProperty(name="Radius scale", default=1.0, min=0.0, soft_max=2.0,
                                description="Multiplies the estimated radii")
    replace: BoolProperty(name="Replace existing", default=True,
                          description="Delete capsules made earlier for this armature")
    body: StringProperty(name="Body mesh", default="",
                         description="Mesh whose surface sets the radii (empty: every mesh with an Armature "
                                     "modifier on this armature that is not a Drape cloth)")

    @classmethod
    def poll(cls, context):
        if context.mode not in {'OBJECT', 'POSE'}:
            cls.poll_message_set("Switch to Object or Pose Mode")
            return False
        if _armature(context) is None:
            cls.poll_message_set("Select an armature")
            return False
        return True

    def execute(self, context):
        arm = _armature(context)
        names = armature.deform_bones(arm, self.only_selected, self.min_length)
        if not names:
            self.report({'ERROR'}, f"Nothing changed: armature '{arm.name}' has no deform bones"
                        + (" selected" if self.only_selected else "")
                        + (f" longer than {self.min_length:g}" if self.min_length > 0 else ""))
            return {'CANCELLED'}
        if self.body:
            body = bpy.data.objects.get(self.body)
            if body is None or body.type != 'MESH':
                self.report({'ERROR'}, f"Nothing changed: body mesh '{self.body}' is not a mesh object")
                return {'CANCELLED'}
            meshes = [body]
        else:
            meshes = armature.skinned_meshes(arm, context.scene)
        radii, source = armature.estimate_radii(arm, names, meshes)
        if self.replace:
            for old in armature.existing_capsules(arm):
                bpy.data.objects.remove(old, do_unlink=True)
        made = armature.make_capsules(context.scene, arm, names, radii, self.radius_scale)
        origin = ("the skinned mesh " + ", ".join(f"'{m.name}'" for m in meshes)) if source == "mesh" \
            else "the bone envelopes"
        self.report({'INFO'}, f"Made {len(made)} capsules for '{arm.name}', radii from {origin}")
        return {'FINISHED'}


classes = (DRAPE_OT_collider_add, DRAPE_OT_collider_remove, DRAPE_OT_capsules_from_armature)
