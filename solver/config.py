"""The step's settings as one named record, and the float32 constants and
array conversions the kernels and their builders share.

step.py fills a one-item structured array of CONFIG from ClothParams and
the substep length; the compiled loop reads its item (a numba Record) by
field name. The fields are float32 like the kernels' arithmetic; flags are
0 or 1.
"""

import numpy as np

F0 = np.float32(0.0)
F1 = np.float32(1.0)
FHALF = np.float32(0.5)
EPS = np.float32(1e-9)
FINF = np.float32(np.inf)
TRACE_EPS = np.float32(1e-5)

CONFIG = np.dtype([(name, np.float32) for name in (
    "h",                                                # substep length, s
    "gx", "gy", "gz",                                   # gravity, m/s^2
    "a_stretch", "a_shear", "a_bend", "a_tether",       # compliances (ClothParams)
    "d_stretch", "d_shear", "d_bend", "d_tether",       # damping
    "tether_scale",
    "air_drag", "air_density", "cd", "cl",              # drag, and the wind model's coefficients
    "margin", "mu_s", "mu_k",                           # colliders: offset, friction
    "maxv",                                             # speed limit, m/s (0 = none)
    "use_tethers", "use_wind", "use_accel", "use_limits", "use_hierarchy",
    "substeps", "iterations",
    "coff_max",      # largest per-vertex collider offset (capsule boxes grow by it)
    "bend_curved",   # 1: some bending element has a curved rest shape (rest norm != 0)
    "use_edges",     # 1: capsule contacts of the edges and faces too (ClothParams.edge_contacts)
    "edge_reach",    # m: how far past the capsules' boxes the edge and face passes look (SurfaceEdges.reach)
    "a_sew", "sew_force",                         # sewing: compliance (m/N), max force (N, 0 = unlimited)
    "a_pressure", "pressure_volume",              # pressure: compliance (m^5/N), target volume factor
    "use_pressure",
    "max_distance", "backstop_distance", "backstop_radius",   # skinned constraints, m (0 = off)
    "settle_rate", "settle_speed",  # settling damping, 1/s and m/s (ClothParams.settle_damping, settle_speed)
    "air_res",       # air resistance: 0.5 air_density air_resistance, kg/m^3 (0 = off)
)])


def new_config():
    """A zeroed one-item CONFIG array."""
    return np.zeros(1, dtype=CONFIG)


def as_u32(a):
    """a as a C-contiguous uint32 array (indices, as the kernels read them)."""
    return np.ascontiguousarray(a, dtype=np.uint32)


def as_f32(a):
    """a as a C-contiguous float32 array."""
    return np.ascontiguousarray(a, dtype=np.float32)
