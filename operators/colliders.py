"""Collider operators: ``drape.collider_add``, ``drape.collider_remove``,
``drape.capsules_from_armature``."""

import math

import bpy
import numpy as np
from bpy.props import BoolProperty, EnumProperty, FloatProperty, StringProperty

from ..scene import armature, runtime


def fit_to_mesh(obj, kind, depsgraph=None):
    """The collider settings that fit mesh ``obj`` (as evaluated), from its
    local bounding box: a sphere around the box's centre through the
    farthest vertex (in world units, so a scaled object's sphere still
    holds it), a box the bounding box itself, a capsule along the longest
    world-scaled local axis with the mean half size of the other two as
    radius, its ends inset by that radius so it spans the box's length.
    Returns a dict of DrapeColliderSettings values, or raises ValueError
    with the reason the object cannot be measured."""
    src = obj.evaluated_get(depsgraph) if depsgraph is not None else obj
    mesh = src.to_mesh()
    try:
        n = len(mesh.vertices)
        co = np.empty(3 * n, dtype=np.float64)
        if n:
            mesh.vertices.foreach_get("co", co)
    finally:
        src.to_mesh_clear()
    co = co.reshape(-1, 3)
    if n == 0:
        raise ValueError("has no vertices to measure")
    if not np.isfinite(co).all():
        raise ValueError("has non-finite vertex coordinates")
    m3 = np.array(obj.matrix_world, dtype=np.float64)[:3, :3]
    scale = np.linalg.norm(m3, axis=0)
    lo, hi = co.min(axis=0), co.max(axis=0)
    centre = 0.5 * (lo + hi)
    half = 0.5 * (hi - lo)
    world_half = half * scale
    if world_half.max() <= 1e-9:
        raise ValueError("has zero size (all its vertices at one point, or a zero scale)")
    if kind == 'SPHERE':
        r = float(np.linalg.norm((co - centre) @ m3.T, axis=1).max())
        return {"center": tuple(centre), "sphere_radius": r / float(np.mean(scale))}
    if kind == 'BOX':
        if world_half.min() <= 1e-9:
            axis = "XYZ"[int(np.argmin(world_half))]
            raise ValueError(f"is flat along its local {axis} (a box needs a size on every axis; a Plane "
                             "collider suits a flat object)")
        return {"center": tuple(centre), "half_extents": tuple(half), "rounding": 0.0}
    k = int(np.argmax(world_half))
    others = [i for i in range(3) if i != k]
    radius = float(np.mean(world_half[others]))
    inset = max(world_half[k] - radius, 0.0) / scale[k]
    a, b = centre.copy(), centre.copy()
    a[k] -= inset
    b[k] += inset
    local_r = radius / float(np.mean(scale[others]))
    return {"axis_start": tuple(a), "axis_end": tuple(b), "radius_start": local_r, "radius_end": local_r}


class DRAPE_OT_collider_add(bpy.types.Operator):
    """Make the selected objects capsule, sphere, box or plane colliders (fitted to a mesh's shape), mesh colliders (their own surface), or create a new collider Empty"""

    bl_idname = "drape.collider_add"
    bl_label = "Add Drape Collider"
    bl_options = {'REGISTER', 'UNDO'}

    type: EnumProperty(
        name="Type",
        items=(('CAPSULE', "Capsule", "Segment from the origin along local +Y (length = Y scale)"),
               ('PLANE', "Plane", "Plane through the origin, normal along local +Z"),
               ('SPHERE', "Sphere", "Sphere around the object's center"),
               ('BOX', "Box", "Oriented box, moving and turning with the object"),
               ('MESH', "Mesh", "The object's own evaluated mesh (modifiers, armature, shape keys), static or "
                                "deforming; selected meshes only")),
        default='CAPSULE',
    )
    radius: FloatProperty(name="Radius", description="Capsule radius at both ends, or sphere radius (on objects "
                          "that are not fitted)", default=0.1, soft_min=0.0, soft_max=1.0, subtype='DISTANCE')
    fit: BoolProperty(name="Fit to object", default=True,
                      description="Size a capsule, sphere or box to each selected mesh's bounds (its longest "
                                  "axis for a capsule) instead of the Radius along local +Y")

    @classmethod
    def poll(cls, context):
        if context.mode != 'OBJECT':
            cls.poll_message_set("Switch to Object Mode")
            return False
        return True

    def execute(self, context):
        objs = list(context.selected_objects)
        if not math.isfinite(self.radius) or self.radius < 0.0:
            self.report({'ERROR'}, f"Nothing changed: Radius must be a finite value >= 0, got {self.radius:g}"
                        + (" (for " + ", ".join(f"'{o.name}'" for o in objs) + ")" if objs else ""))
            return {'CANCELLED'}
        cloths = [o for o in objs if runtime.is_cloth(o)]
        if cloths:
            names = ", ".join(f"'{o.name}'" for o in cloths)
            what = "is a Drape cloth and cannot also be a collider; deselect it" if len(cloths) == 1 else \
                "are Drape cloths and cannot also be colliders; deselect them"
            self.report({'ERROR'}, f"Nothing changed: {names} {what}")
            return {'CANCELLED'}
        if self.type == 'MESH':
            if not objs:
                self.report({'ERROR'}, "Nothing changed: a Mesh collider is an object's own mesh; select the "
                            "mesh objects to collide with")
                return {'CANCELLED'}
            bad = [o for o in objs if o.type != 'MESH']
            if bad:
                self.report({'ERROR'}, f"Nothing changed: '{bad[0].name}' is a {bad[0].type.lower()} object, "
                            "not a mesh: a Mesh collider needs a mesh object")
                return {'CANCELLED'}
        if not objs:
            label = "Drape " + self.type.capitalize()
            empty = bpy.data.objects.new(label, None)
            empty.empty_display_type = {'CAPSULE': 'SINGLE_ARROW', 'SPHERE': 'SPHERE', 'BOX': 'CUBE'}.get(
                self.type, 'PLAIN_AXES')
            empty.location = context.scene.cursor.location
            context.collection.objects.link(empty)
            for o in context.selected_objects:
                o.select_set(False)
            empty.select_set(True)
            context.view_layer.objects.active = empty
            objs = [empty]
        # Measure every object before changing any: a bad one changes nothing.
        fits = {}
        if self.fit and self.type not in ('PLANE', 'MESH'):
            depsgraph = context.evaluated_depsgraph_get()
            for obj in objs:
                if obj.type == 'EMPTY':
                    continue  # nothing to measure: Radius along local +Y
                if obj.type != 'MESH':
                    self.report({'ERROR'}, f"Nothing changed: '{obj.name}' is a {obj.type.lower()} object, not a "
                                "mesh: Fit to object measures a mesh's bounds; turn Fit to object off to use the "
                                "Radius")
                    return {'CANCELLED'}
                try:
                    fits[obj.name] = fit_to_mesh(obj, self.type, depsgraph)
                except ValueError as exc:
                    self.report({'ERROR'}, f"Nothing changed: '{obj.name}' {exc}, so Fit to object cannot "
                                "size it; turn Fit to object off to use the Radius")
                    return {'CANCELLED'}
        for obj in objs:
            c = obj.drape_collider
            c.kind = self.type
            if self.type == 'CAPSULE':
                c.radius_start = c.radius_end = self.radius
                c.axis_start, c.axis_end = (0.0, 0.0, 0.0), (0.0, 1.0, 0.0)
            elif self.type == 'SPHERE':
                c.center, c.sphere_radius = (0.0, 0.0, 0.0), self.radius
            elif self.type == 'BOX':
                c.center, c.rounding = (0.0, 0.0, 0.0), 0.0
                c.half_extents = (0.5, 0.5, 0.5) if obj.type != 'EMPTY' else (obj.empty_display_size,) * 3
            for key, value in fits.get(obj.name, {}).items():
                setattr(c, key, value)
        what = {'CAPSULE': "capsule", 'PLANE': "plane", 'SPHERE': "sphere", 'BOX': "box", 'MESH': "mesh"}[self.type]
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
