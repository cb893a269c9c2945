"""The substep loop's ahead-of-time parts (loop.precompile): compiled first,
they leave the default step nothing to compile but `run` itself."""

import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import sys
import numpy as np
from numba.core.dispatcher import Dispatcher
from drape.solver import Capsules, ClothParams, Planes, StepInputs, build_model, loop, step, vertex_masses

def kernels():
    found = {}
    for name, module in list(sys.modules.items()):
        if module is not None and name.startswith("drape.solver"):
            for v in vars(module).values():
                if isinstance(v, Dispatcher):
                    found[f"{v.py_func.__module__}.{v.py_func.__qualname__}"] = v
    return found

n = 6
xs = np.linspace(0.0, 1.0, n + 1)
x, z = np.meshgrid(xs, xs[::-1])
rest = np.stack([x.ravel(), np.zeros(x.size), z.ravel()], axis=1)
idx = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)
quads = np.stack([idx[:-1, :-1], idx[1:, :-1], idx[1:, 1:], idx[:-1, 1:]], axis=-1).ravel()
sizes = np.full(n * n, 4)
pin = np.zeros(len(rest), np.float32)
pin[: n + 1] = 1.0
pin[n + 1] = 0.5                                   # a soft pin
params = ClothParams(substeps=2)
model = build_model(rest, quads, sizes, vertex_masses(rest, quads, sizes, 0.2), pin, params)
state = model.new_state()
parts = sys.argv[1].split(",") if sys.argv[1] else []
for part in parts:
    loop.precompile(part)
before = {k: sum(d.stats.cache_misses.values()) for k, d in kernels().items()}
caps = Capsules(a0=[[0.5, -1, 0.5]], b0=[[0.5, 1, 0.5]], a1=[[0.6, -1, 0.5]], b1=[[0.6, 1, 0.5]],
                radius_a=[0.1], radius_b=[0.1])
ground = Planes(point0=[[0, 0, -0.5]], normal0=[[0, 0, 1.0]])
step(model, state, StepInputs(pin_targets=rest, capsules=caps, planes=ground), 1 / 60, params)
after = {k: sum(d.stats.cache_misses.values()) for k, d in kernels().items()}
print(sorted(k.rsplit(".", 1)[1] for k in after if after[k] > before.get(k, 0)))
"""

STEP_LEVEL = {"run", "pack_capsules", "rows_from_points", "_rows_from_flat"}


def _compiled_by_the_step(tmp_path, parts):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", SCRIPT, ",".join(parts)], env=env, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return set(eval(out.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_the_parts_leave_the_default_step_only_run_to_compile(tmp_path):
    without = _compiled_by_the_step(tmp_path / "cold", [])
    # Without the parts the step compiles the kernels itself (the check can fail)...
    assert "advance_vertices" in without and "project_colliders_into" in without, without
    # ...with them, only run and the step's own input passes.
    assert _compiled_by_the_step(tmp_path / "parts", ["sweep", "solve"]) <= STEP_LEVEL


def test_an_unknown_part_is_refused():
    from drape.solver import loop

    with pytest.raises(ValueError, match="unknown part 'walk'"):
        loop.precompile("walk")
