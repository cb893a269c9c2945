"""The named records the self-collision kernels take and return.

numba passes a namedtuple of arrays as one argument and reads its fields by
name at no cost, so a kernel's signature says what it works on (the mesh,
the regions' settings, the contact buffers) instead of listing thirty
arrays. Field types are fixed (SelfCollision makes every record) so each
kernel compiles once.
"""

from collections import namedtuple

# The rest mesh's topology, built once per model (SelfCollision._build_topology).
Mesh = namedtuple("Mesh", [
    "rest",         # (n, 3) float32: rest positions [m]
    "triangles",    # (t, 3) int32
    "tri_edges",    # (t, 3) int32: the edges of each triangle's sides
    "edges",        # (e, 2) int32: each edge once, ends sorted
    "edge_tris",    # (e, 2) int32: the first two triangles of each edge (-1: none)
    "tri_region",   # (t,) int32: the region most of its corners are in
    "tri_comp",     # (t,) int32: its connected component
    "vtri_start",   # (n + 1,) int64 and
    "vtri",         # int32: CSR vertex -> its triangles, ascending
    "near_start",   # (n + 1,) int64 and
    "near",         # int32: CSR vertex -> its neighbours across short edges (SelfCollision NEAR_ALTITUDES)
    "ring_start",   # (t + 1,) int64 and
    "ring",         # int32: CSR triangle -> every vertex equal or near to a corner
])

# Per-region settings, read every detect (SelfCollision.set_params may change them).
Regions = namedtuple("Regions", [
    "modes",             # (R, R) int8: MODE_* between regions i >= j (lower triangle)
    "thickness",         # (R,) float32 [m]
    "friction",          # (R,) float32: Coulomb mu
    "conservativeness",  # (R,) float32: scale of the predicted closing
    "layers",            # (R,) int32: layer order, -1 = none
    "margin",            # float32: contacts are made within thickness * (1 + margin)
])

# The patch broad phase's patches (topology.build_patches and the tables after it).
Patches = namedtuple("Patches", [
    "start",       # (P + 1,) int64 and
    "tris",        # (t,) int32: CSR patch -> its triangles
    "nbr_start",   # (P + 1,) int64 and
    "nbr",         # int32: CSR patch -> the patches sharing a vertex with it
    "far_start",   # (t + 1,) int64 and
    "far",         # int32: CSR triangle slot -> later slots of its patch that are not near
    "vert_start",  # (P + 1,) int64 and
    "verts",       # int32: CSR patch -> its distinct vertices
    "patch_of",    # (t,) int32: each triangle's patch
    "flat_cos",    # float32: a union of patches within acos(flat_cos) of one axis is flat
    "flat_alt",    # (P,) float32: a triangle of the patch and one not near it lie this many altitudes apart in a flat union
])

# Contact buffers detection writes (SelfCollision._alloc); `count` past
# their length means: call again with more room.
Contacts = namedtuple("Contacts", [
    "vertex",    # (c, 4) int32: the vertex slots (see constants)
    "kind",      # (c,) int8: KIND_*
    "normal",    # (c, 3) float32: normal, side or frame-local normal by kind
    "frame",     # (c,) int32: the edge-edge normal's frame triangle (-1: none)
    "target",    # (c,) float32: the distance to hold [m]
    "friction",  # (c,) float32: Coulomb mu
])

# One triangle pair in the narrow phase: A < B and what their regions say.
Pair = namedtuple("Pair", [
    "A", "B",     # int32 triangles
    "thick",      # the pair's thickness [m] (the mean of its regions')
    "fric",       # Coulomb mu (the geometric mean)
    "cons",       # conservativeness (the larger)
    "reach",      # contacts are made within this distance [m]
    "layered",    # both regions layered, in different layers
    "apart",      # different connected components: boxes alone decide the exactly-once rule
])

# What the patch broad phase computes in a step, for a step (broad.patch_work).
PatchWork = namedtuple("PatchWork", [
    "box",        # (t, 6) float32: triangle swept boxes (lo, hi), made on first use
    "sph",        # (t, 8) float32: triangle bounding spheres and motions
    "planes",     # (t, 16) float32: triangle planes and edge planes
    "trows",      # (7, t) float32: per-triangle rows of broad._patch_triangles
    "pbox",       # (P, 6) float32: patch swept boxes
    "pcone",      # (P, 4) float32: patch normal cone (axis, cos of half angle)
    "palt",       # (P,) float32: smallest triangle altitude [m]
    "pmot",       # (P, 4) float32: centre of the patch's relative motion, largest deviation [m]
    "plip",       # (P,) float32: Lipschitz bound of that motion over the patch
    "ready",      # (P + 2 t,) uint8: which patch boxes, triangle spheres, planes are made
    "seg_q",      # (P,) int64 and
    "seg_start",  # (P + 1,) int64 and
    "seg_tri",    # (t,) int64: the patches one patch meets and their triangles in its box
    "mark",       # (n,) int64: two-ring stamps
    "hits",       # (t,) int32: triangles whose boxes meet one triangle's
    "qlist",      # (P,) int64: patches whose boxes meet one patch's
])

# Per-worker scratch of the threaded detection (broad.thread_work), one
# worker per thread: the rows of PatchWork's per-pass scratch (worker t:
# row t), the contacts each worker found, and where each chunk's are.
ThreadWork = namedtuple("ThreadWork", [
    "ready", "seg_q", "seg_start", "seg_tri", "mark", "hits", "qlist",   # (T, ...): PatchWork's, per thread
    "vertex", "kind", "normal", "frame", "target", "friction",           # (T, c, ...): Contacts, per thread
    "fill",       # (T,) int64: contacts in each thread's buffer
    "chunk",      # (chunks, 5) int64: worker, first contact, contacts, overlaps, narrow pairs
    "claim",      # (T,) int64: chunks handed out of each worker's run
])

# The step's motion as the broad phase sweeps it (broad._sweep).
Sweep = namedtuple("Sweep", [
    "pos",         # (3, n) float32 at step start [m]
    "rel",         # (3, n) float32: the step's displacement less its mean [m]
    "region_pad",  # (R,) float32: half the thickness plus the margin [m]
    "region_cons", # (R,) float32: conservativeness
    "max_reach",   # float32: the largest contact distance of any region [m]
    "max_cons",    # float32: the largest conservativeness
])
