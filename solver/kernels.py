"""numba kernels of one step. float32 structure-of-arrays positions (3, n),
uint32 indices, unsigned loop counters (numba adds a negative-index fix-up for
signed ones), one compiled call per step on the fast path.

Pipeline of a substep (Ten Minute Physics' three verbs):
  predict -> generate swept collider contacts -> iterations of
  [stretch, shear, bend, stretch limits, tether, soft pins, (self collision),
  colliders] ->
  velocities (+ friction, clamp, NaN check).
"""

import numpy as np
from numba import njit

from .selfcollision import solve_serial
from .hardware import compact_flags, rsqrt
from .jit import FLAT
from .jit import KERNEL as JIT
from .jit import NoAliasCompiler


F0 = np.float32(0.0)
F1 = np.float32(1.0)
FHALF = np.float32(0.5)
EPS = np.float32(1e-9)
FINF = np.float32(np.inf)
TRACE_EPS = np.float32(1e-5)

# cfg slots (float32 array built by step.py)
C_H = 0
C_GX, C_GY, C_GZ = 1, 2, 3
C_A_STRETCH, C_A_SHEAR, C_A_BEND, C_A_TETHER = 4, 5, 6, 7
C_D_STRETCH, C_D_SHEAR, C_D_BEND, C_D_TETHER = 8, 9, 10, 11
C_TETHER_SCALE = 12
C_AIR_DRAG = 14
C_AIR_DENSITY, C_CD, C_CL = 15, 16, 17
C_MARGIN, C_MU_S, C_MU_K, C_MAXV = 18, 19, 20, 21
C_USE_TETHERS, C_USE_WIND = 22, 23
C_SUBSTEPS, C_ITERATIONS = 24, 25
C_USE_ACCEL = 26
C_USE_LIMITS = 27
C_COFF_MAX = 28    # largest per-vertex collider offset (capsule boxes grow by it)
C_BEND_CURVED = 29  # 1: some bending element has a curved rest shape (rest norm != 0)
C_SIZE = 32


# ---------------------------------------------------------------- predict

@njit(**JIT)
def predict(pos, vel, prev, inv_mass, cfg, accel, wind, tris, kin, pin_start, pin_end, t1):
    h = cfg[C_H]
    gx, gy, gz = cfg[C_GX], cfg[C_GY], cfg[C_GZ]
    use_accel = cfg[C_USE_ACCEL] != F0
    use_wind = cfg[C_USE_WIND] != F0
    drag = cfg[C_AIR_DRAG] * h
    if drag > F1:
        drag = F1
    n = np.uint64(pos.shape[1])
    if use_wind:
        # Aerodynamic drag + lift per triangle from the air velocity relative
        # to the triangle, split equally among its corners.
        third = np.float32(1.0 / 3.0)
        k = FHALF * cfg[C_AIR_DENSITY] * h * third
        cd, cl = cfg[C_CD], cfg[C_CL]
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


# ---------------------------------------------------------------- constraints

@njit(**JIT)
def solve_distance(pos, prev, a, b, wa, wb, rest, lam, alpha, gamma, use_lambda):
    """XPBD distance constraints C = |xb - xa| - rest, in array order (which
    is colour order: within a colour no two share a vertex)."""
    px, py, pz = pos[0], pos[1], pos[2]
    ox, oy, oz = prev[0], prev[1], prev[2]
    one_g = F1 + gamma
    m = np.uint64(a.shape[0])
    for i in range(m):
        ia = a[i]
        ib = b[i]
        dx = px[ib] - px[ia]
        dy = py[ib] - py[ia]
        dz = pz[ib] - pz[ia]
        d2 = dx * dx + dy * dy + dz * dz
        w_a = wa[i]
        w_b = wb[i]
        wsum = w_a + w_b
        if d2 < EPS * EPS or wsum == F0:
            continue
        dist = np.sqrt(d2)
        inv = F1 / dist
        nx, ny, nz = dx * inv, dy * inv, dz * inv
        c = dist - rest[i]
        damp = F0
        if gamma != F0:
            damp = gamma * (nx * (dx - (ox[ib] - ox[ia])) + ny * (dy - (oy[ib] - oy[ia]))
                            + nz * (dz - (oz[ib] - oz[ia])))
        if use_lambda:
            lm = lam[i]
            dl = -(c + alpha * lm + damp) / (one_g * wsum + alpha)
            lam[i] = lm + dl
        else:
            dl = -(c + damp) / (one_g * wsum + alpha)
        sa = w_a * dl
        sb = w_b * dl
        px[ia] -= sa * nx
        py[ia] -= sa * ny
        pz[ia] -= sa * nz
        px[ib] += sb * nx
        py[ib] += sb * ny
        pz[ib] += sb * nz


@njit(**JIT)
def _distance_fast(pos, ab, coef, unilateral):
    """solve_distance for one iteration without damping (lambda = 0), with
    the denominators folded into per-constraint coefficients
    ca = w_a / (w_a + w_b + alpha~) (cb likewise): the correction is
    -/+ c (1 - rest/|d|) d, one sqrt and one division. unilateral: only
    when longer than rest (the stretch limits).
    ab: flat index pairs (2m,); coef: flat records (4m,) [ca, cb, rest, -]."""
    px, py, pz = pos[0], pos[1], pos[2]
    m = np.uint64(ab.shape[0]) >> np.uint64(1)
    for i in range(m):
        ia = ab[2 * i]
        ib = ab[2 * i + 1]
        e = 4 * i
        dx = px[ib] - px[ia]
        dy = py[ib] - py[ia]
        dz = pz[ib] - pz[ia]
        d2 = dx * dx + dy * dy + dz * dz
        if d2 < EPS * EPS:
            continue
        f = F1 - coef[e + 2] / np.sqrt(d2)
        if unilateral:
            f = max(f, F0)
        dx, dy, dz = dx * f, dy * f, dz * f
        sa = coef[e]
        sb = coef[e + 1]
        px[ia] += sa * dx
        py[ia] += sa * dy
        pz[ia] += sa * dz
        px[ib] -= sb * dx
        py[ib] -= sb * dy
        pz[ib] -= sb * dz


@njit(**JIT)
def solve_distance_fast(pos, ab, coef, unilateral):
    """_distance_fast with `unilateral` a constant in each call, so LLVM
    compiles two specialised loops (see solve_distance_fast4)."""
    if unilateral:
        _distance_fast(pos, ab, coef, True)
    else:
        _distance_fast(pos, ab, coef, False)


@njit(**JIT)
def solve_bending_fast(pos, idx4, coef):
    """solve_bending for one iteration without damping: dx_j = -c_j (1 -
    rest/|L|) L with c_j = w_j k_j / (sum w k^2 + alpha~) precomputed; a flat
    rest pose (rest = 0) needs no sqrt and no division at all.
    idx4: flat vertex quadruples (4m,); coef: flat records (8m,)
    [k1, k2, k3, rest, c0, c1, c2, c3]."""
    px, py, pz = pos[0], pos[1], pos[2]
    m = np.uint64(idx4.shape[0]) >> np.uint64(2)
    for i in range(m):
        q = 4 * i
        e = 8 * i
        i0 = idx4[q]
        i1 = idx4[q + 1]
        i2 = idx4[q + 2]
        i3 = idx4[q + 3]
        k1 = coef[e]
        k2 = coef[e + 1]
        k3 = coef[e + 2]
        x0, y0, z0 = px[i0], py[i0], pz[i0]
        lx = k1 * (px[i1] - x0) + k2 * (px[i2] - x0) + k3 * (px[i3] - x0)
        ly = k1 * (py[i1] - y0) + k2 * (py[i2] - y0) + k3 * (py[i3] - y0)
        lz = k1 * (pz[i1] - z0) + k2 * (pz[i2] - z0) + k3 * (pz[i3] - z0)
        r = coef[e + 3]
        if r != F0:
            l2 = lx * lx + ly * ly + lz * lz
            if l2 < EPS * EPS:
                continue
            f = F1 - r / np.sqrt(l2)
            lx, ly, lz = lx * f, ly * f, lz * f
        s = coef[e + 4]
        px[i0] = x0 - s * lx
        py[i0] = y0 - s * ly
        pz[i0] = z0 - s * lz
        s = coef[e + 5]
        px[i1] -= s * lx
        py[i1] -= s * ly
        pz[i1] -= s * lz
        s = coef[e + 6]
        px[i2] -= s * lx
        py[i2] -= s * ly
        pz[i2] -= s * lz
        s = coef[e + 7]
        px[i3] -= s * lx
        py[i3] -= s * ly
        pz[i3] -= s * lz


@njit(**JIT)
def solve_bending(pos, prev, idx, k, wk, swk2, rest, lam, alpha, gamma, use_lambda):
    """Bergou isometric bending, C = |L| - |L_rest|, L = sum_j k_j x_j.
    grad_j C = k_j L/|L|, so |grad|^2 weighted = sum_j w_j k_j^2 = swk2
    (precomputed): the element is dot products and multiplies, no trig."""
    px, py, pz = pos[0], pos[1], pos[2]
    ox, oy, oz = prev[0], prev[1], prev[2]
    one_g = F1 + gamma
    m = np.uint64(rest.shape[0])
    for i in range(m):
        i0 = idx[0, i]
        i1 = idx[1, i]
        i2 = idx[2, i]
        i3 = idx[3, i]
        k1 = k[1, i]
        k2 = k[2, i]
        k3 = k[3, i]
        # sum k = 0, so L = sum_{j>0} k_j (x_j - x_0): better float32 precision.
        x0, y0, z0 = px[i0], py[i0], pz[i0]
        lx = k1 * (px[i1] - x0) + k2 * (px[i2] - x0) + k3 * (px[i3] - x0)
        ly = k1 * (py[i1] - y0) + k2 * (py[i2] - y0) + k3 * (py[i3] - y0)
        lz = k1 * (pz[i1] - z0) + k2 * (pz[i2] - z0) + k3 * (pz[i3] - z0)
        l2 = lx * lx + ly * ly + lz * lz
        if l2 < EPS * EPS:
            continue
        r = rest[i]
        if r == F0 and gamma == F0 and not use_lambda:
            # Flat rest pose: C grad C = k_j L, the energy is quadratic and
            # the update linear, dx_j = -w_j k_j L / (swk2 + alpha): no sqrt,
            # one division.
            sc = -F1 / (swk2[i] + alpha)
            dx, dy, dz = lx * sc, ly * sc, lz * sc
        else:
            ln = np.sqrt(l2)
            inv = F1 / ln
            ux, uy, uz = lx * inv, ly * inv, lz * inv
            c = ln - r
            damp = F0
            if gamma != F0:
                k0 = k[0, i]
                dvx = (k0 * (x0 - ox[i0]) + k1 * (px[i1] - ox[i1]) + k2 * (px[i2] - ox[i2])
                       + k3 * (px[i3] - ox[i3]))
                dvy = (k0 * (y0 - oy[i0]) + k1 * (py[i1] - oy[i1]) + k2 * (py[i2] - oy[i2])
                       + k3 * (py[i3] - oy[i3]))
                dvz = (k0 * (z0 - oz[i0]) + k1 * (pz[i1] - oz[i1]) + k2 * (pz[i2] - oz[i2])
                       + k3 * (pz[i3] - oz[i3]))
                damp = gamma * (ux * dvx + uy * dvy + uz * dvz)
            if use_lambda:
                lm = lam[i]
                dl = -(c + alpha * lm + damp) / (one_g * swk2[i] + alpha)
                lam[i] = lm + dl
            else:
                dl = -(c + damp) / (one_g * swk2[i] + alpha)
            dx, dy, dz = ux * dl, uy * dl, uz * dl
        s = wk[0, i]
        px[i0] = x0 + s * dx
        py[i0] = y0 + s * dy
        pz[i0] = z0 + s * dz
        s = wk[1, i]
        px[i1] += s * dx
        py[i1] += s * dy
        pz[i1] += s * dz
        s = wk[2, i]
        px[i2] += s * dx
        py[i2] += s * dy
        pz[i2] += s * dz
        s = wk[3, i]
        px[i3] += s * dx
        py[i3] += s * dy
        pz[i3] += s * dz


@njit(**JIT)
def solve_tethers(pos, prev, v, anchor, length, w, alpha, gamma, scale):
    """Unilateral long-range attachments: only pull in when over-extended.
    Anchors are kinematic, so each tether writes one vertex and needs no
    colouring; no multiplier (inactive most of the time)."""
    px, py, pz = pos[0], pos[1], pos[2]
    ox, oy, oz = prev[0], prev[1], prev[2]
    one_g = F1 + gamma
    m = np.uint64(v.shape[0])
    for i in range(m):
        iv = v[i]
        ia = anchor[i]
        dx = px[iv] - px[ia]
        dy = py[iv] - py[ia]
        dz = pz[iv] - pz[ia]
        d2 = dx * dx + dy * dy + dz * dz
        lim = length[i] * scale
        if d2 <= lim * lim:
            continue
        dist = np.sqrt(d2)
        inv = F1 / dist
        nx, ny, nz = dx * inv, dy * inv, dz * inv
        c = dist - lim
        damp = F0
        if gamma != F0:
            damp = gamma * (nx * (px[iv] - ox[iv]) + ny * (py[iv] - oy[iv]) + nz * (pz[iv] - oz[iv]))
            if damp < F0:
                damp = F0
        wi = w[i]
        dl = -(c + damp) / (one_g * wi + alpha)
        s = wi * dl
        px[iv] += s * nx
        py[iv] += s * ny
        pz[iv] += s * nz


@njit(**JIT)
def solve_soft_pins(pos, soft, soft_alpha, soft_lam, inv_mass, pin_start, pin_end, t1, use_lambda):
    """Zero-length XPBD attachment of each soft-pinned vertex to its target
    (three independent linear constraints, one per axis)."""
    s1 = F1 - t1
    m = np.uint64(soft.shape[0])
    for j in range(m):
        i = soft[j]
        w = inv_mass[i]
        al = soft_alpha[j]
        for ax in range(3):
            target = s1 * pin_start[ax, i] + t1 * pin_end[ax, i]
            c = pos[ax, i] - target
            if use_lambda:
                lm = soft_lam[ax, j]
                dl = -(c + al * lm) / (w + al)
                soft_lam[ax, j] = lm + dl
            else:
                dl = -c / (w + al)
            pos[ax, i] += w * dl


# ---------------------------------------------------------------- colliders

@njit(inline="always", **JIT)
def _sphere_push(vx, vy, vz, r, s, ax, ay, az):
    """The capsule distances' result for a point at offset v from its closest
    sphere (radius r, axis fraction s): (distance, unit normal, s). On the
    axis (v = 0) any direction perpendicular to the axis (ax, ay, az) will do."""
    d2 = vx * vx + vy * vy + vz * vz
    if d2 > EPS * EPS:
        dc = np.sqrt(d2)
        inv = F1 / dc
        return dc - r, vx * inv, vy * inv, vz * inv, s
    if abs(ax) < abs(ay):
        nx, ny, nz = F0, -az, ay
    else:
        nx, ny, nz = az, F0, -ax
    nl = np.sqrt(nx * nx + ny * ny + nz * nz)
    if nl < EPS:
        return -r, F0, F0, F1, s
    return -r, nx / nl, ny / nl, nz / nl, s


@njit(inline="always", **JIT)
def capsule_distance(px, py, pz, ax, ay, az, bx, by, bz, ra, rb):
    """Signed distance to a round cone (a capsule with one radius per end):
    min over s of |p - c(s)| - r(s), the union of spheres along the axis.
    Returns (distance, unit normal, axis fraction of the closest sphere)."""
    dx, dy, dz = bx - ax, by - ay, bz - az
    l2 = dx * dx + dy * dy + dz * dz
    qx, qy, qz = px - ax, py - ay, pz - az
    if l2 < EPS * EPS:
        s = F0
        r = ra if ra > rb else rb
        cx, cy, cz = ax, ay, az
    else:
        ln = np.sqrt(l2)
        inv = F1 / ln
        ux, uy, uz = dx * inv, dy * inv, dz * inv
        x = qx * ux + qy * uy + qz * uz
        ex, ey, ez = qx - x * ux, qy - x * uy, qz - x * uz
        y = np.sqrt(ex * ex + ey * ey + ez * ez)
        kk = (ra - rb) * inv
        if kk * kk < np.float32(0.999999):
            sd = x - kk * y / np.sqrt(F1 - kk * kk)
        elif ra > rb:
            sd = F0
        else:
            sd = ln
        if sd < F0:
            sd = F0
        if sd > ln:
            sd = ln
        s = sd * inv
        r = ra + (rb - ra) * s
        cx, cy, cz = ax + sd * ux, ay + sd * uy, az + sd * uz
    return _sphere_push(px - cx, py - cy, pz - cz, r, s, dx, dy, dz)


@njit(**JIT)
def prepare_capsules(cap, margin):
    """Per-capsule constants for capsule_distance_pre (k, 12): a(3), unit
    axis(3), length, 1/length, ra, rb (margin added), slope of the tangent
    condition, mode (0 round cone, 1 sphere at a, 2 sphere at b)."""
    pre = np.empty((cap.shape[0], 12), dtype=np.float32)
    prepare_capsules_into(cap, margin, pre)
    return pre


@njit(**FLAT)
def prepare_capsules_into(cap, margin, pre):
    """prepare_capsules into pre (k, 12), allocating nothing: the step's
    per-substep passes compile without reference counting (FLAT)."""
    k = cap.shape[0]
    for j in range(k):
        for c in range(12):
            pre[j, c] = F0
        ax, ay, az = cap[j, 0], cap[j, 1], cap[j, 2]
        dx, dy, dz = cap[j, 3] - ax, cap[j, 4] - ay, cap[j, 5] - az
        ra = cap[j, 6] + margin
        rb = cap[j, 7] + margin
        ln = np.sqrt(dx * dx + dy * dy + dz * dz)
        pre[j, 0], pre[j, 1], pre[j, 2] = ax, ay, az
        pre[j, 8], pre[j, 9] = ra, rb
        if ln < EPS:
            pre[j, 5] = F1
            pre[j, 11] = np.float32(1.0)
            if rb > ra:
                pre[j, 8] = rb
            continue
        inv = F1 / ln
        pre[j, 3], pre[j, 4], pre[j, 5] = dx * inv, dy * inv, dz * inv
        pre[j, 6], pre[j, 7] = ln, inv
        kk = (ra - rb) * inv
        if kk * kk < np.float32(0.999999):
            pre[j, 10] = kk / np.sqrt(F1 - kk * kk)
        else:
            pre[j, 11] = np.float32(1.0) if ra > rb else np.float32(2.0)


@njit(inline="always", **JIT)
def capsule_row_off(pre, j, off):
    """Row j of prepare_capsules as a tuple of scalars, both radii grown by
    off (a vertex's collider offset: an outer layer of clothing keeps clear
    of the body by the inner layers' thickness; the same difference of radii
    keeps the slope and mode). Per-element helpers take scalars and tuples,
    never arrays: an array argument makes numba refcount it on every call
    (atomic NRT_incref/decref that LLVM cannot prune past a branch), which
    made per-vertex loops 100x slower. This accessor has no branch, so its
    own refcounts are pruned."""
    return (pre[j, 0], pre[j, 1], pre[j, 2], pre[j, 3], pre[j, 4], pre[j, 5],
            pre[j, 6], pre[j, 7], pre[j, 8] + off, pre[j, 9] + off, pre[j, 10], pre[j, 11])


@njit(inline="always", **JIT)
def box_row(box, j):
    """Row j of a (k, 6) min/max box array as a tuple (see capsule_row_off)."""
    return (box[j, 0], box[j, 1], box[j, 2], box[j, 3], box[j, 4], box[j, 5])


@njit(inline="always", **JIT)
def capsule_distance_pre(px, py, pz, c):
    """capsule_distance with the per-capsule constants c = capsule_row_off(pre, j, off)
    of prepare_capsules: one sqrt and one division for equal radii."""
    qx, qy, qz = px - c[0], py - c[1], pz - c[2]
    ux, uy, uz = c[3], c[4], c[5]
    ln = c[6]
    x = qx * ux + qy * uy + qz * uz
    mode = c[11]
    slope = c[10]
    if mode == F0:
        sd = x
        if slope != F0:
            ex, ey, ez = qx - x * ux, qy - x * uy, qz - x * uz
            sd = x - slope * np.sqrt(ex * ex + ey * ey + ez * ez)
        if sd < F0:
            sd = F0
        if sd > ln:
            sd = ln
    elif mode == F1:
        sd = F0
    else:
        sd = ln
    s = sd * c[7]
    r = c[8] + (c[9] - c[8]) * s
    return _sphere_push(qx - sd * ux, qy - sd * uy, qz - sd * uz, r, s, ux, uy, uz)


@njit(inline="always", **JIT)
def outside_capsule(px, py, pz, ax, ay, az, ux, uy, uz, ln, rmax):
    """True if the point is farther than rmax from the axis segment (a, a +
    ln u): then it is outside the round cone (every sphere along the axis
    has a radius of at most rmax). Squared, no square root or division: most
    of the vertices the projection visits are near a capsule, not in it, and
    the full distance (capsule_distance_pre) cost them a square root, a
    division and the sphere push's branches."""
    qx, qy, qz = px - ax, py - ay, pz - az
    x = qx * ux + qy * uy + qz * uz
    x = min(max(x, F0), ln)
    ex, ey, ez = qx - x * ux, qy - x * uy, qz - x * uz
    return ex * ex + ey * ey + ez * ez > rmax * rmax


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


@njit(**JIT)
def capsule_boxes(cap0, cap1, margin):
    """Axis-aligned boxes around each capsule's sweep over the substep
    (cap0 -> cap1), grown by the larger radius and the margin; (k, 6) min, max."""
    box = np.empty((cap1.shape[0], 6), dtype=np.float32)
    capsule_boxes_into(cap0, cap1, margin, box)
    return box


@njit(**FLAT)
def capsule_boxes_into(cap0, cap1, margin, box):
    """capsule_boxes into box (k, 6), allocating nothing."""
    k = cap1.shape[0]
    for j in range(k):
        r = max(cap1[j, 6], cap1[j, 7]) + margin
        for c in range(3):
            lo = min(min(cap0[j, c], cap0[j, 3 + c]), min(cap1[j, c], cap1[j, 3 + c]))
            hi = max(max(cap0[j, c], cap0[j, 3 + c]), max(cap1[j, c], cap1[j, 3 + c]))
            box[j, c] = lo - r
            box[j, 3 + c] = hi + r


@njit(**FLAT)
def swept_box_union(box):
    """Box around every capsule's swept box as a tuple (min xyz, max xyz):
    one cheap test per vertex before the per-capsule work."""
    lx = ly = lz = np.float32(3e38)
    hx = hy = hz = np.float32(-3e38)
    for j in range(box.shape[0]):
        lx = min(lx, box[j, 0])
        ly = min(ly, box[j, 1])
        lz = min(lz, box[j, 2])
        hx = max(hx, box[j, 3])
        hy = max(hy, box[j, 4])
        hz = max(hz, box[j, 5])
    return (lx, ly, lz, hx, hy, hz)


@njit(inline="always", **JIT)
def path_misses(x0, y0, z0, x1, y1, z1, u):
    """True if the path box misses box u (a tuple, see box_row). One `|` of
    six comparisons, no short-circuit branches: it also serves the
    vectorised row pass (_advance_rows)."""
    return ((max(x0, x1) < u[0]) | (min(x0, x1) > u[3]) | (max(y0, y1) < u[1])
            | (min(y0, y1) > u[4]) | (max(z0, z1) < u[2]) | (min(z0, z1) > u[5]))


@njit(**JIT)
def generate_contacts(pos, prev, inv_mass, cap0, cap1, margin, hit, entry, cmask, pad):
    """Swept capsule contacts for this substep: the segment from the vertex's
    substep-start position (carried along with the capsule, so a capsule that
    sweeps past a still vertex is seen) to its predicted position, against the
    capsule at substep end, by Newton steps on the (convex) distance along it.
    hit[i] = 1 + index of the capsule entered first (0 = none) and
    entry[:, i] = entry point, entry normal, surface velocity. cmask[i]: the
    vertex's collider offset (capsule radii grow by it), negative = it
    ignores the capsules (an outer layer that collides with cloth only);
    pad: the largest offset."""
    n = np.uint64(pos.shape[1])
    k = cap1.shape[0]
    box = capsule_boxes(cap0, cap1, margin + pad)
    ubox = swept_box_union(box)
    cand = np.empty(n, dtype=np.uint32)
    count = 0
    for i in range(n):
        hit[i] = 0
        if inv_mass[i] == F0 or k == 0 or cmask[i] < F0:
            continue
        if path_misses(prev[0, i], prev[1, i], prev[2, i], pos[0, i], pos[1, i], pos[2, i], ubox):
            continue
        cand[count] = i
        count += 1
    swept_contacts(cand, count, pos, prev, cap0, cap1, box, margin, hit, entry, cmask)


@njit(inline="always", **JIT)
def _capsule_distance_rows(px, py, pz, c, perp):
    """capsule_distance_pre without branches, for the vectorised swept pass:
    the mode and slope (per capsule, the same for every lane) select instead
    of branching, and perp is the capsule's fallback normal for a point on
    its axis (a tuple, see _axis_perpendicular). Same results up to
    rounding."""
    qx, qy, qz = px - c[0], py - c[1], pz - c[2]
    ux, uy, uz = c[3], c[4], c[5]
    ln = c[6]
    x = qx * ux + qy * uy + qz * uz
    ex, ey, ez = qx - x * ux, qy - x * uy, qz - x * uz
    sd = x - c[10] * np.sqrt(ex * ex + ey * ey + ez * ez)
    sd = min(max(sd, F0), ln)
    sd = F0 if c[11] == F1 else sd
    sd = ln if c[11] == np.float32(2.0) else sd
    s = sd * c[7]
    r = c[8] + (c[9] - c[8]) * s
    vx, vy, vz = qx - sd * ux, qy - sd * uy, qz - sd * uz
    d2 = vx * vx + vy * vy + vz * vz
    off_axis = d2 > EPS * EPS
    dc = np.sqrt(max(d2, EPS * EPS))
    inv = F1 / dc
    d = dc - r if off_axis else -r
    nx = vx * inv if off_axis else perp[0]
    ny = vy * inv if off_axis else perp[1]
    nz = vz * inv if off_axis else perp[2]
    return d, nx, ny, nz, s


@njit(inline="always", **JIT)
def _axis_perpendicular(ux, uy, uz):
    """The unit normal _sphere_push gives a point on the axis (ux, uy, uz)."""
    _, nx, ny, nz, _ = _sphere_push(F0, F0, F0, F0, F0, ux, uy, uz)
    return nx, ny, nz


@njit(pipeline_class=NoAliasCompiler, **FLAT)
def _path_rows(cand, count, x0r, y0r, z0r, x1r, y1r, z1r, cmask, path):
    """The candidates' paths as rows (7, count): start x, y, z, predicted x,
    y, z, collider offset; read once, then every capsule's passes load them
    contiguously."""
    for q in range(np.uint64(count)):
        i = cand[q]
        path[0, q] = x0r[i]
        path[1, q] = y0r[i]
        path[2, q] = z0r[i]
        path[3, q] = x1r[i]
        path[4, q] = y1r[i]
        path[5, q] = z1r[i]
        path[6, q] = cmask[i]


@njit(pipeline_class=NoAliasCompiler, **FLAT)
def _path_box_flags(count, x0r, y0r, z0r, x1r, y1r, z1r, bx, sel):
    """sel[q] = 1 where path q's box meets box bx (a tuple), else 0."""
    for q in range(np.uint64(count)):
        sel[q] = 0 if path_misses(x0r[q], y0r[q], z0r[q], x1r[q], y1r[q], z1r[q], bx) else 1


@njit(pipeline_class=NoAliasCompiler, **FLAT)
def _swept_rows(sub, count, x0r, y0r, z0r, x1r, y1r, z1r, offr, c, perp, e0, e1, inv_l2, move,
                sxr, syr, szr, dr, nxr, nyr, nzr, sr, at_start, newton):
    """The branch-free part of the swept contacts against one capsule (see
    swept_contacts), one lane per path t of sub[:count] (indices into the
    path rows of _path_rows, whose boxes meet the capsule's): the start
    position carried into the frame of the capsule at substep end (sxr,
    syr, szr[t]) and its distance, normal and axis fraction (dr, nxr, nyr,
    nzr, sr[t]). at_start[t] = 1: the path enters at its start (u = 0);
    newton[t] = 1: it may enter later, and only the Newton steps can tell.
    c = capsule_row_off(pre, j, 0) (each lane adds its vertex's collider
    offset); perp: the capsule's normal for a point on its axis; e0, e1:
    the end points at substep start and end; inv_l2 = 1 / |b0 - a0|^2 (0
    for a sphere); move: how far the capsule's axis moves over the substep."""
    ax0, ay0, az0 = e0[0], e0[1], e0[2]
    dx0, dy0, dz0 = e0[3] - ax0, e0[4] - ay0, e0[5] - az0
    tax, tay, taz = e1[0] - ax0, e1[1] - ay0, e1[2] - az0
    tbx, tby, tbz = e1[3] - e0[3], e1[4] - e0[4], e1[5] - e0[5]
    for t in range(np.uint64(count)):
        q = sub[t]
        x0, y0, z0 = x0r[q], y0r[q], z0r[q]
        x1, y1, z1 = x1r[q], y1r[q], z1r[q]
        off = offr[q]
        cc = (c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8] + off, c[9] + off, c[10], c[11])
        path = np.sqrt((x1 - x0) * (x1 - x0) + (y1 - y0) * (y1 - y0) + (z1 - z0) * (z1 - z0))
        de, _, _, _, _ = _capsule_distance_rows(x1, y1, z1, cc, perp)
        f = ((x0 - ax0) * dx0 + (y0 - ay0) * dy0 + (z0 - az0) * dz0) * inv_l2
        f = min(max(f, F0), F1)
        g = F1 - f
        sx = x0 + g * tax + f * tbx
        sy = y0 + g * tay + f * tby
        sz = z0 + g * taz + f * tbz
        ex, ey, ez = x1 - sx, y1 - sy, z1 - sz
        seg = np.sqrt(ex * ex + ey * ey + ez * ez)
        d, nx, ny, nz, s = _capsule_distance_rows(sx, sy, sz, cc, perp)
        # Culls: the end point is farther than the path and the capsule's
        # motion can bring it (the distance is 1-Lipschitz); the start is
        # farther than the path in the capsule's frame is long, or both ends are.
        cull = (de > path + move) | (d > seg) | ((d > TRACE_EPS) & (d + de > seg))
        r = cc[8] + (cc[9] - cc[8]) * s
        # Started inside: a vertex resting on the surface that the capsule
        # moved into counts as entering where it touched; one deep inside
        # is left to the live push-out. Started on the surface (within
        # TRACE_EPS): enters at once.
        inside = d < F0
        first = (inside & (d > -FHALF * r)) | ((d >= F0) & (d < TRACE_EPS) & (seg > EPS))
        # Newton's first step: f'(0) = n . e >= 0, the path's closest
        # approach is behind it, no hit.
        later = (d >= TRACE_EPS) & (seg > EPS) & (nx * ex + ny * ey + nz * ez < F0)
        at_start[t] = 0 if cull else (1 if first else 0)
        newton[t] = 0 if cull else (1 if later else 0)
        sxr[t], syr[t], szr[t] = sx, sy, sz
        dr[t], nxr[t], nyr[t], nzr[t], sr[t] = d, nx, ny, nz, s


@njit(**JIT)
def _newton_entry(sx, sy, sz, ex, ey, ez, d, nx, ny, nz, s, c):
    """Where the path s + u e (u in [0, 1], in the frame of the capsule at
    substep end) first reaches the capsule c = capsule_row_off(pre, j, off),
    from u = 0 at distance d > 0 with normal n moving towards it (n . e < 0).
    A round cone is convex, so the distance along the path, f(u), is
    convex: Newton from u = 0 (slope f'(u) = n . e) stays left of the
    first root and converges to it in a few steps, where sphere tracing
    (slope 1) crawled along a surface the vertex slides on for up to 32
    steps. f' >= 0 before reaching the surface: the path's closest approach
    is behind, no hit. Returns (found, u, entry point, normal, axis fraction)."""
    u = F0
    hx, hy, hz = sx, sy, sz
    found = False
    for _ in range(32):
        if d < TRACE_EPS:
            found = True
            break
        slope = nx * ex + ny * ey + nz * ez
        if slope >= F0:
            break
        u -= d / slope
        if u >= F1:
            break
        hx, hy, hz = sx + u * ex, sy + u * ey, sz + u * ez
        d, nx, ny, nz, s = capsule_distance_pre(hx, hy, hz, c)
    return found, u, hx, hy, hz, nx, ny, nz, s


@njit(inline="always", **JIT)
def _write_entry(i, j, hx, hy, hz, nx, ny, nz, s, cap1, hit, entry):
    """hit[i] = j + 1 and the entry (point, normal, surface velocity at axis fraction s)."""
    hit[i] = j + 1
    entry[0, i], entry[1, i], entry[2, i] = hx, hy, hz
    entry[3, i], entry[4, i], entry[5, i] = nx, ny, nz
    g = F1 - s
    entry[6, i] = g * cap1[j, 8] + s * cap1[j, 11]
    entry[7, i] = g * cap1[j, 9] + s * cap1[j, 12]
    entry[8, i] = g * cap1[j, 10] + s * cap1[j, 13]


@njit(**JIT)
def swept_contacts(cand, count, pos, prev, cap0, cap1, box, margin, hit, entry, cmask):
    """swept_contacts_into with its scratch allocated here (the general
    path and tests; the step's fast path passes scratch it holds)."""
    scratch = sweep_scratch(count, cap1.shape[0])
    prepare_capsules_into(cap1, margin, scratch[0])
    swept_contacts_into(cand, count, pos, prev, cap0, cap1, box, margin, hit, entry, cmask, scratch)


@njit(**JIT)
def sweep_scratch(n, k):
    """Scratch of swept_contacts_into for n paths and k capsules: the
    capsules' prepared rows (prepare_capsules_into fills them) and the flat
    row blocks of the paths (it zeroes what it uses)."""
    room = (n + 7) // 8 * 8
    return (np.empty((k, 12), dtype=np.float32), np.empty(16 * room, dtype=np.float32),
            np.empty(3 * room, dtype=np.uint8), np.empty(2 * room, dtype=np.uint32))


def collider_scratch(n, k, kp):
    """What the step's collider passes write, for n vertices, k capsules and
    kp planes, held by the model between steps: the capsules at substep
    start and end (k, 14), the planes at substep end (kp, 9), the capsules'
    swept and end boxes (k, 6) and sweep_scratch(n, k)."""
    return (np.zeros((k, 14), np.float32), np.zeros((k, 14), np.float32), np.zeros((kp, 9), np.float32),
            np.zeros((k, 6), np.float32), np.zeros((k, 6), np.float32), sweep_scratch(n, k))


@njit(pipeline_class=NoAliasCompiler, **FLAT)
def swept_contacts_into(cand, count, pos, prev, cap0, cap1, box, margin, hit, entry, cmask, scratch):
    """Swept contacts of the candidate vertices cand[:count] (their paths
    meet the capsules' union box; hit[i] = 0 on entry) against every capsule,
    grown by each vertex's collider offset cmask[i] (box: grown by the
    largest): the path from the vertex's substep-start position, carried
    along with the capsule (so a capsule that sweeps past a still vertex is
    seen), to its predicted position, against the capsule at substep end.
    The first capsule entered along the path wins.
    Vectorised passes: the paths are read into rows once (_path_rows); per
    capsule, a box test lists the paths that meet its swept box, and
    _swept_rows culls those that cannot reach it and finds those that enter
    at their start (a vertex resting on the capsule). Only the rest take
    Newton steps (_newton_entry), one at a time: on the 100x100 sheet with
    the swinging capsule ~340 of ~1,600 candidates a substep. The scalar code
    had cost ~50 ns a candidate; with many capsules (a character's bones)
    the box test per capsule keeps each one's work to the paths near it."""
    k = cap1.shape[0]
    if count == 0 or k == 0:
        return
    # scratch (sweep_scratch): pre = prepare_capsules(cap1, margin), rows
    # for at least count paths. Nothing is allocated here: a FLAT kernel
    # (no reference counts; at 20 substeps of a 32x32 sheet the
    # allocations and counts of each call showed).
    # The blocks are flat and reshaped to the rows needed: C-contiguous
    # rows for the vectorised passes (a column slice of a 2-D block is not).
    pre, block_all, flags_all, lists_all = scratch
    room = (count + 7) // 8 * 8
    block = block_all[:16 * room].reshape(16, room)
    path, rows, best = block[:7], block[7:15], block[15]
    best[:] = np.float32(2.0)
    flags = flags_all[:3 * room].reshape(3, room)
    flags[:] = 0
    lists = lists_all[:2 * room].reshape(2, room)
    sub, todo = lists[0], lists[1]
    _path_rows(cand, count, prev[0], prev[1], prev[2], pos[0], pos[1], pos[2], cmask, path)
    for j in range(k):
        _path_box_flags(count, path[0], path[1], path[2], path[3], path[4], path[5], box_row(box, j), flags[2])
        ns = compact_flags(flags[2], sub)
        if ns == 0:
            continue
        # How far any point of the capsule's axis moves over the substep (at
        # most as far as its farther end).
        da = ((cap1[j, 0] - cap0[j, 0]) ** 2 + (cap1[j, 1] - cap0[j, 1]) ** 2
              + (cap1[j, 2] - cap0[j, 2]) ** 2)
        db = ((cap1[j, 3] - cap0[j, 3]) ** 2 + (cap1[j, 4] - cap0[j, 4]) ** 2
              + (cap1[j, 5] - cap0[j, 5]) ** 2)
        move = np.sqrt(max(da, db))
        e0 = (cap0[j, 0], cap0[j, 1], cap0[j, 2], cap0[j, 3], cap0[j, 4], cap0[j, 5])
        e1 = (cap1[j, 0], cap1[j, 1], cap1[j, 2], cap1[j, 3], cap1[j, 4], cap1[j, 5])
        l2 = (e0[3] - e0[0]) ** 2 + (e0[4] - e0[1]) ** 2 + (e0[5] - e0[2]) ** 2
        inv_l2 = F1 / l2 if l2 > EPS * EPS else F0
        c = capsule_row_off(pre, j, F0)
        perp = _axis_perpendicular(c[3], c[4], c[5])
        _swept_rows(sub, ns, path[0], path[1], path[2], path[3], path[4], path[5], path[6], c, perp, e0, e1,
                    inv_l2, move, rows[0], rows[1], rows[2], rows[3], rows[4], rows[5], rows[6], rows[7],
                    flags[0], flags[1])
        rs = (ns + 7) // 8 * 8
        flags[:2, ns:rs] = 0
        m = compact_flags(flags[0, :rs], todo)
        for u in range(m):
            t = todo[u]
            q = sub[t]
            if best[q] > F0:
                best[q] = F0
                d = min(rows[3, t], F0)
                nx, ny, nz = rows[4, t], rows[5, t], rows[6, t]
                _write_entry(cand[q], j, rows[0, t] - d * nx, rows[1, t] - d * ny, rows[2, t] - d * nz,
                             nx, ny, nz, rows[7, t], cap1, hit, entry)
        m = compact_flags(flags[1, :rs], todo)
        for u in range(m):
            t = todo[u]
            q = sub[t]
            sx, sy, sz = rows[0, t], rows[1, t], rows[2, t]
            found, uu, hx, hy, hz, nx, ny, nz, s = _newton_entry(
                sx, sy, sz, path[3, q] - sx, path[4, q] - sy, path[5, q] - sz, rows[3, t], rows[4, t],
                rows[5, t], rows[6, t], rows[7, t], capsule_row_off(pre, j, path[6, q]))
            if found and uu < best[q]:
                best[q] = uu
                _write_entry(cand[q], j, hx, hy, hz, nx, ny, nz, s, cap1, hit, entry)


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
            contact[0, i], contact[1, i], contact[2, i] = cnx, cny, cnz
            if contact[3, i] == F0:
                clist[ccount] = i
                ccount += 1
            contact[3, i] += depth
            contact[4, i], contact[5, i], contact[6, i] = cvx, cvy, cvz
    return ccount


# ---------------------------------------------------------------- per-step inputs
#
# Called every step from step.py: the same checks the numpy code made, in
# one compiled pass (a dozen small numpy calls cost ~17 us per step for one
# capsule, more than the whole solve of a small cloth).


@njit(cache=True)
def pack_capsules(a0, b0, a1, b1, ra, rb, out):
    """out (k, 14) float32 = a0, b0, a1, b1 (k, 3), radius_a, radius_b (k,),
    as Capsules.packed. Returns 0, or 1 if a value is NaN or Inf (or does
    not fit in float32), 2 if a radius is negative (1 | 2 for both)."""
    bad = 0
    for j in range(out.shape[0]):
        for c in range(3):
            out[j, c] = a0[j, c]
            out[j, 3 + c] = b0[j, c]
            out[j, 6 + c] = a1[j, c]
            out[j, 9 + c] = b1[j, c]
        out[j, 12] = ra[j]
        out[j, 13] = rb[j]
        for c in range(14):
            if not np.isfinite(out[j, c]):
                bad |= 1
        if out[j, 12] < F0 or out[j, 13] < F0:
            bad |= 2
    return bad


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


# ---------------------------------------------------------------- velocities
#
# The end of a substep (v = (x - x_prev)/h, friction, clamp, NaN check) and,
# between substeps, the predict of the next one touch every vertex. Friction
# needs the few vertices a collider pushed (the contact list, filled by
# project_colliders) and runs over those alone; every vertex then goes
# through one branch-free pass over 1-D rows (NoAliasCompiler) that LLVM
# vectorises. One scalar pass with a friction branch per vertex cost 4.6 ns
# per vertex at 10k (velocities alone) and 11 ns with the predict.


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


# ---------------------------------------------------------------- one step

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


@njit(**FLAT)
def _distance_fast4(p4, ab, coef, unilateral):
    """solve_distance_fast on x, y, z, 0 records (the same arithmetic per lane);
    ab: record offsets (4 x vertex index, DistanceConstraints.ab_rec).
    unilateral: only pull together pairs farther apart than their rest length
    (the stretch limits)."""
    m = np.uint64(ab.shape[0]) >> np.uint64(1)
    for i in range(m):
        ia = np.uint64(ab[2 * i])
        ib = np.uint64(ab[2 * i + 1])
        e = 4 * i
        dx = p4[ib] - p4[ia]
        dy = p4[ib + 1] - p4[ia + 1]
        dz = p4[ib + 2] - p4[ia + 2]
        dw = p4[ib + 3] - p4[ia + 3]
        # dw = 0: the fourth term keeps the dot product one 4-wide operation.
        d2 = (dx * dx + dy * dy) + (dz * dz + dw * dw)
        if d2 < EPS * EPS:
            continue
        f = F1 - coef[e + 2] * rsqrt(d2)
        if unilateral:
            f = max(f, F0)
        dx, dy, dz, dw = dx * f, dy * f, dz * f, dw * f
        sa = coef[e]
        sb = coef[e + 1]
        p4[ia] += sa * dx
        p4[ia + 1] += sa * dy
        p4[ia + 2] += sa * dz
        p4[ia + 3] += sa * dw
        p4[ib] -= sb * dx
        p4[ib + 1] -= sb * dy
        p4[ib + 2] -= sb * dz
        p4[ib + 3] -= sb * dw


@njit(**FLAT)
def solve_distance_fast4(p4, ab, coef, unilateral):
    """_distance_fast4 with `unilateral` a constant in each call. A runtime
    flag inside the loop compiled to a per-constraint mask blend (sete into a
    byte register, kmov, masked move) that doubled the cost of every
    constraint (5.6 -> 2.7 ns on the 100x100 sheet's stretch); with a
    constant, LLVM inlines _distance_fast4 here and drops the dead path."""
    if unilateral:
        _distance_fast4(p4, ab, coef, True)
    else:
        _distance_fast4(p4, ab, coef, False)


@njit(**FLAT)
def solve_bending_fast4(p4, idx4, coef, curved):
    """solve_bending_fast on x, y, z, 0 records (the same arithmetic per lane);
    idx4: record offsets (4 x vertex index, BendingConstraints.idx_rec).
    curved: some element has a curved rest shape (cfg[C_BEND_CURVED]); a
    constant in each call, as in solve_distance_fast4: a sheet that is flat
    at rest skips the rest-norm test, 3 of the ~33 instructions an element
    costs (the loop runs at the core's instruction throughput)."""
    if curved:
        _bending_fast4(p4, idx4, coef, True)
    else:
        _bending_fast4(p4, idx4, coef, False)


@njit(**FLAT)
def _bending_fast4(p4, idx4, coef, curved):
    m = np.uint64(idx4.shape[0]) >> np.uint64(2)
    for i in range(m):
        q = 4 * i
        e = 8 * i
        i0 = np.uint64(idx4[q])
        i1 = np.uint64(idx4[q + 1])
        i2 = np.uint64(idx4[q + 2])
        i3 = np.uint64(idx4[q + 3])
        k1 = coef[e]
        k2 = coef[e + 1]
        k3 = coef[e + 2]
        x0, y0, z0, w0 = p4[i0], p4[i0 + 1], p4[i0 + 2], p4[i0 + 3]
        lx = k1 * (p4[i1] - x0) + k2 * (p4[i2] - x0) + k3 * (p4[i3] - x0)
        ly = k1 * (p4[i1 + 1] - y0) + k2 * (p4[i2 + 1] - y0) + k3 * (p4[i3 + 1] - y0)
        lz = k1 * (p4[i1 + 2] - z0) + k2 * (p4[i2 + 2] - z0) + k3 * (p4[i3 + 2] - z0)
        lw = k1 * (p4[i1 + 3] - w0) + k2 * (p4[i2 + 3] - w0) + k3 * (p4[i3 + 3] - w0)
        r = coef[e + 3]
        if curved and r != F0:
            l2 = lx * lx + ly * ly + lz * lz
            if l2 < EPS * EPS:
                continue
            f = F1 - r / np.sqrt(l2)
            lx, ly, lz, lw = lx * f, ly * f, lz * f, lw * f
        s = coef[e + 4]
        p4[i0] = x0 - s * lx
        p4[i0 + 1] = y0 - s * ly
        p4[i0 + 2] = z0 - s * lz
        p4[i0 + 3] = w0 - s * lw
        s = coef[e + 5]
        p4[i1] -= s * lx
        p4[i1 + 1] -= s * ly
        p4[i1 + 2] -= s * lz
        p4[i1 + 3] -= s * lw
        s = coef[e + 6]
        p4[i2] -= s * lx
        p4[i2 + 1] -= s * ly
        p4[i2 + 2] -= s * lz
        p4[i2 + 3] -= s * lw
        s = coef[e + 7]
        p4[i3] -= s * lx
        p4[i3 + 1] -= s * ly
        p4[i3 + 2] -= s * lz
        p4[i3 + 3] -= s * lw


@njit(**FLAT)
def solve_tethers_fast4(p4, v, anchor, length, coef, scale):
    """solve_tethers without damping on x, y, z, 0 records, branch-free:
    most tethers are slightly over-extended after each predict, so a branch
    on it mispredicts about half the time (it cost 20 ns per tether). An
    inactive tether computes a zero correction. coef = w / (w + alpha~);
    v, anchor: record offsets (4 x vertex index)."""
    m = np.uint64(v.shape[0])
    for i in range(m):
        iv = np.uint64(v[i])
        ia = np.uint64(anchor[i])
        dx = p4[iv] - p4[ia]
        dy = p4[iv + 1] - p4[ia + 1]
        dz = p4[iv + 2] - p4[ia + 2]
        dw = p4[iv + 3] - p4[ia + 3]
        # A vertex on its anchor (d2 = 0) gets a huge 1/|d| and f = 0.
        d2 = max(dx * dx + dy * dy + dz * dz, np.float32(1e-30))
        f = coef[i] * max(F0, F1 - length[i] * scale * rsqrt(d2))
        p4[iv] -= f * dx
        p4[iv + 1] -= f * dy
        p4[iv + 2] -= f * dz
        p4[iv + 3] -= f * dw


@njit(**JIT)
def solve_constraints(pos, prev, cfg, h, stretch, shear, bend, tether, limits, pins, use_lambda):
    ha = F1 / (h * h)
    # The fast kernels need one iteration, no damping, and coefficients
    # computed for this alpha~ (step.py refreshes them when it changes).
    if not use_lambda and cfg[C_D_STRETCH] == F0 and cfg[C_D_SHEAR] == F0 and cfg[C_D_BEND] == F0:
        # Fast path on x, y, z, 0 records (see to_aos4 and compiled_fast).
        p4 = np.empty(4 * pos.shape[1], dtype=np.float32)
        to_aos4(pos, p4)
        solve_distance_fast4(p4, stretch[8], stretch[7], False)
        solve_distance_fast4(p4, shear[8], shear[7], False)
        solve_bending_fast4(p4, bend[8], bend[7], cfg[C_BEND_CURVED] != F0)
        if cfg[C_USE_LIMITS] != F0:
            solve_distance_fast4(p4, limits[8], limits[7], True)
        from_aos4(p4, pos)
    else:
        solve_classes(pos, prev, cfg, ha, stretch, shear, bend, use_lambda)
        if cfg[C_USE_LIMITS] != F0:
            solve_distance_fast(pos, limits[6], limits[7], True)
    if cfg[C_USE_TETHERS] != F0:
        tv, ta, tl, tw, tc = tether
        solve_tethers(pos, prev, tv, ta, tl, tw, cfg[C_A_TETHER] * ha, cfg[C_D_TETHER], cfg[C_TETHER_SCALE])


@njit(**JIT)
def solve_classes(pos, prev, cfg, ha, stretch, shear, bend, use_lambda):
    a, b, wa, wb, rest, lam, ab, coef, _ = stretch
    if use_lambda or cfg[C_D_STRETCH] != F0:
        solve_distance(pos, prev, a, b, wa, wb, rest, lam, cfg[C_A_STRETCH] * ha, cfg[C_D_STRETCH], use_lambda)
    else:
        solve_distance_fast(pos, ab, coef, False)
    a, b, wa, wb, rest, lam, ab, coef, _ = shear
    if use_lambda or cfg[C_D_SHEAR] != F0:
        solve_distance(pos, prev, a, b, wa, wb, rest, lam, cfg[C_A_SHEAR] * ha, cfg[C_D_SHEAR], use_lambda)
    else:
        solve_distance_fast(pos, ab, coef, False)
    idx, k, wk, swk2, rest, lam, idx4, coef, _ = bend
    if use_lambda or cfg[C_D_BEND] != F0:
        solve_bending(pos, prev, idx, k, wk, swk2, rest, lam, cfg[C_A_BEND] * ha, cfg[C_D_BEND], use_lambda)
    else:
        solve_bending_fast(pos, idx4, coef)


@njit(**JIT)
def begin_substep(pos, vel, prev, inv_mass, cfg, accel, wind, tris, pins, caps, planes,
                  cap0, cap1, plane1, hit, entry, cmask, sub, stretch, shear, bend, soft_lam):
    substeps = np.uint64(cfg[C_SUBSTEPS])
    h = cfg[C_H]
    t0 = np.float32(sub) / np.float32(substeps)
    t1 = np.float32(sub + 1) / np.float32(substeps)
    kin, soft, soft_alpha, pin_start, pin_end = pins
    predict(pos, vel, prev, inv_mass, cfg, accel, wind, tris, kin, pin_start, pin_end, t1)
    if caps.shape[0] + planes.shape[0] > 0:
        interpolate_colliders(caps, planes, t0, t1, h * np.float32(substeps), cap0, cap1, plane1)
    if caps.shape[0] > 0:
        generate_contacts(pos, prev, inv_mass, cap0, cap1, cfg[C_MARGIN], hit, entry, cmask, cfg[C_COFF_MAX])
    if cfg[C_ITERATIONS] > F1:
        stretch[5][:] = F0
        shear[5][:] = F0
        bend[5][:] = F0
        soft_lam[:] = F0
    return t1


@njit(**JIT)
def iterate_substep(pos, prev, inv_mass, cfg, stretch, shear, bend, tether, limits, pins, soft_lam, t1):
    h = cfg[C_H]
    use_lambda = cfg[C_ITERATIONS] > F1
    solve_constraints(pos, prev, cfg, h, stretch, shear, bend, tether, limits, pins, use_lambda)
    kin, soft, soft_alpha, pin_start, pin_end = pins
    if soft.shape[0] > 0:
        solve_soft_pins(pos, soft, soft_alpha, soft_lam, inv_mass, pin_start, pin_end, t1, use_lambda)


@njit(**FLAT)
def finish_substep(pos, prev, vel, cfg, contact, clist, ccount):
    h = cfg[C_H]
    g = np.sqrt(cfg[C_GX] * cfg[C_GX] + cfg[C_GY] * cfg[C_GY] + cfg[C_GZ] * cfg[C_GZ])
    creep = np.float32(2.0) * g * h
    return update_velocities(pos, prev, vel, contact, clist, ccount, h, cfg[C_MU_S], cfg[C_MU_K],
                             cfg[C_MAXV], creep)


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
    h = cfg[C_H]
    inv_h = F1 / h
    drag = cfg[C_AIR_DRAG] * h
    if drag > F1:
        drag = F1
    if finish:
        g = np.sqrt(cfg[C_GX] * cfg[C_GX] + cfg[C_GY] * cfg[C_GY] + cfg[C_GZ] * cfg[C_GZ])
        contact_friction(pos, prev, vel, contact, clist, ccount, inv_h, h, cfg[C_MU_S], cfg[C_MU_K],
                         np.float32(2.0) * g * h)
    margin = cfg[C_MARGIN]
    capsule_boxes_into(cap0, cap1, margin + cfg[C_COFF_MAX], box)
    ubox = swept_box_union(box)
    rows = (pos[0], pos[1], pos[2], prev[0], prev[1], prev[2], vel[0], vel[1], vel[2], contact[3], inv_mass, hit,
            accel[0], accel[1], accel[2], cmask, sel, ubox, not finish)
    # A literal flag per call: LLVM drops the dead path (see solve_distance_fast4).
    if cfg[C_USE_ACCEL] != F0:
        bad = _advance_rows(*rows, True, inv_h, h, cfg[C_MAXV], drag, cfg[C_GX], cfg[C_GY], cfg[C_GZ])
    else:
        bad = _advance_rows(*rows, False, inv_h, h, cfg[C_MAXV], drag, cfg[C_GX], cfg[C_GY], cfg[C_GZ])
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


@njit(**JIT)
def step_fused(pos, vel, prev, inv_mass, cfg, accel, wind, tris, pins, caps, planes,
               colliders, hit, entry, cmask, contact, stretch, shear, bend, tether, limits, soft_lam):
    """A whole step in one compiled call (no self collision). Between two
    substeps the velocity, predict and contact passes run as one sweep over
    the vertices (advance_vertices) unless wind needs its triangle pass.
    colliders: collider_scratch(n, k, planes)."""
    cap0, cap1, plane1, box0, box1, sweep = colliders
    substeps = np.uint64(cfg[C_SUBSTEPS])
    iterations = np.uint64(cfg[C_ITERATIONS])
    has_contacts = caps.shape[0] + planes.shape[0] > 0
    use_wind = cfg[C_USE_WIND] != F0
    kin, soft, soft_alpha, pin_start, pin_end = pins
    h = cfg[C_H]
    sel, cand, clist = vertex_lists(pos.shape[1])
    ccount = 0
    bad = 0
    for sub in range(substeps):
        if sub == 0 or use_wind:
            if sub > 0:
                bad += finish_substep(pos, prev, vel, cfg, contact, clist, ccount)
                ccount = 0
                if bad > 0:
                    return bad
            t1 = begin_substep(pos, vel, prev, inv_mass, cfg, accel, wind, tris, pins, caps, planes,
                               cap0, cap1, plane1, hit, entry, cmask, sub, stretch, shear, bend, soft_lam)
        else:
            t0 = np.float32(sub) / np.float32(substeps)
            t1 = np.float32(sub + 1) / np.float32(substeps)
            if has_contacts:
                interpolate_colliders(caps, planes, t0, t1, h * np.float32(substeps), cap0, cap1, plane1)
            bad += advance_vertices(pos, vel, prev, inv_mass, cfg, accel, contact, clist, ccount, kin,
                                    pin_start, pin_end, t1, cap0, cap1, hit, entry, cmask, True, cand, sel,
                                    box0, sweep)
            ccount = 0
            if bad > 0:
                return bad
            if cfg[C_ITERATIONS] > F1:
                stretch[5][:] = F0
                shear[5][:] = F0
                bend[5][:] = F0
                soft_lam[:] = F0
        for _ in range(iterations):
            iterate_substep(pos, prev, inv_mass, cfg, stretch, shear, bend, tether, limits, pins, soft_lam, t1)
            if has_contacts:
                ccount = project_colliders(pos, inv_mass, cap1, plane1, cfg[C_MARGIN], hit, entry, contact, cmask,
                                           cand, -1, cfg[C_COFF_MAX], clist, ccount)
    bad += finish_substep(pos, prev, vel, cfg, contact, clist, ccount)
    return bad


@njit(**JIT)
def step_fast(pos, vel, prev, inv_mass, cfg, accel, pins, caps, planes, colliders, hit, entry,
              cmask, contact, stretch, shear, bend, tether, limits, soft_lam, self_contacts=None):
    """step_fused for the default settings (no wind, one iteration, no
    stretch/shear/bend damping): the same sequence and arithmetic with only
    the fast kernels, so a first step compiles only what it runs (the
    general kernels compile when a setting needs them).
    stretch, shear, bend, limits: (indices, coefficients) of the fast
    kernels (the packed() tuples' last two arrays: fewer arrays to pass,
    and numba's dispatch costs ~0.15 us per array argument).
    self_contacts: None, or SelfCollision.solve_args() for this step's frozen
    self contacts, solved (Jacobi) after the constraints and before the
    colliders, as in the general path. None compiles a version without them.
    colliders: collider_scratch(n, k, planes). The substeps' kernels
    allocate nothing and compile without reference counts (FLAT): at 20
    substeps the counts and allocations of a small cloth's calls had cost
    ~2 us a substep."""
    cap0, cap1, plane1, box0, box1, sweep = colliders
    substeps = np.uint64(cfg[C_SUBSTEPS])
    has_contacts = caps.shape[0] + planes.shape[0] > 0
    kin, soft, soft_alpha, pin_start, pin_end = pins
    h = cfg[C_H]
    ha = F1 / (h * h)
    p4 = np.empty(4 * pos.shape[1], dtype=np.float32)
    sel, cand, clist = vertex_lists(pos.shape[1])
    ccount = 0
    bad = 0
    st_i, st_c = stretch
    sh_i, sh_c = shear
    be_i, be_c = bend
    li_i, li_c = limits
    tv, ta, tl, tw, tc, tv_rec, ta_rec = tether
    for sub in range(substeps):
        t0 = np.float32(sub) / np.float32(substeps)
        t1 = np.float32(sub + 1) / np.float32(substeps)
        if has_contacts:
            interpolate_colliders(caps, planes, t0, t1, h * np.float32(substeps), cap0, cap1, plane1)
        bad += advance_vertices(pos, vel, prev, inv_mass, cfg, accel, contact, clist, ccount, kin,
                                pin_start, pin_end, t1, cap0, cap1, hit, entry, cmask, sub > 0, cand, sel,
                                box0, sweep)
        ccount = 0
        if bad > 0:
            return bad
        to_aos4(pos, p4)
        solve_distance_fast4(p4, st_i, st_c, False)
        solve_distance_fast4(p4, sh_i, sh_c, False)
        solve_bending_fast4(p4, be_i, be_c, cfg[C_BEND_CURVED] != F0)
        if cfg[C_USE_LIMITS] != F0:
            solve_distance_fast4(p4, li_i, li_c, True)
        fast_tethers = cfg[C_USE_TETHERS] != F0 and cfg[C_D_TETHER] == F0
        if fast_tethers:
            solve_tethers_fast4(p4, tv_rec, ta_rec, tl, tc, cfg[C_TETHER_SCALE])
        # Only capsules and nothing moving vertices after the records are
        # read back but the self contacts: the projection visits the
        # vertices near the capsules (listed after the self contacts moved
        # theirs, when there are any).
        listed = (has_contacts and plane1.shape[0] == 0 and soft.shape[0] == 0
                  and (fast_tethers or cfg[C_USE_TETHERS] == F0))
        count = -1
        if has_contacts:
            # The capsules' boxes at substep end: the projection's, and
            # their union for either list.
            capsule_boxes_into(cap1, cap1, cfg[C_MARGIN] + cfg[C_COFF_MAX], box1)
        if listed:
            ubox1 = swept_box_union(box1)
        if listed and self_contacts is None:
            count = from_aos4_collect(p4, pos, hit, ubox1, cand, sel)
        else:
            from_aos4(p4, pos)
        if cfg[C_USE_TETHERS] != F0 and not fast_tethers:
            solve_tethers(pos, prev, tv, ta, tl, tw, cfg[C_A_TETHER] * ha, cfg[C_D_TETHER], cfg[C_TETHER_SCALE])
        if soft.shape[0] > 0:
            solve_soft_pins(pos, soft, soft_alpha, soft_lam, inv_mass, pin_start, pin_end, t1, False)
        if self_contacts is not None:
            solve_serial(pos, prev, *self_contacts)
            if listed:
                count = collect_rows(pos, hit, ubox1, cand, sel)
        if has_contacts:
            ccount = project_colliders_into(pos, inv_mass, cap1, plane1, cfg[C_MARGIN], hit, entry, contact, cmask,
                                            cand, count, clist, ccount, box1, sweep[0])
    bad += finish_substep(pos, prev, vel, cfg, contact, clist, ccount)
    return bad
