"""Collider shapes drawn in the 3D viewport (a gpu draw handler).

Capsules, spheres, boxes and planes are drawn as the solver sees them. Mesh
colliders are not drawn: the object's own mesh, as the viewport shows it
evaluated, is the surface that collides.

Nothing is drawn, and no handler is added, in background mode: there is no
viewport and the gpu module may be unavailable there."""

import bpy
import numpy as np

from . import colliders

_handle = None
_SEGMENTS = 24
_COLOUR = (0.2, 0.85, 1.0, 0.9)


def _circle(centre, axis, radius, segments=_SEGMENTS):
    axis = axis / max(float(np.linalg.norm(axis)), 1e-12)
    helper = np.array((1.0, 0.0, 0.0)) if abs(axis[0]) < 0.9 else np.array((0.0, 1.0, 0.0))
    u = np.cross(axis, helper)
    u /= np.linalg.norm(u)
    v = np.cross(axis, u)
    t = np.linspace(0.0, 2.0 * np.pi, segments + 1)
    pts = centre + radius * (np.cos(t)[:, None] * u + np.sin(t)[:, None] * v)
    return np.repeat(pts, 2, axis=0)[1:-1], u, v


def capsule_lines(a, b, ra, rb):
    """Line-segment vertices (2k, 3) outlining a capsule."""
    axis = b - a
    if float(np.linalg.norm(axis)) < 1e-9:
        axis = np.array((0.0, 0.0, 1.0))
    ring_a, u, v = _circle(a, axis, ra)
    ring_b, _, _ = _circle(b, axis, rb)
    lines = [ring_a, ring_b]
    n = axis / np.linalg.norm(axis)
    for d in (u, -u, v, -v):
        lines.append(np.array((a + d * ra, b + d * rb)))
    half = np.linspace(0.0, np.pi, _SEGMENTS // 2 + 1)
    for side in (u, v):
        for centre, r, sign in ((a, ra, -1.0), (b, rb, 1.0)):
            arc = centre + r * (np.cos(half)[:, None] * side + sign * np.sin(half)[:, None] * n)
            lines.append(np.repeat(arc, 2, axis=0)[1:-1])
    return np.concatenate(lines).astype(np.float32)


def sphere_lines(centre, radius, axes=np.eye(3)):
    """Line-segment vertices of a sphere: its three great circles across
    the columns of ``axes`` (the object's axes, so the drawing reaches the
    sphere's extremes along them)."""
    t = np.linspace(0.0, 2.0 * np.pi, _SEGMENTS + 1)[:, None]
    rings = []
    for i, j in ((0, 1), (1, 2), (2, 0)):
        pts = centre + radius * (np.cos(t) * axes[:, i] + np.sin(t) * axes[:, j])
        rings.append(np.repeat(pts, 2, axis=0)[1:-1])
    return np.concatenate(rings).astype(np.float32)


def box_lines(centre, rot, half, rounding):
    """Line-segment vertices outlining a box (rounded edges: the flat part
    of every face's border and a quarter arc round each edge, the shape
    the solver collides with)."""
    r = min(float(rounding), float(np.min(half)))
    core = np.asarray(half, dtype=np.float64) - r
    lines = []
    arc = np.linspace(0.0, 0.5 * np.pi, _SEGMENTS // 4 + 1)
    for k in range(3):  # edges along local axis k
        i, j = (k + 1) % 3, (k + 2) % 3
        for si in (-1.0, 1.0):
            for sj in (-1.0, 1.0):
                ends = []
                for sk in (-1.0, 1.0):
                    p = np.zeros(3)
                    p[i], p[j], p[k] = si * core[i], sj * core[j], sk * core[k]
                    ends.append(p)
                for d in ((i, si), (j, sj)):
                    off = np.zeros(3)
                    off[d[0]] = d[1] * r
                    lines.append(np.array((ends[0] + off, ends[1] + off)))
                if r > 0:
                    for end in ends:
                        pts = np.repeat(end[None], len(arc), axis=0)
                        pts[:, i] += si * r * np.cos(arc)
                        pts[:, j] += sj * r * np.sin(arc)
                        lines.append(np.repeat(pts, 2, axis=0)[1:-1])
    local = np.concatenate(lines)
    return (local @ np.asarray(rot).T + centre).astype(np.float32)


def plane_lines(m):
    point, normal = colliders.plane_from_matrix(m)
    x = m[:3, 0]
    y = m[:3, 1]
    corners = [point + sx * x + sy * y for sx, sy in ((-1, -1), (1, -1), (1, 1), (-1, 1))]
    lines = []
    for i in range(4):
        lines += [corners[i], corners[(i + 1) % 4]]
    lines += [corners[0], corners[2], corners[1], corners[3], point, point + normal * 0.25 * float(np.linalg.norm(x))]
    return np.array(lines, np.float32)


def scene_lines(scene, depsgraph=None):
    chunks = []
    for obj in colliders.collider_objects(scene):
        if not obj.visible_get():
            continue
        src = obj.evaluated_get(depsgraph) if depsgraph is not None else obj
        m = np.array(src.matrix_world, dtype=np.float64)
        c = obj.drape_collider
        if c.kind == 'CAPSULE':
            a, b, ra, rb = colliders.capsule_from_matrix(m, c.radius_start, c.radius_end, c.axis_start,
                                                         c.axis_end)
            chunks.append(capsule_lines(a, b, ra, rb))
        elif c.kind == 'SPHERE':
            centre, r = colliders.sphere_from_matrix(m, c.center, c.sphere_radius)
            scale = np.linalg.norm(m[:3, :3], axis=0)
            chunks.append(sphere_lines(centre, r, m[:3, :3] / np.where(scale > 0, scale, 1.0)))
        elif c.kind == 'BOX':
            chunks.append(box_lines(*colliders.box_from_matrix(m, c.center, c.half_extents, c.rounding)))
        elif c.kind == 'PLANE':
            chunks.append(plane_lines(m))
    if not chunks:
        return None
    return np.concatenate(chunks)


def _draw():
    try:
        import gpu
        from gpu_extras.batch import batch_for_shader

        context = bpy.context
        if context.space_data is not None and not getattr(context.space_data, "show_object_viewport_empty", True):
            return
        lines = scene_lines(context.scene)
        if lines is None:
            return
        shader = gpu.shader.from_builtin('UNIFORM_COLOR')
        batch = batch_for_shader(shader, 'LINES', {"pos": lines})
        gpu.state.depth_test_set('LESS_EQUAL')
        gpu.state.blend_set('ALPHA')
        shader.uniform_float("color", _COLOUR)
        batch.draw(shader)
        gpu.state.blend_set('NONE')
        gpu.state.depth_test_set('NONE')
    except Exception:  # noqa: BLE001 - a draw callback must never raise
        pass


def register():
    global _handle
    if bpy.app.background or _handle is not None:
        return
    _handle = bpy.types.SpaceView3D.draw_handler_add(_draw, (), 'WINDOW', 'POST_VIEW')


def unregister():
    global _handle
    if _handle is not None:
        bpy.types.SpaceView3D.draw_handler_remove(_handle, 'WINDOW')
        _handle = None
