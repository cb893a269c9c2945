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
    FloatVectorProperty,
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
    threads: IntProperty(name="Threads",
                         description="CPU threads for stepping this cloth beside the scene's other cloths, "
                                     "and for a large cloth's self-collision detection "
                                     "(0 = Blender's thread setting, Render Properties > Performance); "
                                     "the result is the same for any number",
                         default=0, min=0, max=1024, soft_max=64)

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
    settle_damping: FloatProperty(
        name="Settling", description="Brings cloth to rest after a disturbance: damps each vertex's motion "
        "relative to its pins (or its centre of mass) like drag at this rate (1/s) when slow, and by a small "
        "constant deceleration when fast, so swinging stops without slowing falls (0: off)",
        default=10.0, min=0.0, soft_max=40.0)
    air_resistance: FloatProperty(
        name="Air resistance", description="Drag of still air on the cloth's motion across its own surface, "
        "relative to its pins (or its centre of mass): the drag coefficient, about 1 for cloth moving face on. "
        "Quadratic in speed, so a hit or flapping sheet stops swinging; a fall and motion with the pins are "
        "not slowed, a sheet swinging from its pins is, as in air (0: off; off while a wind field acts)",
        default=1.0, min=0.0, soft_max=5.0)
    settle_speed: FloatProperty(
        name="Settling speed", description="Relative speed (m/s, whatever the scene's unit scale) below which "
        "settling acts as full drag; above it the deceleration stays at Settling x this speed",
        default=0.1, min=1e-4, soft_max=1.0)
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
    stretch_hierarchy: BoolProperty(name="Multilevel stretch",
                                    description="Solve coarse copies of the mesh first every iteration and "
                                    "carry their corrections down, so a pull crosses the whole cloth at once: "
                                    "cloth pinned in several places, or hanging from one point, stops "
                                    "stretching like rubber at few substeps. Only resists stretching, never "
                                    "folds or a curved rest shape, and leaves cloth touching a collider alone. "
                                    "Unticked, it runs in place of the stretch limits on pinned cloth with "
                                    "Tethers off (if the limits are on); ticked, it always runs, beside the "
                                    "tethers and limits. At 2 substeps a fast-spinning capsule "
                                    "can bring the cloth about a millimetre past its thickness",
                                    default=False)
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

    # Garment authoring (scene/garment.py reads the mesh's part when the
    # simulation starts; the numbers act every step)
    use_sewing: BoolProperty(name="Sewing",
                             description="Loose edges (in no face) between two panels of this mesh are stitches "
                                         "that pull the panels together and then hold the seam",
                             default=False)
    sewing_compliance: _compliance_property("Sewing", 1e-8)
    sewing_stiffness: _stiffness_property("sewing_compliance", "Sewing stiffness", "N/m per stitch",
                                          1e8, 1e2, 1e10)
    sewing_max_force: FloatProperty(name="Max sewing force",
                                    description="Largest force a stitch pulls with while its seam is open (N); "
                                                "0 = no limit",
                                    default=0.0, min=0.0, soft_max=10.0)
    shrink: FloatProperty(name="Shrink", description="Shrinks rest lengths by this factor (0.2 = to 80 %); "
                                                     "negative grows",
                          default=0.0, soft_min=-0.5, max=0.99, soft_max=0.5)
    shrink_max: FloatProperty(name="Max shrink",
                              description="Shrink at weight 1 of the shrink group (Shrink at weight 0)",
                              default=0.0, soft_min=-0.5, max=0.99, soft_max=0.5)
    shrink_group: StringProperty(name="Shrink group", description="Vertex group scaling the shrink", default="")
    shrink_warp: FloatProperty(name="Warp shrink", description="Extra shrink along the UV map's U axis (warp)",
                               default=0.0, soft_min=-0.5, max=0.99, soft_max=0.5)
    shrink_weft: FloatProperty(name="Weft shrink", description="Extra shrink along the UV map's V axis (weft)",
                               default=0.0, soft_min=-0.5, max=0.99, soft_max=0.5)
    warp_stretch: FloatProperty(name="Warp stretch",
                                description="Stretch compliance along the UV map's U axis, times the stretch "
                                            "compliance (2 = stretches twice as much along the warp)",
                                default=1.0, min=0.0, soft_min=0.1, soft_max=10.0)
    weft_stretch: FloatProperty(name="Weft stretch",
                                description="Stretch compliance along the UV map's V axis, times the stretch "
                                            "compliance",
                                default=1.0, min=0.0, soft_min=0.1, soft_max=10.0)
    uv_map: StringProperty(name="UV map", description="UV map giving warp (U) and weft (V); empty = the active one",
                           default="")
    stretch_group: StringProperty(name="Stretch group", description="Vertex group painting stretch stiffness",
                                  default="")
    stretch_group_max: FloatProperty(name="Max stretch",
                                     description="Stretch stiffness at weight 1, times the stiffness at weight 0",
                                     default=1.0, min=0.0, soft_max=100.0)
    shear_group: StringProperty(name="Shear group", description="Vertex group painting shear stiffness",
                                default="")
    shear_group_max: FloatProperty(name="Max shear",
                                   description="Shear stiffness at weight 1, times the stiffness at weight 0",
                                   default=1.0, min=0.0, soft_max=100.0)
    bend_group: StringProperty(name="Bend group", description="Vertex group painting bend stiffness", default="")
    bend_group_max: FloatProperty(name="Max bend",
                                  description="Bend stiffness at weight 1, times the stiffness at weight 0",
                                  default=1.0, min=0.0, soft_max=100.0)
    use_pressure: BoolProperty(name="Pressure",
                               description="A closed mesh keeps a target volume (pillows, balloons, puffer jackets)",
                               default=False)
    pressure_volume: FloatProperty(name="Target volume",
                                   description="Volume kept, times the volume the mesh is modelled with",
                                   default=1.0, min=0.0, soft_max=3.0)
    pressure_compliance: FloatProperty(name="Pressure compliance",
                                       description="Volume given per pascal of pressure (m^5/N); 0 = holds the "
                                                   "target exactly",
                                       default=0.0, min=0.0, soft_max=1.0, precision=6)
    pressure_group: StringProperty(name="Pressure group",
                                   description="Vertex group limiting where the pressure moves the cloth",
                                   default="")
    max_distance: FloatProperty(name="Max distance",
                                description="Each vertex stays within this distance of where the animation "
                                            "(the modifiers above Drape) puts it, times its group weight; 0 = off",
                                default=0.0, min=0.0, soft_max=1.0, subtype='DISTANCE')
    max_distance_group: StringProperty(name="Max distance group",
                                       description="Vertex group scaling the max distance (weight 0 = free)",
                                       default="")
    backstop_distance: FloatProperty(name="Backstop distance",
                                     description="How far behind its animated surface the cloth may go",
                                     default=0.0, min=0.0, soft_max=0.2, subtype='DISTANCE')
    backstop_radius: FloatProperty(name="Backstop radius",
                                   description="Radius of the sphere behind the animated surface the cloth may not "
                                               "enter; 0 = no backstop",
                                   default=0.0, min=0.0, soft_max=1.0, subtype='DISTANCE')
    backstop_group: StringProperty(name="Backstop group",
                                   description="Vertex group of the vertices with a backstop (empty: all)",
                                   default="")


class DrapeColliderSettings(PropertyGroup):
    """Per-object collider (``Object.drape_collider``).

    Capsule: a segment from the object's origin along its local +Y axis to
    local (0, 1, 0) (the way a bone points), so the object's Y scale is the
    length and animating/parenting the object moves the capsule. Radii are in
    the object's local units: scaled by the mean of its X and Z world scale.
    Plane: through the object's origin, normal along its local +Z.
    A capsule's axis may run between any two local points (Axis start / Axis
    end; "Fit to object" sets them along a mesh's longest axis); its radii
    then scale with the mean world scale across that axis.
    Sphere: around a local Center, its radius scaled by the mean world scale.
    Box: an oriented box around a local Center with local Half size, its
    edges and corners rounded by Rounding (inside the half size); it moves,
    turns and scales with the object.
    Mesh: the object's evaluated triangles in world space, read at every
    frame (deforming meshes collide as they move).
    """

    kind: EnumProperty(
        name="Collider",
        items=(
            ('NONE', "None", "Not a collider"),
            ('CAPSULE', "Capsule", "Segment along local +Y (length = Y scale), a radius at each end"),
            ('PLANE', "Plane", "Infinite plane through the origin, normal along local +Z"),
            ('SPHERE', "Sphere", "Sphere around a local center (radius scaled by the mean world scale)"),
            ('BOX', "Box", "Oriented box around a local center, optionally with rounded edges"),
            ('MESH', "Mesh", "The object's evaluated mesh (modifiers, armature, shape keys), static or deforming"),
        ),
        default='NONE',
    )
    radius_start: FloatProperty(name="Radius start", description="Capsule radius at the origin (head)",
                                default=0.1, min=0.0, soft_max=1.0, subtype='DISTANCE')
    radius_end: FloatProperty(name="Radius end", description="Capsule radius at local +Y (tail)",
                              default=0.1, min=0.0, soft_max=1.0, subtype='DISTANCE')
    axis_start: FloatVectorProperty(name="Axis start", size=3, default=(0.0, 0.0, 0.0), subtype='TRANSLATION',
                                    description="Capsule axis start (head) in the object's local coordinates")
    axis_end: FloatVectorProperty(name="Axis end", size=3, default=(0.0, 1.0, 0.0), subtype='TRANSLATION',
                                  description="Capsule axis end (tail) in the object's local coordinates")
    center: FloatVectorProperty(name="Center", size=3, default=(0.0, 0.0, 0.0), subtype='TRANSLATION',
                                description="Sphere or box center in the object's local coordinates")
    sphere_radius: FloatProperty(name="Radius", description="Sphere radius in local units", default=0.5,
                                 min=0.0, soft_max=2.0, subtype='DISTANCE')
    half_extents: FloatVectorProperty(name="Half size", size=3, default=(0.5, 0.5, 0.5), min=0.0,
                                      subtype='XYZ_LENGTH',
                                      description="Half the box's size along local X, Y, Z (local units)")
    rounding: FloatProperty(name="Rounding", description="Radius of the box's rounded edges and corners "
                            "(inside its half size; local units)", default=0.0, min=0.0, soft_max=0.5,
                            subtype='DISTANCE')
    outer_thickness: FloatProperty(name="Outer thickness",
                                   description="Mesh collider: distance the cloth keeps from its surface, "
                                               "on top of the cloth's own collision thickness",
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
