"""Drape as a user gets it, inside one Blender: install the zip, use every part, uninstall.

    <venv>/bin/python tests/installed/scenario.py --zip dist/drape-0.1.0-linux_x64.zip

Run by ``make test-blenders`` (tools/test_blenders.py) in the venv of each
supported Blender line (the bpy module, no numba: the extension must load the
wheels it bundles). Not a pytest file: pytest collects only ``test_*.py``.

The zip goes in through Blender's own installer into a scratch
``BLENDER_USER_RESOURCES``; then a sheet pinned along one edge, with a mass
group, falls for 30 frames onto a capsule made by hand and one made from an
armature bone; the live result is recorded from Blender's evaluated mesh and
is what every bake must play back (each target: shape keys, PC2, Alembic),
frame by frame, within float32 rounding. Then every bake is made to fail
midway (an AttributeError as a changed Blender API raises, an OSError as a
full disk or a failed rename raises) and the object, its shape keys, actions,
modifiers, the earlier cache files and the temporary folder must be exactly
as before. Then free, disable, re-enable, uninstall.

One line per check (PASS/FAIL, failures with their traceback), then
``N passed, M failed`` alone on the last line; the exit status is 1 when
anything failed. The caller also checks that the process exits cleanly.
"""

import argparse
import errno
import math
import os
import pathlib
import sys
import tempfile
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
PKG = "bl_ext.user_default.drape"
FRAMES = range(1, 31)
DRAPE_BAKE = "Drape Bake"  # the bake's modifier (bake/install.py MODIFIER_NAME)


# ------------------------------------------------------------------ harness


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.failed_names = set()

    def run(self, name, fn, requires=()):
        missing = [r for r in requires if r in self.failed_names]
        t0 = time.perf_counter()
        if missing:
            self._fail(name, f"not run: {', '.join(missing)} failed", None)
            return None
        try:
            detail = fn()
        except Exception as exc:  # every failure is reported, none stops the suite
            self._fail(name, f"{type(exc).__name__}: {exc}", traceback.format_exc())
            return None
        self.passed += 1
        extra = f"  {detail}" if isinstance(detail, str) and detail else ""
        print(f"PASS  {name} ({time.perf_counter() - t0:.1f} s){extra}", flush=True)
        return True

    def _fail(self, name, message, tb):
        self.failed += 1
        self.failed_names.add(name)
        print(f"FAIL  {name}: {message}", flush=True)
        if tb:
            print("      " + tb.rstrip().replace("\n", "\n      "), flush=True)


def require(condition, message):
    if not condition:
        raise AssertionError(message)


# ------------------------------------------------------------------ geometry


def f32_tol(reference):
    """A few float32 ulps of the coordinates' magnitude: what storing positions
    as float32 (shape keys relative to a basis, PC2, Alembic) may change."""
    import numpy as np

    return 16 * float(np.finfo(np.float32).eps) * max(1.0, float(np.abs(reference).max()))


def evaluated_co(obj):
    import bpy
    import numpy as np

    ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
    mesh = ev.to_mesh()
    try:
        co = np.empty(len(mesh.vertices) * 3, dtype=np.float32)
        mesh.vertices.foreach_get("co", co)
        return co.reshape(-1, 3)
    finally:
        ev.to_mesh_clear()


def mesh_co(mesh):
    import numpy as np

    co = np.empty(len(mesh.vertices) * 3, dtype=np.float32)
    mesh.vertices.foreach_get("co", co)
    return co.reshape(-1, 3)


def to_world(obj, local):
    import numpy as np

    m = np.array(obj.matrix_world, dtype=np.float64)
    return np.asarray(local, np.float64) @ m[:3, :3].T + m[:3, 3]


def capsule_of(obj):
    """The capsule Drape documents for a collider object: from the origin to
    local (0, 1, 0), radii scaled by the mean length of the X and Z axes."""
    import bpy
    import numpy as np

    m = np.array(obj.evaluated_get(bpy.context.evaluated_depsgraph_get()).matrix_world, np.float64)
    a = m[:3, 3].copy()
    b = m[:3, :3] @ np.array([0.0, 1.0, 0.0]) + m[:3, 3]
    s = 0.5 * (np.linalg.norm(m[:3, 0]) + np.linalg.norm(m[:3, 2]))
    c = obj.drape_collider
    return a, b, c.radius_start * s, c.radius_end * s


def max_error(a, b):
    import numpy as np

    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


# ------------------------------------------------------------------ snapshot


def _rna_state(struct, skip=("rna_type",)):
    """Every readable property of an RNA struct, as plain Python values."""
    import bpy

    out = {}
    for prop in struct.bl_rna.properties:
        key = prop.identifier
        if key in skip or prop.type == 'COLLECTION':
            continue
        try:
            value = getattr(struct, key)
        except Exception as exc:  # a property this Blender cannot read is part of the state too
            out[key] = f"<{type(exc).__name__}>"
            continue
        if prop.type == 'POINTER':
            value = getattr(value, "name", None) if isinstance(value, bpy.types.ID) else (
                None if value is None else type(value).__name__)
        elif isinstance(value, set):
            value = sorted(value)
        elif hasattr(value, "__len__") and not isinstance(value, str):
            value = tuple(round(v, 6) if isinstance(v, float) else v for v in value)
        elif isinstance(value, float):
            value = round(value, 6)
        out[key] = value
    return out


# What Blender recomputes or the UI sets, not a setting: which modifier is
# active, its last evaluation time and frame, its session identifier.
_MODIFIER_RUNTIME = ("rna_type", "is_active", "execution_time", "eval_frame", "eval_time", "eval_factor",
                     "persistent_uid")


def _files(folder):
    if not os.path.isdir(folder):
        return None
    out = []
    for root, _dirs, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            st = os.stat(path)
            out.append((os.path.relpath(path, folder), st.st_size, st.st_mtime_ns))
    return sorted(out)


def snapshot(obj, cache_dir):
    """What a bake may touch: the object, its mesh and shape keys, actions,
    modifiers with their settings, datablocks, cache files, temporary files."""
    import bpy
    import numpy as np

    keys = obj.data.shape_keys
    key_anim = keys.animation_data if keys is not None else None
    tmp = tempfile.gettempdir()
    return {
        "shape_keys": None if keys is None else [
            (kb.name, kb.mute, round(kb.value, 6), kb.relative_key.name) for kb in keys.key_blocks],
        "shape_key_action": getattr(getattr(key_anim, "action", None), "name", None),
        "shape_key_fcurves": None if key_anim is None or key_anim.action is None else sorted(
            fc.data_path for fc in _action_fcurves(key_anim.action)),
        "actions": sorted((a.name, a.users) for a in bpy.data.actions),
        "modifiers": [(m.name, m.type, _rna_state(m, skip=_MODIFIER_RUNTIME)) for m in obj.modifiers],
        "drape_bake": _rna_state(obj.drape_bake),
        "drape": {k: v for k, v in _rna_state(obj.drape).items() if not k.endswith("_stiffness")},
        "attributes": sorted(a.name for a in obj.data.attributes),
        "vertex_groups": [g.name for g in obj.vertex_groups],
        "mesh_co": hash(mesh_co(obj.data).tobytes()),
        "mesh_vertices": len(obj.data.vertices),
        "objects": sorted(o.name for o in bpy.data.objects),
        "meshes": sorted(m.name for m in bpy.data.meshes),
        "scenes": sorted(s.name for s in bpy.data.scenes),
        "cache_files": sorted((c.name, c.filepath) for c in bpy.data.cache_files),
        "frame": (bpy.context.scene.frame_current, round(bpy.context.scene.frame_subframe, 6)),
        "cache_folder": _files(cache_dir),
        "temp_folder": sorted((n, os.path.getsize(os.path.join(tmp, n))) for n in os.listdir(tmp)
                              if n.lower().startswith("drape")),
    }


def _action_fcurves(action):
    """F-curves of an action in any Blender: 4.4+ keep them in layered
    channelbags, older ones (and legacy actions) in ``action.fcurves``."""
    curves = list(getattr(action, "fcurves", None) or [])
    for layer in getattr(action, "layers", ()) or ():
        for strip in layer.strips:
            for bag in getattr(strip, "channelbags", ()) or ():
                curves += list(bag.fcurves)
    return curves


def diff(before, after):
    lines = []
    for key in before:
        if before[key] != after.get(key):
            b, a = before[key], after.get(key)
            if key == "modifiers" and [m[:2] for m in b] == [m[:2] for m in a]:
                for (name, _t, sb), (_n, _t2, sa) in zip(b, a):
                    changed = {k: (sb.get(k), sa.get(k)) for k in set(sb) | set(sa) if sb.get(k) != sa.get(k)}
                    if changed:
                        lines.append(f"modifier {name!r}: {changed} (before, after)")
            elif isinstance(b, list) and isinstance(a, list):
                gone = [x for x in b if x not in a]
                new = [x for x in a if x not in b]
                lines.append(f"{key}: gone {gone[:6]}, new {new[:6]}")
            elif isinstance(b, dict) and isinstance(a, dict):
                changed = {k: (b.get(k), a.get(k)) for k in set(b) | set(a) if b.get(k) != a.get(k)}
                lines.append(f"{key}: {dict(list(changed.items())[:6])}")
            else:
                lines.append(f"{key}: {str(b)[:200]} -> {str(a)[:200]}")
    return lines


# ------------------------------------------------------------------ patches


def _find_fault_point(where):
    """The (owner object, attribute name) of the first candidate that exists."""
    for module, path in where:
        owner = sys.modules.get(PKG + "." + module)
        *parents, attr = path.split(".")
        for name in parents:
            owner = getattr(owner, name, None)
        if owner is not None and hasattr(owner, attr):
            return owner, attr
    names = ", ".join(f"{m}.{p}" for m, p in where)
    raise AssertionError(f"cannot force the failure: {names} no longer exist(s) in {PKG} "
                         "(point the scenario at the bake's new code)")


class Fault:
    """Replaces ``owner.name`` so that its ``nth`` call raises ``exc``; counts calls."""

    def __init__(self, owner, name, exc, nth=1):
        self.owner, self.name, self.exc, self.nth = owner, name, exc, nth
        self.calls = 0
        self.original = getattr(owner, name)

    def __enter__(self):
        original = self.original

        def faulty(*args, **kwargs):
            self.calls += 1
            if self.calls == self.nth:
                raise self.exc
            return original(*args, **kwargs)

        setattr(self.owner, self.name, faulty)
        return self

    def __exit__(self, *exc):
        setattr(self.owner, self.name, self.original)
        return False


# ------------------------------------------------------------------ scenario


class Scenario:
    def __init__(self, zip_path, work):
        self.zip = str(zip_path)
        self.work = pathlib.Path(work)
        self.cache_dir = str(self.work / "cache")
        self.live = {}

    # -- install ------------------------------------------------------------
    def install(self):
        import importlib.util

        import bpy

        require(importlib.util.find_spec("numba") is None,
                "this Python has numba of its own: the bundled wheels would not be tested")
        result = bpy.ops.extensions.package_install_files(filepath=self.zip, repo="user_default",
                                                          enable_on_install=True)
        require(result == {'FINISHED'}, f"package_install_files returned {result}")
        require(PKG in bpy.context.preferences.addons.keys(), f"{PKG} is not enabled after the install")
        require(hasattr(bpy.types, "DRAPE_OT_bake"), "drape.bake is not registered")
        self.ext_dir = os.path.dirname(sys.modules[PKG].__file__)
        return f"Blender {bpy.app.version_string}, Python {sys.version.split()[0]}"

    # -- scene ------------------------------------------------------------
    def build_scene(self):
        import bpy
        import numpy as np

        # The startup file's objects go; a factory reset would also reset the
        # preferences and so disable the extension just installed.
        for obj in list(bpy.data.objects):
            bpy.data.objects.remove(obj, do_unlink=True)
        scene = bpy.context.scene
        scene.frame_start, scene.frame_end = FRAMES[0], FRAMES[-1]
        scene.frame_set(FRAMES[0])
        bpy.ops.mesh.primitive_grid_add(x_subdivisions=18, y_subdivisions=18, size=1.0, location=(0, 0, 1))
        sheet = bpy.context.active_object
        sheet.name = "Sheet"
        rest = mesh_co(sheet.data)
        pins = np.where(rest[:, 1] > rest[:, 1].max() - 1e-6)[0]
        require(2 < len(pins) < len(rest) // 4, f"{len(pins)} pinned vertices of {len(rest)}")
        sheet.vertex_groups.new(name="pins").add([int(i) for i in pins], 1.0, 'REPLACE')
        mass = sheet.vertex_groups.new(name="mass")
        for i, x in enumerate(rest[:, 0]):
            mass.add([i], float(0.25 + 0.75 * (x + 0.5)), 'REPLACE')  # heavier towards +X
        self.sheet, self.rest, self.pins = sheet, rest, pins
        self.free = np.setdiff1d(np.arange(len(rest)), pins)

        bpy.ops.drape.cloth_add(pin_group="pins")
        require(sheet.drape.enabled, "drape.cloth_add did not enable the cloth")
        sheet.drape.mass_group = "mass"
        require(sheet.drape.pin_group == "pins" and sheet.drape.mass_group == "mass", "groups not set")
        self.modifiers_before_bake = [m.name for m in sheet.modifiers]
        return f"{len(rest)} vertices, {len(pins)} pinned, modifiers {self.modifiers_before_bake}"

    def capsule_by_hand(self):
        import bpy

        for o in bpy.context.selected_objects:
            o.select_set(False)
        result = bpy.ops.drape.collider_add(type='CAPSULE', radius=0.08)
        require(result == {'FINISHED'}, f"drape.collider_add returned {result}")
        cap = bpy.context.active_object
        require(cap is not None and cap != self.sheet and cap.drape_collider.kind == 'CAPSULE',
                "drape.collider_add made no capsule")
        # Along world +X under the middle of the sheet: local +Y -> world +X.
        cap.location = (-0.6, 0.0, 0.75)
        cap.rotation_euler = (0.0, 0.0, -math.pi / 2)
        cap.scale = (1.0, 1.2, 1.0)
        self.hand_capsule = cap
        a, b, ra, rb = capsule_of(cap)
        require(max_error(a, (-0.6, 0.0, 0.75)) < 1e-6 and max_error(b, (0.6, 0.0, 0.75)) < 1e-6,
                f"capsule ends {a} {b}")
        require(abs(ra - 0.08) < 1e-6 and abs(rb - 0.08) < 1e-6, f"radii {ra} {rb}")
        return cap.name

    def capsules_from_armature(self):
        import bpy
        import numpy as np

        bpy.ops.object.armature_add(location=(-0.5, -0.25, 0.7), rotation=(0.0, math.pi / 2, 0.0))
        arm = bpy.context.active_object
        bone = arm.data.bones[0]
        before = {o.name for o in bpy.data.objects}
        result = bpy.ops.drape.capsules_from_armature()
        require(result == {'FINISHED'}, f"drape.capsules_from_armature returned {result}")
        made = [o for o in bpy.data.objects if o.name not in before and o.drape_collider.kind == 'CAPSULE']
        require(len(made) == 1, f"{len(made)} capsules for an armature with one deform bone")
        cap = made[0]
        a, b, ra, rb = capsule_of(cap)
        m = np.array(arm.matrix_world, np.float64)
        head = m[:3, :3] @ np.array(bone.head_local) + m[:3, 3]
        tail = m[:3, :3] @ np.array(bone.tail_local) + m[:3, 3]
        require(max_error(a, head) < 1e-5 and max_error(b, tail) < 1e-5,
                f"capsule {a}..{b}, bone {head}..{tail}")
        # No skinned mesh: the bone's envelope radii.
        require(abs(ra - bone.head_radius) < 1e-5 and abs(rb - bone.tail_radius) < 1e-5,
                f"radii {ra}, {rb}; envelope {bone.head_radius}, {bone.tail_radius}")
        self.bone_capsule = cap
        bpy.context.view_layer.objects.active = self.sheet
        for o in bpy.context.selected_objects:
            o.select_set(False)
        self.sheet.select_set(True)
        return f"{cap.name}: {np.round(a, 3)} -> {np.round(b, 3)}, r {ra:.3f}/{rb:.3f}"

    # -- live simulation ---------------------------------------------------
    def simulate(self):
        import bpy
        import numpy as np

        sys.path.insert(0, str(HERE.parent))
        import oracles

        scene = bpy.context.scene
        t0 = time.perf_counter()
        worst_pin, deepest, closest = 0.0, math.inf, math.inf
        for frame in FRAMES:
            scene.frame_set(frame)
            co = evaluated_co(self.sheet)
            require(np.all(np.isfinite(co)), f"non-finite positions at frame {frame}")
            self.live[frame] = co
            worst_pin = max(worst_pin, max_error(co[self.pins], self.rest[self.pins]))
            if frame > FRAMES[0]:
                world = to_world(self.sheet, co[self.free])
                for cap in (self.hand_capsule, self.bone_capsule):
                    d = oracles.point_capsule_distances(world, *capsule_of(cap))
                    deepest = min(deepest, float(d.min()))
                    closest = min(closest, float(d.min()))
            if frame == FRAMES[0]:
                first = time.perf_counter() - t0
        import numba

        numba_file = numba.__file__
        user = os.environ["BLENDER_USER_RESOURCES"]
        drop = float((self.rest[self.free, 2] - self.live[FRAMES[-1]][self.free, 2]).mean())
        require(numba_file.startswith(user), f"numba came from {numba_file}, not the extension's wheels")
        require(worst_pin < 1e-5, f"pinned vertices moved {worst_pin:.2e} m")
        require(drop > 0.05, f"the free part fell only {drop:.3f} m on average in {len(FRAMES)} frames")
        require(deepest > -2e-3, f"a vertex went {-deepest * 1e3:.2f} mm into a capsule")
        require(closest < 0.02, f"the cloth never came within 2 cm of a capsule ({closest:.3f} m): "
                                "the collision check tests nothing")
        return (f"first frame {first:.1f} s (compile), {len(FRAMES)} frames {time.perf_counter() - t0:.1f} s; "
                f"mean drop {drop:.3f} m, deepest {deepest * 1e3:.2f} mm, pins {worst_pin:.1e} m")

    def _compare_playback(self, what, frames=FRAMES):
        import bpy

        worst, worst_frame = 0.0, None
        for frame in frames:
            bpy.context.scene.frame_set(frame)
            co = evaluated_co(self.sheet)
            err = max_error(co, self.live[frame])
            if err > worst:
                worst, worst_frame = err, frame
        tol = f32_tol(self.live[frames[-1]])
        require(worst <= tol, f"{what} differs from the live result by {worst:.3e} at frame {worst_frame} "
                              f"(float32 tolerance {tol:.1e})")
        return f"max difference {worst:.1e} (tolerance {tol:.1e})"

    # -- bakes ----------------------------------------------------------------
    def _bake(self, target):
        import bpy

        bpy.context.view_layer.objects.active = self.sheet
        return bpy.ops.drape.bake(target=target, frame_range='CUSTOM', frame_start=FRAMES[0],
                                  frame_end=FRAMES[-1], folder=self.cache_dir + os.sep)

    def bake_and_play(self, target):
        import numpy as np

        result = self._bake(target)
        require(result == {'FINISHED'}, f"drape.bake returned {result}")
        st = self.sheet.drape_bake
        require(st.baked and st.baked_target == target, f"baked={st.baked} target={st.baked_target!r}")
        # Without gravity a live simulation would not fall: what plays must be the bake.
        self.sheet.drape.gravity_scale = 0.0
        try:
            detail = self._compare_playback(f"the {target} bake's playback")
        finally:
            self.sheet.drape.gravity_scale = 1.0
        if target == 'SHAPE_KEYS':
            keys = self.sheet.data.shape_keys
            names = [kb.name for kb in keys.key_blocks][1:] if keys else []
            require(len(names) == len(FRAMES), f"{len(names)} shape keys for {len(FRAMES)} frames")
        else:
            mod = self.sheet.modifiers.get(DRAPE_BAKE)
            want = 'MESH_CACHE' if target == 'PC2' else 'MESH_SEQUENCE_CACHE'
            require(mod is not None and mod.type == want, f"no {want} modifier named {DRAPE_BAKE!r}")
            path = os.path.join(self.cache_dir, "Sheet" + (".pc2" if target == 'PC2' else ".abc"))
            require(os.path.isfile(path), f"no cache file {path}")
            if target == 'PC2':  # read back with numpy, as any PC2 reader would
                raw = np.fromfile(path, dtype=np.uint8)
                require(bytes(raw[:12]) == b"POINTCACHE2\0", "not a PC2 header")
                points, start, rate, samples = (int(raw[16:20].view("<i4")[0]), float(raw[20:24].view("<f4")[0]),
                                                float(raw[24:28].view("<f4")[0]), int(raw[28:32].view("<i4")[0]))
                require((points, start, rate, samples) == (len(self.rest), FRAMES[0], 1.0, len(FRAMES)),
                        f"PC2 header {(points, start, rate, samples)}")
                data = raw[32:].view("<f4").reshape(samples, points, 3)
                err = max(max_error(data[i], self.live[f]) for i, f in enumerate(FRAMES))
                require(err <= f32_tol(data), f"the PC2 file's samples differ from the live result by {err:.2e}")
        return detail

    def free_bake(self, target):
        import bpy

        result = bpy.ops.drape.bake_free()
        require(result == {'FINISHED'}, f"drape.bake_free returned {result}")
        st = self.sheet.drape_bake
        require(not st.baked and not st.baked_target, "the object still counts as baked")
        keys = self.sheet.data.shape_keys
        left = [kb.name for kb in keys.key_blocks] if keys else []
        require(not any(n.startswith("drape_") for n in left), f"bake shape keys left: {left[:4]}")
        actions = [a.name for a in bpy.data.actions if a.name.startswith("DrapeBake")]
        require(not actions, f"bake actions left: {actions}")
        names = [m.name for m in self.sheet.modifiers]
        require(names == self.modifiers_before_bake, f"modifiers {names}, before the bake "
                                                     f"{self.modifiers_before_bake}")
        return "live again: " + self._compare_playback("the live simulation after the free")

    # -- failures mid-bake --------------------------------------------------
    def earlier_bake(self):
        result = self._bake('PC2')
        require(result == {'FINISHED'}, f"drape.bake returned {result}")
        return self._compare_playback("the earlier PC2 bake", frames=(15,))

    def failing_bake(self, target, where, exc, nth=1):
        """``where``: (module below the package, attribute path) candidates;
        the first that exists is made to raise ``exc`` on its ``nth`` call."""
        import bpy

        owner, attr = _find_fault_point(where)
        bpy.context.scene.frame_set(7)
        before = snapshot(self.sheet, self.cache_dir)
        raised = None
        with Fault(owner, attr, exc, nth) as fault:
            try:
                result = self._bake(target)
            except Exception as e:  # the operator may pass the error on: the state is what counts
                result, raised = None, e
        print(flush=True)  # Blender's report of the error may end without a newline
        require(fault.calls >= nth, f"the bake called {attr} {fault.calls} times, never failed: "
                                    "the forced failure tests nothing")
        after = snapshot(self.sheet, self.cache_dir)
        changes = diff(before, after)
        require(result != {'FINISHED'}, f"drape.bake reported success although {attr} raised")
        require(not changes, "the failed bake left changes:\n        " + "\n        ".join(changes))
        detail = self._compare_playback("the earlier bake after the failed one", frames=(15,))
        # In background mode an operator's error report reaches the caller as a
        # RuntimeError too: its first line tells a report from a traceback.
        how = (f"raised {type(raised).__name__} ({str(raised).strip().splitlines()[0][:90]})"
               if raised is not None else f"returned {result}")
        return f"drape.bake {how}; nothing changed; {detail}"

    # -- disable, enable, uninstall ------------------------------------------
    def disable(self):
        import bpy

        result = bpy.ops.preferences.addon_disable(module=PKG)
        require(result == {'FINISHED'}, f"addon_disable returned {result}")
        require(PKG not in bpy.context.preferences.addons.keys(), "still enabled")
        left = [n for n in dir(bpy.types) if n.upper().startswith("DRAPE")]
        require(not left, f"types left registered: {left[:5]}")
        require("drape" not in bpy.types.Object.bl_rna.properties.keys(), "Object.drape is still registered")
        handlers = [f"{h}:{fn.__module__}" for h in dir(bpy.app.handlers)
                    if isinstance(getattr(bpy.app.handlers, h), list)
                    for fn in getattr(bpy.app.handlers, h) if str(getattr(fn, "__module__", "")).startswith(PKG)]
        require(not handlers, f"handlers left: {handlers}")
        bpy.context.scene.frame_set(3)  # a frame change with Drape off raises nothing
        return ""

    def enable(self):
        import bpy

        result = bpy.ops.preferences.addon_enable(module=PKG)
        require(result == {'FINISHED'}, f"addon_enable returned {result}")
        d = self.sheet.drape
        require(d.enabled and d.pin_group == "pins" and d.mass_group == "mass",
                f"settings after re-enabling: enabled={d.enabled} pins={d.pin_group!r} mass={d.mass_group!r}")
        return "simulates as before: " + self._compare_playback("the simulation after re-enabling",
                                                                frames=range(1, 11))

    def mass_group_matters(self):
        """The mass group is read: without it (uniform mass) the sheet moves otherwise."""
        import bpy

        self.sheet.drape.mass_group = ""
        try:
            worst = 0.0
            for frame in range(1, 11):
                bpy.context.scene.frame_set(frame)
                worst = max(worst, max_error(evaluated_co(self.sheet), self.live[frame]))
        finally:
            self.sheet.drape.mass_group = "mass"
        require(worst > 1e-4, f"uniform mass moves the sheet like the mass group does ({worst:.1e} m apart "
                              "over 10 frames): the mass group is not read")
        return f"{worst * 1e3:.1f} mm apart by frame 10"

    def uninstall(self):
        import bpy

        repos = bpy.context.preferences.extensions.repos
        index = next((i for i, r in enumerate(repos) if r.module == "user_default"), None)
        require(index is not None, "no user_default extension repository")
        result = bpy.ops.extensions.package_uninstall(repo_directory=repos[index].directory, repo_index=index,
                                                      pkg_id="drape")
        require(result == {'FINISHED'}, f"package_uninstall returned {result}")
        require(PKG not in bpy.context.preferences.addons.keys(), "still enabled after the uninstall")
        require(not os.path.exists(self.ext_dir), f"{self.ext_dir} is still there")
        require(not any(n.upper().startswith("DRAPE") for n in dir(bpy.types)), "types left registered")
        wheels = [str(p) for p in pathlib.Path(os.environ["BLENDER_USER_RESOURCES"]).glob(
            "extensions/.local/lib/python*/site-packages/*") if p.name.lower().startswith(("numba", "llvmlite"))]
        require(not wheels, f"the bundled wheels stay installed: {wheels[:3]}")
        bpy.context.scene.frame_set(4)  # the scene keeps Drape's data; nothing runs for it any more
        return ""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--zip", required=True, type=pathlib.Path, help="the linux-x64 extension zip")
    args = parser.parse_args(argv)
    zip_path = args.zip.resolve()
    if not zip_path.is_file():
        print(f"drape scenario: --zip {zip_path}: no such file", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="drape-scenario-")
    # Blender reads it once, at import: it must be set before bpy is imported.
    os.environ.setdefault("BLENDER_USER_RESOURCES", os.path.join(work, "user"))
    os.makedirs(os.environ["BLENDER_USER_RESOURCES"], exist_ok=True)

    import bpy  # noqa: F401  (after BLENDER_USER_RESOURCES)

    c = Checks()
    s = Scenario(zip_path, work)
    inst = "install through Blender's installer"
    c.run(inst, s.install)
    scene = "cloth with pins and a mass group"
    c.run(scene, s.build_scene, requires=[inst])
    c.run("capsule by hand", s.capsule_by_hand, requires=[scene])
    c.run("capsule from an armature", s.capsules_from_armature, requires=[scene])
    sim = f"simulate {len(FRAMES)} frames"
    c.run(sim, s.simulate, requires=[scene, "capsule by hand", "capsule from an armature"])
    for target in ('SHAPE_KEYS', 'PC2', 'ALEMBIC'):
        bake = f"bake to {target}, playback equals the live result"
        c.run(bake, lambda t=target: s.bake_and_play(t), requires=[sim])
        c.run(f"free the {target} bake", lambda t=target: s.free_bake(t), requires=[bake])

    earlier = "an earlier PC2 bake to fail over"
    c.run(earlier, s.earlier_bake, requires=[sim])
    api = "'AnimData' object has no attribute 'action_slot'"
    enospc = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    cases = [  # (what, target, where, exception, nth call)
        ("shape keys: AttributeError while keying", 'SHAPE_KEYS',
         [("scene.compat", "animation_fcurves")], AttributeError(api), 1),
        ("PC2: AttributeError while setting up the Mesh Cache", 'PC2',
         [("scene.compat", "mesh_cache_flip_set")],
         AttributeError("MeshCacheModifier.flip_axis expected a set, not a tuple"), 1),
        ("Alembic: AttributeError from the exporter", 'ALEMBIC',
         [("bake.targets.alembic", "export_isolated"), ("bake.targets.alembic", "export")], AttributeError(api), 1),
        ("Alembic: AttributeError while placing the modifier", 'ALEMBIC',
         [("bake.install", "place")], AttributeError("'ObjectModifiers' object has no attribute 'move'"), 1),
        ("PC2: OSError renaming the finished cache over the earlier one", 'PC2',
         [("bake.pc2", "PC2Writer.commit")], OSError(errno.EIO, os.strerror(errno.EIO)), 1),
    ] + [(f"{t}: OSError (disk full) at frame 10", t, [("bake.pc2", "PC2Writer.add")], enospc, 10)
         for t in ('SHAPE_KEYS', 'PC2', 'ALEMBIC')]
    for what, target, where, exc, nth in cases:
        c.run(f"failed bake leaves everything as before: {what}",
              lambda t=target, w=where, e=exc, n=nth: s.failing_bake(t, w, e, n), requires=[earlier])
    c.run("free the earlier bake", lambda: s.free_bake('PC2'), requires=[earlier])

    c.run("disable", s.disable, requires=[inst])
    c.run("re-enable", s.enable, requires=[inst, sim, "disable"])
    c.run("the mass group changes the motion", s.mass_group_matters, requires=["re-enable"])
    c.run("uninstall", s.uninstall, requires=[inst])
    print(f"\n{c.passed} passed, {c.failed} failed", flush=True)
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
