"""Every difference between the Blender versions Drape supports (4.2 LTS on).

One function per difference; each says which versions take which branch and
decides by feature (what the API offers), not by version number, so a future
Blender that keeps an API keeps working. Nothing else in Drape tests
``bpy.app.version`` or probes for an attribute that only some versions have.

A Blender newer than :data:`NEWEST_TESTED` may have changed an API Drape
uses without any branch here knowing it: :func:`failure_message` turns the
first such failure into one line naming the version, which the panel shows
(:func:`incompatibility`) and the frame handler prints once, instead of a
traceback per frame.
"""

import atexit

import bpy

#: The newest Blender line (major, minor) Drape was tested with.
NEWEST_TESTED = (5, 3)
OLDEST_SUPPORTED = (4, 2)

# The errors an API that changed under Drape raises: an attribute, argument,
# enum item or collection key it names is gone, or a value has another type.
_API_ERRORS = (AttributeError, TypeError, KeyError)

_incompatibility = None


# --- Geometry Nodes modifier inputs ------------------------------------------

def _modifier_inputs(mod):
    """Blender 5.2+: a Geometry Nodes modifier's inputs are RNA structs under
    ``mod.properties.inputs`` (one per interface socket identifier, value in
    ``.value``). 4.2-5.1: they are ID properties of the modifier itself."""
    props = getattr(mod, "properties", None)
    return getattr(props, "inputs", None) if props is not None else None


def modifier_input_get(mod, identifier):
    """The value of the Geometry Nodes modifier input ``identifier`` (the
    interface socket's identifier), or None when it has none yet."""
    inputs = _modifier_inputs(mod)
    if inputs is not None:
        item = getattr(inputs, identifier, None)
        return None if item is None else item.value
    return mod.get(identifier)


def modifier_input_set(mod, identifier, value):
    """Sets the Geometry Nodes modifier input ``identifier`` to ``value``.

    An object input (the result object) set this way stays out of the
    modifier's depsgraph relations, and its geometry reads as empty until
    something else rebuilds them: in 4.2-5.1 an ID property tells the
    depsgraph nothing, and 5.2's RNA input does not rebuild them either (5.3
    does). Assigning the node group again (an RNA update) rebuilds them."""
    inputs = _modifier_inputs(mod)
    if inputs is not None:
        getattr(inputs, identifier).value = value
    else:
        mod[identifier] = value
    if isinstance(value, bpy.types.ID) and mod.node_group is not None:
        mod.node_group = mod.node_group


# --- F-Curves of an animated ID ----------------------------------------------

def animation_fcurves(anim, ensure=False):
    """The F-Curve collection (``new(data_path)``, ``remove(fcurve)``,
    iteration) through which ``anim``'s assigned action animates its ID, or
    None when there is none (no action; no slot or channels yet).

    Blender 4.4+ (layered actions; the only kind from 5.0, where
    ``Action.fcurves`` is gone): the channelbag of the assigned action slot
    in the action's keyframe strip. With ``ensure`` a missing slot (named
    after the ID), layer, strip and channelbag are created and the slot is
    assigned. 4.2-4.3: the action's own F-Curves (no slots)."""
    action = anim.action if anim is not None else None
    if action is None:
        return None
    if not hasattr(action, "layers"):
        return action.fcurves
    slot = anim.action_slot
    if slot is None:
        if not ensure:
            return None
        owner = anim.id_data
        slot = action.slots.new(id_type=owner.id_type, name=owner.name)
        anim.action_slot = slot
    strip = next((s for layer in action.layers for s in layer.strips if s.type == 'KEYFRAME'), None)
    if strip is None:
        if not ensure:
            return None
        layer = action.layers[0] if len(action.layers) else action.layers.new(name="Layer")
        strip = layer.strips.new(type='KEYFRAME')
    bag = strip.channelbag(slot, ensure=ensure)
    return None if bag is None else bag.fcurves


def action_fcurves(action):
    """Every F-Curve of ``action``, for all the IDs it animates, as a list.
    Blender 4.4+ (layered actions): those of every channelbag of every
    strip. 4.2-4.3: ``Action.fcurves``."""
    if not hasattr(action, "layers"):
        return list(action.fcurves)
    return [fc for layer in action.layers for strip in layer.strips
            for bag in strip.channelbags for fc in bag.fcurves]


# --- Mesh Cache modifier -----------------------------------------------------

def _flip_axis_is_set():
    """Blender 4.2: ``MeshCacheModifier.flip_axis`` is a set of axis names
    (``{'X', 'Z'}``). 4.5+: three booleans, one per axis."""
    return bpy.types.MeshCacheModifier.bl_rna.properties["flip_axis"].type == 'ENUM'


def mesh_cache_flip_set(mod, flip):
    """Sets which axes the Mesh Cache modifier ``mod`` mirrors: ``flip`` is
    three booleans (x, y, z)."""
    if _flip_axis_is_set():
        mod.flip_axis = {axis for axis, on in zip("XYZ", flip) if on}
    else:
        mod.flip_axis = tuple(bool(on) for on in flip)


def mesh_cache_flip_get(mod):
    """Which axes the Mesh Cache modifier ``mod`` mirrors, as (x, y, z) booleans."""
    if _flip_axis_is_set():
        return tuple(axis in mod.flip_axis for axis in "XYZ")
    return tuple(bool(on) for on in mod.flip_axis)


# --- bone selection ----------------------------------------------------------

def _selection_holder(arm_obj, bone_name):
    """Blender 5.0+: a bone's selection in pose mode lives on its PoseBone
    (``PoseBone.select``). 4.2-4.5: on the armature's Bone."""
    pose_bone = arm_obj.pose.bones.get(bone_name) if arm_obj.pose else None
    if pose_bone is not None and "select" in pose_bone.bl_rna.properties:
        return pose_bone
    return arm_obj.data.bones[bone_name]


def bone_selected(arm_obj, bone_name):
    """Whether the bone ``bone_name`` of the armature object is selected."""
    return bool(_selection_holder(arm_obj, bone_name).select)


def bone_select_set(arm_obj, bone_name, selected):
    """Selects or deselects the bone ``bone_name`` of the armature object."""
    _selection_holder(arm_obj, bone_name).select = bool(selected)


# --- exit of a script that leaves Drape registered --------------------------

def unregister_at_exit(unregister):
    """Makes ``unregister`` run when the Python process exits while Drape is
    still registered (a script or farm job that calls ``drape.register()``
    and ends). Blender 4.2 and 4.5 as a Python module (the bpy wheel) shut
    themselves down only once nothing holds the ``bpy`` module any more, and
    every registered class or handler holds it: left registered, 4.2 crashes
    at exit (rc 139) and 4.5 never exits. 5.0+ and Blender itself (which
    unregisters add-ons before Python ends): the hook is harmless there.
    Applied on every version, so nothing here depends on the version."""
    atexit.unregister(unregister)
    atexit.register(unregister)


def cancel_unregister_at_exit(unregister):
    """Undoes :func:`unregister_at_exit` (on unregister: nothing is left to do)."""
    atexit.unregister(unregister)


# --- a Blender newer than the newest tested ----------------------------------

def untested_version():
    """The running Blender's version string when it is newer than
    :data:`NEWEST_TESTED` (APIs may have changed there), else None."""
    if tuple(bpy.app.version[:2]) > NEWEST_TESTED:
        return bpy.app.version_string
    return None


def failure_message(exc):
    """The line to show for ``exc``, an error Drape caught (a frame, an
    operator, a bake). On a Blender newer than :data:`NEWEST_TESTED` an API
    error (a name or type Blender no longer has) becomes one line naming the
    version, recorded for :func:`incompatibility`; the first one recorded is
    kept and returned for every later one, so a handler that prints a
    message only when it changes prints it once. Anything else (Drape's own
    checks of the input, errors on a tested Blender) is ``str(exc)``."""
    global _incompatibility
    version = untested_version()
    if version is None or not isinstance(exc, _API_ERRORS):
        return str(exc)
    if _incompatibility is None:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        _incompatibility = (f"Blender {version} is newer than Drape supports "
                            f"({_line(OLDEST_SUPPORTED)} to {_line(NEWEST_TESTED)}): {detail}")
    return _incompatibility


def incompatibility():
    """The recorded line (see :func:`failure_message`), or None."""
    return _incompatibility


def forget_incompatibility():
    """Drops the recorded line (on unregister, so re-enabling starts afresh)."""
    global _incompatibility
    _incompatibility = None


def _line(version):
    return f"{version[0]}.{version[1]}"


def blend_relative_path_options():
    """The ``options`` a path StringProperty needs to accept a ``//`` (blend
    relative) value without a warning. Blender 4.5+ warns on every assignment
    unless the property says 'PATH_SUPPORTS_BLEND_RELATIVE'; 4.2 has no such
    option and refuses it."""
    if "is_path_supports_blend_relative" in bpy.types.Property.bl_rna.properties:
        return {'PATH_SUPPORTS_BLEND_RELATIVE'}
    return set()
