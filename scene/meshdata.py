"""Reading meshes into arrays (foreach_get only) and checking that a mesh can
be simulated. Every problem an artist can cause becomes a
:class:`DrapeInputError` whose text names the object and the problem."""

import contextlib

import bpy
import numpy as np

from . import writeback
from ._kernels import affine


class DrapeInputError(ValueError):
    """User-fixable input problem; the message names the object.

    ``name``: the object the message is about (for a collider or a wind field,
    that object); ``setting``: the setting as the UI labels it, if one is at
    fault. ``retry``: raised before anything was changed, so the simulation can
    go on from where it stands once the input is fixed (a bad setting, a NaN
    collider); without it the cloth waits for the start frame to rebuild."""

    def __init__(self, message, name=None, setting=None, retry=False):
        super().__init__(message)
        self.name = name
        self.setting = setting
        self.retry = retry


# Modifiers that only move vertices (or edit weights/normals/UVs): they keep
# the vertex count and order, and every attribute Drape stores. Anything else
# may change the topology: above the Drape modifier it makes the simulated
# mesh (as with Blender's Cloth), below it it works on the simulated result.
DEFORM_ONLY = frozenset({
    'ARMATURE', 'CAST', 'CURVE', 'DISPLACE', 'HOOK', 'LAPLACIANDEFORM', 'LATTICE',
    'MESH_DEFORM', 'SHRINKWRAP', 'SIMPLE_DEFORM', 'SMOOTH', 'CORRECTIVE_SMOOTH',
    'LAPLACIANSMOOTH', 'SURFACE_DEFORM', 'WARP', 'WAVE', 'MESH_CACHE',
    'MESH_SEQUENCE_CACHE', 'VERTEX_WEIGHT_EDIT', 'VERTEX_WEIGHT_MIX',
    'VERTEX_WEIGHT_PROXIMITY', 'DATA_TRANSFER', 'NORMAL_EDIT', 'WEIGHTED_NORMAL',
    'UV_PROJECT', 'UV_WARP',
})
# Other physics on the same object fight Drape for the vertices.
CONFLICTING = frozenset({'CLOTH', 'SOFT_BODY', 'COLLISION', 'DYNAMIC_PAINT', 'FLUID', 'OCEAN'})


def article(word):
    """'a' or 'an', by the sound of the word's first letter."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def type_name(obj):
    """The object's type as the UI names it, with its article: 'an empty'."""
    items = obj.bl_rna.properties["type"].enum_items
    item = items.get(obj.type)
    word = (item.name if item is not None else obj.type.replace("_", " ")).lower()
    return f"{article(word)} {word}"


def nonfinite_vertices(positions):
    """``(count, words)`` for the rows of ``positions`` (n, 3) holding NaN or
    Inf: ``(3, "3 vertices have a NaN coordinate")``; ``(0, "")`` when all are finite."""
    if np.isfinite(positions.sum(dtype=np.float64)):  # every frame: one pass; NaN and Inf propagate
        return 0, ""
    finite = np.isfinite(positions).all(axis=1)
    count = int(finite.size - np.count_nonzero(finite))
    if count == 0:
        return 0, ""
    kind = "a NaN" if np.isnan(positions[~finite]).any() else "an infinite"
    return count, f"{'1 vertex has' if count == 1 else f'{count} vertices have'} {kind} coordinate"


class Topology:
    """Polygons as flat arrays, in Blender's corner order."""

    __slots__ = ("vertex_count", "face_indices", "face_sizes", "edge_count", "loose_edges")

    def __init__(self, mesh):
        self.vertex_count = len(mesh.vertices)
        nf = len(mesh.polygons)
        nl = len(mesh.loops)
        self.face_sizes = np.empty(nf, np.int32)
        mesh.polygons.foreach_get("loop_total", self.face_sizes)
        self.face_indices = np.empty(nl, np.int32)
        mesh.loops.foreach_get("vertex_index", self.face_indices)
        self.edge_count = len(mesh.edges)
        corner_edges = np.empty(nl, np.int32)
        mesh.loops.foreach_get("edge_index", corner_edges)
        self.loose_edges = self.edge_count - np.unique(corner_edges).size if nl else self.edge_count

    def signature(self):
        """Cheap fingerprint of the connectivity (changes when topology does)."""
        fi = self.face_indices
        h = int(np.bitwise_xor.reduce(fi * np.arange(1, fi.size + 1, dtype=np.int64) % 1000003)) if fi.size else 0
        return (self.vertex_count, self.face_sizes.size, self.face_indices.size, h)

    def triangles(self):
        """Fan triangulation (t, 3) int32 of every polygon."""
        sizes = self.face_sizes.astype(np.int64)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        ntri = sizes - 2
        owner = np.repeat(np.arange(sizes.size), ntri)
        k = np.arange(ntri.sum()) - np.repeat(np.cumsum(ntri) - ntri, ntri)
        first = self.face_indices[starts[owner]]
        second = self.face_indices[starts[owner] + k + 1]
        third = self.face_indices[starts[owner] + k + 2]
        return np.stack((first, second, third), axis=1).astype(np.int32)


def local_positions(mesh):
    out = np.empty(len(mesh.vertices) * 3, np.float32)
    mesh.vertices.foreach_get("co", out)
    return out.reshape(-1, 3)


def read_point_attribute(mesh, name, width):
    attr = mesh.attributes.get(name)
    if attr is None:
        return None
    out = np.empty(len(mesh.vertices) * width, np.float32)
    attr.data.foreach_get("vector" if width == 3 else "value", out)
    return out.reshape(-1, 3) if width == 3 else out


def matrix_np(matrix):
    return np.array(matrix, dtype=np.float64)


def unit_scale(scene):
    """Metres per Blender unit: the scene's Unit Scale (1 without a unit system)."""
    units = scene.unit_settings
    return float(units.scale_length) if units.system != 'NONE' else 1.0


def to_world(local, matrix, unit=1.0):
    """Local coordinates to world space in metres (``unit``: metres per Blender unit)."""
    m = matrix_np(matrix)
    if unit != 1.0:
        m = np.diag((unit, unit, unit, 1.0)) @ m
    return affine(local, m)


def to_local(world, matrix, unit=1.0):
    """World positions in metres back to the object's local coordinates."""
    m = matrix_np(matrix.inverted_safe())
    if unit != 1.0:
        m = m @ np.diag((1.0 / unit, 1.0 / unit, 1.0 / unit, 1.0))
    return affine(world, m)


class Sample:
    """One frame of a mesh as the depsgraph evaluated it at Drape's place in
    the stack, in world space (metres). ``counts``: its vertex, face and
    corner counts; ``topology``: its :class:`Topology` when asked for."""

    __slots__ = ("positions", "pin_weight", "mass_weight", "matrix", "counts", "topology")

    def __init__(self, positions, pin_weight, mass_weight, matrix, counts=None, topology=None):
        self.positions = positions
        self.pin_weight = pin_weight
        self.mass_weight = mass_weight
        self.matrix = matrix
        self.counts = counts
        self.topology = topology


def _enabled(mod, mode):
    return mod.show_render if mode == 'RENDER' else mod.show_viewport


def modifiers_around(obj):
    """``(above, below)``: the object's modifiers before and after its Drape
    modifier (all above when it has none)."""
    mods = list(obj.modifiers)
    index = writeback.modifier_index(obj)
    if index is None:
        return mods, []
    return mods[:index], mods[index + 1:]


def changes_topology(mod):
    """True for a modifier that may change the vertex count or order."""
    return mod.type not in DEFORM_ONLY


def _hidden_below(obj, mode):
    """The modifiers below Drape to switch off while reading the mesh at
    Drape's place: those that may change its topology (deform-only ones
    keep the attributes Drape stores, so the final mesh still has them)."""
    _above, below = modifiers_around(obj)
    return [m for m in below if _enabled(m, mode) and changes_topology(m)]


@contextlib.contextmanager
def at_drape_point(obj, depsgraph):
    """The evaluated mesh as it leaves Drape's modifier (what the modifiers
    below it receive, before they act). With a modifier below that changes
    the topology, those are switched off for one evaluation and back on."""
    mode = getattr(depsgraph, "mode", 'VIEWPORT')
    hidden = _hidden_below(obj, mode)
    if not hidden:
        yield obj.evaluated_get(depsgraph).data
        return
    attr = 'show_render' if mode == 'RENDER' else 'show_viewport'
    try:
        for mod in hidden:
            setattr(mod, attr, False)
        depsgraph.update()
        yield obj.evaluated_get(depsgraph).data
    finally:
        for mod in hidden:
            setattr(mod, attr, True)
        obj.update_tag()


def sample(obj, depsgraph, settings=None, unit=1.0, topology=False):
    """Evaluated positions (world, metres), pin and mass weights of a mesh
    carrying the Drape modifier, at Drape's place in the stack: the values
    stored *before* the result is applied. ``settings``: the cloth's
    ``Object.drape`` (a proxy reads its cloth's groups); ``unit``: metres
    per Blender unit; ``topology``: also read the mesh's polygons there."""
    settings = settings if settings is not None else obj.drape
    obj_eval = obj.evaluated_get(depsgraph)
    with at_drape_point(obj, depsgraph) as mesh:
        local = read_point_attribute(mesh, writeback.ATTR_INPUT, 3)
        if local is None:  # modifier disabled: the stack's result is the input
            local = local_positions(mesh)
        pin = read_point_attribute(mesh, writeback.ATTR_PIN, 1)
        mass = read_point_attribute(mesh, writeback.ATTR_MASS, 1)
        counts = (len(mesh.vertices), len(mesh.polygons), len(mesh.loops))
        topo = Topology(mesh) if topology else None
    n = local.shape[0]
    if pin is None or not settings.pin_group:
        pin = np.zeros(n, np.float32)
    if mass is None or not settings.mass_group:
        mass = np.ones(n, np.float32)
    matrix = obj_eval.matrix_world.copy()
    return Sample(to_world(local, matrix, unit), np.clip(pin, 0.0, 1.0), np.clip(mass, 0.0, None), matrix,
                  counts, topo)


def vertex_count_at_drape(obj, depsgraph):
    """How many vertices the mesh has at Drape's place in the stack."""
    with at_drape_point(obj, depsgraph) as mesh:
        return len(mesh.vertices)


def _animated_paths(obj):
    """The data paths of ``obj``'s F-Curves and drivers."""
    from . import compat

    anim = obj.animation_data
    if anim is None:
        return []
    fcurves = compat.animation_fcurves(anim)
    paths = [fc.data_path for fc in fcurves] if fcurves is not None else []
    return paths + [d.data_path for d in anim.drivers]


def animated_topology(obj):
    """Messages for the modifiers above Drape (where Drape goes, when it has
    no modifier yet) that change the topology and are animated or driven:
    the simulated mesh would change between frames."""
    if obj is None or obj.type != 'MESH':
        return []
    if writeback.find_modifier(obj) is None:
        above = list(obj.modifiers)[:writeback.default_index(obj)]
    else:
        above, _below = modifiers_around(obj)
    paths = _animated_paths(obj)
    out = []
    for mod in above:
        if not changes_topology(mod) or not (mod.show_viewport or mod.show_render):
            continue
        prefix = f'modifiers["{bpy.utils.escape_identifier(mod.name)}"]'
        if any(p.startswith(prefix) for p in paths):
            out.append(f"'{obj.name}': modifier '{mod.name}' ({_type_label(mod)}) above the Drape modifier is "
                       f"animated and changes the topology between frames: Drape simulates one topology; "
                       f"stop animating it, apply it, or move it below the Drape modifier")
    return out


def topology_changed_message(obj, before, now, frame):
    """The message for a mesh whose topology at Drape's place changed."""
    return (f"'{obj.name}': the mesh above its Drape modifier changed topology at frame {frame} "
            f"({before[0]} -> {now[0]} vertices, {before[1]} -> {now[1]} faces; an animated modifier or "
            f"geometry above Drape?): Drape simulates one topology; stop animating it, apply it, or move it "
            f"below the Drape modifier, then go to the start frame")


def _type_label(mod):
    items = mod.bl_rna.properties["type"].enum_items
    item = items.get(mod.type)
    return item.name if item is not None else mod.type.replace('_', ' ').title()


def _scale_problem(obj):
    full = matrix_np(obj.matrix_world)
    if not np.isfinite(full).all():
        return (f"'{obj.name}' has a NaN or infinite transform (Location, Rotation, Scale or its parent's): "
                f"set finite values")
    m = full[:3, :3]
    det = float(np.linalg.det(m))
    size = float(np.abs(m).max()) if m.size else 0.0
    if not np.isfinite(det) or size == 0.0 or abs(det) <= 1e-12 * max(size, 1e-30) ** 3:
        return f"'{obj.name}' has a zero scale: it has no volume to simulate in; set its scale to non-zero"
    if det < 0.0 or any(s <= 0.0 for s in obj.scale):
        return (f"'{obj.name}' has a negative scale {tuple(round(s, 4) for s in obj.scale)}: apply the scale "
                f"(Ctrl+A > Scale) or make it positive")
    return None


def check_mesh(obj, role="cloth", settings=None, depsgraph=None):
    """Problems that stop ``obj`` from being simulated, as messages (empty: fine).

    ``settings`` is the cloth's ``Object.drape`` (defaults to the object's own);
    vertex-group names are checked against ``obj``."""
    if obj is None:
        return ["no object"]
    if obj.type != 'MESH':
        return [f"'{obj.name}' is {type_name(obj)}, not a mesh: Drape only simulates meshes"]
    settings = settings if settings is not None else obj.drape
    problems = []
    mesh = obj.data
    scale = _scale_problem(obj)
    if scale:
        problems.append(scale)
    if len(mesh.polygons) == 0:
        problems.append(f"'{obj.name}' has no faces: cloth needs polygons, not just vertices or edges")
        return problems

    topo = Topology(mesh)
    used = np.zeros(topo.vertex_count, bool)
    used[topo.face_indices] = True
    loose_verts = int((~used).sum())
    if loose_verts:
        problems.append(f"'{obj.name}' has {loose_verts} loose vertices not used by any face: "
                        f"delete them (Mesh > Clean Up > Delete Loose)")
    if topo.loose_edges and not (role == "cloth" and getattr(settings, "use_sewing", False)):  # sewing's stitches
        from .garment import loose_edges_are_stitches

        if role == "cloth" and loose_edges_are_stitches(mesh):
            problems.append(f"'{obj.name}' has {topo.loose_edges} loose edges between its panels: turn on "
                            f"Garment > Sewing to sew them as stitches, or delete them (Mesh > Clean Up > "
                            f"Delete Loose)")
        else:
            problems.append(f"'{obj.name}' has {topo.loose_edges} loose edges not used by any face: "
                            f"delete them (Mesh > Clean Up > Delete Loose)")

    co = local_positions(mesh).astype(np.float64)
    count, words = nonfinite_vertices(co)
    if count:
        # NaN and Inf compare unequal to everything: left in, they would pass
        # for duplicates and spoil the mesh's extent for the checks below.
        fix = "give it a finite position or delete it" if count == 1 else \
            "give them finite positions or delete them"
        problems.append(f"'{obj.name}': {words}: {fix}")
        co = co[np.isfinite(co).all(axis=1)]
    extent = float(np.ptp(co, axis=0).max()) if co.size else 0.0
    areas = np.empty(len(mesh.polygons), np.float32)
    mesh.polygons.foreach_get("area", areas)
    tiny = float(max(extent, 1e-6) ** 2 * 1e-10)
    degenerate = int((areas <= tiny).sum())  # a NaN area is not counted: the coordinate is reported
    if degenerate:
        problems.append(f"'{obj.name}' has {degenerate} degenerate (zero-area) faces: "
                        f"remove them (Mesh > Clean Up > Degenerate Dissolve)")
    quantum = max(extent, 1e-6) * 1e-6
    keys = np.round(co / quantum).astype(np.int64)
    duplicates = co.shape[0] - np.unique(keys, axis=0).shape[0]
    if duplicates:
        problems.append(f"'{obj.name}' has {duplicates} duplicate vertices (same position): "
                        f"merge them (Mesh > Clean Up > Merge by Distance)")

    groups = obj.vertex_groups
    if role == "cloth":
        sharing = [o.name for o in bpy.data.objects if o.data is mesh and o is not obj]
        if sharing:
            problems.append(f"'{obj.name}' shares its mesh '{mesh.name}' with "
                            + ", ".join(f"'{n}'" for n in sharing)
                            + ": Drape writes its result into the mesh; make it single-user "
                              "(Object > Relations > Make Single User)")
        for label, name in (("pin group", settings.pin_group), ("mass group", settings.mass_group)):
            if name and groups.get(name) is None:
                problems.append(f"'{obj.name}' has no vertex group '{name}' (its {label}): "
                                f"create it or pick an existing group")
    if role == "cloth":  # a proxy is used as modelled: its modifiers don't matter
        problems.extend(_modifier_problems(obj, depsgraph))
    return problems


def _modifier_problems(obj, depsgraph):
    problems = []
    drape_mod = writeback.find_modifier(obj)
    for mod in obj.modifiers:
        if mod is drape_mod or (drape_mod is not None and mod.name == drape_mod.name):
            continue
        if not (mod.show_viewport or mod.show_render):
            continue
        if mod.type in CONFLICTING:
            problems.append(f"'{obj.name}' has a {mod.type.replace('_', ' ').title()} modifier "
                            f"'{mod.name}': remove it, Drape simulates this object itself")
    problems.extend(animated_topology(obj))
    if depsgraph is not None and not problems and drape_mod is not None:
        with at_drape_point(obj, depsgraph) as mesh:
            if len(mesh.polygons) == 0:
                problems.append(f"'{obj.name}': the modifiers above its Drape modifier leave no faces to "
                                f"simulate")
    return problems


def check_cloth(obj, depsgraph=None):
    """All problems of a cloth object, including its proxy."""
    problems = check_mesh(obj, "cloth", depsgraph=depsgraph)
    if obj is not None and obj.type == 'MESH' and obj.drape.sim_source == 'PROXY':
        proxy = obj.drape.proxy
        if proxy is None:
            problems.append(f"'{obj.name}' simulates a proxy object but none is set: pick a mesh in Sim mesh > Proxy")
        elif proxy.type != 'MESH':
            problems.append(f"'{obj.name}': proxy '{proxy.name}' is {type_name(proxy)}, not a mesh")
        else:
            problems.extend(check_mesh(proxy, "proxy", settings=obj.drape))
    return problems
