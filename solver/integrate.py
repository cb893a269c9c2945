"""The per-vertex passes of a substep: predict (x_prev = x, gravity, drag,
acceleration, wind on triangles, x += h v, the kinematic pins), the
velocities (v = (x - x_prev) / h, friction, speed clamp, the NaN check),
both fused into one pass between substeps (advance_vertices), and the
layout changes of the record kernels (to_aos4 / from_aos4: x, y, z, 0
records). float32 structure-of-arrays positions (3, n), uint32 indices,
unsigned loop counters (numba adds a negative-index fix-up for signed
ones).
"""

import numpy as np
from numba import njit

from .colliders import contact_friction
from .colliders.capsule import (capsule_boxes_into, path_misses, prepare_capsules_into, swept_box_union,
                                swept_contacts_into)
from .config import EPS, F0, F1, FHALF, FINF
from .hardware import compact_flags
from .jit import FLAT, KERNEL as JIT, NoAliasCompiler


@njit(**JIT)
def predict(pos, vel, prev, inv_mass, cfg, accel, wind, tris, kin, pin_start, pin_end, t1):
    h = cfg.h
    gx, gy, gz = cfg.gx, cfg.gy, cfg.gz
    use_accel = cfg.use_accel != F0
    use_wind = cfg.use_wind != F0
    drag = cfg.air_drag * h
    if drag > F1:
        drag = F1
    n = np.uint64(pos.shape[1])
    if use_wind:
        # Aerodynamic drag + lift per triangle from the air velocity relative
        # to the triangle, split equally among its corners.
        third = np.float32(1.0 / 3.0)
        k = FHALF * cfg.air_density * h * third
        cd, cl = cfg.cd, cfg.cl
        nt = np.uint64(tris.shape[1])
        for t in range(nt):
            a, b, c = tris[0, t], tris[1, t], tris[2, t]
            ux = (wind[0, a] + wind[0, b] + wind[0, c] - vel[0, a] - vel[0, b] - vel[0, c]) * third
            uy = (wind[1, a] + wind[1, b] + wind[1, c] - vel[1, a] - vel[1, b] - vel[1, c]) * third
            uz = (wind[2, a] + wind[2, b] + wind[2, c] - vel[2, a] - vel[2, b] - vel[2, c]) * third
            u2 = ux * ux + uy * uy + uz * uz
            if u2 < EPS:
                continue
            e1x, e1y, e1z = pos[0, b] - pos[0, a], pos[1, b] - pos[1, a], pos[2, b] - pos[2, a]
            e2x, e2y, e2z = pos[0, c] - pos[0, a], pos[1, c] - pos[1, a], pos[2, c] - pos[2, a]
            nx = e1y * e2z - e1z * e2y
            ny = e1z * e2x - e1x * e2z
            nz = e1x * e2y - e1y * e2x
            n2 = nx * nx + ny * ny + nz * nz
            if n2 < EPS * EPS:
                continue
            nlen = np.sqrt(n2)
            area = FHALF * nlen
            ulen = np.sqrt(u2)
            inv_u = F1 / ulen
            inv_n = F1 / nlen
            ux_, uy_, uz_ = ux * inv_u, uy * inv_u, uz * inv_u
            nx, ny, nz = nx * inv_n, ny * inv_n, nz * inv_n
            cos = nx * ux_ + ny * uy_ + nz * uz_
            if cos < F0:
                nx, ny, nz, cos = -nx, -ny, -nz, -cos
            # n_perp = n - cos u: perpendicular to the flow, |n_perp| = sin.
            px_, py_, pz_ = nx - cos * ux_, ny - cos * uy_, nz - cos * uz_
            s = k * area * u2 * cos
            fx = s * (cd * ux_ + cl * px_)
            fy = s * (cd * uy_ + cl * py_)
            fz = s * (cd * uz_ + cl * pz_)
            wa, wb, wc = inv_mass[a], inv_mass[b], inv_mass[c]
            # Explicit aerodynamics must not overshoot the air speed (large
            # substeps, light vertices): cap the velocity change at |u|.
            dv = np.sqrt(fx * fx + fy * fy + fz * fz) * max(wa, max(wb, wc))
            if dv > ulen:
                sc = ulen / dv
                fx, fy, fz = fx * sc, fy * sc, fz * sc
            vel[0, a] += fx * wa
            vel[1, a] += fy * wa
            vel[2, a] += fz * wa
            vel[0, b] += fx * wb
            vel[1, b] += fy * wb
            vel[2, b] += fz * wb
            vel[0, c] += fx * wc
            vel[1, c] += fy * wc
            vel[2, c] += fz * wc
    for i in range(n):
        x, y, z = pos[0, i], pos[1, i], pos[2, i]
        prev[0, i] = x
        prev[1, i] = y
        prev[2, i] = z
        if inv_mass[i] == F0:
            continue
        vx = vel[0, i]
        vy = vel[1, i]
        vz = vel[2, i]
        # Drag acts on the velocity the vertex had, not on this substep's
        # gravity (else the resting sag would shrink with the drag).
        if drag > F0:
            if use_wind:
                vx += drag * (wind[0, i] - vx)
                vy += drag * (wind[1, i] - vy)
                vz += drag * (wind[2, i] - vz)
            else:
                vx -= drag * vx
                vy -= drag * vy
                vz -= drag * vz
        vx += h * gx
        vy += h * gy
        vz += h * gz
        if use_accel:
            vx += h * accel[0, i]
            vy += h * accel[1, i]
            vz += h * accel[2, i]
        vel[0, i] = vx
        vel[1, i] = vy
        vel[2, i] = vz
        pos[0, i] = x + h * vx
        pos[1, i] = y + h * vy
        pos[2, i] = z + h * vz
    # Kinematic pins follow their targets, interpolated across substeps.
    s1 = F1 - t1
    nk = np.uint64(kin.shape[0])
    for j in range(nk):
        i = kin[j]
        pos[0, i] = s1 * pin_start[0, i] + t1 * pin_end[0, i]
        pos[1, i] = s1 * pin_start[1, i] + t1 * pin_end[1, i]
        pos[2, i] = s1 * pin_start[2, i] + t1 * pin_end[2, i]


@njit(pipeline_class=NoAliasCompiler, cache=True, error_model="numpy", nogil=True,
      fastmath={"nsz", "contract", "reassoc"})
def _rows_from_flat(a, x, y, z):
    """x, y, z = a[0::3], a[1::3], a[2::3] as float32; the count of points
    with a value that is NaN or Inf as float32 (or does not fit in it).
    Branch-free, the count in float32 (an int count kept the loop scalar),
    every item of a point read (LLVM loads whole triples and shuffles them
    apart): vectorised, 2.5 -> 1.4 us for 2,116 points. No "nnan"/"ninf"
    in its fastmath: they would let LLVM drop the finiteness tests."""
    n = np.uint64(x.shape[0])
    bad = np.float32(0.0)
    for i in range(n):
        vx = np.float32(a[3 * i])
        vy = np.float32(a[3 * i + 1])
        vz = np.float32(a[3 * i + 2])
        x[i] = vx
        y[i] = vy
        z[i] = vz
        bad += F0 if np.isfinite(vx) & np.isfinite(vy) & np.isfinite(vz) else F1
    return bad


@njit(cache=True, error_model="numpy", nogil=True)
def rows_from_points(a, out):
    """out (3, n) float32 = a (n, 3) transposed; False if a value is NaN or
    Inf (or does not fit in float32)."""
    return _rows_from_flat(a.ravel(), out[0], out[1], out[2]) == F0


@njit(inline="always", **JIT)
def _row_velocity(x, y, z, ox, oy, oz, vx, vy, vz, depth, start, inv_h, max_v, vmax2):
    """Velocity at the end of a substep of a vertex at (x, y, z) that started
    it at (ox, oy, oz), clamped to max_v (vmax2 = max_v^2, inf without a
    clamp): from its positions, or v as contact_friction left it (depth >
    0), or v as it is (start: the step's first substep). Scalars in, both
    candidates computed and one selected: the loop stays branch-free.
    Returns (v, 1.0 if not finite else 0.0)."""
    keep = start | (depth > F0)
    ux = (x - ox) * inv_h
    uy = (y - oy) * inv_h
    uz = (z - oz) * inv_h
    ux = vx if keep else ux
    uy = vy if keep else uy
    uz = vz if keep else uz
    v2 = ux * ux + uy * uy + uz * uz
    s = max_v / np.sqrt(v2)
    s = s if v2 > vmax2 else F1
    # A NaN or Inf anywhere in x, x_prev or v reaches v2 (and fails the
    # ordered comparison; np.isfinite here was folded to true once LLVM
    # vectorised the loop under fastmath). A float32 flag: the row passes
    # count it in float32 (see _velocity_rows).
    bad = F0 if v2 < FINF else F1
    return ux * s, uy * s, uz * s, bad


@njit(pipeline_class=NoAliasCompiler, **FLAT)
def _velocity_rows(x, y, z, ox, oy, oz, vx, vy, vz, depth, inv_h, max_v):
    """The end of a step's last substep for every vertex (see
    _row_velocity). Returns the number of non-finite velocities.
    The count is a float32 sum (exact to 2^24 vertices, and never back to 0
    past that): an int64 counter beside the float32 lanes kept LLVM from
    vectorising the whole loop (_advance_rows alone 31-37 us on 10k
    vertices with it, 17-19 without)."""
    n = np.uint64(x.shape[0])
    vmax2 = max_v * max_v if max_v > F0 else FINF
    bad = F0
    for i in range(n):
        ux, uy, uz, b = _row_velocity(x[i], y[i], z[i], ox[i], oy[i], oz[i], vx[i], vy[i], vz[i], depth[i], False,
                                      inv_h, max_v, vmax2)
        depth[i] = F0
        vx[i] = ux
        vy[i] = uy
        vz[i] = uz
        bad += b
    return np.int64(bad)


@njit(**FLAT)
def update_velocities(pos, prev, vel, contact, clist, ccount, h, mu_s, mu_k, max_v, creep):
    """v = (x - x_prev)/h; friction for the vertices in the contact list
    (see _friction); speed clamp. Returns the number of non-finite
    velocities (the caller raises)."""
    inv_h = F1 / h
    contact_friction(pos, prev, vel, contact, clist, ccount, inv_h, h, mu_s, mu_k, creep)
    return _velocity_rows(pos[0], pos[1], pos[2], prev[0], prev[1], prev[2], vel[0], vel[1], vel[2],
                          contact[3], inv_h, max_v)


@njit(pipeline_class=NoAliasCompiler, **FLAT)
def _settle_rows(x, y, z, vx, vy, vz, inv_mass, ref, k, vs, dt):
    """v = u + (v - u) exp(-k vs / (vs + |v - u|) dt) for the free vertices,
    u = ref's rigid motion at the vertex (see settle_velocities),
    branch-free."""
    n = np.uint64(vx.shape[0])
    kdt = k * vs * dt
    bx, by, bz, wx, wy, wz, cx, cy, cz = ref
    for i in range(n):
        px, py, pz = x[i] - cx, y[i] - cy, z[i] - cz
        rx = bx + wy * pz - wz * py
        ry = by + wz * px - wx * pz
        rz = bz + wx * py - wy * px
        ux, uy, uz = vx[i] - rx, vy[i] - ry, vz[i] - rz
        s = np.sqrt(ux * ux + uy * uy + uz * uz)
        # exp(-x) as its (2, 2) Pade approximant, which vectorises: x <= k
        # dt (0.42 at the defaults and 24 fps, 1e-5 off; 6e-4 at x = 1). It
        # falls until x = sqrt(12) (0.072) and rises past it: x stops there.
        e = min(kdt / (vs + s), np.float32(3.4641016))
        e2 = e * e * np.float32(1.0 / 12.0)
        f = (F1 - FHALF * e + e2) / (F1 + FHALF * e + e2)
        f = f if inv_mass[i] != F0 else F1
        vx[i] = rx + ux * f
        vy[i] = ry + uy * f
        vz[i] = rz + uz * f


@njit(**FLAT)
def _pins_rigid_motion(kin, pin_start, pin_end, dt):
    """The rigid motion closest to the kinematic pins' over a step (least
    squares, float64 scalars): their mean velocity b, the angular velocity w
    about their centre c at step end, as (bx, by, bz, wx, wy, wz, cx, cy,
    cz) float32. Turning about a line the pins lie along is not seen (w has
    no part along it): pins in a row give the turn about the other axes."""
    nk = np.uint64(kin.shape[0])
    inv = 1.0 / np.float64(nk)
    cx = cy = cz = bx = by = bz = 0.0
    for j in range(nk):
        i = kin[j]
        cx += np.float64(pin_end[0, i]) * inv
        cy += np.float64(pin_end[1, i]) * inv
        cz += np.float64(pin_end[2, i]) * inv
        bx += (np.float64(pin_end[0, i]) - pin_start[0, i]) * inv / dt
        by += (np.float64(pin_end[1, i]) - pin_start[1, i]) * inv / dt
        bz += (np.float64(pin_end[2, i]) - pin_start[2, i]) * inv / dt
    # w = J^-1 L, L = sum r x (v - b), J = sum |r|^2 1 - r r^T (symmetric).
    lx = ly = lz = jxx = jyy = jzz = jxy = jxz = jyz = 0.0
    for j in range(nk):
        i = kin[j]
        rx, ry, rz = pin_end[0, i] - cx, pin_end[1, i] - cy, pin_end[2, i] - cz
        ux = (np.float64(pin_end[0, i]) - pin_start[0, i]) / dt - bx
        uy = (np.float64(pin_end[1, i]) - pin_start[1, i]) / dt - by
        uz = (np.float64(pin_end[2, i]) - pin_start[2, i]) / dt - bz
        lx += ry * uz - rz * uy
        ly += rz * ux - rx * uz
        lz += rx * uy - ry * ux
        jxx += ry * ry + rz * rz
        jyy += rx * rx + rz * rz
        jzz += rx * rx + ry * ry
        jxy -= rx * ry
        jxz -= rx * rz
        jyz -= ry * rz
    # A small multiple of the trace on the diagonal: a row of pins (or one
    # pin) leaves J singular about its own line, where L is 0 too.
    t = (jxx + jyy + jzz) * 1e-6 + 1e-30
    jxx += t
    jyy += t
    jzz += t
    # The adjugate of J over its determinant.
    axx, ayy, azz = jyy * jzz - jyz * jyz, jxx * jzz - jxz * jxz, jxx * jyy - jxy * jxy
    axy, axz, ayz = jxz * jyz - jxy * jzz, jxy * jyz - jxz * jyy, jxy * jxz - jxx * jyz
    det = jxx * axx + jxy * axy + jxz * axz
    wx = (axx * lx + axy * ly + axz * lz) / det
    wy = (axy * lx + ayy * ly + ayz * lz) / det
    wz = (axz * lx + ayz * ly + azz * lz) / det
    f = np.float32
    return f(bx), f(by), f(bz), f(wx), f(wy), f(wz), f(cx), f(cy), f(cz)


@njit(**FLAT)
def _air_rows(x, y, z, vx, vy, vz, inv_mass, tris, ref, c, dt):
    """Air resistance (see settle_velocities): each triangle's centroid
    velocity u relative to ref's rigid motion there, its part u_n along the
    unit normal, loses the drag c A |u_n| u_n (c = 0.5 air density x
    ClothParams.air_resistance, A the triangle's area) over dt, the impulse
    shared by the three corners equally (so a cloth of uniform areal
    density sigma moving as one slows as du_n/dt = -(c / sigma) |u_n| u_n).
    Each triangle's share is integrated implicitly (u_n -> u_n / (1 + k
    |u_n| dt), k its corners' share of c A / m), and no corner's motion
    across the plane is reversed, at any dt. Triangles in order, each seeing the ones before:
    serial and the same at any thread count."""
    third = np.float32(1.0 / 3.0)
    bx, by, bz, wx, wy, wz, cx, cy, cz = ref
    # k |u_n| dt = c A wsum / 9 |u_n| dt = c' wsum |u . N|, N the
    # unnormalised normal (|N| = 2 A): c' = c dt / 18.
    cdt = c * dt * np.float32(1.0 / 18.0)
    for t in range(np.uint64(tris.shape[1])):
        a, b, d = tris[0, t], tris[1, t], tris[2, t]
        wsum = inv_mass[a] + inv_mass[b] + inv_mass[d]
        e1x, e1y, e1z = x[b] - x[a], y[b] - y[a], z[b] - z[a]
        e2x, e2y, e2z = x[d] - x[a], y[d] - y[a], z[d] - z[a]
        nx = e1y * e2z - e1z * e2y
        ny = e1z * e2x - e1x * e2z
        nz = e1x * e2y - e1y * e2x
        # ref's velocity at the centroid.
        px = (x[a] + x[b] + x[d]) * third - cx
        py = (y[a] + y[b] + y[d]) * third - cy
        pz = (z[a] + z[b] + z[d]) * third - cz
        rx = bx + wy * pz - wz * py
        ry = by + wz * px - wx * pz
        rz = bz + wx * py - wy * px
        ux = (vx[a] + vx[b] + vx[d]) * third - rx
        uy = (vy[a] + vy[b] + vy[d]) * third - ry
        uz = (vz[a] + vz[b] + vz[d]) * third - rz
        un = ux * nx + uy * ny + uz * nz   # |N| u_n
        n2 = nx * nx + ny * ny + nz * nz
        if un * un <= EPS * n2 or wsum == F0:
            continue   # still across its plane, pinned, or degenerate
        inl = F1 / np.sqrt(n2)
        nx, ny, nz = nx * inl, ny * inl, nz * inl
        # x = k |u_n| dt; the centroid's normal speed goes to u_n / (1 + x):
        # an impulse J = -u_n x / (1 + x) 9 / wsum shared equally, a third
        # to each corner, moves corner v by -u_n x / (1 + x) 3 w_v / wsum,
        # at most stopping its own motion across the plane (a light corner
        # of heavy ones is not thrown back; one moving the other way is
        # left alone).
        xk = cdt * wsum * abs(un)
        f = -un * inl * xk / (F1 + xk) * np.float32(3.0) / wsum
        for v in (a, b, d):
            q = f * inv_mass[v]
            sv = (vx[v] - rx) * nx + (vy[v] - ry) * ny + (vz[v] - rz) * nz
            if sv * q >= F0:
                continue
            if abs(q) > abs(sv):
                q = -sv
            vx[v] += q * nx
            vy[v] += q * ny
            vz[v] += q * nz


@njit(**FLAT)
def settle_velocities(pos, vel, inv_mass, kin, pin_start, pin_end, dt, k, vs, tris, air):
    """Settling damping and air resistance, once a step of dt seconds.

    Settling (k > 0): each free vertex's
    velocity relative to the cloth's motion decays at the rate k vs / (vs +
    s), s its relative speed. Below vs that is plain drag at k (1/s): the
    last slow swings die out; above it a constant deceleration of at most
    k vs (m/s^2), like dry friction, so fast motion keeps nearly all of its
    speed. Smooth in s (dry friction itself sticks and slips: it jitters).

    Air resistance (air > 0, kg/m^3: 0.5 air density x
    ClothParams.air_resistance): each triangle's motion across its plane
    relative to the cloth's motion meets quadratic drag (_air_rows), before
    the settling.

    The cloth's motion is the rigid motion of its kinematic pins over the
    step (_pins_rigid_motion: a cloth pinned to a moving, turning character
    follows it undamped), or, with no pins, its centre of mass's velocity
    (a falling cloth falls freely). Applied to each step's end velocities,
    per second of dt: the same decay at any frame rate and number of
    substeps."""
    if kin.shape[0] > 0:
        ref = _pins_rigid_motion(kin, pin_start, pin_end, np.float64(dt))
    else:
        m = F0
        rx, ry, rz = F0, F0, F0
        for i in range(np.uint64(vel.shape[1])):
            w = inv_mass[i]
            if w != F0:
                w = F1 / w
                m += w
                rx += w * vel[0, i]
                ry += w * vel[1, i]
                rz += w * vel[2, i]
        if m > F0:
            rx, ry, rz = rx / m, ry / m, rz / m
        ref = (rx, ry, rz, F0, F0, F0, F0, F0, F0)
    if air != F0:
        _air_rows(pos[0], pos[1], pos[2], vel[0], vel[1], vel[2], inv_mass, tris, ref, air, dt)
    if k != F0:
        _settle_rows(pos[0], pos[1], pos[2], vel[0], vel[1], vel[2], inv_mass, ref, k, vs, dt)


@njit(**FLAT)
def to_aos4(pos, p4):
    """(3, n) -> flat (4n,) x, y, z, 0 records: one 16-byte load/store per
    vertex lets the compiler (SLP) solve a constraint's x, y, z at once."""
    n = np.uint64(pos.shape[1])
    for i in range(n):
        p4[4 * i] = pos[0, i]
        p4[4 * i + 1] = pos[1, i]
        p4[4 * i + 2] = pos[2, i]
        p4[4 * i + 3] = F0


# The fourth item of every record is 0 (to_aos4 writes it, and the 4-wide
# constraint updates add 0 * their correction to it), and the two passes
# below add it to x: reading all four items of a record lets LLVM load whole
# records and shuffle them apart. Reading three, it gathered each row (three
# gathers per 16 vertices), more than twice as slow on CPUs that gather
# slowly (AMD Zen), here and in _from_aos4_flags.
@njit(**FLAT)
def from_aos4(p4, pos):
    n = np.uint64(pos.shape[1])
    for i in range(n):
        pos[0, i] = p4[4 * i] + p4[4 * i + 3]
        pos[1, i] = p4[4 * i + 1]
        pos[2, i] = p4[4 * i + 2]


@njit(inline="always", **JIT)
def _listed_flag(px, py, pz, h, ubox):
    """1 for a vertex inside box ubox (a tuple) or with a swept entry
    (h = hit[i] != 0), else 0: branch-free, for the vectorised passes."""
    outside = (px < ubox[0]) | (px > ubox[3]) | (py < ubox[1]) | (py > ubox[4]) | (pz < ubox[2]) | (pz > ubox[5])
    return 1 if (h != 0) | (not outside) else 0


@njit(pipeline_class=NoAliasCompiler, **FLAT)
def _from_aos4_flags(p4, x, y, z, hit, ubox, sel):
    """from_aos4 into rows, and sel[i] = 1 where vertex i is inside box ubox
    (a tuple) or has a swept entry (hit[i] != 0), else 0. Branch-free, so it
    vectorises like from_aos4."""
    n = np.uint64(x.shape[0])
    for i in range(n):
        px = p4[4 * i] + p4[4 * i + 3]
        py = p4[4 * i + 1]
        pz = p4[4 * i + 2]
        x[i] = px
        y[i] = py
        z[i] = pz
        sel[i] = _listed_flag(px, py, pz, hit[i], ubox)


@njit(pipeline_class=NoAliasCompiler, **FLAT)
def _row_flags(x, y, z, hit, ubox, sel):
    """sel[i] as in _from_aos4_flags, from the position rows."""
    n = np.uint64(x.shape[0])
    for i in range(n):
        sel[i] = _listed_flag(x[i], y[i], z[i], hit[i], ubox)


@njit(**FLAT)
def collect_rows(pos, hit, ubox, cand, sel):
    """from_aos4_collect's list from pos (3, n) itself, for a step whose self
    contacts move vertices after the records are read back."""
    _row_flags(pos[0], pos[1], pos[2], hit, ubox, sel)
    return compact_flags(sel, cand)


@njit(**FLAT)
def from_aos4_collect(p4, pos, hit, ubox, cand, sel):
    """from_aos4, and the list of vertices project_colliders must visit when
    only capsules are present: inside the capsules' union box ubox (a tuple)
    or with a swept entry. The box test rides on a pass that loads every
    position anyway, so the projection visits hundreds of vertices, not all.
    The list is built from flags (see compact_flags): with a branch per
    vertex the pass cost 20 us on the 100x100 sheet, with a branch-free
    append 29. sel: scratch as for compact_flags. Returns the count."""
    _from_aos4_flags(p4, pos[0], pos[1], pos[2], hit, ubox, sel)
    return compact_flags(sel, cand)


@njit(pipeline_class=NoAliasCompiler, **FLAT)
def _advance_rows(x, y, z, ox, oy, oz, vx, vy, vz, depth, inv_mass, hit, ax, ay, az, cmask, sel, ubox, start,
                  use_accel, inv_h, h, max_v, drag, gx, gy, gz):
    """_velocity_rows, then the predict of the next substep (x_prev = x,
    drag, gravity, acceleration, x += h v) for every vertex, branch-free.
    A vertex with inv_mass 0 keeps its velocity and position (the pins pass
    moves the kinematic ones). sel[i] = 1 for a free vertex that collides
    with capsules (cmask >= 0) and whose path box meets box ubox (a tuple),
    else 0 (see compact_flags). Returns the number of non-finite
    velocities."""
    n = np.uint64(x.shape[0])
    vmax2 = max_v * max_v if max_v > F0 else FINF
    keep = F1 - drag
    hgx, hgy, hgz = h * gx, h * gy, h * gz
    bad = F0  # float32: see _velocity_rows
    for i in range(n):
        px, py, pz = x[i], y[i], z[i]
        ux, uy, uz, b = _row_velocity(px, py, pz, ox[i], oy[i], oz[i], vx[i], vy[i], vz[i], depth[i], start,
                                      inv_h, max_v, vmax2)
        bad += b
        depth[i] = F0
        hit[i] = 0
        ox[i] = px
        oy[i] = py
        oz[i] = pz
        free = inv_mass[i] != F0
        wx = ux * keep + hgx
        wy = uy * keep + hgy
        wz = uz * keep + hgz
        if use_accel:
            wx += h * ax[i]
            wy += h * ay[i]
            wz += h * az[i]
        wx = wx if free else ux
        wy = wy if free else uy
        wz = wz if free else uz
        vx[i] = wx
        vy[i] = wy
        vz[i] = wz
        qx = px + h * wx if free else px
        qy = py + h * wy if free else py
        qz = pz + h * wz if free else pz
        x[i] = qx
        y[i] = qy
        z[i] = qz
        miss = path_misses(px, py, pz, qx, qy, qz, ubox) | (not free) | (cmask[i] < F0)
        sel[i] = 0 if miss else 1
    return np.int64(bad)


@njit(**FLAT)
def advance_vertices(pos, vel, prev, inv_mass, cfg, accel, contact, clist, ccount, kin, pin_start, pin_end,
                     t1, cap0, cap1, hit, entry, cmask, finish, cand, sel, box, sweep):
    """The per-vertex passes between two substeps (no wind): the velocities
    of the substep that ended (if finish; the first substep of a step starts
    from the state's velocities), then predict and the swept capsule
    contacts of the next. The arithmetic per vertex is that of
    update_velocities, predict and generate_contacts in sequence (they touch
    vertex i alone): friction over the contact list, one vectorised row pass
    (_advance_rows, which also flags the vertices whose path meets the
    capsules), the pins, and swept_contacts for the flagged ones. cand: (n,)
    uint32 scratch, sel: uint8 scratch (see compact_flags); box (k, 6) and
    sweep (sweep_scratch): scratch that holds on return the capsules' swept
    boxes and, in sweep[0], their prepared rows at substep end. Returns the
    number of non-finite velocities. Allocates nothing (FLAT)."""
    h = cfg.h
    inv_h = F1 / h
    drag = cfg.air_drag * h
    if drag > F1:
        drag = F1
    if finish:
        g = np.sqrt(cfg.gx * cfg.gx + cfg.gy * cfg.gy + cfg.gz * cfg.gz)
        contact_friction(pos, prev, vel, contact, clist, ccount, inv_h, h, cfg.mu_s, cfg.mu_k,
                         np.float32(2.0) * g * h)
    margin = cfg.margin
    capsule_boxes_into(cap0, cap1, margin + cfg.coff_max, box)
    ubox = swept_box_union(box)
    rows = (pos[0], pos[1], pos[2], prev[0], prev[1], prev[2], vel[0], vel[1], vel[2], contact[3], inv_mass, hit,
            accel[0], accel[1], accel[2], cmask, sel, ubox, not finish)
    # A literal flag per call: LLVM drops the dead path (see solve_distance_fast4).
    if cfg.use_accel != F0:
        bad = _advance_rows(*rows, True, inv_h, h, cfg.maxv, drag, cfg.gx, cfg.gy, cfg.gz)
    else:
        bad = _advance_rows(*rows, False, inv_h, h, cfg.maxv, drag, cfg.gx, cfg.gy, cfg.gz)
    s1 = F1 - t1
    nk = np.uint64(kin.shape[0])
    for j in range(nk):
        i = kin[j]
        pos[0, i] = s1 * pin_start[0, i] + t1 * pin_end[0, i]
        pos[1, i] = s1 * pin_start[1, i] + t1 * pin_end[1, i]
        pos[2, i] = s1 * pin_start[2, i] + t1 * pin_end[2, i]
    if cap1.shape[0] > 0:
        # The capsules at substep end, for the swept contacts and the
        # projection (project_colliders_into) alike.
        prepare_capsules_into(cap1, margin, sweep[0])
        count = compact_flags(sel, cand)
        swept_contacts_into(cand, count, pos, prev, cap0, cap1, box, margin, hit, entry, cmask, sweep)
    return bad


@njit(**JIT)
def vertex_lists(n):
    """The step's per-vertex scratch for n vertices: sel (flags, zero past
    the items to a whole number of words, see compact_flags), cand (as long
    as sel: compact_flags writes past the listed items) and clist (the
    contact list)."""
    sel = np.zeros((n + 7) // 8 * 8, dtype=np.uint8)
    return sel, np.empty(sel.shape[0], dtype=np.uint32), np.empty(n, dtype=np.uint32)
