"""The multilevel stretch (solver/constraints/hierarchy.py): its levels
against the graph definitions they must meet (independent sets, every
vertex interpolated, weights summing to one, rest lengths never shorter
than the chord), the pass against exact expectations (nothing moves at
rest, folded or compressed; a pin never moves), and hung sheets without
tethers judged by their edge strain against the rest lengths (the oracle
computes l / rest - 1 itself), over resolutions, pin layouts and
substeps, with and without the hierarchy."""

import numpy as np
import pytest

import oracles
from drape.solver import Capsules, ClothParams, StepInputs, build_model, step
from drape.solver.constraints.hierarchy import solve_hierarchy4
from mesh_scenes import half_cylinder as _half_cylinder, settled_strain


def _irregular_sheet(n=14, seed=3):
    """A flat sheet of triangles with jittered vertices (not a grid)."""
    rest, fi, fs = oracles.grid_sheet(n, n, plane="xy")
    rng = np.random.default_rng(seed)
    inner = (rest[:, 0] > 0) & (rest[:, 0] < 1) & (rest[:, 1] > 0) & (rest[:, 1] < 1)
    rest = rest.copy()
    rest[inner, :2] += rng.uniform(-0.3, 0.3, (inner.sum(), 2)) / n
    quads = fi.reshape(-1, 4)
    tris = np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]]).reshape(-1)
    return rest, tris.astype(np.int64), np.full(2 * len(quads), 3, np.int64)


def _model(rest, fi, fs, pinned=None):
    pin = np.zeros(len(rest)) if pinned is None else pinned.astype(float)
    return build_model(rest, fi, fs, np.full(len(rest), 0.01), pin)


def _graph(model):
    pairs = np.concatenate([model.stretch.pairs, model.shear.pairs])
    return {frozenset(map(int, p)) for p in pairs}


def _run_pass(h, p4):
    solve_hierarchy4(p4, *h.packed())


def _aos4(x):
    p4 = np.zeros((len(x), 4), np.float32)
    p4[:, :3] = x
    return p4.reshape(-1)


SHEETS = {"grid": lambda: oracles.grid_sheet(24, 24, plane="xy"), "triangles": _irregular_sheet}


@pytest.mark.parametrize("sheet", SHEETS)
def test_levels_are_independent_sets_and_every_vertex_follows_them(sheet):
    """Each level's coarse vertices are pairwise unconnected in the level
    below; every vertex of the level below that is not coarse is
    interpolated from coarse ones, with weights summing to one; and the
    coarse constraints' rest lengths are never shorter than the rest chord
    (the pass can only pull cloth together where it is stretched). The
    pass solves the constraints of every level but the finest
    (hierarchy.SOLVE_FINEST_LEVEL)."""
    rest, fi, fs = SHEETS[sheet]()
    model = _model(rest, fi, fs)
    h = model.hierarchy
    assert h.levels >= 2
    below = _graph(model)
    members = np.arange(len(rest))
    # Finest first: the constraints were stored coarsest first.
    for lv in range(h.levels - 1, -1, -1):
        pairs = h.level_pairs[h.levels - 1 - lv]
        solved = h.pairs[h.ends[lv]:h.ends[lv + 1]]
        finest = lv == h.levels - 1
        assert len(solved) == (0 if finest else len(pairs))
        assert {frozenset(map(int, p)) for p in solved} <= {frozenset(map(int, p)) for p in pairs}
        coarse = np.unique(pairs)
        assert not any(frozenset((int(a), int(b))) in below for a, b in pairs), "coarse vertices adjacent below"
        fine = h.fine_vertices[h.fine_ends[lv]:h.fine_ends[lv + 1]]
        assert set(fine.tolist()) | set(coarse.tolist()) == set(members.tolist())
        for j in range(h.fine_ends[lv], h.fine_ends[lv + 1]):
            w = h.par_w[h.par_ends[j]:h.par_ends[j + 1]]
            parents = h.par_vertices[h.par_ends[j]:h.par_ends[j + 1]]
            assert len(w) and abs(float(w.sum()) - 1.0) < 1e-5
            assert set(parents.tolist()) <= set(coarse.tolist())
        chord = np.linalg.norm(rest[solved[:, 0]] - rest[solved[:, 1]], axis=1)
        assert np.all(h.rest[h.ends[lv]:h.ends[lv + 1]] >= chord * (1 - 1e-6))
        below = {frozenset(map(int, p)) for p in pairs}
        members = coarse
    assert len(members) < len(rest) / 8


@pytest.mark.parametrize("shape", ["rest", "compressed", "folded", "curved_rest"])
def test_the_pass_moves_nothing_that_is_not_stretched(shape):
    """At rest, compressed to 60 %, folded in half along a row, or over a
    half cylinder's curved rest shape, one pass leaves every position as it
    was, bit for bit: the coarse constraints only ever shorten."""
    if shape == "curved_rest":
        rest, fi, fs, _ = _half_cylinder(16, 20)
        x = rest
    else:
        rest, fi, fs = oracles.grid_sheet(20, 20, plane="xy")
        x = rest.copy()
        if shape == "compressed":
            x = 0.6 * (x - x.mean(axis=0))
        elif shape == "folded":
            far = x[:, 0] > 0.5
            x[far, 0] = 1.0 - x[far, 0]
            x[far, 2] = 0.01
    model = _model(rest, fi, fs)
    p4 = _aos4(x)
    before = p4.copy()
    _run_pass(model.hierarchy, p4)
    assert np.array_equal(p4, before)


def test_a_stretched_sheet_is_pulled_together_and_pins_stay():
    """Stretched to 150 % around a pinned corner, one pass pulls the sheet
    back far more than one pass of its own edges does (each edge pass moves
    the pull one ring), and the pinned vertices do not move at all."""
    from drape.solver.constraints.distance import solve_distance_fast4

    rest, fi, fs = oracles.grid_sheet(32, 32, plane="xy")
    pinned = np.isclose(rest[:, 0], 0.0) & np.isclose(rest[:, 1], 1.0)
    model = _model(rest, fi, fs, pinned)
    for cls in (model.stretch, model.hierarchy):
        cls.refresh_coefficients(0.0)
    x = rest.copy()
    x[:, :2] = x[:, :2] * 1.5 - 0.5 * rest[pinned][0, :2]
    far = np.argmax(np.linalg.norm(x - x[pinned][0], axis=1))
    edges = _aos4(x)
    solve_distance_fast4(edges, model.stretch.ab_rec, model.stretch.coef.reshape(-1), False)
    multi = _aos4(x)
    _run_pass(model.hierarchy, multi)
    reach = lambda p4: np.linalg.norm(p4.reshape(-1, 4)[far, :3] - x[pinned][0])  # noqa: E731
    exact = np.linalg.norm(rest[far] - rest[pinned][0])
    assert reach(multi) - exact < 0.5 * (reach(edges) - exact)
    assert np.array_equal(multi.reshape(-1, 4)[pinned, :3], x[pinned].astype(np.float32))


def _hung(nx, layout, substeps, hierarchy):
    return settled_strain(nx, layout, frames=72, substeps=substeps, tethers=False, stretch_limits=False,
                          stretch_hierarchy=hierarchy)


# Measured bounds with the hierarchy, tethers off (the default solve without
# it stretches these sheets 75 % to many times their length).
_BOUND = {"two_corners": 0.25, "one_edge": 0.05, "two_edges": 0.2}


@pytest.mark.parametrize("nx", [20, 32, 40])
@pytest.mark.parametrize("layout", sorted(_BOUND))
@pytest.mark.parametrize("substeps", [2, 4, 8])
def test_without_tethers_the_hierarchy_holds_a_hung_sheet(nx, layout, substeps):
    """Hung without tethers, the multilevel stretch keeps the largest edge
    stretch within the layout's bound and at most half of what the same
    solve gives without it."""
    s = _hung(nx, layout, substeps, True)
    assert s.max() <= _BOUND[layout], f"max stretch {s.max():.3f}"
    assert np.abs(s).mean() <= 0.04
    without = _hung(nx, layout, substeps, False)
    assert s.max() <= 0.5 * without.max(), (s.max(), without.max())


@pytest.mark.parametrize("substeps", [2, 5])
def test_a_sheet_dropped_on_a_sphere_stays_on_it(substeps):
    """A free 20x20 sheet dropped on a 25 cm sphere with the hierarchy on
    ends draped on it: no vertex deeper than the thickness inside the
    exact sphere, its middle on the top, no edge stretched to twice its
    length (the coarse pass once tore it and it fell off)."""
    rest, fi, fs = oracles.grid_sheet(20, 20, plane="xy")
    rest = rest - [0.5, 0.5, -0.3]
    c, r = np.zeros((1, 3)), np.array([0.25])
    sphere = StepInputs(capsules=Capsules(a0=c, b0=c, a1=c, b1=c, radius_a=r, radius_b=r))
    params = ClothParams(substeps=substeps, stretch_hierarchy=True, stretch_limits=False)
    model = build_model(rest, fi, fs, np.full(len(rest), 1e-3), np.zeros(len(rest)), params)
    state = model.new_state()
    for _ in range(45):
        step(model, state, sphere, 1 / 30, params)
        x = state.positions_aos().astype(np.float64)
        assert np.linalg.norm(x, axis=1).min() - 0.25 > -params.collision_margin
        assert oracles.edge_strain(x, model.stretch.pairs, rest).max() < 1.0
    mid = np.argmin(np.linalg.norm(rest[:, :2], axis=1))
    assert abs(np.linalg.norm(x[mid]) - 0.25) < 3 * params.collision_margin + 1e-3
