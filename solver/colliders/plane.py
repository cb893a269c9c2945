"""Plane colliders: infinite half-spaces (the cloth stays on the normal's
side), moving linearly over the step. Planes is the record the caller
fills; packed() checks it and gives the kernels (k, 12) rows: point0, unit
normal0, point1, unit normal1. The projection pushes a vertex out along
the normal by its depth below the plane plus the margin
(colliders.project_colliders_into, last, so the ground wins).
"""

from dataclasses import dataclass

import numpy as np

from ..params import SolverError


def _as_vec3(name, a, k=None):
    arr = np.asarray(a, dtype=np.float32)
    if arr.ndim == 1 and arr.shape == (3,) and k is not None:
        arr = np.broadcast_to(arr, (k, 3))
    if arr.ndim != 2 or arr.shape[1] != 3 or (k is not None and arr.shape[0] != k):
        want = f"({k}, 3)" if k is not None else "(k, 3)"
        raise SolverError(f"{name} must have shape {want}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise SolverError(f"{name} contains NaN or Inf")
    return np.ascontiguousarray(arr)


@dataclass
class Planes:
    """k infinite planes (half-spaces; the cloth stays on the normal's side).

    point0, normal0: (k, 3) at step start; point1, normal1 at step end
    (default: same as start). Normals need not be unit length.
    """

    point0: np.ndarray
    normal0: np.ndarray
    point1: np.ndarray = None
    normal1: np.ndarray = None

    def packed(self):
        """(k, 12) float32: point0, unit normal0, point1, unit normal1."""
        p0 = _as_vec3("Planes.point0", self.point0)
        k = p0.shape[0]
        n0 = _as_vec3("Planes.normal0", self.normal0, k)
        p1 = p0 if self.point1 is None else _as_vec3("Planes.point1", self.point1, k)
        n1 = n0 if self.normal1 is None else _as_vec3("Planes.normal1", self.normal1, k)
        out = np.empty((k, 12), dtype=np.float32)
        for col, v, nm in ((0, p0, None), (3, n0, "normal0"), (6, p1, None), (9, n1, "normal1")):
            if nm is not None:
                ln = np.linalg.norm(v, axis=1)
                if np.any(ln < 1e-12):
                    raise SolverError(f"Planes.{nm} has a zero-length normal")
                v = v / ln[:, None]
            out[:, col:col + 3] = v
        return out
