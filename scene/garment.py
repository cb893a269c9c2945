"""Garment settings of a cloth (sewing, shrink, painted stiffness, warp and
weft, pressure, max distance, backstop) read from its mesh at Drape's place
in the stack and handed to the solver model when the simulation starts.

Loose edges (in no polygon) are the sewing stitches, Blender's convention;
the UV map gives warp (U) and weft (V); vertex groups scale shrink,
stiffness, pressure, max distance and backstop. On a proxy or automatic sim
mesh the groups are the dense mesh's, read at the coarse vertices as its pin
weights are, and with max distance or a backstop every coarse vertex takes
the dense mesh's animated surface as its target (stitches and UVs need the
simulated mesh itself). Group weights are read once
per build (Blender has no bulk read of vertex weights: one pass over the
vertices), so repainting takes effect at the next reset.
"""

import numpy as np

from .meshdata import DrapeInputError

# (property holding the group name, model weight name, panel label)
GROUPS = (
    ("shrink_group", "shrink", "Garment > Shrink group"),
    ("stretch_group", "stretch", "Garment > Stretch group"),
    ("shear_group", "shear", "Garment > Shear group"),
    ("bend_group", "bend", "Garment > Bend group"),
    ("pressure_group", "pressure", "Garment > Pressure group"),
    ("max_distance_group", "max_distance", "Garment > Max distance group"),
    ("backstop_group", "backstop", "Garment > Backstop group"),
)


def uses_uv(settings):
    return bool(settings.shrink_warp or settings.shrink_weft or settings.warp_stretch != 1.0
                or settings.weft_stretch != 1.0)


def active(settings):
    """True when some garment setting needs the mesh's loose edges, groups or
    UVs, or (a proxy or automatic sim mesh) the dense mesh as every vertex's target."""
    return bool(settings.use_sewing or uses_uv(settings) or any(getattr(settings, g) for g, _w, _l in GROUPS)
                or (settings.sim_source != 'SELF' and (settings.max_distance > 0 or settings.backstop_radius > 0)))


def rebuild_key(settings):
    """What needs a new model when it changes (params.rebuild_key adds it)."""
    skinned = settings.sim_source != 'SELF' and (settings.max_distance > 0 or settings.backstop_radius > 0)
    return (settings.use_sewing, settings.uv_map, uses_uv(settings), skinned) + tuple(
        getattr(settings, g) for g, _w, _l in GROUPS)


def loose_edges(mesh):
    """(m, 2) int64 vertex pairs of the edges in no polygon."""
    ne = len(mesh.edges)
    verts = np.empty(2 * ne, np.int32)
    mesh.edges.foreach_get("vertices", verts)
    used = np.zeros(ne, bool)
    if len(mesh.loops):
        corner_edges = np.empty(len(mesh.loops), np.int32)
        mesh.loops.foreach_get("edge_index", corner_edges)
        used[corner_edges] = True
    return verts.reshape(-1, 2)[~used].astype(np.int64)


def loose_edges_are_stitches(mesh):
    """True when the mesh has loose edges and every one joins two different
    panels (pieces of its polygons): what sewing takes as stitches."""
    from ..solver.constraints.sewing import panels

    pairs = loose_edges(mesh)
    if len(pairs) == 0 or len(mesh.polygons) == 0:
        return False
    topo_sizes = np.empty(len(mesh.polygons), np.int64)
    mesh.polygons.foreach_get("loop_total", topo_sizes)
    corners = np.empty(len(mesh.loops), np.int64)
    mesh.loops.foreach_get("vertex_index", corners)
    label = panels(len(mesh.vertices), corners, topo_sizes)
    a, b = label[pairs[:, 0]], label[pairs[:, 1]]
    return bool(np.all((a >= 0) & (b >= 0) & (a != b)))


def group_weights(obj, mesh, name):
    """(n,) float32 weights of vertex group ``name`` (0 outside it), or None
    when ``obj`` has no such group."""
    group = obj.vertex_groups.get(name)
    if group is None:
        return None
    index = group.index
    w = np.zeros(len(mesh.vertices), np.float32)
    for v in mesh.vertices:
        for g in v.groups:
            if g.group == index:
                w[v.index] = g.weight
                break
    return w


def corner_uv(mesh, name=""):
    """(corners, 2) float64 UVs of the named (or the active) UV map, or None."""
    layers = mesh.uv_layers
    layer = layers.get(name) if name else layers.active
    if layer is None:
        return None
    out = np.empty(2 * len(mesh.loops), np.float32)
    layer.uv.foreach_get("vector", out)
    return out.reshape(-1, 2).astype(np.float64)


def _read(obj, mesh, settings):
    """(stitches, weights, uv) of one cloth's mesh; raises DrapeInputError."""
    stitches = loose_edges(mesh) if settings.use_sewing else None
    if settings.use_sewing and len(stitches) == 0:
        raise DrapeInputError(f"'{obj.name}': Garment > Sewing is on but the mesh has no loose edges to sew "
                              f"(select two border edge loops in Edit Mode and use Sew Selected Edge Loops)",
                              name=obj.name, setting="Garment > Sewing")
    weights = {}
    for prop, key, label in GROUPS:
        name = getattr(settings, prop)
        if not name:
            continue
        w = group_weights(obj, mesh, name)
        if w is None:
            raise DrapeInputError(f"'{obj.name}': {label} '{name}' is not a vertex group of the mesh",
                                  name=obj.name, setting=label)
        weights[key] = w
    uv = None
    if uses_uv(settings):
        uv = corner_uv(mesh, settings.uv_map)
        if uv is None:
            which = f"UV map '{settings.uv_map}'" if settings.uv_map else "a UV map"
            raise DrapeInputError(f"'{obj.name}': Garment > warp and weft need {which}, and the mesh has none "
                                  f"(add one in Object Data > UV Maps, or set Warp/Weft back to their defaults)",
                                  name=obj.name, setting="Garment > UV map")
    return stitches, weights, uv


def apply(model, objs, members, depsgraph):
    """Hand the garment data of ``objs`` (their runtime members, in model
    order) to ``model``; raises DrapeInputError naming the object and the
    setting, and leaves the model as built when anything is wrong."""
    from . import meshdata
    from ..solver import SolverError

    check_pressure(objs[0], model, objs[0].drape)
    if not any(active(o.drape) for o in objs):
        return
    stitches, weights, uvs = [], {}, []
    for obj, m in zip(objs, members):
        settings = obj.drape
        if not active(settings):
            uvs.append(None)
            continue
        if m.source != 'SELF':
            s, w, uv = _read_coarse(obj, m, settings, depsgraph)
        else:
            with meshdata.at_drape_point(obj, depsgraph) as mesh:
                if len(mesh.vertices) != m.stop - m.start:
                    raise DrapeInputError(f"'{obj.name}': its garment data could not be read at the Drape "
                                          f"modifier", name=obj.name)
                s, w, uv = _read(obj, mesh, settings)
        if s is not None:
            stitches.append(s + m.start)
        for key, values in w.items():
            full = weights.setdefault(key, np.zeros(model.n, np.float32) if key not in ("pressure",)
                                      else np.ones(model.n, np.float32))
            full[m.start:m.stop] = values
        uvs.append(uv)
    try:
        if stitches:
            try:
                model.set_sewing(np.concatenate(stitches))
            except SolverError as exc:
                raise _error(objs[0], "Garment > Sewing", exc) from exc
        if any(u is not None for u in uvs):
            if len(objs) > 1:
                parts = [u if u is not None else np.zeros((len(_corners(o, depsgraph)), 2)) for u, o in
                         zip(uvs, objs)]
                model.set_uv(np.concatenate(parts))
            else:
                model.set_uv(uvs[0])
        if weights:
            model.set_garment_weights(**weights)
    except SolverError as exc:
        raise _error(objs[0], "Garment", exc) from exc


def _read_coarse(obj, member, settings, depsgraph):
    """A proxy's or automatic sim mesh's garment data: the dense mesh's group
    weights at the coarse vertices (as its pin weights are); stitches and UVs
    belong to the mesh that is simulated, so they need This mesh."""
    from . import meshdata
    from .runtime import _interpolate

    if settings.use_sewing or uses_uv(settings):
        what = "Sewing" if settings.use_sewing else "warp and weft"
        raise DrapeInputError(f"'{obj.name}': Garment > {what} needs Sim Mesh > Simulate: This mesh (stitches and "
                              f"UVs belong to the simulated mesh)", name=obj.name, setting="Sim Mesh > Simulate")
    with meshdata.at_drape_point(obj, depsgraph) as mesh:
        _s, dense, _uv = _read(obj, mesh, settings)
    member.track_all = bool(settings.max_distance > 0 or settings.backstop_radius > 0)
    return None, {k: _interpolate(member, v) for k, v in dense.items()}, None


def _corners(obj, depsgraph):
    from . import meshdata

    with meshdata.at_drape_point(obj, depsgraph) as mesh:
        return range(len(mesh.loops))


def _error(obj, setting, exc):
    return DrapeInputError(f"'{obj.name}': {setting}: {exc}", name=obj.name, setting=setting)


def check_pressure(obj, model, settings):
    """A clear message for pressure on a mesh that is not closed (before a step)."""
    if settings.use_pressure and model.pressure.open:
        raise DrapeInputError(f"'{obj.name}': Garment > Pressure needs a closed mesh, and this one has "
                              f"{model.pressure.open} open edge(s): close the holes or turn Pressure off",
                              name=obj.name, setting="Garment > Pressure", retry=True)
