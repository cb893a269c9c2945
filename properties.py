"""PropertyGroups saved in the .blend: per-object cloth and collider settings.

``Object.drape`` (:class:`DrapeClothSettings`) holds one cloth's settings;
``Object.drape_collider`` (:class:`DrapeColliderSettings`) makes any object a
capsule or plane collider.

Stiffness is *stored* as XPBD compliance (the ``*_compliance`` properties, in
the solver's units) and *shown* as its inverse, a stiffness (``*_stiffness``,
get/set views of the same number), because "10 000 N/m" is something an artist
can compare and nudge while "1e-4 m/N" is not. Both names work from scripts;
only the compliance is saved. The solver reads ``scene.params.cloth_params``,
never these RNA objects.

This module keeps no reference to the ``bpy`` module in its globals (it
imports names from ``bpy.props`` / ``bpy.types``, and ``bpy`` only inside
register()): Blender 4.2 keeps the Python callbacks of these properties
(get/set/update/poll) alive after unregister, and a callback whose globals
reach ``bpy`` keeps the module from being freed when Python shuts down, so
Blender's own exit never runs and the process crashes at exit (rc 139) once
the uninstaller has dropped the add-on's modules. 4.5 on release them.
"""

from bpy.props import (
    BoolProperty,
    EnumProperty,
    FloatProperty,
    IntProperty,
    PointerProperty,
    StringProperty,
)
from bpy.types import Object, PropertyGroup

# Compliance must stay positive (a compliance of 0 is a hard constraint, which
# XPBD handles, but the stiffness view would be infinite): clamp the view.
_MIN_COMPLIANCE = 1e-12
_MAX_STIFFNESS = 1.0 / _MIN_COMPLIANCE


def _stiffness_property(compliance_attr, name, unit_text, default, soft_min, soft_max):
    """A FloatProperty that shows 1/compliance and writes compliance back."""

    def get(self):
        return 1.0 / max(getattr(self, compliance_attr), _MIN_COMPLIANCE)

    def set(self, value):
        value = min(max(value, 1.0 / 1e6), _MAX_STIFFNESS)
        setattr(self, compliance_attr, 1.0 / value)

    return FloatProperty(
        name=name,
        description=f"{name} ({unit_text}); stored as XPBD compliance = 1 / stiffness",
        get=get,
        set=set,
        default=default,
        min=1e-6,
        soft_min=soft_min,
        soft_max=soft_max,
        precision=6,
        options={'ANIMATABLE'},
    )


def _compliance_property(name, default):
    return FloatProperty(
        name=f"{name} compliance",
        description=f"XPBD compliance of the {name.lower()} constraints (inverse stiffness); saved value",
        default=default,
        min=_MIN_COMPLIANCE,
        soft_max=10.0,
        precision=9,
    )


def _mesh_poll(self, obj):
    return obj.type == 'MESH' and obj is not getattr(self, "id_data", None)


def _sync_groups(self, context):
    """Pin / mass group names live inside the Drape modifier too (the node tree
    reads them per frame); keep them in step when the artist picks another."""
    from .scene import writeback

    writeback.sync_modifier_inputs(self.id_data)


class DrapeClothSettings(PropertyGroup):
    """Per-object cloth settings (``Object.drape``)."""

    enabled: BoolProperty(
        name="Enabled",
        description="Simulate this object with Drape (live in the timeline and in bakes)",
        default=False,
    )
    uid: IntProperty(
        name="Runtime key",
        description="Internal: identifies this cloth's live solver state; survives renames",
        default=0,
        options={'HIDDEN'},
    )

    # Quality
    substeps: IntProperty(name="Substeps", description="Solver substeps per frame",
                          default=4, min=1, max=200, soft_max=40)
    iterations: IntProperty(name="Iterations", description="Constraint iterations per substep",
                            default=1, min=1, max=50, soft_max=10)

    # Stiffness (compliance stored, stiffness shown)
    stretch_compliance: _compliance_property("Stretch", 1e-7)
    shear_compliance: _compliance_property("Shear", 1e-5)
    bend_compliance: _compliance_property("Bend", 1e3)
    tether_compliance: _compliance_property("Tether", 1e-9)
    stretch_stiffness: _stiffness_property("stretch_compliance", "Stretch", "N/m per edge",
                                           1e7, 1e2, 1e9)
    shear_stiffness: _stiffness_property("shear_compliance", "Shear", "N/m per quad diagonal",
                                         1e5, 1.0, 1e8)
    bend_stiffness: _stiffness_property("bend_compliance", "Bend", "N·m, isometric bending",
                                        1e-3, 1e-7, 1.0)
    tether_stiffness: _stiffness_property("tether_compliance", "Tether", "N/m",
                                          1e9, 1e2, 1e12)

    # Damping
    stretch_damping: FloatProperty(name="Stretch", description="Rayleigh damping of stretch constraints",
                                   default=0.0, min=0.0, soft_max=1.0)
    shear_damping: FloatProperty(name="Shear", description="Rayleigh damping of shear constraints",
                                 default=0.0, min=0.0, soft_max=1.0)
    bend_damping: FloatProperty(name="Bend", description="Rayleigh damping of bending",
                                default=0.0, min=0.0, soft_max=1.0)
    tether_damping: FloatProperty(name="Tether", description="Rayleigh damping of tethers",
                                  default=0.0, min=0.0, soft_max=1.0)
    air_drag: FloatProperty(name="Air drag", description="Velocity damping by still air (1/s)",
                            default=0.1, min=0.0, soft_max=10.0)
    gravity_scale: FloatProperty(name="Gravity scale", description="Multiplies the scene's gravity",
                                 default=1.0, soft_min=-2.0, soft_max=4.0)

    # Mass
    areal_density: FloatProperty(name="Density", description="Areal density (kg/m²)",
                                 default=0.15, min=1e-5, soft_min=0.01, soft_max=2.0, precision=3)
    mass_group: StringProperty(name="Mass group",
                               description="Vertex group whose weights scale per-vertex mass (empty: uniform)",
                               default="", update=_sync_groups)

    # Pins and tethers
    pin_group: StringProperty(name="Pin group",
                              description="Vertex group of pinned vertices: weight 1 = follows the animated "
                                          "mesh exactly, in between = soft attachment. Read every frame",
                              default="", update=_sync_groups)
    pin_stiffness: _stiffness_property("pin_compliance", "Pin stiffness",
                                       "N/m; a soft pin of weight w gets stiffness * w / (1 - w)",
                                       1e3, 1.0, 1e8)
    pin_compliance: _compliance_property("Pin", 1e-3)
    tethers: BoolProperty(name="Tethers", description="Long-range attachments to the nearest pin: stop "
                          "free vertices from stretching away from pinned ones", default=True)
    stretch_limits: BoolProperty(name="Stretch limits",
                                 description="Long-range limits along the cloth: points 4 and 12 edges "
                                 "apart may not move farther apart than their rest distance along the surface "
                                 "(times the tether scale). Stops stretching where a collider shoves the cloth "
                                 "or it hangs over something, which tethers to the pins cannot see",
                                 default=True)
    tether_scale: FloatProperty(name="Tether scale",
                                description="Allowed tether and stretch-limit length relative to rest",
                                default=1.0, min=0.5, soft_max=1.5)

    # Collisions
    thickness: FloatProperty(name="Thickness", description="Collision distance kept from colliders (m)",
                             default=0.005, min=0.0, soft_max=0.05, subtype='DISTANCE', precision=4)
    friction: FloatProperty(name="Friction", description="Kinetic (sliding) Coulomb friction against colliders",
                            default=0.3, min=0.0, soft_max=1.5)
    static_friction: FloatProperty(name="Static friction",
                                   description="Coulomb friction that must be overcome to start sliding",
                                   default=0.5, min=0.0, soft_max=2.0)

    # Self collision
    self_collision: BoolProperty(name="Self collision", description="Cloth against itself", default=False)
    self_thickness: FloatProperty(name="Thickness", description="Distance kept between cloth surfaces (m)",
                                  default=0.004, min=0.0, soft_max=0.05, subtype='DISTANCE', precision=4)
    self_friction: FloatProperty(name="Friction", description="Friction between cloth surfaces",
                                 default=0.2, min=0.0, soft_max=1.5)
    cloth_collision: BoolProperty(
        name="Collide with other cloths",
        description="Simulate together with every other cloth that has this on, in one solver model, "
                    "so they collide with each other (self-collision contacts between objects); "
                    "solver settings then come from the first of them by name",
        default=False)
    layer: IntProperty(name="Layer",
                       description="Layer order among cloths that collide with each other: a cloth on a higher "
                                   "layer stays on the outer side (its face normals' side) of one on a lower "
                                   "layer, even when they tangle; -1 = no layer order",
                       default=-1, min=-1, soft_max=8)
    self_cache: BoolProperty(
        name="Cache contacts",
        description="Find self and cloth-cloth contacts once, from the pose the simulation starts in, and "
                    "reuse them every step instead of detecting them (several times cheaper). For layers that "
                    "stay together, like a lining or a jacket over a shirt; cloth that slides far along itself "
                    "or folds onto itself needs live detection. Taken again at the start frame",
        default=False)
    self_conservativeness: FloatProperty(name="Conservativeness",
                                         description="How far ahead contacts are predicted from closing "
                                                     "speed (0 = only pairs already within thickness)",
                                         default=1.5, min=0.0, soft_max=3.0)

    # Wind response
    wind_drag: FloatProperty(name="Drag", description="Aerodynamic drag coefficient against Wind fields",
                             default=1.0, min=0.0, soft_max=5.0)
    wind_lift: FloatProperty(name="Lift", description="Aerodynamic lift coefficient against Wind fields",
                             default=0.3, min=0.0, soft_max=5.0)

    # Simulated mesh
    sim_source: EnumProperty(
        name="Simulate",
        description="Which mesh the solver simulates; the object's own mesh is skinned onto it",
        items=(
            ('SELF', "This mesh", "Simulate every vertex of this mesh"),
            ('PROXY', "Proxy object", "Simulate an artist-made low-resolution mesh and skin this one onto it"),
            ('AUTO', "Automatic", "Simplify this mesh to a vertex budget, simulate that, skin this one"),
        ),
        default='SELF',
    )
    proxy: PointerProperty(name="Proxy", type=Object, poll=_mesh_poll,
                           description="Low-resolution mesh simulated in place of this one")
    vertex_budget: IntProperty(name="Vertex budget", description="Vertices of the simplified simulated mesh",
                               default=2000, min=16, soft_max=20000)


class DrapeColliderSettings(PropertyGroup):
    """Per-object collider (``Object.drape_collider``).

    Capsule: a segment from the object's origin along its local +Y axis to
    local (0, 1, 0) (the way a bone points), so the object's Y scale is the
    length and animating/parenting the object moves the capsule. Radii are in
    the object's local units: scaled by the mean of its X and Z world scale.
    Plane: through the object's origin, normal along its local +Z.
    Mesh: the object's evaluated triangles in world space, read at every
    frame (deforming meshes collide as they move).
    """

    kind: EnumProperty(
        name="Collider",
        items=(
            ('NONE', "None", "Not a collider"),
            ('CAPSULE', "Capsule", "Segment along local +Y (length = Y scale), a radius at each end"),
            ('PLANE', "Plane", "Infinite plane through the origin, normal along local +Z"),
            ('MESH', "Mesh", "The object's evaluated mesh (modifiers, armature, shape keys), static or deforming"),
        ),
        default='NONE',
    )
    radius_start: FloatProperty(name="Radius start", description="Capsule radius at the origin (head)",
                                default=0.1, min=0.0, soft_max=1.0, subtype='DISTANCE')
    radius_end: FloatProperty(name="Radius end", description="Capsule radius at local +Y (tail)",
                              default=0.1, min=0.0, soft_max=1.0, subtype='DISTANCE')
    outer_thickness: FloatProperty(name="Outer thickness",
                                   description="Mesh collider: distance the cloth keeps from its surface",
                                   default=0.01, min=0.0, soft_max=0.1, subtype='DISTANCE')
    friction: FloatProperty(name="Friction", description="Mesh collider: factor on the cloth's friction "
                                                         "against it (1 = the cloth's own, 0 = none)",
                            default=1.0, min=0.0, soft_max=2.0)
    sides: EnumProperty(
        name="Sides",
        items=(
            ('NORMAL', "Normal side", "The cloth stays on the side the face normals point to (closed meshes, "
                                      "or open ones whose normals face the cloth)"),
            ('BOTH', "Both sides", "The cloth stays on whichever side it comes from (open meshes)"),
        ),
        default='NORMAL',
    )


classes = (DrapeClothSettings, DrapeColliderSettings)


def register():
    import bpy

    for cls in classes:
        bpy.utils.register_class(cls)
    Object.drape = PointerProperty(type=DrapeClothSettings)
    Object.drape_collider = PointerProperty(type=DrapeColliderSettings)


def unregister():
    import bpy

    del Object.drape_collider
    del Object.drape
    for cls in reversed(classes):
        bpy.utils.unregister_class(cls)
