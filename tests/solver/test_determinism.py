"""The same build gives the same bytes whether numba compiled the solver in
this process or loaded it from its disk cache.

Two layered sheets pinned along a swung capsule (the layered scenario of
test_selfcollision_scenarios.py, shorter) are stepped in two fresh
processes sharing one empty NUMBA_CACHE_DIR: the first compiles everything
and fills the cache, the second loads it. The layered scene is chaotic, so
a difference of one rounding in any kernel shows in the positions within a
few frames.
"""

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

FRAMES = 12


def _scene_bytes(frames):
    from drape.solver import Capsules, ClothParams, StepInputs, build_model, step, vertex_masses
    from drape.solver.selfcollision import SelfCollision, merge_meshes

    dt = 1.0 / 60.0

    def sheet(n, size, z):
        xs = np.linspace(-size / 2, size / 2, n + 1)
        x, y = np.meshgrid(xs, xs)
        rest = np.stack([x.ravel(), y.ravel(), np.full(x.size, z)], axis=1)
        idx = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)
        quads = np.stack([idx[:-1, :-1], idx[:-1, 1:], idx[1:, 1:], idx[1:, :-1]], axis=-1)
        return rest, quads.ravel(), np.full(n * n, 4)

    n = 12
    m = merge_meshes([sheet(n, 0.6, 0.11), sheet(n, 0.6, 0.13)])
    pin = np.zeros(len(m.positions), np.float32)
    mid = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)[n // 2]
    pin[mid] = 1.0
    pin[mid + (n + 1) ** 2] = 1.0
    params = ClothParams(substeps=10)
    masses = vertex_masses(m.positions, m.face_indices, m.face_sizes, 0.2)
    model = build_model(m.positions, m.face_indices, m.face_sizes, masses, pin, params, region=m.region)
    model.self_collision = SelfCollision.from_model(model, thickness=0.006, layers=[0, 1])
    outer = np.zeros(len(m.positions), bool)
    outer[m.vertex_offset[1]:] = True
    model.set_collider_offset(np.where(outer, 0.006, 0.0))
    state = model.new_state()
    digest = hashlib.sha256()
    for f in range(frames):
        o0, o1 = (np.array([0.0, 0.25 * np.sin(2 * np.pi * t / 0.6), 0.05 * np.sin(2 * np.pi * t / 0.42)])
                  for t in (f * dt, (f + 1) * dt))
        caps = Capsules(a0=[[-0.6, 0, 0] + o0], b0=[[0.6, 0, 0] + o0], a1=[[-0.6, 0, 0] + o1],
                        b1=[[0.6, 0, 0] + o1], radius_a=[0.1], radius_b=[0.1])
        step(model, state, StepInputs(pin_targets=m.positions + o1.astype(np.float32), capsules=caps), dt, params)
        digest.update(state.positions.tobytes())
        digest.update(state.velocities.tobytes())
    return model.self_collision.count, digest.hexdigest()


def _run(cache_dir):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir))
    out = subprocess.run([sys.executable, __file__, str(FRAMES)], env=env, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_layered_scene_is_bit_identical_compiled_and_loaded_from_cache(tmp_path):
    compiled = _run(tmp_path)
    assert any(tmp_path.rglob("*.nbi")), "the first process wrote no numba cache"
    loaded = _run(tmp_path)
    assert int(compiled.split()[0]) > 0, "the layers made no contacts: nothing was tested"
    assert loaded == compiled


if __name__ == "__main__":
    count, digest = _scene_bytes(int(sys.argv[1]))
    print(count, digest)
