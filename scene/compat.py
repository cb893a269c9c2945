"""Every difference between the Blender versions Drape supports (4.2 LTS on).

One function per difference; each says which versions take which branch and
decides by feature (what the API offers), not by version number, so a future
Blender that keeps an API keeps working. Nothing else in Drape tests
``bpy.app.version`` or probes for an attribute that only some versions have.
"""

import bpy


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
    """Sets the Geometry Nodes modifier input ``identifier`` to ``value``."""
    inputs = _modifier_inputs(mod)
    if inputs is not None:
        getattr(inputs, identifier).value = value
    else:
        mod[identifier] = value
