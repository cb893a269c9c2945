"""The substep loop: one compiled call per step.

For each substep:
  1. the colliders move to their substep-end pose (interpolate_colliders);
  2. predict: the velocities of the substep that ended, then x_prev = x,
     gravity, drag, acceleration (and wind on triangles), x += h v, the
     kinematic pins at their interpolated targets, and the swept capsule
     contacts of each vertex's path (integrate.advance_vertices; with wind,
     integrate.predict and colliders.capsule.generate_contacts);
  3. iterations of the constraints: the multilevel stretch's coarse levels
     (when on), stretch, shear, bend, stretch limits,
     tethers, soft pins, then this step's frozen self contacts, then the
     colliders' projection (last, so the colliders win) and the capsule
     contacts of the edges and faces between the vertices (colliders.edges);
the velocities of the last substep end the step. Garment constraints (only
in run_general): the stitches with the records, pressure after them, and
max distance and backstop last in every iteration, after the colliders, so
they hold exactly.

The loop is written once and compiled twice (jit.specialised): `run` for
the default settings (one iteration, no damping, no wind), which holds only
the fast kernels and compiles quickly, and `run_general`, which holds every
kernel and is compiled the first time a setting needs it. Inside `run`
the general branches are dead at compile time (numba prunes a branch on a
constant), so both read the same source. A third, `run_threaded`, is
`run` with each colour of the constraints split over numba's threads; it
is compiled only when solver.threads turns it on for a large cloth.
"""

import numba
import numpy as np
from numba import njit, types

from .colliders import collider_scratch, interpolate_colliders, project_colliders_into
from .colliders.box import (box_swept_contacts, interpolate_boxes, project_box_corners_into, project_box_edges_into,
                             project_boxes_into)
from .colliders.capsule import capsule_boxes_into, generate_contacts, prepare_capsules_into, swept_box_union
from .colliders.edges import grown_box, project_edges_into, project_faces_into
from .colliders.mesh import mesh_substep_rows, project_mesh_edges, project_meshes
from .config import F0, F1, new_config
from .constraints.bending import (BendingRecord, FastBendingRecord, solve_bending, solve_bending_fast,
                                  solve_bending_fast4)
from .constraints.distance import (DistanceRecord, FastDistanceRecord, solve_distance, solve_distance_fast,
                                   solve_distance_fast4)
from .constraints.bending import solve_bending_colours
from .constraints.distance import solve_distance_colours
from .constraints.pins import solve_soft_pins
from .constraints.hierarchy import contact_gate, mark_touched, solve_hierarchy4
from .constraints.pressure import PressureRecord, keep_rigid_motion, solve_pressure
from .constraints.sewing import SewingRecord, solve_sewing, solve_sewing4
from .constraints.skinned import SkinnedRecord, animated_normals, solve_skinned
from .constraints.tethers import TetherRecord, solve_tethers, solve_tethers_fast4
from .integrate import (advance_vertices, collect_rows, from_aos4, from_aos4_collect, predict, settle_velocities,
                        to_aos4, update_velocities, vertex_lists)
from .jit import FLAT
from .jit import KERNEL as JIT
from .jit import compiled_fast, specialised
from .selfcollision import solve_serial

# Rounds of the capsule edge and face passes over the vertices in contact,
# after the first over every vertex near a capsule, per iteration: each
# round mends what the one before pushed back in (a sheet dragged over a
# post's end, an arm or a thin bar through a hanging sheet at 1-8 m/s and
# 1-4 substeps: frames with a surface point deeper than the margin in the
# capsule, of 2,250: 152 with one round, 60 with two, 28 with four, 15-25
# with up to eight; a step of those scenes costs 3-20 % more than with one).
CONTACT_ROUNDS = 8
# A round that pushes no vertex by this many collision margins is the last.
ROUND_PUSH = np.float32(0.1)
# Replaced by True in run_general (see jit.specialised).
GENERAL = False
# Replaced by True in run_threaded: the default loop with each colour's
# constraints split over numba's threads (stretch, shear, bend, limits: their
# records carry their colour offsets as a third array); bit-identical to run.
THREADED = False


@njit(inline="always", **JIT)
def _save_pushes(contact, clist, ccount, saved):
    """saved[q] = the pushes so far of the listed vertex clist[q]."""
    for q in range(ccount):
        saved[q] = contact[3, clist[q]]


@njit(inline="always", **JIT)
def _largest_push(contact, clist, ccount, saved, before):
    """The largest push of one listed vertex since _save_pushes (which saw
    the first `before` of them; the others were listed since)."""
    most = F0
    for q in range(ccount):
        most = max(most, contact[3, clist[q]] - (saved[q] if q < before else F0))
    return most


@njit(**JIT)
def solve_classes(pos, prev, cfg, ha, stretch, shear, bend, use_lambda):
    """Stretch, shear and bend with the general kernels where a class is
    damped or lambdas accumulate over iterations, else the fast ones."""
    if use_lambda or cfg.d_stretch != F0:
        solve_distance(pos, prev, stretch.a, stretch.b, stretch.wa, stretch.wb, stretch.rest, stretch.lam,
                       cfg.a_stretch * ha, cfg.d_stretch, use_lambda)
    else:
        solve_distance_fast(pos, stretch.ab, stretch.coef, False)
    if use_lambda or cfg.d_shear != F0:
        solve_distance(pos, prev, shear.a, shear.b, shear.wa, shear.wb, shear.rest, shear.lam,
                       cfg.a_shear * ha, cfg.d_shear, use_lambda)
    else:
        solve_distance_fast(pos, shear.ab, shear.coef, False)
    if use_lambda or cfg.d_bend != F0:
        solve_bending(pos, prev, bend.idx, bend.k, bend.wk, bend.swk2, bend.rest, bend.lam,
                      cfg.a_bend * ha, cfg.d_bend, use_lambda)
    else:
        solve_bending_fast(pos, bend.idx4, bend.coef)


@njit(**FLAT)
def finish_substep(pos, prev, vel, cfg, contact, clist, ccount):
    """The velocities of the substep that ended (friction, clamp); returns
    the number of non-finite ones."""
    h = cfg.h
    g = np.sqrt(cfg.gx * cfg.gx + cfg.gy * cfg.gy + cfg.gz * cfg.gz)
    creep = np.float32(2.0) * g * h
    return update_velocities(pos, prev, vel, contact, clist, ccount, h, cfg.mu_s, cfg.mu_k, cfg.maxv, creep)


def _run(pos, vel, prev, inv_mass, config, accel, wind, tris, pins, caps, planes, colliders, hit, entry, cmask,
         contact, stretch_arrays, shear_arrays, bend_arrays, tether_arrays, limits_arrays, sewing_arrays,
         pressure_arrays, skinned_arrays, hierarchy_arrays, soft_lam, surface, self_contacts, boxes, box_scratch,
         meshes=None):
    """Advance the state one step (config[0]: config.CONFIG); returns the
    number of non-finite velocities (0 = fine).

    pins: (kinematic, soft, soft_alpha, pin_start, pin_end). colliders:
    colliders.collider_scratch(n, capsules, planes). stretch, shear,
    limits: the arrays of a DistanceRecord (run: of a FastDistanceRecord);
    bend: of a BendingRecord (run: FastBendingRecord); tether: of a
    TetherRecord, as plain tuples. surface: SurfaceEdges.arrays() (the edge
    and face contacts, colliders/edges.py).
    self_contacts: None, or SelfCollision.solve_args() for this step's
    frozen self contacts (None compiles a version without them).
    meshes: None, or colliders.mesh.mesh_step_args(...) for this step's
    mesh colliders (run_general only; step() passes colliders.mesh.NO_MESHES
    for none, so one compiled version serves both). The
    substeps' kernels allocate nothing and compile without reference counts
    (jit.FLAT). boxes: packed colliders.box.Boxes (k, 21), box_scratch:
    colliders.box.box_scratch(n, k); boxes run in run_general only."""
    cfg = config[0]
    if GENERAL:
        stretch = DistanceRecord(*stretch_arrays)
        shear = DistanceRecord(*shear_arrays)
        limits = DistanceRecord(*limits_arrays)
        bend = BendingRecord(*bend_arrays)
    elif THREADED:
        stretch = FastDistanceRecord(stretch_arrays[0], stretch_arrays[1])
        shear = FastDistanceRecord(shear_arrays[0], shear_arrays[1])
        limits = FastDistanceRecord(limits_arrays[0], limits_arrays[1])
        bend = FastBendingRecord(bend_arrays[0], bend_arrays[1])
    else:
        stretch = FastDistanceRecord(*stretch_arrays)
        shear = FastDistanceRecord(*shear_arrays)
        limits = FastDistanceRecord(*limits_arrays)
        bend = FastBendingRecord(*bend_arrays)
    tether = TetherRecord(*tether_arrays)
    # Garment constraints (constraints/sewing, pressure, skinned): empty
    # arrays when off; only run_general solves them.
    sew = SewingRecord(*sewing_arrays)
    pressure = PressureRecord(*pressure_arrays)
    skinned = SkinnedRecord(*skinned_arrays)
    use_sewing = GENERAL and sew.t.shape[0] > 0
    use_pressure = GENERAL and pressure.w.shape[0] > 0
    use_skinned = GENERAL and skinned.vertex.shape[0] > 0
    cap0, cap1, plane1, box0, box1, sweep = colliders
    bx0, bx1, baabb, bhit, bentry, bstamp = box_scratch
    use_boxes = GENERAL and boxes.shape[0] > 0
    substeps = np.uint64(cfg.substeps)
    iterations = np.uint64(cfg.iterations)
    has_contacts = caps.shape[0] + planes.shape[0] > 0
    # Every branch that needs the general kernels tests GENERAL first, so
    # numba drops it from `run` before typing it.
    use_wind = cfg.use_wind != F0
    use_lambda = cfg.iterations > F1
    # The record kernels: one iteration and no stretch/shear/bend damping
    # (always so in `run`).
    fast = not use_lambda and cfg.d_stretch == F0 and cfg.d_shear == F0 and cfg.d_bend == F0
    use_tethers = cfg.use_tethers != F0
    use_hierarchy = cfg.use_hierarchy != F0
    # Without colliders nothing marks the hierarchy's gate (its marks from
    # the step before, the last substep's contacts, are cleared at the end).
    collides = has_contacts or use_boxes or (GENERAL and meshes is not None and meshes[2].shape[0] > 0)
    fast_tethers = fast and use_tethers and cfg.d_tether == F0
    kin, soft, soft_alpha, pin_start, pin_end = pins
    # A free cloth with pressure: each iteration's constraint moves, up to
    # the pressure, are taken without the rigid motion they add up to
    # (constraints/pressure.py, keep_rigid_motion).
    # A cloth held by max distance, a backstop or soft pins is held by its
    # animation (external): there the pass is left out.
    rigid_free = use_pressure and pressure.coef[2] > F0 and not use_skinned and soft.shape[0] == 0
    h = cfg.h
    ha = F1 / (h * h)
    margin = cfg.margin
    p4 = np.empty(4 * pos.shape[1], dtype=np.float32)
    moved_from = np.empty((3, pos.shape[1] if rigid_free else 0), dtype=np.float32)
    sel, cand, clist = vertex_lists(pos.shape[1])
    saved = np.empty(pos.shape[1], dtype=np.float32)   # _save_pushes
    # Only capsules, and nothing that moves vertices after the records are
    # read back but the self contacts: the projection visits only the
    # vertices near the capsules (listed after the self contacts moved
    # theirs, when there are any).
    listed = (fast and has_contacts and plane1.shape[0] == 0 and soft.shape[0] == 0
              and (fast_tethers or not use_tethers))
    # The edge and face passes visit the vertices within edge_reach of the
    # capsules' boxes: the list grows by it.
    use_edges = cfg.use_edges != F0 and caps.shape[0] > 0
    reach = cfg.edge_reach if use_edges else F0
    edge_start, edge_other, tri_start, tri_list, tri_stamp = surface
    ccount = np.int64(0)  # not a literal 0: the callees compile once
    bad = 0
    if GENERAL and use_skinned and skinned.coef[1] > F0:
        animated_normals(pin_end, tris, skinned.normal)   # the backstop's, at step end
    for sub in range(substeps):
        t0 = np.float32(sub) / np.float32(substeps)
        t1 = np.float32(sub + 1) / np.float32(substeps)
        if has_contacts:
            interpolate_colliders(caps, planes, t0, t1, h * np.float32(substeps), cap0, cap1, plane1)
        if GENERAL and use_boxes:
            interpolate_boxes(boxes, t0, t1, h * np.float32(substeps), bx0, bx1)
        # ---- predict (with the velocities of the substep that ended)
        if GENERAL and use_wind:
            if sub > 0:
                bad += finish_substep(pos, prev, vel, cfg, contact, clist, ccount)
            predict(pos, vel, prev, inv_mass, cfg, accel, wind, tris, kin, pin_start, pin_end, t1)
            if caps.shape[0] > 0:
                generate_contacts(pos, prev, inv_mass, cap0, cap1, margin, hit, entry, cmask, cfg.coff_max)
                prepare_capsules_into(cap1, margin, sweep[0])
        else:
            bad += advance_vertices(pos, vel, prev, inv_mass, cfg, accel, contact, clist, ccount, kin,
                                    pin_start, pin_end, t1, cap0, cap1, hit, entry, cmask, sub > 0, cand, sel,
                                    box0, sweep)
        touched = ccount   # the substep before's contact list, for the gate
        ccount = np.int64(0)  # not a literal 0: the callees compile once
        if bad > 0:
            return bad
        if GENERAL and use_boxes:
            box_swept_contacts(pos, prev, inv_mass, bx0, bx1, margin, cmask, cfg.coff_max, bhit, bentry, baabb)
        if use_hierarchy and collides:
            contact_gate(hierarchy_arrays[12], hit, bhit, clist, touched, sub > 0, edge_start, edge_other)
        if GENERAL and meshes is not None and meshes[2].shape[0] > 0:
            # The mesh colliders' triangles at this substep's start and end.
            mesh_substep_rows(meshes[0], meshes[1], meshes[2], meshes[3], t0, t1, meshes[10], cfg.coff_max,
                              meshes[12], meshes[8], meshes[9], meshes[13], meshes[14], meshes[16])
        if GENERAL and use_lambda:
            stretch.lam[:] = F0
            shear.lam[:] = F0
            bend.lam[:] = F0
            soft_lam[:] = F0
        if has_contacts:
            # The capsules' boxes at substep end: the projection's, and
            # their union for the list of vertices near them.
            capsule_boxes_into(cap1, cap1, margin + cfg.coff_max, box1)
        if listed:
            ubox1 = grown_box(swept_box_union(box1), reach)
        for _ in range(iterations):
            # ---- constraints
            count = -1
            if GENERAL and rigid_free:
                moved_from[:] = pos
            if GENERAL and not fast:
                if use_hierarchy:
                    to_aos4(pos, p4)
                    solve_hierarchy4(p4, *hierarchy_arrays)
                    from_aos4(p4, pos)
                solve_classes(pos, prev, cfg, ha, stretch, shear, bend, use_lambda)
                if cfg.use_limits != F0:
                    solve_distance_fast(pos, limits.ab, limits.coef, True)
                if use_sewing:
                    solve_sewing(pos, sew.vab, sew.w, sew.coef, sew.t, sew.hold, sew.closed)
            else:
                to_aos4(pos, p4)
                if use_hierarchy:
                    solve_hierarchy4(p4, *hierarchy_arrays)
                if THREADED:
                    solve_distance_colours(p4, stretch.ab_rec, stretch.coef, stretch_arrays[2], False)
                    solve_distance_colours(p4, shear.ab_rec, shear.coef, shear_arrays[2], False)
                    solve_bending_colours(p4, bend.idx_rec, bend.coef, bend_arrays[2], cfg.bend_curved != F0)
                    if cfg.use_limits != F0:
                        solve_distance_colours(p4, limits.ab_rec, limits.coef, limits_arrays[2], True)
                else:
                    solve_distance_fast4(p4, stretch.ab_rec, stretch.coef, False)
                    solve_distance_fast4(p4, shear.ab_rec, shear.coef, False)
                    solve_bending_fast4(p4, bend.idx_rec, bend.coef, cfg.bend_curved != F0)
                    if cfg.use_limits != F0:
                        solve_distance_fast4(p4, limits.ab_rec, limits.coef, True)
                if fast_tethers:
                    solve_tethers_fast4(p4, tether.vertex_rec, tether.anchor_rec, tether.length, tether.coef,
                                        cfg.tether_scale)
                # Sewing on the records too, before they are read back: the
                # list of vertices near the capsules sees its moves.
                if GENERAL and use_sewing:
                    solve_sewing4(p4, sew.vab_rec, sew.w, sew.coef, sew.t, sew.hold, sew.closed)
                if listed and self_contacts is None and not use_pressure:
                    count = from_aos4_collect(p4, pos, hit, ubox1, cand, sel)
                else:   # pressure moves every vertex: the list follows it
                    from_aos4(p4, pos)
            if GENERAL and use_pressure:
                # On the rows (a pass over the triangles' records was slower);
                # the vertices near the capsules are listed again after it.
                solve_pressure(pos, pressure.tris, pressure.w, pressure.grad, pressure.coef)
                if rigid_free:
                    keep_rigid_motion(pos, moved_from, pressure.mass, pressure.coef[2])
                if listed and self_contacts is None:
                    count = collect_rows(pos, hit, ubox1, cand, sel)
            if use_tethers and not fast_tethers:
                solve_tethers(pos, prev, tether.vertex, tether.anchor, tether.length, tether.w,
                              cfg.a_tether * ha, cfg.d_tether, cfg.tether_scale)
            if soft.shape[0] > 0:
                solve_soft_pins(pos, soft, soft_alpha, soft_lam, inv_mass, pin_start, pin_end, t1, use_lambda)
            # ---- self contacts, then the colliders
            if self_contacts is not None:
                solve_serial(pos, prev, *self_contacts)
                if listed:
                    count = collect_rows(pos, hit, ubox1, cand, sel)
            if GENERAL and use_boxes:
                ccount = project_boxes_into(pos, prev, inv_mass, bx0, bx1, margin, cmask, cfg.coff_max, bhit, bentry,
                                            contact, clist, ccount, baabb)
                if cfg.use_edges != F0:
                    ccount = project_box_edges_into(pos, prev, inv_mass, bx0, bx1, margin, cmask, edge_start,
                                                    edge_other, contact, clist, ccount, baabb, bstamp, False)
                    # Once more around the vertices it pushed: their
                    # neighbours' edges over a corner were pushed back in.
                    ccount = project_box_edges_into(pos, prev, inv_mass, bx0, bx1, margin, cmask, edge_start,
                                                    edge_other, contact, clist, ccount, baabb, bstamp, True)
                    # The corners out of the faces, and the edges of the
                    # vertices that moved once more.
                    ccount = project_box_corners_into(pos, inv_mass, bx1, margin, cmask, tri_start,
                                                      tri_list, tris, tri_stamp, cfg.edge_reach, contact, clist,
                                                      ccount, bstamp)
                    ccount = project_box_edges_into(pos, prev, inv_mass, bx0, bx1, margin, cmask, edge_start,
                                                    edge_other, contact, clist, ccount, baabb, bstamp, True)
            if has_contacts:
                ccount = project_colliders_into(pos, inv_mass, cap1, plane1, margin, hit, entry, contact, cmask,
                                                cand, count, clist, ccount, box1, sweep[0])
                if use_edges:
                    if count < 0:
                        count = collect_rows(pos, hit, grown_box(swept_box_union(box1), reach), cand, sel)
                    ccount = project_edges_into(pos, prev, inv_mass, cap0, cap1, cmask, cand, count, sel, True,
                                                edge_start, edge_other, box1, sweep[0], margin, contact, clist, ccount)
                    ccount = project_faces_into(pos, prev, inv_mass, cap0, cap1, hit, cmask, cand, count, edge_start,
                                                edge_other, tri_start, tri_list, tris, tri_stamp, reach, sweep[0],
                                                margin, contact, clist, ccount)
                    # Then the edges and the faces of the vertices in contact,
                    # CONTACT_ROUNDS times: an edge draped over a capsule's
                    # end, stretched by a fast one, is pushed back in by its
                    # neighbours' pushes, and an edge pushed off a capsule's
                    # side swings a face of its end into the end's sphere.
                    for _ in range(CONTACT_ROUNDS):
                        before = ccount
                        _save_pushes(contact, clist, ccount, saved)
                        ccount = project_edges_into(pos, prev, inv_mass, cap0, cap1, cmask, clist, ccount, sel,
                                                    False, edge_start, edge_other, box1, sweep[0], margin, contact,
                                                    clist, ccount)
                        ccount = project_faces_into(pos, prev, inv_mass, cap0, cap1, hit, cmask, clist, ccount,
                                                    edge_start, edge_other, tri_start, tri_list, tris, tri_stamp,
                                                    reach, sweep[0], margin, contact, clist, ccount)
                        if _largest_push(contact, clist, ccount, saved, before) < ROUND_PUSH * margin:
                            break
            if GENERAL and meshes is not None and meshes[2].shape[0] > 0:
                ccount = project_meshes(pos, prev, inv_mass, cmask, meshes[3], meshes[8], meshes[9], meshes[4],
                                        meshes[5], meshes[6], meshes[7], meshes[11], contact, clist, ccount,
                                        meshes[15])
                if cfg.use_edges != F0:
                    ccount = project_mesh_edges(pos, prev, inv_mass, cmask, edge_start, edge_other, meshes[3],
                                                meshes[8], meshes[9], meshes[4], meshes[5], meshes[6], meshes[7],
                                                meshes[11], contact, clist, ccount)
            # ---- skinned constraints last: they hold exactly
            if GENERAL and use_skinned:
                solve_skinned(pos, skinned.vertex, skinned.radius, skinned.backstop, skinned.normal, skinned.coef,
                              pin_start, pin_end, t1)
    bad += finish_substep(pos, prev, vel, cfg, contact, clist, ccount)
    if use_hierarchy:
        mark_touched(hierarchy_arrays[12], clist, ccount)
    # Air resistance is the wind model's drag in steps with a wind field.
    air = cfg.air_res if cfg.use_wind == F0 else F0
    if (cfg.settle_rate != F0 or air != F0) and bad == 0:
        settle_velocities(pos, vel, inv_mass, kin, pin_start, pin_end, h * np.float32(substeps), cfg.settle_rate,
                          cfg.settle_speed, tris, air)
    return bad


run = njit(**JIT)(specialised(_run, "run", GENERAL=False))
run_general = njit(**JIT)(specialised(_run, "run_general", GENERAL=True))
# Compiled only for a large cloth stepped on several threads
# (solver.threads.colour_loop), in the background.
run_threaded = njit(**JIT)(specialised(_run, "run_threaded", THREADED=True))


# ---------------------------------------------------------------- compiling ahead
#
# Compiling `run` compiles every kernel it calls, one after the other. A
# kernel already in numba's disk cache is loaded instead, so processes that
# compile the parts first, side by side, leave `run` only its own module to
# compile (scene/warmup_child.py: one process compiles "sweep", another
# "solve", then `run`). The argument types are those _run passes; a kernel
# whose arguments change here compiles twice (tests/solver/test_loop.py
# checks that compiling the parts leaves run nothing else to compile).


def _part_calls(part, n=8):
    """(kernel, argument types) of one part of `run`'s default path."""
    f32, u32 = np.float32, np.uint32
    rows = np.zeros((3, n), f32)
    flat = np.zeros(4 * n, f32)
    index = np.zeros(2 * n, u32)
    vec = np.zeros(n, f32)
    ids = np.zeros(n, u32)
    cfg = new_config()[0]
    cap0, cap1, plane1, box0, box1, sweep = collider_scratch(n, 1, 1)
    hit = np.zeros(n, np.int32)
    entry = np.zeros((9, n), f32)
    contact = np.zeros((7, n), f32)
    sel = np.zeros(n, np.uint8)
    field = np.zeros((3, 1), f32)
    ubox = tuple(f32(0) for _ in range(6))
    count, h = np.int64(0), f32(0)
    ends = np.zeros(n + 1, u32)
    ends64 = np.zeros(n + 1, np.int64)
    tris = np.zeros((3, n), u32)
    flag = types.literal
    if part == "sweep":
        return [(advance_vertices, (rows, rows, rows, vec, cfg, field, contact, ids, count, ids, rows, rows, h,
                                    cap0, cap1, hit, entry, vec, True, ids, sel, box0, sweep))]
    if part == "solve":
        return [
            (vertex_lists, (count,)),
            (interpolate_colliders, (cap0, plane1, h, h, h, cap0, cap1, plane1)),
            (capsule_boxes_into, (cap1, cap1, h, box1)),
            (swept_box_union, (box1,)),
            (to_aos4, (rows, flat)),
            (contact_gate, (hit, hit, hit, ids, count, True, ends, ids)),
            (solve_hierarchy4, (flat, index, flat, ends64, index, flat, index, vec, ends64, index, index, vec,
                                ends64, hit)),
            (mark_touched, (hit, ids, count)),
            (solve_distance_fast4, (flat, index, flat, flag(False))),
            (solve_distance_fast4, (flat, index, flat, flag(True))),
            (solve_bending_fast4, (flat, index, flat, True)),
            (solve_tethers_fast4, (flat, ids, ids, vec, vec, h)),
            (from_aos4_collect, (flat, rows, hit, ubox, ids, sel)),
            (from_aos4, (flat, rows)),
            (solve_tethers, (rows, rows, ids, ids, vec, vec, h, h, h)),
            (solve_soft_pins, (rows, ids, vec, rows, vec, rows, rows, h, True)),
            (project_colliders_into, (rows, vec, cap1, plane1, h, hit, entry, contact, vec, ids, count, ids, count,
                                      box1, sweep[0])),
            (collect_rows, (rows, hit, ubox, ids, sel)),
            (project_edges_into, (rows, rows, vec, cap0, cap1, vec, ids, count, sel, flag(True), ends, ids, box1,
                                  sweep[0], h, contact, ids, count)),
            (project_edges_into, (rows, rows, vec, cap0, cap1, vec, ids, count, sel, flag(False), ends, ids, box1,
                                  sweep[0], h, contact, ids, count)),
            (project_faces_into, (rows, rows, vec, cap0, cap1, hit, vec, ids, count, ends, ids, ends, ids, tris, ids,
                                  h, sweep[0], h, contact, ids, count)),
            (finish_substep, (rows, rows, rows, cfg, contact, ids, count)),
            (settle_velocities, (rows, rows, vec, ids, rows, rows, h, h, h, tris, h)),
        ]
    raise ValueError(f"unknown part {part!r} (sweep, solve)")


def precompile(part):
    """Compile (or load from numba's cache) the kernels of one part of the
    default loop, "sweep" (the per-vertex pass between substeps and the
    swept capsule contacts) or "solve" (the constraints, the projection and
    the velocities), as `run` would; returns how many."""
    calls = _part_calls(part)
    with compiled_fast():
        for kernel, args in calls:
            kernel.compile(tuple(a if isinstance(a, types.Type) else numba.typeof(a) for a in args))
    return len(calls)
