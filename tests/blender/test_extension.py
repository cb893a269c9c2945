"""The extension users install, end to end, through Blender's own tooling.

tools/build_extension.py builds the linux-x64 zip with Blender's builder and
validator; a subprocess running this file as a script ("the probe") installs it
with ``bpy.ops.extensions.package_install_files`` into a scratch
BLENDER_USER_RESOURCES, with the venv's numba, llvmlite and ``drape`` link hidden
from its import path, so the installed extension must import numba from the
wheels it bundles. The probe writes what it saw as JSON; the tests below judge.

The probe part comes first and imports nothing outside the standard library at
module level, so the file also runs as a script in a Python without pytest.
"""

import importlib
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
PLATFORM = "linux-x64"
PKG = "bl_ext.user_default.drape"
HIDDEN = ("numba", "llvmlite", "drape")


# --------------------------------------------------------------------- probe


def _package_modules():
    return {name: mod for name, mod in list(sys.modules.items())
            if mod is not None and (name == PKG or name.startswith(PKG + "."))}


def _package_classes():
    """Every class named in a package module's `classes` tuple (DEVELOPERS.md convention)."""
    found = {}
    for mod in _package_modules().values():
        for cls in getattr(mod, "classes", ()) or ():
            found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


def _snapshot():
    """What Drape can leave in Blender: classes, RNA properties, handlers, timers, keymaps."""
    import bpy

    drape_types = sorted(n for n in dir(bpy.types) if n.upper().startswith("DRAPE"))
    rna_props = set()
    for name in dir(bpy.types):
        rna = getattr(getattr(bpy.types, name, None), "bl_rna", None)
        if rna is None or name.upper().startswith("DRAPE"):
            continue
        rna_props.update(f"{name}.{p}" for p in rna.properties.keys() if p.lower().startswith("drape"))
    handlers = []
    handler_counts = {}
    for hname in dir(bpy.app.handlers):
        hlist = getattr(bpy.app.handlers, hname)
        if isinstance(hlist, list):
            handler_counts[hname] = len(hlist)
            handlers += [f"{hname}:{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
                         for fn in hlist if str(getattr(fn, "__module__", "")).startswith(PKG)]
    timers = []
    for mname, mod in _package_modules().items():
        for obj in list(vars(mod).values()):
            funcs = [obj] if callable(obj) and not isinstance(obj, type) else []
            if isinstance(obj, type) and obj.__module__ == mname:
                funcs = [f for f in vars(obj).values() if callable(f)]
            for fn in funcs:
                try:
                    if bpy.app.timers.is_registered(fn):
                        timers.append(f"{mname}.{getattr(fn, '__qualname__', repr(fn))}")
                except (TypeError, ValueError):
                    pass
    keymap_items = []
    kc = bpy.context.window_manager.keyconfigs.addon
    if kc is not None:
        keymap_items = sorted(f"{km.name}:{kmi.idname}" for km in kc.keymaps for kmi in km.keymap_items
                              if kmi.idname.startswith("drape."))
    registered = sorted(k for k, cls in _package_classes().items() if getattr(cls, "is_registered", False))
    return {"types": drape_types, "rna_props": sorted(rna_props), "handlers": sorted(handlers),
            "handler_counts": handler_counts,
            "timers": sorted(timers), "keymap_items": keymap_items, "registered_classes": registered}


def _solver_step(pkg_name):
    """One step of a 12x12 sheet pinned along one edge, with the solver API of DEVELOPERS.md."""
    import numpy as np

    solver = importlib.import_module(pkg_name + ".solver")
    n = 12
    size = 0.5
    xs, ys = np.meshgrid(np.linspace(0, size, n), np.linspace(0, size, n), indexing="xy")
    rest = np.stack([xs.ravel(), ys.ravel(), np.full(n * n, 1.0)], axis=1)
    quads = [(j * n + i, j * n + i + 1, (j + 1) * n + i + 1, (j + 1) * n + i)
             for j in range(n - 1) for i in range(n - 1)]
    faces = np.array(quads, dtype=np.int64).ravel()
    sizes = np.full(len(quads), 4, dtype=np.int64)
    mass = np.full(n * n, 0.2 * size * size / (n * n))
    pin = np.zeros(n * n)
    pin[(n - 1) * n:] = 1.0  # the far edge (y = size) is kinematic
    params = solver.ClothParams()
    model = solver.build_model(rest, faces, sizes, mass, pin, params)
    state = model.new_state()
    dt = 1.0 / 24.0
    t0 = time.perf_counter()
    solver.step(model, state, solver.StepInputs(pin_targets=rest), dt, params)
    seconds = time.perf_counter() - t0
    x = np.asarray(state.positions_aos(), dtype=np.float64)
    free = pin == 0
    g = float(np.linalg.norm(params.gravity))
    return {
        "seconds": seconds,
        "finite": bool(np.all(np.isfinite(x))),
        "pinned_max_error": float(np.abs(x[~free] - rest[~free]).max()),
        "free_mean_drop": float((rest[free, 2] - x[free, 2]).mean()),
        "free_max_drop": float((rest[free, 2] - x[free, 2]).max()),
        "free_fall_bound": g * dt * dt,  # explicit substepping never falls further than g dt^2
    }


def _probe(zip_path, out_path):
    user = os.environ["BLENDER_USER_RESOURCES"]
    report = {"user_resources": user}
    sys.path.insert(0, str(ROOT / "tools"))
    from import_guard import only_under

    only_under(HIDDEN, user)
    try:
        import numba  # noqa: F401

        report["numba_hidden"] = False
    except ModuleNotFoundError:
        report["numba_hidden"] = True

    import bpy

    report["blender"] = bpy.app.version_string
    report["before"] = _snapshot()
    t0 = time.perf_counter()
    result = bpy.ops.extensions.package_install_files(
        filepath=zip_path, repo="user_default", enable_on_install=True)
    report["install"] = {"result": sorted(result), "seconds": time.perf_counter() - t0}
    report["enabled_addons"] = sorted(bpy.context.preferences.addons.keys())
    report["enabled"] = _snapshot()
    classes = _package_classes()
    report["class_bases"] = {k: [b.__name__ for b in cls.__mro__[1:3]] for k, cls in classes.items()}

    report["numba_cache_env"] = os.environ.get("NUMBA_CACHE_DIR")
    report["numba_imported_at_enable"] = "numba" in sys.modules
    report["extension_path_user"] = bpy.utils.extension_path_user(PKG)
    report["extension_dir"] = os.path.dirname(sys.modules[PKG].__file__)
    try:
        report["step"] = _solver_step(PKG)
    except Exception as exc:  # reported, judged by the test
        report["step_error"] = f"{type(exc).__name__}: {exc}"
    import numba

    report["numba_file"] = numba.__file__
    report["numba_version"] = numba.__version__
    report["llvmlite_file"] = sys.modules["llvmlite"].__file__
    report["numba_config_cache_dir"] = numba.config.CACHE_DIR
    report["cache_index_files"] = sorted(
        str(p) for p in pathlib.Path(report["extension_path_user"]).rglob("*.nbi"))
    report["cache_files_in_extension_dir"] = sorted(
        str(p) for p in pathlib.Path(report["extension_dir"]).rglob("*.nb[ic]"))

    report["cycles"] = []
    for _ in range(2):
        bpy.ops.preferences.addon_disable(module=PKG)
        disabled = _snapshot()
        bpy.ops.preferences.addon_enable(module=PKG)
        report["cycles"].append({"disabled": disabled, "enabled": _snapshot(),
                                 "addon_enabled": PKG in bpy.context.preferences.addons.keys()})
    try:
        report["step_after_cycles"] = _solver_step(PKG)
    except Exception as exc:
        report["step_after_cycles_error"] = f"{type(exc).__name__}: {exc}"
    bpy.ops.preferences.addon_disable(module=PKG)
    report["final_disabled"] = _snapshot()
    pathlib.Path(out_path).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    argv = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else sys.argv[1:]
    _probe(*argv)
    sys.exit(0)


# --------------------------------------------------------------------- tests

import pytest  # noqa: E402

pytestmark = pytest.mark.slow  # a 127 MB zip, an install, a cold numba compile: ~1 min


def _real_blender():
    import bpy

    return bpy.app.binary_path or None  # empty for the bpy module


@pytest.fixture(scope="module")
def extension_zip(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    cmd = [sys.executable, str(ROOT / "tools" / "build_extension.py"), "--platform", PLATFORM,
           "--output-dir", str(out)]
    if _real_blender():
        cmd += ["--blender", _real_blender()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.fail(f"build failed: {proc.stderr.strip() or proc.stdout.strip()}")
    zips = sorted(out.glob("*.zip"))
    assert len(zips) == 1 and zips[0].name.endswith("-linux_x64.zip"), zips
    yield zips[0]
    shutil.rmtree(out, ignore_errors=True)  # 127 MB


@pytest.fixture(scope="module")
def probe(extension_zip, tmp_path_factory):
    work = tmp_path_factory.mktemp("ext")
    user = work / "user"
    user.mkdir()
    out = work / "report.json"
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "PYTHONPATH")}
    env["BLENDER_USER_RESOURCES"] = str(user)
    if _real_blender():
        cmd = [_real_blender(), "--background", "--factory-startup", "--python-exit-code", "1",
               "--python", __file__, "--", str(extension_zip), str(out)]
    else:
        cmd = [sys.executable, __file__, str(extension_zip), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=work)
    if proc.returncode != 0 or not out.is_file():
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        pytest.fail(f"probe failed (exit {proc.returncode}):\n{tail}")
    yield json.loads(out.read_text())
    shutil.rmtree(work, ignore_errors=True)  # the installed extension and its wheels: ~250 MB


def _read_pins():
    pins = {}
    for line in (ROOT / "requirements-dev.txt").read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep and name.strip() in ("numba", "llvmlite"):
            pins[name.strip()] = version.split("#")[0].strip()
    return pins


def test_blenders_validator_accepts_the_zip(extension_zip):
    spec = importlib.util.spec_from_file_location("build_extension", ROOT / "tools" / "build_extension.py")
    build_extension = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_extension)
    tool = build_extension.find_builder(_real_blender())
    proc = subprocess.run([*tool, "validate", str(extension_zip)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "FATAL" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_zip_holds_the_addon_and_its_linux_wheels_only(extension_zip):
    with zipfile.ZipFile(extension_zip) as zf:
        names = zf.namelist()
    pins = _read_pins()
    wheels = sorted(n for n in names if n.endswith(".whl"))
    assert len(wheels) == 4, wheels
    for package, version in pins.items():
        for abi in ("cp311", "cp313"):  # Blender 4.2-5.0 and 5.1+
            assert sum(1 for w in wheels if w.startswith(f"wheels/{package}-{version}-{abi}-{abi}-")
                       and "x86_64" in w and "linux" in w) == 1, (package, abi, wheels)

    banned_dirs = ("tests/", "benchmarks/", "tools/", "docs/", "dist/", "out/", ".git/", ".venv/", ".ci/",
                   "requirements/")
    offenders = [n for n in names if n.startswith(banned_dirs)
                 or "__pycache__/" in n or n.endswith((".pyc", ".nbi", ".nbc", ".blend1", ".zip", ".log"))
                 or any(part.startswith(".") for part in n.split("/"))
                 or n in ("Makefile", "pytest.ini", "conftest.py", "requirements-dev.txt")
                 or (n.endswith(".md") and "/" not in n)]
    assert offenders == []

    # Nothing the add-on needs is left out: every tracked source file of the
    # package (outside the dev folders) is in the zip.
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout: cannot list the package's sources")
    sources = [f for f in tracked.stdout.split() if f.endswith((".py", ".toml"))
               and not f.startswith(banned_dirs) and f != "conftest.py"]
    assert "__init__.py" in sources and "blender_manifest.toml" in sources
    missing = [f for f in sources if f not in names and (ROOT / f).exists()]
    assert missing == []


def test_install_enables_the_addon_with_bundled_numba(probe):
    assert probe["numba_hidden"], "the probe could import the venv's numba: hiding failed, the test proves nothing"
    assert probe["install"]["result"] == ["FINISHED"]
    assert PKG in probe["enabled_addons"]
    site = os.path.join(probe["user_resources"], "extensions", ".local", "lib")
    assert probe["numba_file"].startswith(site), probe["numba_file"]
    assert probe["llvmlite_file"].startswith(site), probe["llvmlite_file"]
    assert probe["numba_version"] == _read_pins()["numba"]


def test_numba_caches_in_the_extension_user_folder(probe):
    user_dir = probe["extension_path_user"]
    assert user_dir.startswith(probe["user_resources"])
    # Set by register() before anything imported numba, so numba's config took it.
    assert probe["numba_cache_env"] and probe["numba_cache_env"].startswith(user_dir + os.sep)
    assert probe["numba_config_cache_dir"] == probe["numba_cache_env"]
    assert "step_error" not in probe, probe.get("step_error")
    assert probe["cache_index_files"], "the solver step compiled nothing into the cache folder (cache=True?)"
    assert all(f.startswith(probe["numba_cache_env"]) for f in probe["cache_index_files"])
    assert probe["cache_files_in_extension_dir"] == []


def test_installed_extension_runs_a_solver_step(probe):
    assert "step_error" not in probe, probe.get("step_error")
    step = probe["step"]
    assert step["finite"]
    assert step["pinned_max_error"] < 1e-5  # weight-1 pins are kinematic
    # Gravity pulled the free part down, never further than free fall.
    assert 0.0 < step["free_mean_drop"] <= step["free_fall_bound"] * 1.001
    assert step["free_max_drop"] <= step["free_fall_bound"] * 1.001


def test_registers_operators_panels_and_properties(probe):
    enabled, before = probe["enabled"], probe["before"]
    assert before["registered_classes"] == [] and before["rna_props"] == [] and before["types"] == []
    bases = probe["class_bases"]
    # Every class the package lists in a `classes` tuple is registered.
    assert sorted(bases) == enabled["registered_classes"]
    kinds = {b for pair in bases.values() for b in pair}
    missing = [k for k in ("Operator", "Panel", "PropertyGroup") if k not in kinds]
    if missing:
        pytest.skip(f"the package defines no {', '.join(missing)} classes yet")
    assert any(p.startswith("Object.drape") for p in enabled["rna_props"]), enabled["rna_props"]
    assert any(t.startswith("DRAPE_OT_") for t in enabled["types"])
    assert any(t.startswith("DRAPE_PT_") for t in enabled["types"])


def test_two_disable_enable_cycles_leave_nothing_behind(probe):
    before, enabled = probe["before"], probe["enabled"]
    assert len(probe["cycles"]) == 2
    for cycle in probe["cycles"]:
        assert cycle["disabled"] == before  # no class, property, handler, timer or keymap left
        assert cycle["enabled"] == enabled  # and re-enabling brings all of it back
        assert cycle["addon_enabled"]
    assert probe["final_disabled"] == before
    assert "step_after_cycles_error" not in probe, probe.get("step_after_cycles_error")
    assert probe["step_after_cycles"]["finite"]
