"""Contact kinds, region modes, the solve's reach and depth limits, and the
kernel options every self-collision kernel compiles with.

Contact kinds (`KIND_*`), vertex slots in `contact_vertex[k, 0:4]`:
  point-point    (v, w, -, -)  normal n stored (world, from w to v at step start)
  vertex-triangle (v, a, b, c) side +-1 stored in contact_normal[k, 0]; the
                 triangle's live normal is used in the solve
  edge-edge      (a, b, c, d)  normal stored in the frame of the triangle
                 `contact_frame[k]` (the first edge's owner), so it turns with
                 the cloth when contacts are cached over many steps
"""

import numpy as np

from ..jit import FAST, FAST_FLAT

KIND_POINT_POINT = 0
KIND_VERTEX_TRIANGLE = 1
KIND_EDGE_EDGE = 2

MODE_OFF = 0
MODE_POINT_POINT = 1
MODE_FULL = 2

# A vertex-triangle contact pushes while the vertex is over the triangle or
# beside it by at most this many thicknesses.
VT_REACH = 1.0

# An edge-edge contact pushes while its closest points are apart across its
# normal by at most this many thicknesses. At 2 the stacked layers of cloth
# crushed into a pile lose their edge contacts and tangle; with no limit
# layered skirts crease more (tests/solver/test_selfcollision_scenarios.py's
# crushed pile, `make demo`'s crossing count).
EE_REACH = 4.0

# Between layered regions the layer order decides a contact's side only while
# the vertex (or edge) is less than this many thicknesses on the wrong side;
# deeper, the side at step start holds: forcing deep ones across a whole
# layer in one solve tears layered skirts apart (`make demo`'s crossing
# count between the layers).
LAYER_DEPTH = 1.0

# A vertex-triangle or edge-edge contact whose vertex (edge) is more than this
# many thicknesses behind its frozen normal while the contact is not acting
# (beside the triangle, or the edges slid apart) has gone around, not
# through: it stays off (STALE) until the feature is back within that depth.
# Otherwise sliding over the triangle from far behind switched the contact on
# at full depth: on the demo's skirts at 10 substeps a hem vertex 13 cm
# behind a triangle of its own skirt was thrown 10 cm in one substep (20 m/s),
# and the skirts tangled for good (19,267 crossing pairs within the skirt
# summed over every 6th frame).
CONTACT_DEPTH = 2.0

# slot_active values: the contact's state, kept from substep to substep.
SLOT_OFF = 0
SLOT_ON = 1
SLOT_STALE = 2

# The kernels' options (solver/jit.py).
JIT = FAST

# Helpers that allocate nothing compile without numba's reference counting
# (jit.FAST_FLAT): called with arrays, each call otherwise made an atomic
# increment and decrement per array argument, a quarter of the detection
# time on the demo's layered skirts (perf: `lock incq`/`lock decq`).
# narrow_pair is a plain call for the same reason (inlined, its twenty
# array arguments were counted on every triangle pair). The small per-pair
# and per-triangle helpers (_tri_box, _tri_sphere, _spheres_apart, ...) are
# inlined as well: a call passes each array as its whole struct, and
# inlining them made detection ~10% faster on the 32x32 and 100x100 sheets.
HELPER = FAST_FLAT
F32_TINY = np.float32(1e-30)
F32_ONE = np.float32(1.0)
F32_TWO = np.float32(2.0)
F32_ZERO = np.float32(0.0)
F32_INF = np.float32(np.inf)

# The reject tests' slack for rounding: 1% and 1 um.
SLACK = np.float32(1.01)
SLACK_ABS = np.float32(1e-6)
