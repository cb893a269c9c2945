"""The solver must stay importable from plain Python, without Blender."""

import subprocess
import sys


def test_solver_imports_without_bpy():
    code = (
        "import sys, drape.solver\n"
        "assert 'bpy' not in sys.modules, 'solver pulled in bpy'\n"
        "assert 'mathutils' not in sys.modules, 'solver pulled in mathutils'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
