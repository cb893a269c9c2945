"""Pins, wind, determinism, the self-collision hook and adversarial input."""

import numpy as np
import pytest

import oracles
from drape.solver import (Capsules, ClothParams, Planes, SolverError, StepInputs, build_model, step,
                          vertex_masses)


def _hanging(nx=10, size=1.0, params=None):
    rest, fi, fs = oracles.grid_sheet(nx, nx, size)
    pin = np.zeros(len(rest))
    pin[: nx + 1] = 1.0
    model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.2), pin, params)
    return model, rest, pin


def test_kinematic_pins_follow_their_targets_exactly():
    params = ClothParams(substeps=3)
    model, rest, pin = _hanging(params=params)
    state = model.new_state()
    pinned = np.flatnonzero(pin)
    for i in range(40):
        targets = rest.copy()
        targets[:, 0] += 0.3 * np.sin(0.2 * i)
        targets[:, 1] += 0.01 * i
        step(model, state, StepInputs(pin_targets=targets), 1 / 60, params)
        x = state.positions_aos()
        assert np.array_equal(x[pinned], targets[pinned].astype(np.float32))
        # Free vertices were dragged along, not left behind at rest.
    assert np.mean(state.positions_aos()[~pin.astype(bool), 1]) > 0.1


def test_pin_targets_are_interpolated_across_substeps():
    # A pin moved 0.4 m in one step of 4 substeps moves 0.1 per substep: its
    # neighbour's stretch stays bounded instead of one 0.4 m jerk.
    rest = np.array([[0.0, 0, 0], [0.1, 0, 0], [0.1, 0.1, 0]])
    params = ClothParams(substeps=4, tethers=False, stretch_compliance=0.0)
    model = build_model(rest, np.array([0, 1, 2]), np.array([3]), np.ones(3), np.array([1.0, 0, 0]), params)
    state = model.new_state()
    targets = rest.copy()
    targets[0, 0] = 0.4
    step(model, state, StepInputs(pin_targets=targets), 1 / 60, params)
    # The pin's velocity is that of its last substep: 0.1 m in 1/240 s
    # (one jerk of 0.4 m would give 0, or 96 m/s in a single substep).
    assert np.isclose(state.velocities[0, 0], 0.1 * 240, rtol=1e-4)
    assert np.isclose(state.positions[0, 0], 0.4, atol=1e-6)


def test_releasing_pins_lets_the_cloth_fall_freely():
    params = ClothParams(substeps=2)
    model, rest, pin = _hanging(params=params)
    state = model.new_state()
    for _ in range(120):
        step(model, state, None, 1 / 60, params)
    x0 = state.positions_aos().astype(np.float64)
    mass = model.mass.astype(np.float64)
    com0 = (mass[:, None] * x0).sum(0) / mass.sum()
    v0 = (mass[:, None] * state.velocities_aos()).sum(0) / mass.sum()
    steps, h = 30, 1 / 120
    step(model, state, StepInputs(pin_weight=np.zeros(len(rest))), 1 / 60, params)
    for _ in range(steps - 1):
        step(model, state, None, 1 / 60, params)
    com = (mass[:, None] * state.positions_aos()).sum(0) / mass.sum()
    # Internal constraints conserve momentum: the centre of mass falls exactly
    # as symplectic Euler with gravity does, N = 2 * steps substeps.
    n = 2 * steps
    expected = com0[2] + v0[2] * n * h - 9.81 * h * h * n * (n + 1) / 2
    assert com[2] == pytest.approx(expected, abs=2e-3)
    assert com0[2] - com[2] > 0.3


def test_runtime_pin_changes_without_rebuild_add_and_soft_pins():
    params = ClothParams(substeps=2, pin_compliance=1e-2)
    # A single free vertex with a soft pin (w = 0.5) sags below its target by
    # m g * compliance, compliance = pin_compliance (1 - w) / w.
    rest = np.array([[0.0, 0.0, 1.0]])
    model = build_model(rest, np.zeros(0, int), np.zeros(0, int), np.array([0.2]), np.zeros(1), params)
    state = model.new_state()
    w = 0.5
    step(model, state, StepInputs(pin_weight=np.array([w]), pin_targets=rest), 1 / 60, params)
    for _ in range(600):
        step(model, state, StepInputs(pin_targets=rest), 1 / 60,
             ClothParams(substeps=2, pin_compliance=1e-2, air_drag=3.0))
    sag = 1.0 - state.positions[2, 0]
    assert sag == pytest.approx(0.2 * 9.81 * 1e-2 * (1 - w) / w, rel=1e-3)
    # Re-weight to 1: kinematic, exactly on target.
    step(model, state, StepInputs(pin_weight=np.array([1.0]), pin_targets=rest), 1 / 60, params)
    assert state.positions[2, 0] == np.float32(1.0)


def test_outputs_are_deterministic():
    def run():
        params = ClothParams(substeps=2)
        model, rest, pin = _hanging(nx=12, params=params)
        state = model.new_state()
        t = 0.0
        for _ in range(40):
            a = np.array([[0.2, 0.3 * np.sin(t), 0.5]])
            b = np.array([[0.8, 0.3 * np.sin(t), 0.5]])
            a1 = np.array([[0.2, 0.3 * np.sin(t + 0.1), 0.5]])
            b1 = np.array([[0.8, 0.3 * np.sin(t + 0.1), 0.5]])
            caps = Capsules(a, b, a1, b1, np.array([0.1]), np.array([0.1]))
            step(model, state, StepInputs(capsules=caps, wind_velocity=(1.0, 2.0, 0.0)), 1 / 60, params)
            t += 0.1
        return state.positions.copy(), state.velocities.copy()

    p1, v1 = run()
    p2, v2 = run()
    assert np.array_equal(p1, p2) and np.array_equal(v1, v2)


def test_wind_pushes_a_hanging_sheet_downwind_and_air_drag_decays_velocity():
    params = ClothParams(substeps=2)
    model, rest, pin = _hanging(params=params)
    state = model.new_state()
    for _ in range(60):
        step(model, state, StepInputs(wind_velocity=(0.0, 6.0, 0.0)), 1 / 60, params)
    y = state.positions[1]
    assert y.mean() > 0.05 and np.all(np.isfinite(y))
    # Linear air drag on a lone vertex without gravity: v *= (1 - k h) per substep.
    p2 = ClothParams(substeps=2, gravity=(0.0, 0.0, 0.0), air_drag=2.0)
    m2 = build_model(np.zeros((1, 3)), np.zeros(0, int), np.zeros(0, int), np.ones(1), np.zeros(1), p2)
    s2 = m2.new_state(velocities=np.array([[1.0, 0.0, 0.0]]))
    for _ in range(10):
        step(m2, s2, None, 1 / 60, p2)
    assert s2.velocities[0, 0] == pytest.approx((1 - 2.0 / 120) ** 20, rel=1e-5)


def test_aerodynamic_lift_acts_across_the_flow_on_an_inclined_sheet():
    # A free flat sheet inclined 45 degrees in a horizontal wind gets pushed
    # along the flow (drag) and across it along the normal side (lift).
    rest, fi, fs = oracles.grid_sheet(4, 4, size=0.2, plane="xy")
    c, s = np.cos(np.pi / 4), np.sin(np.pi / 4)
    rest = rest @ np.array([[1, 0, 0], [0, c, -s], [0, s, c]]).T
    p_lift = ClothParams(substeps=1, gravity=(0, 0, 0), lift_coefficient=1.0, drag_coefficient=0.0)
    model = build_model(rest, fi, fs, np.full(len(rest), 1e-3), np.zeros(len(rest)), p_lift)
    state = model.new_state()
    step(model, state, StepInputs(wind_velocity=(0.0, 5.0, 0.0)), 1 / 60, p_lift)
    v = state.velocities_aos().mean(0)
    # n_perp is perpendicular to the wind (y): motion only in z.
    assert abs(v[2]) > 1e-3 and abs(v[1]) < 0.05 * abs(v[2])


def test_self_contacts_are_solved_before_the_colliders_which_win():
    """A sheet folded onto itself and pressed onto the ground by a plane
    above: the self contacts push the layers apart, but no vertex ends
    below the ground (the colliders' projection comes last)."""
    from drape.solver.selfcollision import SelfCollision

    params = ClothParams(substeps=3, iterations=2, collision_margin=0.0, tethers=False)
    rest, fi, fs = oracles.grid_sheet(8, 8)
    # Fold the sheet in half about x = 0.5: two layers 5 mm apart.
    far = rest[:, 0] > 0.5
    folded = np.stack([np.where(far, 1.0 - rest[:, 0], rest[:, 0]), rest[:, 2], np.where(far, 0.005, 0.0)], 1)
    model = build_model(folded, fi, fs, vertex_masses(folded, fi, fs, 0.1), np.zeros(len(rest)), params)
    model.self_collision = SelfCollision.from_model(model, thickness=0.004)
    state = model.new_state()
    ground = Planes(point0=np.array([[0, 0, -0.001]]), normal0=np.array([[0, 0, 1.0]]))
    for _ in range(10):
        step(model, state, StepInputs(planes=ground, acceleration=(0.0, 0.0, -50.0)), 1 / 60, params)
        assert state.positions[2].min() >= -0.001 - 1e-5
    assert model.self_collision.count > 0


@pytest.mark.parametrize("case", ["zero_area", "duplicates", "isolated", "all_pinned", "none_pinned",
                                  "zero_compliance", "huge_compliance", "huge_dt", "ngon_and_tris"])
def test_adversarial_inputs_never_produce_nan(case):
    rest, fi, fs = oracles.grid_sheet(6, 6)
    n = len(rest)
    pin = np.zeros(n)
    pin[:7] = 1.0
    params = ClothParams(substeps=2)
    dt = 1 / 60
    if case == "zero_area":
        # Collapse a row: quads of zero area and colinear triangles.
        rest[14:21, 2] = rest[7:14, 2]
        rest = np.vstack([rest, [[0, 0, 0], [1, 0, 0], [2, 0, 0]]])
        fi = np.concatenate([fi, [n, n + 1, n + 2]])
        fs = np.concatenate([fs, [3]])
        pin = np.concatenate([pin, [0, 0, 0]])
    elif case == "duplicates":
        # A duplicated vertex (same position) used by a face, and a face
        # that repeats a vertex.
        rest = np.vstack([rest, rest[10]])
        fi = np.concatenate([fi, [10, n, 11, 3, 3, 4]])
        fs = np.concatenate([fs, [3, 3]])
        pin = np.concatenate([pin, [0]])
    elif case == "isolated":
        rest = np.vstack([rest, [[5, 5, 5], [6, 6, 6]]])
        pin = np.concatenate([pin, [0, 1]])
    elif case == "all_pinned":
        pin[:] = 1.0
    elif case == "none_pinned":
        pin[:] = 0.0
    elif case == "zero_compliance":
        params = ClothParams(substeps=2, stretch_compliance=0, shear_compliance=0, bend_compliance=0)
    elif case == "huge_compliance":
        params = ClothParams(substeps=2, stretch_compliance=1e30, shear_compliance=1e30, bend_compliance=1e30,
                             pin_compliance=1e30)
        pin[7:14] = 0.5
    elif case == "huge_dt":
        dt = 10.0
    elif case == "ngon_and_tris":
        rest = np.vstack([rest, [[2, 0, 0], [3, 0, 0], [3.5, 0, 1], [3, 0, 2], [2, 0, 2], [1.5, 0, 1]]])
        fi = np.concatenate([fi, np.arange(n, n + 6), [0, 1, 8]])
        fs = np.concatenate([fs, [6, 3]])
        pin = np.concatenate([pin, np.zeros(6)])
    mass = vertex_masses(rest, fi, fs, 0.2)
    model = build_model(rest, fi, fs, mass, pin, params)
    state = model.new_state()
    ground = Planes(point0=np.array([[0, 0, -2.0]]), normal0=np.array([[0, 0, 1.0]]))
    caps = Capsules(np.array([[0.2, -0.3, 0.5]]), np.array([[0.8, -0.3, 0.5]]),
                    np.array([[0.2, 0.3, 0.5]]), np.array([[0.8, 0.3, 0.5]]), np.array([0.1]), np.array([0.1]))
    for _ in range(20):
        step(model, state, StepInputs(capsules=caps, planes=ground, wind_velocity=(0, 3, 0)), dt, params)
    assert np.all(np.isfinite(state.positions)) and np.all(np.isfinite(state.velocities))
    assert np.abs(state.velocities).max() <= params.max_velocity * 1.0001
    if case == "all_pinned":
        assert np.array_equal(state.positions_aos(), rest.astype(np.float32))


def test_unusable_input_raises_clear_errors_and_changes_nothing():
    rest, fi, fs = oracles.grid_sheet(3, 3)
    n = len(rest)
    ones, zeros = np.ones(n), np.zeros(n)
    with pytest.raises(SolverError, match="face_indices out of range"):
        build_model(rest, np.where(fi == 5, 99, fi), fs, ones, zeros)
    with pytest.raises(SolverError, match="face_sizes sum"):
        build_model(rest, fi[:-1], fs, ones, zeros)
    with pytest.raises(SolverError, match="rest_positions contains NaN"):
        bad = rest.copy()
        bad[2, 1] = np.nan
        build_model(bad, fi, fs, ones, zeros)
    with pytest.raises(SolverError, match="pin_weight must lie in 0..1"):
        build_model(rest, fi, fs, ones, zeros + 2)
    with pytest.raises(SolverError, match="mass must have shape"):
        build_model(rest, fi, fs, ones[:-1], zeros)
    with pytest.raises(SolverError, match="face_sizes must all be >= 3"):
        build_model(rest, fi, np.where(np.arange(len(fs)) == 0, 2, fs), ones, zeros)
    model = build_model(rest, fi, fs, ones, zeros)
    state = model.new_state()
    before = state.positions.copy()
    with pytest.raises(SolverError, match="pin_targets must have shape"):
        step(model, state, StepInputs(pin_targets=np.zeros((n - 1, 3))))
    with pytest.raises(SolverError, match="dt must be a positive"):
        step(model, state, None, 0.0)
    with pytest.raises(SolverError, match="wind_velocity contains NaN"):
        step(model, state, StepInputs(wind_velocity=np.full((n, 3), np.nan)))
    with pytest.raises(SolverError, match="substeps"):
        step(model, state, None, 1 / 60, ClothParams(substeps=0))
    with pytest.raises(SolverError, match="zero-length normal"):
        step(model, state, StepInputs(planes=Planes(np.zeros((1, 3)), np.zeros((1, 3)))))
    with pytest.raises(SolverError, match="Capsules.b0 must have shape"):
        step(model, state, StepInputs(capsules=Capsules(np.zeros((2, 3)), np.zeros((1, 3)), np.zeros((2, 3)),
                                                        np.zeros((2, 3)), np.ones(2), np.ones(2))))
    # The per-step inputs' compiled checks (float64 and float32 arrays).
    z = np.zeros((1, 3))
    with pytest.raises(SolverError, match="Capsules contain NaN or Inf"):
        step(model, state, StepInputs(capsules=Capsules(z, z, np.full((1, 3), np.nan), z, np.ones(1), np.ones(1))))
    with pytest.raises(SolverError, match="Capsules contain NaN or Inf"):
        step(model, state, StepInputs(capsules=Capsules(z, z, z, np.full((1, 3), 1e39), np.ones(1), np.ones(1))))
    with pytest.raises(SolverError, match="radius_a/radius_b must be >= 0"):
        z32 = z.astype(np.float32)
        step(model, state, StepInputs(capsules=Capsules(z32, z32, z32, z32, np.ones(1, np.float32),
                                                        -np.ones(1, np.float32))))
    for bad, dtype in ((np.inf, np.float64), (1e39, np.float64), (np.nan, np.float32)):
        targets = rest.astype(dtype)
        targets[3, 2] = bad
        with pytest.raises(SolverError, match="pin_targets contains NaN or Inf"):
            step(model, state, StepInputs(pin_targets=targets))
    assert np.array_equal(state.positions, before)
    assert np.array_equal(state.pin_targets, model.new_state().pin_targets)


def test_non_finite_state_raises_solver_error():
    model, rest, pin = _hanging(nx=3)
    state = model.new_state()
    state.velocities[0, 5] = np.inf
    with pytest.raises(SolverError, match="NaN/Inf"):
        step(model, state, None, 1 / 60, ClothParams(max_velocity=0.0))


def test_vertex_masses_match_polygon_areas():
    rest, fi, fs = oracles.grid_sheet(4, 2, size=2.0)
    m = vertex_masses(rest, fi, fs, 0.5)
    assert m.sum() == pytest.approx(2.0 * 2.0 * 0.5, rel=1e-6)
    # A corner vertex touches one quad of area 0.5 x 1: a quarter of it.
    assert m[0] == pytest.approx(0.25 * 0.5 * 1.0 * 0.5, rel=1e-6)
    w = np.ones(len(rest))
    w[0] = 3.0
    assert vertex_masses(rest, fi, fs, 0.5, weight=w)[0] == pytest.approx(3 * m[0], rel=1e-6)
