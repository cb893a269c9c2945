"""``Object.drape`` (RNA) -> ``solver.ClothParams`` (plain dataclass), every step,
so stiffness, damping, friction... changed mid-play take effect at once.

Settings that change what the model *is* (mesh, masses, which vertices are
pinned for tethers, self-collision structures) are in :func:`rebuild_key`
instead: when that key changes the live cache is rebuilt."""

import dataclasses

# Self-collision fields the solver may grow (issue 7); passed when present.
_SELF_FIELDS = {
    "self_collision": "self_collision",
    "self_thickness": "self_thickness",
    "self_friction": "self_friction",
    "self_conservativeness": "self_conservativeness",
}


def gravity(scene, settings):
    if not scene.use_gravity:
        return (0.0, 0.0, 0.0)
    g = scene.gravity
    s = settings.gravity_scale
    return (g[0] * s, g[1] * s, g[2] * s)


def cloth_params(settings, scene, solver):
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
        pin_compliance=settings.pin_compliance,
        air_drag=settings.air_drag,
        drag_coefficient=settings.wind_drag,
        lift_coefficient=settings.wind_lift,
        collision_margin=settings.thickness,
        friction_static=max(settings.static_friction, settings.friction),
        friction_kinetic=settings.friction,
    )
    names = {f.name for f in dataclasses.fields(solver.ClothParams)}
    for prop, field in _SELF_FIELDS.items():
        if field in names:
            values[field] = getattr(settings, prop)
    return solver.ClothParams(**{k: v for k, v in values.items() if k in names})


def rebuild_key(obj):
    """Everything that needs a new model when it changes (besides topology)."""
    s = obj.drape
    proxy = s.proxy.name if (s.sim_source == 'PROXY' and s.proxy is not None) else ""
    return (
        s.sim_source, proxy, s.vertex_budget if s.sim_source == 'AUTO' else 0,
        round(s.areal_density, 9), s.mass_group, s.pin_group, s.tethers, s.self_collision, s.cloth_collision,
    )
