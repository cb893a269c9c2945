"""Rest scale and painted stiffness: what garment settings do to the stretch,
shear and bending constraints' rest lengths and compliances.

No kernel of its own: it rewrites the rest lengths and the per-constraint
compliance factors that the distance and bending kernels already read, so
a shrinking or painted cloth costs what a plain one costs.

- Shrink: a stretch or shear constraint's rest length is multiplied by
  1 - s, s = shrink + (shrink_max - shrink) * (mean group weight of its two
  vertices) (negative s grows), and by sqrt(((1 - s_u) cos)^2 + ((1 - s_v)
  sin)^2) with (cos, sin) its direction in the UV map: a flat panel scaled by
  1 - s_u along U and 1 - s_v along V (warp and weft).
- Painted stiffness: a vertex of weight w in a class's group is
  m = 1 + (max - 1) w times as stiff; a constraint's compliance is divided
  by the mean m of its vertices.
- Warp and weft stretch: a stretch constraint's compliance is multiplied by
  warp cos^2 + weft sin^2.

The per-constraint compliances reach the one-iteration, undamped kernels
(the default); the damped or multi-iteration kernels take one compliance
per class, so params asking for both are refused (SolverError).
"""

import numpy as np

from ..params import SolverError

# The ClothParams fields this module reads.
FIELDS = ("shrink", "shrink_max", "shrink_warp", "shrink_weft", "stretch_weight_max", "shear_weight_max",
          "bend_weight_max", "warp_compliance_scale", "weft_compliance_scale")


def edge_uv_directions(face_indices, face_sizes, corner_uv, pairs, n):
    """(m, 2) unit UV directions (du, dv) of each vertex pair, read from the
    polygon that holds it as an edge or a quad diagonal; (0, 0) where no
    polygon does or the UVs coincide."""
    fi = np.asarray(face_indices, dtype=np.int64)
    fs = np.asarray(face_sizes, dtype=np.int64)
    uv = np.asarray(corner_uv, dtype=np.float64).reshape(-1, 2)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    out = np.zeros((len(pairs), 2))
    if len(fi) == 0 or len(pairs) == 0:
        return out
    ends = np.cumsum(fs)
    starts = ends - fs
    corner = np.arange(len(fi))
    nxt = corner + 1
    nxt[ends - 1] = starts
    c0, c1 = [corner], [nxt]
    quads = np.flatnonzero(fs == 4)
    if len(quads):
        s = starts[quads]
        c0 += [s, s + 1]
        c1 += [s + 2, s + 3]
    c0, c1 = np.concatenate(c0), np.concatenate(c1)
    va, vb = fi[c0], fi[c1]
    d = uv[c1] - uv[c0]
    flip = va > vb
    d[flip] = -d[flip]
    key = np.minimum(va, vb) * n + np.maximum(va, vb)
    order = np.argsort(key, kind="stable")
    key, d = key[order], d[order]
    q = np.minimum(pairs[:, 0], pairs[:, 1]) * n + np.maximum(pairs[:, 0], pairs[:, 1])
    at = np.clip(np.searchsorted(key, q), 0, len(key) - 1)
    found = key[at] == q
    qd = d[at]
    qd[pairs[:, 0] > pairs[:, 1]] *= -1
    length = np.linalg.norm(qd, axis=1)
    ok = found & (length > 1e-12)
    out[ok] = qd[ok] / length[ok, None]
    return out


class RestScale:
    """The garment weights and UVs of one model, applied to its stretch,
    shear and bending constraints by update(params)."""

    def __init__(self, model):
        self.model = model
        self.base_rest = {name: getattr(model, name).rest.astype(np.float64).copy()
                          for name in ("stretch", "shear", "limits", "hierarchy")}
        self.weights = {}          # "shrink", "stretch", "shear", "bend": (n,) float32 group weights
        self.corner_uv = None
        self._uv_dirs = {}
        self._key = None

    def set_weights(self, **groups):
        n = self.model.n
        for name, w in groups.items():
            if name not in ("shrink", "stretch", "shear", "bend"):
                raise SolverError(f"unknown garment weight {name!r} (shrink, stretch, shear, bend)")
            if w is None:
                self.weights.pop(name, None)
                continue
            w = np.asarray(w, dtype=np.float64).ravel()
            if w.shape != (n,) or not np.all(np.isfinite(w)):
                raise SolverError(f"{name} weights must be ({n},) finite values")
            self.weights[name] = np.clip(w, 0.0, 1.0)
        self._key = None

    def set_uv(self, corner_uv):
        m = self.model
        if corner_uv is None:
            self.corner_uv, self._uv_dirs = None, {}
            self._key = None
            return
        uv = np.asarray(corner_uv, dtype=np.float64)
        if uv.shape != (len(m.face_indices), 2) or not np.all(np.isfinite(uv)):
            raise SolverError(f"the UV map must be ({len(m.face_indices)}, 2) finite values (one per polygon corner)")
        self.corner_uv = uv
        self._uv_dirs = {name: edge_uv_directions(m.face_indices, m.face_sizes, uv, getattr(m, name).pairs, m.n)
                         for name in ("stretch", "shear")}
        self._key = None

    def active(self, params):
        """True when some setting changes a rest length or a compliance."""
        p = params
        return bool(p.shrink or (p.shrink_max and "shrink" in self.weights) or p.shrink_warp or p.shrink_weft
                    or (p.stretch_weight_max != 1 and "stretch" in self.weights)
                    or (p.shear_weight_max != 1 and "shear" in self.weights)
                    or (p.bend_weight_max != 1 and "bend" in self.weights)
                    or p.warp_compliance_scale != 1 or p.weft_compliance_scale != 1)

    def update(self, params):
        """Write the rest lengths and compliance factors for params (only
        when they or the weights changed)."""
        key = tuple(float(getattr(params, f)) for f in FIELDS) + (
            int(params.iterations), float(params.stretch_damping), float(params.shear_damping),
            float(params.bend_damping), id(self.model.tethers))
        if key == self._key:
            return
        p = params
        scaled_alpha = ((p.stretch_weight_max != 1 and "stretch" in self.weights)
                        or (p.shear_weight_max != 1 and "shear" in self.weights)
                        or (p.bend_weight_max != 1 and "bend" in self.weights)
                        or p.warp_compliance_scale != 1 or p.weft_compliance_scale != 1)
        if scaled_alpha and (int(p.iterations) > 1 or p.stretch_damping or p.shear_damping or p.bend_damping):
            raise SolverError("painted stiffness and warp/weft stretch need iterations = 1 and no stretch, shear "
                              "or bend damping")
        needs_uv = p.shrink_warp or p.shrink_weft or p.warp_compliance_scale != 1 or p.weft_compliance_scale != 1
        if needs_uv and self.corner_uv is None:
            raise SolverError("warp and weft settings need a UV map (Model.set_uv)")
        m = self.model
        for name in ("stretch", "shear"):
            cons = getattr(m, name)
            pairs = cons.pairs
            rest = self.base_rest[name].copy()
            w = self.weights.get("shrink")
            s = np.full(len(pairs), float(p.shrink))
            if w is not None:
                s += (float(p.shrink_max) - float(p.shrink)) * 0.5 * (w[pairs[:, 0]] + w[pairs[:, 1]])
            rest *= 1.0 - s
            dirs = self._uv_dirs.get(name)
            if dirs is not None and (p.shrink_warp or p.shrink_weft):
                cu, cv = dirs[:, 0], dirs[:, 1]
                none = (cu == 0) & (cv == 0)
                su, sv = 1.0 - float(p.shrink_warp), 1.0 - float(p.shrink_weft)
                f = np.sqrt((su * cu) ** 2 + (sv * cv) ** 2)
                f[none] = 0.5 * (su + sv)
                rest *= f
            cons.rest[:] = rest
            cons.coef[:, 2] = rest
            scale = None
            gw = self.weights.get(name)
            top = float(p.stretch_weight_max if name == "stretch" else p.shear_weight_max)
            if gw is not None and top != 1:
                stiff = 1.0 + (top - 1.0) * 0.5 * (gw[pairs[:, 0]] + gw[pairs[:, 1]])
                scale = 1.0 / np.maximum(stiff, 1e-6)
            if name == "stretch" and dirs is not None and (p.warp_compliance_scale != 1
                                                           or p.weft_compliance_scale != 1):
                cu2, cv2 = dirs[:, 0] ** 2, dirs[:, 1] ** 2
                none = (cu2 == 0) & (cv2 == 0)
                aniso = float(p.warp_compliance_scale) * cu2 + float(p.weft_compliance_scale) * cv2
                aniso[none] = 0.5 * (float(p.warp_compliance_scale) + float(p.weft_compliance_scale))
                scale = aniso if scale is None else scale * aniso
            cons.alpha_scale = scale
            cons._coef_alpha = None
        # The long-range stretch limits and the multilevel stretch's coarse
        # constraints are upper bounds along paths of any direction: they grow
        # with the larger of the warp and weft factors, so they never hold a
        # growing cloth back.
        for name in ("limits", "hierarchy"):
            limits = getattr(m, name)
            if not len(limits):
                continue
            pairs = limits.pairs
            w = self.weights.get("shrink")
            s = np.full(len(pairs), float(p.shrink))
            if w is not None:
                s += (float(p.shrink_max) - float(p.shrink)) * 0.5 * (w[pairs[:, 0]] + w[pairs[:, 1]])
            grow = max(1.0 - float(p.shrink_warp), 1.0 - float(p.shrink_weft))
            # Never shorter than modelled: limits that shrink first snap a
            # shrinking sheet into folds before its edges follow.
            limits.rest[:] = self.base_rest[name] * np.maximum((1.0 - s) * grow, 1.0)
        # Tethers likewise, by the most any part of the cloth grows (a
        # tether's path may cross any of it), never below their modelled
        # lengths: a growing pinned sheet hung at its modelled size.
        tethers = m.tethers
        if len(tethers):
            s = float(p.shrink)
            w = self.weights.get("shrink")
            if w is not None and len(w):
                # The blend is linear in the weight: its least is at an end.
                s = min(s + (float(p.shrink_max) - s) * float(w.min()), s + (float(p.shrink_max) - s) * float(w.max()))
            grow = max((1.0 - s) * max(1.0 - float(p.shrink_warp), 1.0 - float(p.shrink_weft)), 1.0)
            tethers.length[:] = tethers.base_length * grow
        bend = m.bend
        gw = self.weights.get("bend")
        if gw is not None and p.bend_weight_max != 1 and len(bend):
            stiff = 1.0 + (float(p.bend_weight_max) - 1.0) * gw[bend.idx_aos].mean(axis=1)
            bend.alpha_scale = 1.0 / np.maximum(stiff, 1e-6)
        else:
            bend.alpha_scale = None
        bend._coef_alpha = None
        self._key = key
