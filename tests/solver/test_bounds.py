"""Memory safety of the compiled kernels: the step and the self-contact solve
built with numba's bounds checks (NUMBA_BOUNDSCHECK=1, in a subprocess with a
cache of its own, so the suite's compiled kernels are not reused), on inputs
that fill the lists the kernels compact: every vertex near a capsule and
every contact listed, with counts that are not multiples of 8. Out of bounds,
numba raises IndexError instead of writing past an array (compact_flags
writes one item past the listed ones: its output must be as long as its
flags, which this caught for the step's vertex list and the solve's contact
list)."""

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import numpy as np
    from drape import solver
    from drape.solver.selfcollision import SelfCollision, merge_meshes

    def sheet(n, size, z):
        xs = np.linspace(0.0, size, n + 1)
        x, y = np.meshgrid(xs, xs)
        rest = np.stack([x.ravel(), y.ravel(), np.full(x.size, z)], axis=1).astype(np.float32)
        idx = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)
        quads = np.stack([idx[:-1, :-1], idx[:-1, 1:], idx[1:, 1:], idx[1:, :-1]], axis=-1)
        return rest, quads.ravel(), np.full(n * n, 4)

    # 9 vertices, all inside a capsule's reach: every vertex listed.
    rest, quads, sizes = sheet(2, 0.02, 0.0)
    pin = np.zeros(len(rest), np.float32)
    pin[0] = 1.0
    params = solver.ClothParams(substeps=2)
    model = solver.build_model(rest, quads, sizes, solver.vertex_masses(rest, quads, sizes, 0.2), pin, params)
    state = model.new_state()
    ends = [[-1.0, 0.01, 0.05]], [[1.0, 0.01, 0.05]]
    caps = solver.Capsules(a0=ends[0], b0=ends[1], a1=ends[0], b1=ends[1], radius_a=[0.5], radius_b=[0.5])
    for _ in range(3):
        solver.step(model, state, solver.StepInputs(pin_targets=rest, capsules=caps), 1 / 60, params)

    # Two layered sheets, the outer one pushed below the inner: every cached
    # contact is violated and listed; then the same in the compiled step.
    merged = merge_meshes([sheet(3, 0.3, 0.0), sheet(3, 0.3, 0.004)])
    nb = len(merged.positions) // 2
    sc = SelfCollision.from_mesh(merged.positions, merged.face_indices, merged.face_sizes, merged.region,
                                 thickness=0.01, layers=[0, 1])
    x = np.ascontiguousarray(merged.positions.T)
    x[2, nb:] = -0.003
    x[0, nb:] += 0.013
    count = sc.cache_contacts(x, radius=0.02, between_regions=True)
    assert count % 8 != 0, count
    for parallel in (False, True):
        sc.parallel = parallel
        y = x.copy()
        sc.solve(y, x.copy())
        assert np.isfinite(y).all()
    pin = np.zeros(len(merged.positions), np.float32)
    pin[:4] = 1.0
    model = solver.build_model(merged.positions, merged.face_indices, merged.face_sizes,
                               solver.vertex_masses(merged.positions, merged.face_indices, merged.face_sizes, 0.2),
                               pin, params, region=merged.region)
    sc = SelfCollision.from_model(model, thickness=0.01, layers=[0, 1])
    state = model.new_state()
    state.positions[:] = x
    sc.cache_contacts(state.positions, radius=0.02, between_regions=True)
    model.self_collision = sc
    for _ in range(3):
        solver.step(model, state, solver.StepInputs(pin_targets=merged.positions, capsules=caps), 1 / 60, params)
    print("in bounds", count)
""")


@pytest.mark.slow
def test_compiled_step_and_self_contact_solve_stay_in_bounds(tmp_path):
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "in bounds" in proc.stdout
