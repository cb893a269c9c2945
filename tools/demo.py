"""`make demo`: Drape end to end on a real character, headless, in a few minutes.

Builds a scene from real parts with bpy, the way an artist's script would:

- Rigify's human metarig (bundled with Blender), walking procedurally with arm
  swings and a 90-degree turn, with a simple body mesh skinned to its bones;
- capsule colliders made from its bones by ``drape.capsules_from_armature``;
- a cape pinned at the collar, following the chest through an Armature
  modifier, simulated on a coarse proxy and skinned onto the dense render mesh;
- a T-shirt and a skirt sewn from flat panels modelled beside the body
  (front and back, one mesh each, joined by loose edges): Garment > Sewing
  closes their seams around the body while the character stands, arms
  raised, over the first frames (see dress_sewn());
- with --layered-skirts, instead of the sewn skirt, a skirt and a shorter
  overskirt over it, each with self collision, colliding with each other as
  one cloth-cloth group, the overskirt ordered outside (see main());
- a flag on a pole in a Wind force field;
- a tablecloth dropped onto a table (a box collider fitted to its top and one
  to each leg by ``drape.collider_add``) and the ground (a plane collider);

then bakes every cloth with ``drape.bake`` (shape keys, PC2 and Alembic, one
target per object), saves ``out/demo.blend``, renders a short frame sequence
with Workbench to ``out/frames/`` and a contact sheet to ``out/demo.png`` (two
rows of the wide shot, one row of close-ups from a camera riding with the
character), and prints a table of what was simulated and what it cost, and
the quality of the last frame (strain, penetration, crossings, seam gaps).

    .venv/bin/python tools/demo.py [--frames 72] [--out out] [--no-render] [--layered-skirts]
"""

import argparse
import math
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FPS = 24

# Bones that carry the body mesh and the colliders, with a body radius (m) at head and tail.
BODY_BONES = {
    "spine": (0.15, 0.14), "spine.001": (0.14, 0.13), "spine.002": (0.13, 0.14),
    "spine.003": (0.14, 0.10), "spine.004": (0.06, 0.05), "spine.005": (0.05, 0.05),
    "spine.006": (0.09, 0.09),
    "shoulder.L": (0.05, 0.055), "shoulder.R": (0.05, 0.055),
    "upper_arm.L": (0.055, 0.045), "forearm.L": (0.045, 0.035), "hand.L": (0.035, 0.03),
    "upper_arm.R": (0.055, 0.045), "forearm.R": (0.045, 0.035), "hand.R": (0.035, 0.03),
    "thigh.L": (0.085, 0.06), "shin.L": (0.055, 0.045), "foot.L": (0.045, 0.035),
    "thigh.R": (0.085, 0.06), "shin.R": (0.055, 0.045), "foot.R": (0.045, 0.035),
}


# Frames the character stands still at the start while the sewn garments'
# seams close around it; then it starts walking.
DRESS_FRAMES = 12
# The arms' lowering from the metarig's rest pose (degrees): ARMS_DOWN[2] until
# frame ARMS_DOWN[0], eased to ARMS_DOWN[3] at frame ARMS_DOWN[1].
ARMS_DOWN = (6, 20, 12.0, 28.0)
# The sewn T-shirt's gravity is off until this frame (its seams close), then
# eased on over four frames.
SHIRT_GRAVITY_FRAME = 10
# Max sewing force (N a stitch): on panels meshed every 2 cm a stitch moves
# little more than its own vertex, so a few hundredths of a newton close a
# seam in a few frames without throwing the panels through the body.
SEWING_FORCE = 0.2


def log(msg):
    print(f"demo: {msg}", flush=True)


# --------------------------------------------------------------------------- helpers

def grid_mesh(name, cols, rows, corner, u_axis, v_axis):
    """A (cols x rows)-quad grid: vertex (i, j) at corner + u_axis*i/cols + v_axis*j/rows.
    Row j = 0 is the first row (the pinned edge for cloth)."""
    import bpy
    corner = np.asarray(corner, float)
    u_axis = np.asarray(u_axis, float)
    v_axis = np.asarray(v_axis, float)
    jj, ii = np.meshgrid(np.arange(rows + 1), np.arange(cols + 1), indexing="ij")
    co = corner + ii.ravel()[:, None] / cols * u_axis + jj.ravel()[:, None] / rows * v_axis
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    v0 = (r * (cols + 1) + c).ravel()
    quads = np.stack([v0, v0 + 1, v0 + cols + 2, v0 + cols + 1], axis=1)
    return mesh_from_arrays(name, co, quads), (rows + 1, cols + 1)


def mesh_from_arrays(name, co, quads):
    import bpy
    me = bpy.data.meshes.new(name)
    me.vertices.add(len(co))
    me.vertices.foreach_set("co", np.asarray(co, np.float32).ravel())
    nq = len(quads)
    me.loops.add(nq * 4)
    me.loops.foreach_set("vertex_index", np.asarray(quads, np.int32).ravel())
    me.polygons.add(nq)
    me.polygons.foreach_set("loop_start", np.arange(0, nq * 4, 4, dtype=np.int32))
    me.update(calc_edges=True)
    me.validate()
    return me


def new_object(name, data, collection=None):
    import bpy
    obj = bpy.data.objects.new(name, data)
    (collection or bpy.context.scene.collection).objects.link(obj)
    return obj


def material(name, rgb):
    import bpy
    mat = bpy.data.materials.new(name)
    mat.diffuse_color = (*rgb, 1.0)
    return mat


def set_group(obj, name, indices, weight=1.0):
    g = obj.vertex_groups.get(name) or obj.vertex_groups.new(name=name)
    g.add([int(i) for i in indices], weight, "REPLACE")
    return g


def bind_to_bone(obj, armature, bone):
    """Armature modifier + one vertex group at weight 1: the mesh follows `bone`."""
    set_group(obj, bone, range(len(obj.data.vertices)))
    mod = obj.modifiers.new("Armature", "ARMATURE")
    mod.object = armature
    return mod


# --------------------------------------------------------------------------- the character

def add_metarig():
    import addon_utils
    import bpy
    addon_utils.enable("rigify", default_set=True)
    bpy.ops.object.armature_human_metarig_add()
    rig = bpy.context.object
    rig.name = "Character"
    bpy.ops.object.mode_set(mode="OBJECT")
    return rig


def _basis_quaternion(rig, bone_name, rotation):
    """Pose-basis quaternion of `bone_name` for a rotation given in the armature's
    rest axes (3x3), relative to its parent's posed frame."""
    from mathutils import Matrix
    rest = rig.data.bones[bone_name].matrix_local.to_3x3()
    return (rest.inverted() @ Matrix(rotation) @ rest).to_quaternion()


def _rot(axis, degrees):
    a = math.radians(degrees)
    c, s = math.cos(a), math.sin(a)
    if axis == "X":
        return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])
    if axis == "Y":
        return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])


def _smoothstep(t):
    t = min(max(t, 0.0), 1.0)
    return t * t * (3.0 - 2.0 * t)


def _walking(f):
    """0 while the character stands to be dressed, easing to 1 over eight frames."""
    return _smoothstep((f - DRESS_FRAMES) / 8.0)


def walk_path(frames, speed=1.3, turn_start=DRESS_FRAMES + 26, turn_frames=24):
    """Root position and heading per frame: stand, walk towards -Y, then turn
    90 degrees left (towards +X) along an arc."""
    pos = np.zeros((frames + 2, 3))
    heading = np.zeros(frames + 2)
    p = np.array([0.0, 1.6, 0.0])
    h = 0.0
    for f in range(1, frames + 2):
        pos[f] = p
        heading[f] = h
        if turn_start <= f < turn_start + turn_frames:
            h += math.radians(90.0) / turn_frames
        d = np.array([math.sin(h), -math.cos(h), 0.0])   # facing -Y at h = 0, turning to +X
        p = p + d * speed * _walking(f) / FPS
    return pos, heading


def animate_walk(rig, frames, cycle_frames=26):
    """Keyframe a walk: the character stands for DRESS_FRAMES, then legs and
    arms swing in opposition, knees and elbows bend, the chest counter-rotates,
    the root follows walk_path with a small bob."""
    pos, heading = walk_path(frames)
    for pb in rig.pose.bones:
        pb.rotation_mode = "QUATERNION"
    for f in range(1, frames + 2):
        ph = 2.0 * math.pi * max(f - DRESS_FRAMES, 0) / cycle_frames
        amp = _walking(f)
        s = amp * math.sin(ph)
        # The arms start raised (the pose the sewn T-shirt's sleeves are cut
        # for, so its seams close around them) and come down while it settles.
        t = _smoothstep((f - ARMS_DOWN[0]) / (ARMS_DOWN[1] - ARMS_DOWN[0]))
        down = ARMS_DOWN[2] + (ARMS_DOWN[3] - ARMS_DOWN[2]) * t
        arm_down = {"L": _rot("Y", down), "R": _rot("Y", -down)}
        pose = {
            "thigh.L": _rot("X", -28.0 * s),
            "thigh.R": _rot("X", 28.0 * s),
            "shin.L": _rot("X", 8.0 + 38.0 * amp * max(0.0, math.sin(ph - 1.3))),
            "shin.R": _rot("X", 8.0 + 38.0 * amp * max(0.0, -math.sin(ph - 1.3))),
            "foot.L": _rot("X", -10.0 * s),
            "foot.R": _rot("X", 10.0 * s),
            "upper_arm.L": _rot("X", 24.0 * s) @ arm_down["L"],
            "upper_arm.R": _rot("X", -24.0 * s) @ arm_down["R"],
            "forearm.L": _rot("X", -12.0 - 14.0 * max(0.0, -s)),
            "forearm.R": _rot("X", -12.0 - 14.0 * max(0.0, s)),
            "spine.002": _rot("Z", -5.0 * s),
            "spine.003": _rot("Z", -4.0 * s),
        }
        for name, rot in pose.items():
            pb = rig.pose.bones[name]
            pb.rotation_quaternion = _basis_quaternion(rig, name, rot)
            pb.keyframe_insert("rotation_quaternion", frame=f)
        bob = 0.025 * (1.0 - amp + amp * abs(math.cos(ph)))
        rig.location = (pos[f][0], pos[f][1], pos[f][2] - bob)
        rig.rotation_euler = (0.0, 0.0, heading[f])
        rig.keyframe_insert("location", frame=f)
        rig.keyframe_insert("rotation_euler", frame=f)


def add_body(rig):
    """A mannequin: one capsule-shaped tube per body bone, skinned to that bone
    (vertex group = bone name, Armature modifier), so the render shows the body
    and drape.capsules_from_armature can measure the radii from it."""
    import bmesh
    import bpy
    from mathutils import Matrix, Vector
    bm = bmesh.new()
    deform = bm.verts.layers.deform.verify()
    names = list(BODY_BONES)
    for gi, name in enumerate(names):
        bone = rig.data.bones[name]
        r0, r1 = BODY_BONES[name]
        head, tail = bone.head_local, bone.tail_local
        axis = tail - head
        length = axis.length
        ret = bmesh.ops.create_cone(bm, cap_ends=True, cap_tris=False, segments=12,
                                    radius1=r0, radius2=r1, depth=length)
        # create_cone builds along Z centred at the origin: align Z with the bone.
        rot = Vector((0, 0, 1)).rotation_difference(axis.normalized()).to_matrix().to_4x4()
        m = Matrix.Translation((head + tail) / 2) @ rot
        bmesh.ops.transform(bm, matrix=m, verts=ret["verts"])
        for v in ret["verts"]:
            v[deform][gi] = 1.0
        # Rounded joints: a sphere at the head.
        sph = bmesh.ops.create_uvsphere(bm, u_segments=12, v_segments=8, radius=r0)
        bmesh.ops.translate(bm, vec=head, verts=sph["verts"])
        for v in sph["verts"]:
            v[deform][gi] = 1.0
    head_sphere = bmesh.ops.create_uvsphere(bm, u_segments=16, v_segments=10, radius=0.11)
    hb = rig.data.bones["spine.006"]
    bmesh.ops.translate(bm, vec=(hb.head_local + hb.tail_local) / 2, verts=head_sphere["verts"])
    gi_head = names.index("spine.006")
    for v in head_sphere["verts"]:
        v[deform][gi_head] = 1.0
    me = bpy.data.meshes.new("Body")
    bm.to_mesh(me)
    bm.free()
    body = new_object("Body", me)
    for name in names:
        body.vertex_groups.new(name=name)
    body.parent = rig
    mod = body.modifiers.new("Armature", "ARMATURE")
    mod.object = rig
    body.data.materials.append(material("Skin", (0.8, 0.62, 0.5)))
    for p in body.data.polygons:
        p.use_smooth = True
    return body


# --------------------------------------------------------------------------- garments and props

def add_cape(rig, dense=(56, 72), coarse=(14, 18)):
    """A cape hanging behind the back from the collar. Returns (render mesh, proxy).
    Both follow the chest bone through an Armature modifier; the top row is the
    pin group 'collar'."""
    bone = rig.data.bones["spine.003"]
    top_z = bone.tail_local.z - 0.06
    back_y = bone.tail_local.y + 0.19
    width, length = 0.44, 0.95
    corner = (-width / 2, back_y, top_z)
    u = (width, 0.0, 0.0)
    v = (0.0, 0.0, -length)
    out = []
    for name, (cols, rows) in (("Cape", dense), ("CapeProxy", coarse)):
        me, (nrows, ncols) = grid_mesh(name, cols, rows, corner, u, v)
        obj = new_object(name, me)
        set_group(obj, "collar", range(ncols))
        bind_to_bone(obj, rig, "spine.003")
        obj.parent = rig
        out.append(obj)
    cape, proxy = out
    cape.data.materials.append(material("Cape", (0.55, 0.08, 0.1)))
    for p in cape.data.polygons:
        p.use_smooth = True
    proxy.hide_render = True
    proxy.display_type = "WIRE"
    return cape, proxy


def add_skirt(rig, name="Skirt", around=64, down=22, length=0.55, r_top=0.19, r_bot=0.36,
              color=(0.15, 0.3, 0.55)):
    """A flared skirt: a cone from the waist (pinned ring 'waist') down `length`,
    following the hips through an Armature modifier."""
    hips = rig.data.bones["spine"]
    z_top = hips.head_local.z + 0.02
    z_bot = z_top - length
    yc = hips.head_local.y - 0.02
    co = []
    for j in range(down + 1):
        t = j / down
        z = z_top + (z_bot - z_top) * t
        r = r_top + (r_bot - r_top) * t
        for i in range(around):
            a = 2 * math.pi * i / around
            co.append((r * math.cos(a), yc + r * math.sin(a), z))
    quads = []
    for j in range(down):
        for i in range(around):
            a0, a1 = j * around + i, j * around + (i + 1) % around
            # Outward face normals: the layer order keeps an outer layer on
            # the side its inner layer's normals point to.
            quads.append((a0, a0 + around, a1 + around, a1))
    obj = new_object(name, mesh_from_arrays(name, np.array(co), np.array(quads)))
    set_group(obj, "waist", range(around))
    bind_to_bone(obj, rig, "spine")
    obj.parent = rig
    obj.data.materials.append(material(name, color))
    for p in obj.data.polygons:
        p.use_smooth = True
    return obj


def sewn_mesh(name, panel_co, quads, seam):
    """A mesh of two copies of one flat panel: `panel_co` (2n, 3) holds the
    front copy's n positions, then the back copy's; `quads` are one copy's.
    Sewn along the panel's `seam` vertices: one loose edge from each front
    vertex to the same vertex of the back, as drape.sew_edge_loops writes
    them for two loops of equal counts."""
    import bpy
    n = len(panel_co) // 2
    faces = np.concatenate([quads, quads + n])
    seam = np.asarray(seam, np.int64)
    edges = np.stack([seam, seam + n], axis=1)
    me = bpy.data.meshes.new(name)
    me.from_pydata([tuple(map(float, c)) for c in panel_co], [tuple(map(int, e)) for e in edges],
                   [tuple(map(int, q)) for q in faces])
    me.update()
    return me


def _grid_quads(alive):
    """Quads (i, j)-(i+1, j)-(i+1, j+1)-(i, j+1) of a (rows, cols) vertex grid
    where `alive(j, i)` says the quad with corner (j, i) exists; returns the
    quads in compact vertex numbering and the grid index of each vertex."""
    rows, cols = alive.shape[0] + 1, alive.shape[1] + 1
    jj, ii = np.nonzero(alive)
    v0 = jj * cols + ii
    quads = np.stack([v0, v0 + 1, v0 + cols + 1, v0 + cols], axis=1)
    used = np.unique(quads)
    remap = np.full(rows * cols, -1, np.int64)
    remap[used] = np.arange(len(used))
    return remap[quads], used


def add_sewn_skirt(rig, name="Skirt", length=0.55, waist=1.5, hem=2.3, spacing=0.02, offset=0.19,
                   color=(0.15, 0.3, 0.55)):
    """A skirt sewn from two flat trapezoid panels (front and back, one mesh)
    hanging `offset` in front of and behind the hips, their side edges joined
    by loose edges (the seams; Garment > Sewing closes them around the body).
    `waist` and `hem` are the skirt's circumferences. The middle of each
    panel's waist is the pin group 'waist', following the hips through an
    Armature modifier."""
    hips = rig.data.bones["spine"]
    z_top = hips.head_local.z + 0.02
    yc = hips.head_local.y - 0.005
    cols = int(round(hem / 2 / spacing))
    rows = int(round(length / spacing))
    jj, ii = np.meshgrid(np.arange(rows + 1), np.arange(cols + 1), indexing="ij")
    t = jj / rows
    width = waist / 2 + (hem - waist) / 2 * t
    x = (ii / cols - 0.5) * width
    z = z_top - length * t
    panel = np.stack([x.ravel(), np.zeros(x.size), z.ravel()], axis=1)
    quads, used = _grid_quads(np.ones((rows, cols), bool))
    panel = panel[used]
    front = panel + (0.0, yc - offset, 0.0)
    back = panel + (0.0, yc + offset, 0.0)
    ii, jj = ii.ravel()[used], jj.ravel()[used]
    seam = np.nonzero((ii == 0) | (ii == cols))[0]
    me = sewn_mesh(name, np.concatenate([front, back]), quads, seam)
    obj = new_object(name, me)
    n = len(panel)
    waist_pins = np.nonzero((jj == 0) & (np.abs(panel[:, 0]) <= 0.07))[0]
    set_group(obj, "waist", np.concatenate([waist_pins, waist_pins + n]))
    bind_to_bone(obj, rig, "spine")
    obj.parent = rig
    obj.data.materials.append(material(name, color))
    for p in obj.data.polygons:
        p.use_smooth = True
    return obj


def add_tshirt(rig, name="TShirt", half_width=0.26, hem=1.10, top=1.74, sleeve=0.18, neck=0.12,
               spacing=0.02, offset=0.17, blend=0.08, color=(0.85, 0.85, 0.8)):
    """A T-shirt sewn from two flat T-shaped panels (front and back, one
    mesh) `offset` in front of and behind the chest: a body `half_width` wide
    each side from the hem (z) to the top, sleeves `sleeve` long turned down
    along the upper arms of the frame-1 pose (the turn blended over `blend`
    from the armpit, so the shoulder slopes). Sewn at the sides and under
    the sleeves, and along the shoulders and the sleeves' tops outside the
    neck opening (`neck` each side of the middle). Nothing is pinned: the
    shirt rests on the shoulders once sewn (main() holds its gravity off
    while the seams close)."""
    pb = rig.pose.bones["upper_arm.L"]
    head, tail = np.array(pb.head), np.array(pb.tail)
    d = tail - head
    phi = math.atan2(-d[2], d[0])   # below horizontal, in the x-z plane
    # The armpit: the sleeve's underside runs 0.1 m below the arm's axis.
    n_dir = np.array((math.sin(phi), math.cos(phi)))
    hx = head[0] - half_width
    armpit = head[2] - (0.1 - hx * n_dir[0]) / n_dir[1]
    h = spacing
    k_pit = int(round((armpit - hem) / h))
    rows = int(round((top - hem) / h))
    nb = int(round(half_width / h))
    ns = int(round(sleeve / h))
    cols = 2 * (nb + ns)
    u = (np.arange(cols + 1) - (nb + ns)) * h
    v = hem + np.arange(rows + 1) * h
    qi = np.arange(cols)
    qj = np.arange(rows)
    in_body = (np.abs(qi - (nb + ns) + 0.5) < nb)[None, :]
    in_sleeve = (qj >= k_pit)[:, None]
    quads, used = _grid_quads(in_body | in_sleeve)
    jj, ii = np.divmod(used, cols + 1)
    uu, vv = u[ii], v[jj]
    z_pit = hem + k_pit * h
    # Sleeves: turned down about the armpit by phi, blended in over `blend`.
    a = np.maximum(np.abs(uu) - half_width, 0.0)
    theta = phi * np.minimum(a / blend, 1.0)
    b = vv - z_pit
    x_rel = a * np.cos(theta) + b * np.sin(theta)
    z_rel = -a * np.sin(theta) + b * np.cos(theta)
    side = np.abs(uu) > half_width + 1e-9
    x = np.where(side, np.sign(uu) * (half_width + x_rel), uu)
    z = np.where(side, z_pit + z_rel, vv)
    yc = 0.5 * (rig.data.bones["spine.003"].head_local.y + rig.data.bones["spine.003"].tail_local.y)
    panel = np.stack([x, np.zeros_like(x), z], axis=1)
    front = panel + (0.0, yc - offset, 0.0)
    back = panel + (0.0, yc + offset, 0.0)
    au = np.abs(uu)
    side_seam = (np.abs(au - half_width) < 1e-9) & (jj <= k_pit)
    under_sleeve = (jj == k_pit) & (au >= half_width - 1e-9)
    shoulder = (jj == rows) & (au >= neck - 1e-9)
    seam = np.nonzero(side_seam | under_sleeve | shoulder)[0]
    obj = new_object(name, sewn_mesh(name, np.concatenate([front, back]), quads, seam))
    bind_to_bone(obj, rig, "spine.003")
    obj.parent = rig
    obj.data.materials.append(material(name, color))
    for p in obj.data.polygons:
        p.use_smooth = True
    return obj


def stitches(obj):
    """(m, 2) vertex pairs of the loose edges of `obj`'s own mesh (its seams)."""
    from drape.scene.garment import loose_edges
    return loose_edges(obj.data)


def add_flag(location=(3.4, -1.0, 0.0)):
    """A pole (a capsule collider too) with a flag pinned along it and a Wind field."""
    import bpy
    x, y, z = location
    pole_h = 2.6
    bpy.ops.mesh.primitive_cylinder_add(radius=0.03, depth=pole_h, location=(x, y, z + pole_h / 2))
    pole = bpy.context.object
    pole.name = "FlagPole"
    pole.data.materials.append(material("Pole", (0.4, 0.4, 0.42)))
    w, h = 1.3, 0.85
    me, (nrows, ncols) = grid_mesh("Flag", 44, 28, (x + 0.035, y, z + pole_h - 0.05),
                                   (0.0, 0.0, -h), (w, 0.0, 0.0))
    flag = new_object("Flag", me)
    # Rows run away from the pole: row 0 is the hoist, pinned to the pole.
    set_group(flag, "hoist", range(ncols))
    flag.data.materials.append(material("Flag", (0.95, 0.75, 0.1)))
    bpy.ops.object.effector_add(type="WIND", location=(x - 1.5, y - 0.3, z + pole_h - 0.45))
    wind = bpy.context.object
    wind.name = "Wind"
    wind.rotation_euler = (0.0, math.radians(90.0), math.radians(8.0))   # blows along +X
    # Drape reads a Wind field's strength as the air speed in m/s; only the +Z side
    # of the field (towards the flag) blows, so the walking character, who stays
    # on the other side of the field's origin, walks in still air.
    wind.field.strength = 7.0
    wind.field.noise = 0.5
    # Blender seeds a new field's noise from the clock: fix it, so the demo
    # bakes the same flag every run.
    wind.field.seed = 7
    wind.field.z_direction = "POSITIVE"
    wind.field.use_max_distance = True
    wind.field.distance_max = 4.0
    wind.field.falloff_power = 1.0
    return flag, pole, wind


def add_table(location=(-2.6, -0.6, 0.0), size=(1.2, 0.8), height=0.75):
    """A table (box top, four legs) and a cloth dropped over it; returns the
    cloth and the table's parts (made box colliders fitted to their meshes by
    main())."""
    import bpy
    x, y, z = location
    sx, sy = size
    bpy.ops.mesh.primitive_cube_add(size=1.0, location=(x, y, z + height - 0.025))
    top = bpy.context.object
    top.name = "TableTop"
    top.scale = (sx, sy, 0.05)
    wood = material("Wood", (0.45, 0.28, 0.15))
    top.data.materials.append(wood)
    parts = [top]
    for i, (dx, dy) in enumerate(((1, 1), (1, -1), (-1, 1), (-1, -1))):
        bpy.ops.mesh.primitive_cube_add(size=1.0, location=(x + dx * (sx / 2 - 0.06), y + dy * (sy / 2 - 0.06),
                                                            z + (height - 0.05) / 2))
        leg = bpy.context.object
        leg.name = f"TableLeg{i}"
        leg.scale = (0.05, 0.05, height - 0.05)
        leg.data.materials.append(wood)
        parts.append(leg)
    side = 2.3
    me, _ = grid_mesh("Tablecloth", 110, 110, (x - side / 2, y - side / 2 + 0.25, z + height + 0.18),
                      (side, 0.0, 0.0), (0.0, side, 0.0))
    cloth = new_object("Tablecloth", me)
    cloth.data.materials.append(material("Tablecloth", (0.92, 0.92, 0.88)))
    return cloth, parts


def add_ground(size=14.0):
    import bpy
    bpy.ops.mesh.primitive_plane_add(size=size, location=(0.0, 0.0, 0.0))
    ground = bpy.context.object
    ground.name = "Ground"
    ground.data.materials.append(material("Ground", (0.35, 0.36, 0.33)))
    return ground


# --------------------------------------------------------------------------- rendering

def setup_render(scene, res=(480, 300)):
    import bpy
    scene.render.engine = "BLENDER_WORKBENCH"
    scene.render.resolution_x, scene.render.resolution_y = res
    scene.render.resolution_percentage = 100
    scene.render.image_settings.file_format = "PNG"
    shading = scene.display.shading
    shading.light = "STUDIO"
    shading.color_type = "MATERIAL"
    shading.show_shadows = True
    shading.show_cavity = False
    scene.display.shadow_focus = 0.2
    cam_data = bpy.data.cameras.new("Camera")
    cam_data.lens = 27.0
    cam = new_object("Camera", cam_data)
    cam.location = (0.2, -7.6, 3.0)
    target = np.array([0.3, 0.0, 0.8])
    d = target - np.array(cam.location)
    from mathutils import Vector
    cam.rotation_euler = Vector(d).to_track_quat("-Z", "Y").to_euler()
    scene.camera = cam
    scene.world = bpy.data.worlds.new("World")
    return cam


def add_follow_camera(rig):
    """A camera riding with the character (parented to the rig), behind and to its
    side, so the close-ups show the cape and the skirts through the walk and turn."""
    from mathutils import Vector
    cam_data = bpy_data().cameras.new("FollowCamera")
    cam_data.lens = 35.0
    cam = new_object("FollowCamera", cam_data)
    cam.parent = rig
    cam.location = (2.2, 2.4, 1.7)   # rig space: the character faces -Y
    d = Vector((0.0, 0.0, 1.05)) - Vector(cam.location)
    cam.rotation_euler = d.to_track_quat("-Z", "Y").to_euler()
    return cam


def bpy_data():
    import bpy
    return bpy.data


def render_frames(scene, frames, folder, prefix="frame"):
    import bpy
    os.makedirs(folder, exist_ok=True)
    paths = []
    for f in frames:
        scene.frame_set(f)
        path = os.path.join(folder, f"{prefix}_{f:04d}.png")
        scene.render.filepath = path
        bpy.ops.render.render(write_still=True)
        paths.append(path)
    return paths


def contact_sheet(paths, out_path, columns=4, labels=None):
    """Tile rendered frames into one PNG (bpy's image API, no extra packages)."""
    import bpy
    tiles = []
    for p in paths:
        img = bpy.data.images.load(p)
        w, h = img.size
        px = np.empty(w * h * 4, dtype=np.float32)
        img.pixels.foreach_get(px)
        tiles.append(px.reshape(h, w, 4))
        bpy.data.images.remove(img)
    h, w = tiles[0].shape[:2]
    rows = (len(tiles) + columns - 1) // columns
    pad = 4
    sheet = np.ones((rows * (h + pad) + pad, columns * (w + pad) + pad, 4), dtype=np.float32)
    for k, t in enumerate(tiles):
        r, c = divmod(k, columns)
        # Blender images are stored bottom row first: put the first frame at the top left.
        r = rows - 1 - r
        y0 = pad + r * (h + pad)
        x0 = pad + c * (w + pad)
        sheet[y0:y0 + h, x0:x0 + w] = t
    img = bpy.data.images.new("contact_sheet", sheet.shape[1], sheet.shape[0], alpha=True)
    img.pixels.foreach_set(sheet.ravel())
    img.filepath_raw = out_path
    img.file_format = "PNG"
    img.save()
    bpy.data.images.remove(img)
    return out_path


# --------------------------------------------------------------------------- Drape set-up

def _select_only(objs, active=None):
    import bpy
    for o in bpy.context.view_layer.objects:
        o.select_set(False)
    for o in objs:
        o.select_set(True)
    bpy.context.view_layer.objects.active = active or (objs[0] if objs else None)


def _run_op(op, **kw):
    result = op(**kw)
    if "FINISHED" not in result:
        raise RuntimeError(f"{op.idname_py()} did not finish: {result}")
    return result


def make_capsules(rig):
    """drape.capsules_from_armature on the body bones. Only the bones that carry
    the body mesh deform (the metarig's face and finger bones have no mesh), so
    they are the ones that get capsules."""
    import bpy
    for bone in rig.data.bones:
        bone.use_deform = bone.name in BODY_BONES
    _select_only([rig])
    _run_op(bpy.ops.drape.capsules_from_armature)
    capsules = [o for o in bpy.context.scene.objects
                if o.drape_collider.kind == "CAPSULE" and o.name not in ("FlagPole",)]
    # The radii measured from the mesh come out smaller than the tubes the
    # body is made of (the torso's by up to half), and the sewn garments lie
    # on the capsules: give each capsule its tube's radii, so what the
    # render shows is what the cloth collides with.
    for obj in capsules:
        bone = obj.name[len(f"DC_{rig.name}_"):]
        if bone in BODY_BONES:
            obj.drape_collider.radius_start, obj.drape_collider.radius_end = BODY_BONES[bone]
    return capsules


def make_cloth(obj, pin_group="", **settings):
    import bpy
    _select_only([obj])
    if settings.get("use_sewing"):
        # As drape.sew_edge_loops leaves it: loose edges are stitches, not stray edges.
        obj.drape.use_sewing = True
    _run_op(bpy.ops.drape.cloth_add, pin_group=pin_group)
    for k, v in settings.items():
        setattr(obj.drape, k, v)


def dress_sewn(obj, pin_group, gravity_off=False):
    """Make a sewn garment a cloth (Garment > Sewing on) that closes its seams
    over the first frames: at most SEWING_FORCE a stitch until frame
    SHIRT_GRAVITY_FRAME, no limit after (a stitch still open then closes
    at once; a closed one holds whatever the limit); with
    `gravity_off` it floats until then (nothing pinned holds it while the
    seams close). Self collision stays off, so the seams close fully (the
    contacts do not know the stitches). Four iterations: the stitches at the
    end of a seam, where two panels' weights hang from one point, stay
    within a millimetre (one iteration leaves them centimetres open)."""
    make_cloth(obj, pin_group, substeps=8, iterations=4, tethers=bool(pin_group), use_sewing=True,
               areal_density=0.15, air_drag=2.0)
    # 10 mm from the colliders: the body's tubes bulge a little between their capsules.
    obj.drape.thickness = 0.01
    # Keys one frame apart: no frames in between with a weaker limit.
    for frame, force in ((1, SEWING_FORCE), (SHIRT_GRAVITY_FRAME - 1, SEWING_FORCE), (SHIRT_GRAVITY_FRAME, 0.0)):
        obj.drape.sewing_max_force = force
        obj.drape.keyframe_insert("sewing_max_force", frame=frame)
    if gravity_off:
        for frame, g in ((1, 0.0), (SHIRT_GRAVITY_FRAME, 0.0), (SHIRT_GRAVITY_FRAME + 4, 1.0)):
            obj.drape.gravity_scale = g
            obj.drape.keyframe_insert("gravity_scale", frame=frame)
    return obj


class StepMeter:
    """Reads each cloth's runtime cost after every frame (a frame_change_post
    handler that runs after Drape's own)."""

    def __init__(self, objects):
        self.names = [o.name for o in objects]
        self.step_ms = {n: [] for n in self.names}
        self.frame_ms = {n: [] for n in self.names}
        self.parts_ms = {n: [] for n in self.names}

    def __call__(self, scene, depsgraph=None):
        import bpy
        from drape.scene import runtime
        for n in self.names:
            obj = bpy.data.objects.get(n)
            entry = runtime.get(obj) if obj is not None else None
            if entry is None or entry.last_frame != scene.frame_current or entry.last_frame == entry.first_frame:
                continue
            self.step_ms[n].append(entry.last_step_ms)
            self.frame_ms[n].append(entry.last_step_ms + entry.last_read_ms + entry.last_skin_ms
                                    + entry.last_write_ms)
            self.parts_ms[n].append((entry.last_read_ms, entry.last_skin_ms, entry.last_write_ms))


def simulated_vertices(obj):
    """Simulated (coarse) vertices of `obj`, and the names of the cloths sharing its
    simulation (a cloth-cloth group is one model)."""
    from drape.scene import runtime
    entry = runtime.get(obj)
    if entry is None or entry.model is None:
        return None, ()
    members = getattr(entry, "members", None)
    if not members:
        return entry.model.n, ()
    for m in members:
        if m.uid == obj.drape.uid:
            return m.stop - m.start, tuple(x.name for x in members if x.uid != m.uid)
    return entry.model.n, ()


# --------------------------------------------------------------------------- quality of the bake

def _world_mesh(obj, depsgraph):
    """World positions of the evaluated (baked) mesh and its polygons."""
    ev = obj.evaluated_get(depsgraph)
    me = ev.to_mesh()
    co = np.empty(len(me.vertices) * 3, np.float64)
    me.vertices.foreach_get("co", co)
    fi = np.empty(len(me.loops), np.int64)
    me.loops.foreach_get("vertex_index", fi)
    fs = np.empty(len(me.polygons), np.int64)
    me.polygons.foreach_get("loop_total", fs)
    ev.to_mesh_clear()
    m = np.array(obj.matrix_world)
    return co.reshape(-1, 3) @ m[:3, :3].T + m[:3, 3], fi, fs


def capsule_surface(a, b, ra, rb, segments=48, rings=12):
    """A closed triangle mesh (verts, tris) of a capsule's surface (a sphere
    when a == b), its vertices on the surface: the penetration oracle's
    stand-in for a shape with no mesh of its own."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    axis = b - a
    ln = float(np.linalg.norm(axis))
    w = axis / ln if ln > 1e-12 else np.array((0.0, 0.0, 1.0))
    helper = np.array((1.0, 0.0, 0.0)) if abs(w[0]) < 0.9 else np.array((0.0, 1.0, 0.0))
    u = np.cross(w, helper)
    u /= np.linalg.norm(u)
    v = np.cross(w, u)
    # Rings: a hemisphere at a (latitudes -90..0), one at b (0..90).
    lat = np.concatenate([np.linspace(-np.pi / 2, 0, rings + 1), np.linspace(0, np.pi / 2, rings + 1)])
    centre = [a] * (rings + 1) + [b] * (rings + 1)
    radius = [ra] * (rings + 1) + [rb] * (rings + 1)
    t = np.linspace(0, 2 * np.pi, segments, endpoint=False)
    ring_dirs = np.cos(t)[:, None] * u + np.sin(t)[:, None] * v
    verts = np.concatenate([c + r * (np.cos(phi) * ring_dirs + np.sin(phi) * w)
                            for c, r, phi in zip(centre, radius, lat)])
    tris = []
    for k in range(len(lat) - 1):
        for j in range(segments):
            p, q = k * segments + j, k * segments + (j + 1) % segments
            tris += [(p, q, q + segments), (p, q + segments, p + segments)]
    return verts, np.array(tris)


def box_surface(centre, q, half):
    """The 12 triangles of an oriented box (rounding ignored: the mesh holds
    the rounded box, so the oracle errs towards fewer penetrations there)."""
    w, x, y, z = q
    rot = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                    [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                    [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])
    corners = np.array([(sx, sy, sz) for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], float)
    verts = (corners * half) @ rot.T + centre
    quads = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    return verts, np.array([t for a, b, c, d in quads for t in ((a, b, c), (a, c, d))])


def collider_surfaces(scene, depsgraph, objects):
    """World-space surface meshes (verts, tris, closed) of colliders as the
    solver receives them (scene.colliders.read): tessellated capsules and
    spheres, boxes; a collider with its own mesh kind would give its
    evaluated triangles here."""
    from drape.scene import colliders as colliders_mod
    frame = colliders_mod.read(scene, depsgraph)
    out = []
    for obj in objects:
        if obj.name in frame.capsules:
            out.append((*capsule_surface(*frame.capsules[obj.name]), True))
        elif obj.name in frame.boxes:
            c, q, half, _ = frame.boxes[obj.name]
            out.append((*box_surface(c, q, half), True))
    return out


def penetrating(points, verts, tris, closed=True, tolerance=1e-3):
    """How many points lie deeper than `tolerance` inside a collider's
    surface mesh: the distance to it from mathutils.bvhtree (Blender's own
    nearest-point query), inside or outside by the majority of three rays'
    crossing parities for a closed mesh (an open one counts the points
    behind its nearest face's normal). Independent of the solver's distance kernels."""
    from mathutils import Vector
    from mathutils.bvhtree import BVHTree
    lo, hi = verts.min(axis=0) - tolerance, verts.max(axis=0) + tolerance
    near = np.nonzero(np.all((points >= lo) & (points <= hi), axis=1))[0]
    if not len(near):
        return 0
    tree = BVHTree.FromPolygons([tuple(v) for v in verts], [tuple(int(i) for i in t) for t in tris],
                                epsilon=0.0)
    # Three ray directions and a majority: one ray's crossing parity miscounts
    # where it meets a shared edge or vertex of the collider's faces.
    directions = [Vector(d).normalized() for d in ((0.5773, 0.5774, 0.5773), (-0.6123, 0.3481, 0.7099),
                                                   (0.2711, -0.8452, 0.4603))]
    reach = float(np.linalg.norm(hi - lo)) + 1.0

    def odd_crossings(p, direction):
        crossings, origin, left = 0, p, reach
        while left > 0:
            loc, _, _, d = tree.ray_cast(origin, direction, left)
            if loc is None:
                break
            crossings += 1
            # Past the hit by more than float32 rounding at scene scale.
            origin = loc + direction * 1e-5
            left -= d + 1e-5
        return crossings % 2 == 1

    count = 0
    for i in near:
        p = Vector(points[i])
        hit, normal, _, dist = tree.find_nearest(p)
        if hit is None or dist <= tolerance:
            continue
        if closed:
            inside = sum(odd_crossings(p, d) for d in directions) >= 2
        else:
            inside = (p - hit).dot(normal) < 0
        count += int(inside)
    return count


def welded(tris, pairs):
    """Triangles with every stitched vertex renamed to one of its seam (the
    stitches' vertex pairs joined)."""
    root = np.arange(int(max(np.max(tris), np.max(pairs) if len(pairs) else 0)) + 1)

    def find(v):
        while root[v] != v:
            root[v] = root[root[v]]
            v = root[v]
        return v

    for a, b in pairs:
        ra, rb = find(int(a)), find(int(b))
        root[max(ra, rb)] = min(ra, rb)
    return np.vectorize(find)(np.asarray(tris))


def seam_gaps(obj, x):
    """(m,) distance across each of `obj`'s stitches (its mesh's loose edges)
    at world positions `x` of its evaluated mesh."""
    pairs = stitches(obj)
    return np.linalg.norm(x[pairs[:, 0]] - x[pairs[:, 1]], axis=1)


def print_quality(scene, cloths, colliders, layers, sewn=()):
    """The baked result checked at the last frame with benchmarks/quality.py
    (written apart from the solver): edge strain against the rest mesh,
    intersecting triangle pairs (exact test), and between the two cloths of
    `layers`; the vertices deeper than 1 mm inside each group of
    `colliders` ({label: objects}), by distance to the colliders' surface
    meshes (penetrating); and the largest distance across the stitches of
    each `sewn` cloth (its seam gap)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import quality as Q
    scene.frame_set(scene.frame_end)
    dg = __import__("bpy").context.evaluated_depsgraph_get()
    surfaces = {label: collider_surfaces(scene, dg, objs) for label, objs in colliders.items()}
    print(f"quality at frame {scene.frame_end} (benchmarks/quality.py; collider penetration by "
          "mathutils.bvhtree distance and ray parity, three rays):")
    meshes = {}
    for obj in cloths:
        x, fi, fs = _world_mesh(obj, dg)
        rest = np.empty(len(obj.data.vertices) * 3)
        obj.data.vertices.foreach_get("co", rest)
        # Rest lengths from the object's own (un-simulated, un-deformed) mesh.
        edges = Q.polygon_edges(fi, fs)
        strain = Q.edge_strain(x, edges, Q.rest_lengths(rest.reshape(-1, 3), edges)
                               * float(np.mean(np.linalg.norm(np.array(obj.matrix_world)[:3, :3], axis=0))))
        inside = {label: sum(penetrating(x, *surf) for surf in group) for label, group in surfaces.items()}
        tris = Q.triangulate(fi, fs)
        meshes[obj.name] = (x, tris)
        where = ", ".join(f"{label} {n}" for label, n in inside.items())
        # A sewn cloth's stitched vertices count as one (a closed seam's two
        # borders meet along a line: their triangles touch, they do not cross).
        own = Q.intersecting_pairs(x, welded(tris, stitches(obj)) if obj in sewn else tris)
        print(f"  {obj.name:11s} edge strain mean {strain.mean():+.4f} max {strain.max():.3f}; "
              f"vertices inside colliders {sum(inside.values())} ({where}); "
              f"intersecting triangle pairs {own}")
    a, b = layers
    crossing, _, _ = Q.crossings_between(*meshes[a.name], *meshes[b.name])
    print(f"  {a.name} x {b.name}: intersecting triangle pairs between the two {crossing}")
    for obj in sewn:
        gap = seam_gaps(obj, meshes[obj.name][0])
        print(f"  {obj.name} seams: {len(gap)} stitches, largest gap {gap.max() * 1000:.2f} mm, "
              f"mean {gap.mean() * 1000:.2f} mm")


# --------------------------------------------------------------------------- main

def main(argv=None):
    ap = argparse.ArgumentParser(description="Drape demo: bake a walking character's cape, a sewn T-shirt and "
                                             "skirt, a flag and a tablecloth; render a contact sheet")
    ap.add_argument("--frames", type=int, default=72, help="frames to bake at 24 fps (default 72)")
    ap.add_argument("--out", default=os.path.join(ROOT, "out"))
    ap.add_argument("--no-render", action="store_true", help="skip the Workbench renders")
    ap.add_argument("--layered-skirts", action="store_true",
                    help="instead of the sewn skirt, a skirt and an overskirt colliding with each other in "
                         "layer order (benchmarks/demo_crossings.py counts their crossings)")
    ap.add_argument("--no-layer-order", action="store_true",
                    help="with --layered-skirts: simulate the skirt and the overskirt without their layer order")
    ap.add_argument("--nudge-gravity", type=float, default=0.0, metavar="EPS",
                    help="add EPS m/s^2 to the scene's gravity (e.g. 1e-6): the layered skirts are "
                         "chaotic in rounding, so judge a change by several nudged runs, not one")
    args = ap.parse_args(argv)
    t_all = time.perf_counter()

    import bpy
    import drape
    bpy.ops.wm.read_factory_settings(use_empty=True)
    drape.register()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)

    scene = bpy.context.scene
    scene.render.fps = FPS
    scene.frame_start = 1
    scene.frame_end = args.frames

    log("building the scene: Rigify metarig walking, body, garments, flag, table")
    rig = add_metarig()
    animate_walk(rig, args.frames)
    # Keying leaves the rig at the last keyed pose until a frame change:
    # evaluate frame 1, so the body, its capsules' measured radii and every
    # cloth are built from the same pose whatever --frames is.
    scene.frame_set(scene.frame_start)
    body = add_body(rig)
    capsules = make_capsules(rig)
    log(f"{len(capsules)} capsules from the metarig's bones")
    ground = add_ground()
    _select_only([ground])
    _run_op(bpy.ops.drape.collider_add, type="PLANE")

    cape, proxy = add_cape(rig)
    make_cloth(cape, "collar", sim_source="PROXY", proxy=proxy, tethers=True, substeps=6,
               areal_density=0.35, air_drag=0.3)
    # A T-shirt and a skirt sewn from flat panels (dress_sewn): the character
    # stands with its arms raised while their seams close around it, then walks.
    tshirt = dress_sewn(add_tshirt(rig), "", gravity_off=True)
    sewn = [tshirt]
    if args.layered_skirts:
        # Two layers: a skirt and a shorter, wider overskirt, each with self collision and
        # colliding with each other ("Collide with other cloths": one cloth-cloth group).
        skirt = add_skirt(rig)
        overskirt = add_skirt(rig, "Overskirt", around=64, down=14, length=0.34, r_top=0.205, r_bot=0.42,
                              color=(0.75, 0.55, 0.2))
        # Layer order: the overskirt (layer 1) stays outside the skirt (layer 0).
        # The pair is chaotic in rounding (one ulp, or --nudge-gravity 1e-6,
        # changes the run): judge a change by the crossings summed over the walk
        # (benchmarks/demo_crossings.py) over a few nudged runs. Without the
        # order (--no-layer-order) the legs squeeze both layers onto the same
        # capsules and the pair falls apart. 10 substeps: fewer crossings over
        # the walk than 6 (compare with demo_crossings.py), and hardly a slower
        # bake, since the detection, once a step, is most of the skirts' step.
        for obj in (skirt, overskirt):
            make_cloth(obj, "waist", self_collision=True, cloth_collision=True, substeps=10)
        if not args.no_layer_order:
            skirt.drape.layer = 0
            overskirt.drape.layer = 1
        layers = (skirt, overskirt)
        skirts = [skirt, overskirt]
    else:
        skirt = dress_sewn(add_sewn_skirt(rig), "waist")
        sewn.append(skirt)
        layers = (tshirt, skirt)
        skirts = [skirt]
    flag, pole, wind = add_flag()
    make_cloth(flag, "hoist", substeps=4, areal_density=0.12)
    tablecloth, table = add_table()
    # Box colliders fitted to the table's top and legs (their local bounds).
    _select_only(table)
    _run_op(bpy.ops.drape.collider_add, type="BOX")
    # A dense tablecloth (12k vertices) simulated on an automatic 3,000-vertex simplification.
    # 12 substeps: at fewer the cloth draped over the table's edge settles
    # stretched there (the solve's convergence, not friction; compare with
    # benchmarks/quality.py). Nothing is pinned, so no tethers.
    make_cloth(tablecloth, "", self_collision=True, substeps=12, tethers=False,
               sim_source="AUTO", vertex_budget=3000)
    cloths = [cape, tshirt, *skirts, flag, tablecloth]
    targets = {"Cape": "SHAPE_KEYS", "TShirt": "PC2", "Skirt": "PC2", "Overskirt": "PC2", "Flag": "PC2",
               "Tablecloth": "ALEMBIC"}
    for obj in cloths:
        obj.drape_bake.target = targets[obj.name]

    setup_render(scene)
    if args.nudge_gravity:
        scene.use_gravity = True
        scene.gravity[2] += args.nudge_gravity
    follow = add_follow_camera(rig)
    rig.hide_render = True
    blend = os.path.join(out, "demo.blend")
    # PC2/Alembic caches go next to the .blend ('//drape_cache/'): save first.
    bpy.ops.wm.save_as_mainfile(filepath=blend)

    meter = StepMeter(cloths)
    bpy.app.handlers.frame_change_post.append(meter)
    scene.frame_set(scene.frame_start)
    log(f"baking {len(cloths)} cloths over frames {scene.frame_start}..{scene.frame_end} with drape.bake")
    _select_only(cloths, cloths[0])
    t0 = time.perf_counter()
    _run_op(bpy.ops.drape.bake, objects="ALL", frame_range="SCENE")
    bake_s = time.perf_counter() - t0
    sim_counts = {o.name: simulated_vertices(o) for o in cloths}
    bpy.app.handlers.frame_change_post.remove(meter)
    bpy.ops.wm.save_as_mainfile(filepath=blend)
    log(f"saved {blend}")

    render_s = 0.0
    if not args.no_render:
        t0 = time.perf_counter()
        frames = list(range(scene.frame_start, scene.frame_end + 1, 4))
        paths = render_frames(scene, frames, os.path.join(out, "frames"))
        pick = np.linspace(0, len(paths) - 1, 8).round().astype(int)
        wide_cam = scene.camera
        scene.camera = follow
        close_frames = [int(f) for f in np.linspace(scene.frame_end // 4, scene.frame_end, 4).round()]
        close = render_frames(scene, close_frames, os.path.join(out, "frames"), prefix="close")
        scene.camera = wide_cam
        sheet = contact_sheet([paths[i] for i in pick] + close, os.path.join(out, "demo.png"), columns=4)
        render_s = time.perf_counter() - t0
        log(f"rendered {len(paths)} frames and {len(close)} close-ups to {os.path.join(out, 'frames')}; contact sheet {sheet}")

    print_table(cloths, meter, sim_counts, bake_s, args.frames)
    print_quality(scene, cloths, {"body": capsules, "table": table, "pole": [pole]}, layers, sewn)
    log(f"bake {bake_s:.1f} s, renders {render_s:.1f} s, total {time.perf_counter() - t_all:.1f} s")
    return 0


def print_table(cloths, meter, sim_counts, bake_s, frames):
    rows = []
    first = {}
    for obj in cloths:
        steps = meter.step_ms[obj.name]
        per_frame = meter.frame_ms[obj.name]
        if per_frame:
            # The first simulated frame includes numba compiling (or loading from its cache).
            first[obj.name] = per_frame[0] / 1000.0
            per_frame = per_frame[1:]
        rows.append((
            obj.name,
            str(sim_counts.get(obj.name, (None,))[0] or "?"),
            str(len(obj.data.vertices)),
            str(obj.drape.substeps),
            ("on" if obj.drape.self_collision else "off")
            + (" +" + ",".join(sim_counts[obj.name][1]) if sim_counts.get(obj.name, (0, ()))[1] else ""),
            f"{np.median(steps):.2f}" if steps else "-",
            "/".join(f"{v:.1f}" for v in np.median(meter.parts_ms[obj.name], axis=0)) if steps else "-",
            f"{sum(per_frame) / 1000.0:.2f}" if per_frame else "-",
            obj.drape_bake.target,
        ))
    head = ("object", "simulated verts", "rendered verts", "substeps", "self coll. (+with)",
            "ms/step (median)", "read/skin/write ms", "sim s (bake)", "baked to")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print("sim s: read inputs + step + skin + write back, summed over the frames after the first; "
          "first frames (numba compile or cache load): "
          + ", ".join(f"{n} {t:.1f} s" for n, t in first.items()))
    print("ms/step of cloths simulated together (a cloth-cloth group) is the whole group's step.")
    print(f"drape.bake wall time, all cloths, {frames} frames: {bake_s:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
