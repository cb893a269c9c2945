"""``Object.drape`` (RNA) -> ``solver.ClothParams`` (plain dataclass), every step,
so stiffness, damping, friction... changed mid-play take effect at once.

Settings that change what the model *is* (mesh, masses, which vertices are
pinned for tethers, self-collision structures) are in :func:`rebuild_key`
instead: when that key changes the live cache is rebuilt.

Every setting is checked here, before the solver sees it, so a bad value
(a NaN typed or set by a script, an Inf from a driver) is reported with the
object's name and the setting's label as the panel shows it:
``'Cape': Collisions > Thickness must be finite, got nan``. The solver's own
messages name its fields (``ClothParams.collision_margin``);
:func:`solver_message` turns them into the same words for anything that
reaches it anyway."""

import dataclasses
import math
import re

from .meshdata import DrapeInputError

# The cloth settings the solver reads: the property read, the property the
# panel shows for it (the stiffness views of the stored compliances), the
# sub-panel it sits in ("" = the main panel) and the smallest value the
# solver accepts (None: any finite value; strict: the bound itself is refused).
_CHECKED = (
    ("gravity_scale", "gravity_scale", "", None, False),
    ("areal_density", "areal_density", "", 0.0, True),
    ("stretch_compliance", "stretch_stiffness", "Stiffness", 0.0, False),
    ("shear_compliance", "shear_stiffness", "Stiffness", 0.0, False),
    ("bend_compliance", "bend_stiffness", "Stiffness", 0.0, False),
    ("stretch_damping", "stretch_damping", "Damping", 0.0, False),
    ("shear_damping", "shear_damping", "Damping", 0.0, False),
    ("bend_damping", "bend_damping", "Damping", 0.0, False),
    ("tether_damping", "tether_damping", "Damping", 0.0, False),
    ("air_drag", "air_drag", "Damping", 0.0, False),
    ("settle_damping", "settle_damping", "Damping", 0.0, False),
    ("settle_speed", "settle_speed", "Damping", 0.0, True),
    ("air_resistance", "air_resistance", "Damping", 0.0, False),
    ("pin_compliance", "pin_stiffness", "Pins", 0.0, False),
    ("tether_compliance", "tether_stiffness", "Pins", 0.0, False),
    ("tether_scale", "tether_scale", "Pins", 0.0, False),
    ("thickness", "thickness", "Collisions", 0.0, False),
    ("friction", "friction", "Collisions", 0.0, False),
    ("static_friction", "static_friction", "Collisions", 0.0, False),
    ("self_thickness", "self_thickness", "Self Collision", 0.0, False),
    ("self_friction", "self_friction", "Self Collision", 0.0, False),
    ("self_conservativeness", "self_conservativeness", "Self Collision", 0.0, False),
    ("wind_drag", "wind_drag", "Wind", 0.0, False),
    ("wind_lift", "wind_lift", "Wind", 0.0, False),
    ("sewing_compliance", "sewing_stiffness", "Garment", 0.0, False),
    ("sewing_max_force", "sewing_max_force", "Garment", 0.0, False),
    ("shrink", "shrink", "Garment", None, False),
    ("shrink_max", "shrink_max", "Garment", None, False),
    ("shrink_warp", "shrink_warp", "Garment", None, False),
    ("shrink_weft", "shrink_weft", "Garment", None, False),
    ("warp_stretch", "warp_stretch", "Garment", 0.0, False),
    ("weft_stretch", "weft_stretch", "Garment", 0.0, False),
    ("stretch_group_max", "stretch_group_max", "Garment", 0.0, False),
    ("shear_group_max", "shear_group_max", "Garment", 0.0, False),
    ("bend_group_max", "bend_group_max", "Garment", 0.0, False),
    ("pressure_volume", "pressure_volume", "Garment", 0.0, False),
    ("pressure_compliance", "pressure_compliance", "Garment", 0.0, False),
    ("max_distance", "max_distance", "Garment", 0.0, False),
    ("backstop_distance", "backstop_distance", "Garment", 0.0, False),
    ("backstop_radius", "backstop_radius", "Garment", 0.0, False),
)
# Read from every cloth of a cloth-cloth group (the rest come from the first).
_PER_MEMBER = frozenset({"areal_density"})

# ClothParams field -> the cloth property it is made from (cloth_params).
_FIELD_PROPERTY = {
    "gravity": "gravity_scale",
    "drag_coefficient": "wind_drag",
    "lift_coefficient": "wind_lift",
    "collision_margin": "thickness",
    "friction_static": "static_friction",
    "friction_kinetic": "friction",
    "self_thickness": "self_thickness",
    "self_friction": "self_friction",
    "self_conservativeness": "self_conservativeness",
    "areal_density": "areal_density",
    "sewing_max_force": "sewing_max_force",
    "warp_compliance_scale": "warp_stretch",
    "weft_compliance_scale": "weft_stretch",
    "stretch_weight_max": "stretch_group_max",
    "shear_weight_max": "shear_group_max",
    "bend_weight_max": "bend_group_max",
    "pressure": "use_pressure",
}


def _rna_name(settings, prop):
    rna = settings.bl_rna.properties.get(prop)
    return rna.name if rna is not None else prop


def labels(settings):
    """{property read: its label as the artist sees it}: the property's own
    name, after the sub-panel it sits in, which says where to look and tells
    apart the settings of one name (Stiffness > Stretch, Damping > Stretch)."""
    return {prop: f"{panel} > {_rna_name(settings, shown)}" if panel else _rna_name(settings, shown)
            for prop, shown, panel, _lo, _strict in _CHECKED}


def label(settings, prop):
    """The UI label of the cloth property ``prop`` (or of the ClothParams
    field made from it)."""
    prop = _FIELD_PROPERTY.get(prop, prop)
    return labels(settings).get(prop) or _rna_name(settings, prop)


def _shown_value(prop, value):
    """The value as the panel shows it (a compliance is shown as its stiffness)."""
    if prop.endswith("_compliance"):
        return 1.0 / value if value != 0.0 else math.inf
    return value


def _value_problem(value, lo, strict):
    if not math.isfinite(value):
        return "must be finite"
    if lo is not None and (value < lo or (strict and value == lo)):
        return f"must be {'>' if strict else '>='} {lo:g}"
    return None


def _setting_error(obj, settings, prop, problem, value):
    what = label(settings, prop)
    return DrapeInputError(f"'{obj.name}': {what} {problem}, got {value:g}", name=obj.name, setting=what,
                           retry=True)


def check_settings(objs, scene):
    """Raise DrapeInputError (``retry``: nothing has changed) for the first
    setting of ``objs`` (one cloth or a cloth-cloth group, the first giving
    the solver settings) or of ``scene`` the solver cannot use."""
    self_contacts = objs[0].drape.self_collision or len(objs) > 1
    for i, obj in enumerate(objs):
        settings = obj.drape
        for prop, _shown, panel, lo, strict in _CHECKED:
            if (i and prop not in _PER_MEMBER) or (panel == "Self Collision" and not self_contacts):
                continue
            value = float(getattr(settings, prop))
            problem = _value_problem(value, lo, strict)
            if problem:
                raise _setting_error(obj, settings, prop, problem, _shown_value(prop, value))
    lead = objs[0]
    if scene.use_gravity and not all(math.isfinite(v) for v in scene.gravity):
        g = ", ".join(f"{v:g}" for v in scene.gravity)
        raise DrapeInputError(f"'{lead.name}': the scene's Gravity must be finite, got ({g}) "
                              f"(Scene Properties > Gravity)", name=lead.name, setting="Scene > Gravity",
                              retry=True)
    units = scene.unit_settings
    scale = float(units.scale_length)
    if units.system != 'NONE' and (not math.isfinite(scale) or scale <= 0.0):
        raise DrapeInputError(f"'{lead.name}': the scene's Unit Scale must be a positive number, got {scale:g} "
                              f"(Scene Properties > Units > Unit Scale)", name=lead.name,
                              setting="Scene > Unit Scale", retry=True)
    base = float(scene.render.fps_base)
    if not math.isfinite(base) or base <= 0.0:
        raise DrapeInputError(f"'{lead.name}': the scene's frame rate base must be a positive number, got "
                              f"{base:g} (Output Properties > Frame Rate)", name=lead.name,
                              setting="Frame Rate", retry=True)


# A step blows up rarely from a value inside the slider's range; a value this
# many times past the slider's end is named as the likely cause.
_FAR = 100.0


def unusual_settings(objs):
    """``'Label at value (its slider ends at N)'`` for each setting of ``objs``
    (the first gives the solver settings) far past its slider's range: the
    likely cause when a step produces NaN."""
    out = []
    for i, obj in enumerate(objs):
        settings = obj.drape
        for prop, shown, panel, _lo, _strict in _CHECKED:
            if i and prop not in _PER_MEMBER:
                continue
            rna = settings.bl_rna.properties.get(shown)
            value = float(getattr(settings, shown))
            if rna is None or not math.isfinite(value):
                continue
            top = max(abs(rna.soft_max), abs(rna.soft_min))
            if top > 0.0 and abs(value) > _FAR * top:
                name = label(settings, prop)
                whose = f"'{obj.name}' " if i else ""
                out.append(f"{whose}{name} at {value:g} (its slider ends at {rna.soft_max:g})")
    return out


def solver_message(obj, exc, objs=None):
    """The text of a solver error (SolverError names its fields and arrays)
    in the artist's words, with the object's name in front. A step that blew
    up names the settings of ``objs`` (default: ``obj``) far outside their
    usual range."""
    text = str(exc)
    settings = obj.drape
    blown = re.match(r"the step produced NaN/Inf at (\d+) vertices", text)
    if blown is not None:
        suspects = unusual_settings(objs or [obj])
        cause = ("likely from " + ", ".join(suspects)) if suspects else \
            "check for extreme stiffness, masses or collider motion"
        return (f"'{obj.name}': the simulation produced NaN/Inf at {blown.group(1)} vertices, {cause}; "
                f"go to the start frame to reset it")
    match = re.match(r"ClothParams\.(\w+)\s+(.*)", text)
    if match is None:
        match = re.match(r"(areal_density)\s+(.*)", text)
    if match is not None:
        field, rest = match.groups()
        return f"'{obj.name}': {label(settings, field)} {rest}"
    if text.startswith("self collision "):
        rest = text[len("self collision "):]
        for field in ("thickness", "friction", "conservativeness"):
            if rest.startswith(field):
                return f"'{obj.name}': {label(settings, 'self_' + field)}{rest[len(field):]}"
    return f"'{obj.name}': {text}"


def unit_scale(scene):
    """Metres per Blender unit (the scene's Unit Scale)."""
    from .meshdata import unit_scale as scale

    return scale(scene)


def gravity(scene, settings):
    """The scene's gravity times the cloth's scale, in m/s². Blender keeps
    Gravity in scene units per second squared (it shows it times the Unit
    Scale), so a scene at Unit Scale 0.01 showing 9.81 m/s² stores 981."""
    if not scene.use_gravity:
        return (0.0, 0.0, 0.0)
    g = scene.gravity
    s = settings.gravity_scale * unit_scale(scene)
    return (g[0] * s, g[1] * s, g[2] * s)


def thread_count(settings, scene):
    """The cloth's Threads, or Blender's own thread count when it is 0
    (Render Properties > Performance: every core unless set to Fixed)."""
    if settings.threads > 0:
        return int(settings.threads)
    render = getattr(scene, "render", None)
    return max(0, int(getattr(render, "threads", 0) or 0))


def cloth_params(settings, scene, solver):
    """The solver's parameters, in SI units: lengths (Thickness) are stored
    in scene units and go to the solver in metres."""
    unit = unit_scale(scene)
    values = dict(
        substeps=settings.substeps,
        iterations=settings.iterations,
        gravity=gravity(scene, settings),
        stretch_compliance=settings.stretch_compliance,
        shear_compliance=settings.shear_compliance,
        bend_compliance=settings.bend_compliance,
        tether_compliance=settings.tether_compliance,
        stretch_damping=settings.stretch_damping,
        shear_damping=settings.shear_damping,
        bend_damping=settings.bend_damping,
        tether_damping=settings.tether_damping,
        tethers=settings.tethers,
        tether_scale=settings.tether_scale,
        stretch_limits=settings.stretch_limits,
        # Unticked: automatic (in place of the stretch limits on pinned cloth with the tethers off).
        stretch_hierarchy=True if settings.stretch_hierarchy else None,
        pin_compliance=settings.pin_compliance,
        air_drag=settings.air_drag,
        settle_damping=settings.settle_damping,
        settle_speed=settings.settle_speed,
        air_resistance=settings.air_resistance,
        drag_coefficient=settings.wind_drag,
        lift_coefficient=settings.wind_lift,
        collision_margin=settings.thickness * unit,
        friction_static=max(settings.static_friction, settings.friction),
        friction_kinetic=settings.friction,
        # Garment authoring (scene/garment.py gives the model its stitches, groups and UVs)
        sewing_compliance=settings.sewing_compliance,
        sewing_max_force=settings.sewing_max_force,
        shrink=settings.shrink,
        shrink_max=settings.shrink_max if settings.shrink_group else settings.shrink,
        shrink_warp=settings.shrink_warp,
        shrink_weft=settings.shrink_weft,
        stretch_weight_max=settings.stretch_group_max,
        shear_weight_max=settings.shear_group_max,
        bend_weight_max=settings.bend_group_max,
        warp_compliance_scale=settings.warp_stretch,
        weft_compliance_scale=settings.weft_stretch,
        pressure=settings.use_pressure,
        pressure_volume=settings.pressure_volume,
        pressure_compliance=settings.pressure_compliance,
        max_distance=settings.max_distance * unit,
        backstop_distance=settings.backstop_distance * unit,
        backstop_radius=settings.backstop_radius * unit,
        threads=thread_count(settings, scene),
    )
    names = {f.name for f in dataclasses.fields(solver.ClothParams)}
    return solver.ClothParams(**{k: v for k, v in values.items() if k in names})


def _key_number(value):
    # NaN is unequal to itself: as a number it would change the key every
    # frame; as text it stays put while check_settings reports it.
    return round(value, 9) if math.isfinite(value) else repr(value)


def rebuild_key(obj):
    """Everything that needs a new model when it changes (besides topology)."""
    s = obj.drape
    proxy = s.proxy.name if (s.sim_source == 'PROXY' and s.proxy is not None) else ""
    return (
        s.sim_source, proxy, s.vertex_budget if s.sim_source == 'AUTO' else 0,
        _key_number(s.areal_density), s.mass_group, s.pin_group, s.tethers, s.self_collision, s.cloth_collision,
        *garment_key(s),
    )


def garment_key(settings):
    """The garment settings read into the model at a build (scene/garment.py)."""
    from .garment import rebuild_key as key

    return key(settings) if hasattr(settings, "use_sewing") else ()
