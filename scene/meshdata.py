"""Reading meshes into arrays (foreach_get only) and checking that a mesh can
be simulated. Every problem an artist can cause becomes a
:class:`DrapeInputError` whose text names the object and the problem."""

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


# Modifiers that only move vertices (or edit weights/normals/UVs): anything
# else above the Drape modifier may change the vertex count or order, and then
# per-vertex solver state means nothing.
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


def to_world(local, matrix):
    return affine(local, matrix_np(matrix))


def to_local(world, matrix):
    return affine(world, matrix_np(matrix.inverted_safe()))


class Sample:
    """One frame of a mesh as the depsgraph evaluated it, in world space."""

    __slots__ = ("positions", "pin_weight", "mass_weight", "matrix")

    def __init__(self, positions, pin_weight, mass_weight, matrix):
        self.positions = positions
        self.pin_weight = pin_weight
        self.mass_weight = mass_weight
        self.matrix = matrix


def sample(obj, depsgraph, settings=None):
    """Evaluated positions (world), pin and mass weights of a mesh carrying the
    Drape modifier: the values stored *before* the result is applied.
    ``settings``: the cloth's ``Object.drape`` (a proxy reads its cloth's groups)."""
    settings = settings if settings is not None else obj.drape
    obj_eval = obj.evaluated_get(depsgraph)
    mesh = obj_eval.data
    local = read_point_attribute(mesh, writeback.ATTR_INPUT, 3)
    if local is None:  # modifier disabled: the stack's result is the input
        local = local_positions(mesh)
    pin = read_point_attribute(mesh, writeback.ATTR_PIN, 1)
    mass = read_point_attribute(mesh, writeback.ATTR_MASS, 1)
    n = local.shape[0]
    if pin is None or not settings.pin_group:
        pin = np.zeros(n, np.float32)
    if mass is None or not settings.mass_group:
        mass = np.ones(n, np.float32)
    matrix = obj_eval.matrix_world.copy()
    return Sample(to_world(local, matrix), np.clip(pin, 0.0, 1.0), np.clip(mass, 0.0, None), matrix)


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
    if topo.loose_edges:
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
        problems.extend(_modifier_problems(obj, topo, depsgraph))
    return problems


def _modifier_problems(obj, topo, depsgraph):
    problems = []
    drape_mod = writeback.find_modifier(obj)
    seen_drape = False
    for mod in obj.modifiers:
        if mod is drape_mod or (drape_mod is not None and mod.name == drape_mod.name):
            seen_drape = True
            continue
        if not (mod.show_viewport or mod.show_render):
            continue
        if mod.type in CONFLICTING:
            problems.append(f"'{obj.name}' has a {mod.type.replace('_', ' ').title()} modifier "
                            f"'{mod.name}': remove it, Drape simulates this object itself")
        elif mod.type not in DEFORM_ONLY and mod.type != 'NODES':
            where = "below" if seen_drape else "above"
            problems.append(f"'{obj.name}': modifier '{mod.name}' ({mod.type.replace('_', ' ').title()}) "
                            f"changes the topology {where} the simulated point; Drape needs deform-only "
                            f"modifiers (Armature, Hook, shape keys...): apply or remove it")
    if depsgraph is not None and not problems:
        mesh_eval = obj.evaluated_get(depsgraph).data
        if len(mesh_eval.vertices) != topo.vertex_count or len(mesh_eval.polygons) != topo.face_sizes.size:
            problems.append(f"'{obj.name}': its modifiers change the vertex count "
                            f"({topo.vertex_count} -> {len(mesh_eval.vertices)}); Drape needs deform-only "
                            f"modifiers above the simulated point")
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
