"""One module per constraint type, each with its build and its solve.

A new type: its module here (a class that builds the arrays from the rest
mesh, a record of what its kernels read, `prepare(c, inv_h2)` giving the
records for a step, the kernels), its place in Model.constraints
(model.py), and its arguments and call in the substep loop (loop.py).
"""

from .bending import BendingConstraints, BendingRecord
from .distance import DistanceConstraints, DistanceRecord
from .pressure import PressureConstraint, PressureRecord
from .sewing import SewingConstraints, SewingRecord
from .skinned import SkinnedConstraints, SkinnedRecord
from .tethers import TetherRecord, Tethers

__all__ = ["BendingConstraints", "BendingRecord", "DistanceConstraints", "DistanceRecord", "TetherRecord",
           "Tethers", "PressureConstraint", "PressureRecord", "SewingConstraints", "SewingRecord",
           "SkinnedConstraints", "SkinnedRecord"]
