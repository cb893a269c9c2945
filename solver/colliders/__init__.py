"""Colliders, one module per kind (capsule.py, plane.py, box.py, mesh.py), and what they
share: their motion over the substeps (interpolate_colliders), the one
projection pass over every kind (project_colliders_into: capsules, swept
entry planes, then half-spaces, fused into one load and store per vertex)
and velocity-level friction for the vertices they pushed.

A new kind: its module (a record the caller fills and packs, its distance
function), its rows in collider_scratch and interpolate_colliders, its pass
in project_colliders_into, and a field of StepInputs (params.py).
Boxes (box.py), off by default, keep their rows and passes in their own
module and run in loop.run_general only (step.py picks it when there are any).
"""

import numpy as np
from numba import njit

from .capsule import (Capsules, capsule_boxes, capsule_distance_pre, capsule_row_off, outside_capsule,
                      prepare_capsules, sweep_scratch, swept_box_union)
from .edges import record_push
from .mesh import MeshCollider
from .plane import Planes
from ..config import EPS, F0, F1
from ..jit import FLAT, KERNEL as JIT, NoAliasCompiler


@njit(**FLAT)
def interpolate_colliders(caps, planes, t0, t1, h_step, cap0, cap1, plane1):
    """Collider transforms at substep start (cap0) and end (cap1, plane1).
    cap rows: a(3) b(3) ra rb va(3) vb(3); plane rows: point(3) normal(3) vel(3)."""
    for j in range(caps.shape[0]):
        for tt in range(2):
            t = t0 if tt == 0 else t1
            out = cap0 if tt == 0 else cap1
            s = F1 - t
            for c in range(6):
                out[j, c] = s * caps[j, c] + t * caps[j, 6 + c]
            out[j, 6] = caps[j, 12]
            out[j, 7] = caps[j, 13]
            for c in range(6):
                out[j, 8 + c] = (caps[j, 6 + c] - caps[j, c]) / h_step
    for j in range(planes.shape[0]):
        s = F1 - t1
        nx = s * planes[j, 3] + t1 * planes[j, 9]
        ny = s * planes[j, 4] + t1 * planes[j, 10]
        nz = s * planes[j, 5] + t1 * planes[j, 11]
        nl = np.sqrt(nx * nx + ny * ny + nz * nz)
        if nl < EPS:
            nx, ny, nz, nl = planes[j, 9], planes[j, 10], planes[j, 11], F1
        for c in range(3):
            plane1[j, c] = s * planes[j, c] + t1 * planes[j, 6 + c]
            plane1[j, 6 + c] = (planes[j, 6 + c] - planes[j, c]) / h_step
        plane1[j, 3] = nx / nl
        plane1[j, 4] = ny / nl
        plane1[j, 5] = nz / nl


def collider_scratch(n, k, kp):
    """What the step's collider passes write, for n vertices, k capsules and
    kp planes, held by the model between steps: the capsules at substep
    start and end (k, 14), the planes at substep end (kp, 9), the capsules'
    swept and end boxes (k, 6) and sweep_scratch(n, k)."""
    return (np.zeros((k, 14), np.float32), np.zeros((k, 14), np.float32), np.zeros((kp, 9), np.float32),
            np.zeros((k, 6), np.float32), np.zeros((k, 6), np.float32), sweep_scratch(n, k))


@njit(**JIT)
def project_colliders(pos, inv_mass, cap1, plane1, margin, hit, entry, contact, cmask, cand, count, pad,
                      clist, ccount):
    """project_colliders_into with the capsules' boxes and prepared rows
    computed here (the general path and tests)."""
    box = capsule_boxes(cap1, cap1, margin + pad)
    pre = prepare_capsules(cap1, margin)
    return project_colliders_into(pos, inv_mass, cap1, plane1, margin, hit, entry, contact, cmask, cand, count,
                                  clist, ccount, box, pre)


@njit(pipeline_class=NoAliasCompiler, **FLAT)
def project_colliders_into(pos, inv_mass, cap1, plane1, margin, hit, entry, contact, cmask, cand, count,
                           clist, ccount, box, pre):
    """The fused three-pass projection, one load/store per vertex:
    1. live push-out of every capsule (constraints may have dragged a vertex
       in after contacts were generated);
    2. the frozen swept entry plane for a vertex that tunnelled through and
       is now outside on the far side (pushed back to the side it came from);
    3. half-spaces last, so the ground wins.
    Capsule radii grow by the vertex's collider offset cmask[i] (the boxes
    by the largest); a vertex with cmask[i] < 0 skips passes 1 and 2 (it has no swept entry:
    the swept contacts left hit[i] = 0) but not the half-spaces.
    contact[:, i] accumulates normal, push depth and collider velocity for
    velocity-level friction. With count >= 0 only the vertices cand[:count]
    are visited (from_aos4_collect: every vertex that could need it);
    count = -1: all of them (cand is then unused).
    A vertex pushed for the first time since its velocity was last finished
    is appended to clist[ccount:] (the contact list: contact_friction
    applies friction to those alone). Returns the new ccount.
    box = capsule_boxes(cap1, cap1, margin + pad), pre =
    prepare_capsules(cap1, margin), both filled by the caller."""
    use_list = count >= 0
    n = np.uint64(count) if use_list else np.uint64(pos.shape[1])
    kc = cap1.shape[0]
    kp = plane1.shape[0]
    ubox = swept_box_union(box)
    lox, loy, loz, hix, hiy, hiz = ubox[0], ubox[1], ubox[2], ubox[3], ubox[4], ubox[5]
    for q in range(n):
        i = cand[q] if use_list else q
        if inv_mass[i] == F0:
            continue
        px, py, pz = pos[0, i], pos[1, i], pos[2, i]
        swept = hit[i]
        # Most vertices are nowhere near a capsule: one box test, no planes,
        # no swept entry -> nothing to do.
        if (kp == 0 and (kc == 0 or swept == 0)
                and (px < lox or px > hix or py < loy or py > hiy or pz < loz or pz > hiz)):
            continue
        depth = F0
        cnx, cny, cnz = F0, F0, F0
        cvx, cvy, cvz = F0, F0, F0
        for j in range(kc):
            # A vertex that entered this capsule during the substep leaves
            # through its entry plane (pass 2), not the nearest surface,
            # which is the far side once it has tunnelled past the axis.
            if swept == j + 1:
                continue
            if (px < box[j, 0] or px > box[j, 3] or py < box[j, 1] or py > box[j, 4]
                    or pz < box[j, 2] or pz > box[j, 5]):
                continue
            if cmask[i] < F0:
                break
            off = cmask[i]
            if outside_capsule(px, py, pz, pre[j, 0], pre[j, 1], pre[j, 2], pre[j, 3], pre[j, 4], pre[j, 5],
                               pre[j, 6], max(pre[j, 8], pre[j, 9]) + off):
                continue
            d, nx, ny, nz, s = capsule_distance_pre(px, py, pz, capsule_row_off(pre, j, off))
            if d < F0:
                px -= d * nx
                py -= d * ny
                pz -= d * nz
                depth -= d
                cnx, cny, cnz = nx, ny, nz
                g = F1 - s
                cvx = g * cap1[j, 8] + s * cap1[j, 11]
                cvy = g * cap1[j, 9] + s * cap1[j, 12]
                cvz = g * cap1[j, 10] + s * cap1[j, 13]
        if kc > 0 and swept != 0:
            nx, ny, nz = entry[3, i], entry[4, i], entry[5, i]
            d = (px - entry[0, i]) * nx + (py - entry[1, i]) * ny + (pz - entry[2, i]) * nz
            if d < F0:
                px -= d * nx
                py -= d * ny
                pz -= d * nz
                depth -= d
                cnx, cny, cnz = nx, ny, nz
                cvx, cvy, cvz = entry[6, i], entry[7, i], entry[8, i]
        for j in range(kp):
            nx, ny, nz = plane1[j, 3], plane1[j, 4], plane1[j, 5]
            d = (px - plane1[j, 0]) * nx + (py - plane1[j, 1]) * ny + (pz - plane1[j, 2]) * nz - margin
            if d < F0:
                px -= d * nx
                py -= d * ny
                pz -= d * nz
                depth -= d
                cnx, cny, cnz = nx, ny, nz
                cvx, cvy, cvz = plane1[j, 6], plane1[j, 7], plane1[j, 8]
        if depth > F0:
            pos[0, i], pos[1, i], pos[2, i] = px, py, pz
            ccount = record_push(contact, clist, ccount, i, depth, cnx, cny, cnz, cvx, cvy, cvz)
    return ccount


@njit(inline="always", **JIT)
def _friction(x, y, z, ox, oy, oz, depth, c, inv_h, h, mu_s, mu_k, creep):
    """Velocity of a vertex at (x, y, z) that started the substep at (ox, oy,
    oz) and was pushed out of a collider by `depth` along c[:3], a surface
    moving with velocity c[3:]: the normal velocity relative to the collider
    removed (zero restitution), Coulomb friction from the push depth (static
    below mu_s, kinetic above). Scalars only (see capsule_row_off). Returns
    (v, position after static friction)."""
    vx = (x - ox) * inv_h
    vy = (y - oy) * inv_h
    vz = (z - oz) * inv_h
    nx, ny, nz = c[0], c[1], c[2]
    cx, cy, cz = c[3], c[4], c[5]
    rx, ry, rz = vx - cx, vy - cy, vz - cz
    vn = rx * nx + ry * ny + rz * nz
    tx, ty, tz = rx - vn * nx, ry - vn * ny, rz - vn * nz
    tl = np.sqrt(tx * tx + ty * ty + tz * tz)
    dvn = depth * inv_h
    if tl <= mu_s * dvn:
        # Static. A resting vertex (slip no faster than gravity adds in a
        # substep) also has this substep's slip undone, else it creeps
        # h^2 g sin(theta) per substep down a slope. Faster slips (cloth
        # shoved by a fast collider) stay velocity-only: moving those
        # positions after the constraints tears the cloth around the
        # collider.
        if tl <= creep:
            x -= tx * h
            y -= ty * h
            z -= tz * h
        tx, ty, tz = F0, F0, F0
    else:
        f = F1 - mu_k * dvn / tl
        if f < F0:
            f = F0
        tx, ty, tz = tx * f, ty * f, tz * f
    return cx + tx, cy + ty, cz + tz, x, y, z


@njit(**FLAT)
def contact_friction(pos, prev, vel, contact, clist, ccount, inv_h, h, mu_s, mu_k, creep):
    """Friction for the ccount vertices of the contact list: their velocity
    (before the clamp) into vel, their position after static friction into
    pos. contact[3, i] > 0 stays the flag that tells the row pass to take
    vel as it is (the row pass clears it)."""
    for q in range(np.uint64(ccount)):
        i = clist[q]
        vx, vy, vz, x, y, z = _friction(
            pos[0, i], pos[1, i], pos[2, i], prev[0, i], prev[1, i], prev[2, i], contact[3, i],
            (contact[0, i], contact[1, i], contact[2, i], contact[4, i], contact[5, i], contact[6, i]),
            inv_h, h, mu_s, mu_k, creep)
        vel[0, i] = vx
        vel[1, i] = vy
        vel[2, i] = vz
        pos[0, i] = x
        pos[1, i] = y
        pos[2, i] = z
