"""Drape's XPBD cloth solver: pure numpy + numba, never imports bpy.

Build once, step many, read positions::

    from drape.solver import ClothParams, build_model, StepInputs, Capsules, Planes, step
    params = ClothParams(substeps=2)
    model = build_model(rest, face_indices, face_sizes,
                        vertex_masses(rest, face_indices, face_sizes, 0.2), pin_weight, params)
    state = model.new_state()
    step(model, state, StepInputs(pin_targets=targets), 1 / 60, params)
    x = state.positions_aos()            # (n, 3) float32

`model.self_collision` (None by default) may be set to an object with
``detect(pos, vel, dt, gravity)`` (called once per step) and
``solve(pos, prev_pos)`` (called every substep iteration, before colliders).
"""

# First: how every kernel is compiled (see jit.py) and for which CPU (the
# portable switch in hardware.py must act before any kernel is declared).
from . import jit  # noqa: F401, I001
from . import hardware  # noqa: F401, I001
from .model import Model, State, build_model
from .colliders import Capsules, MeshCollider, Planes
from .colliders.box import Boxes
from .params import ClothParams, SolverError, StepInputs
from .step import step
from .topology import vertex_masses

__all__ = [
    "Boxes",
    "Capsules",
    "ClothParams",
    "MeshCollider",
    "Model",
    "Planes",
    "SolverError",
    "State",
    "StepInputs",
    "build_model",
    "step",
    "vertex_masses",
]
