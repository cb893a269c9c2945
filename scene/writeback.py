"""How the simulated result reaches the viewport and renders.

Every Drape cloth gets one Geometry Nodes modifier named ``Drape`` at the end
of its stack, running the shared node group ``Drape Cloth``:

    geometry ─► Store "drape_input" = position        (pin targets: the stack's result)
             ─► Store "drape_pin"   = attribute <pin group>   (weights, as animated)
             ─► Store "drape_mass"  = attribute <mass group>
             ─► Set Position(position = "drape_position", selection = it exists)

The simulation writes its dense result, in object local space, into the point
attribute ``drape_position`` of the object's *original* mesh (one foreach_set)
and tags the mesh; the depsgraph re-evaluates and the Set Position node shows
it. Everything above the modifier (Armature, shape keys, hooks, Vertex Weight
modifiers) keeps working and is what the next frame reads back from the
evaluated mesh as pin targets and pin weights: the stored attributes are
written *before* Set Position, so the result never feeds itself.

Removing the ``drape_position`` attribute shows the un-simulated mesh.
"""

import bpy
import numpy as np

from . import compat

NODE_GROUP = "Drape Cloth"
MODIFIER = "Drape"
ATTR_RESULT = "drape_position"
ATTR_INPUT = "drape_input"
ATTR_PIN = "drape_pin"
ATTR_MASS = "drape_mass"
_GROUP_VERSION = 1


def _build_node_group():
    ng = bpy.data.node_groups.new(NODE_GROUP, 'GeometryNodeTree')
    ng["drape_version"] = _GROUP_VERSION
    iface = ng.interface
    iface.new_socket(name="Geometry", in_out='INPUT', socket_type='NodeSocketGeometry')
    iface.new_socket(name="Pin Group", in_out='INPUT', socket_type='NodeSocketString')
    iface.new_socket(name="Mass Group", in_out='INPUT', socket_type='NodeSocketString')
    iface.new_socket(name="Geometry", in_out='OUTPUT', socket_type='NodeSocketGeometry')
    nodes, links = ng.nodes, ng.links
    group_in = nodes.new('NodeGroupInput')
    group_out = nodes.new('NodeGroupOutput')
    position = nodes.new('GeometryNodeInputPosition')

    def store(name, data_type):
        node = nodes.new('GeometryNodeStoreNamedAttribute')
        node.data_type = data_type
        node.domain = 'POINT'
        node.inputs['Name'].default_value = name
        return node

    def named(data_type, name=None):
        node = nodes.new('GeometryNodeInputNamedAttribute')
        node.data_type = data_type
        if name is not None:
            node.inputs['Name'].default_value = name
        return node

    store_input = store(ATTR_INPUT, 'FLOAT_VECTOR')
    store_pin = store(ATTR_PIN, 'FLOAT')
    store_mass = store(ATTR_MASS, 'FLOAT')
    pin_weight = named('FLOAT')
    mass_weight = named('FLOAT')
    result = named('FLOAT_VECTOR', ATTR_RESULT)
    set_position = nodes.new('GeometryNodeSetPosition')

    links.new(group_in.outputs[0], store_input.inputs['Geometry'])
    links.new(position.outputs[0], store_input.inputs['Value'])
    links.new(store_input.outputs[0], store_pin.inputs['Geometry'])
    links.new(group_in.outputs[1], pin_weight.inputs['Name'])
    links.new(pin_weight.outputs['Attribute'], store_pin.inputs['Value'])
    links.new(store_pin.outputs[0], store_mass.inputs['Geometry'])
    links.new(group_in.outputs[2], mass_weight.inputs['Name'])
    links.new(mass_weight.outputs['Attribute'], store_mass.inputs['Value'])
    links.new(store_mass.outputs[0], set_position.inputs['Geometry'])
    links.new(result.outputs['Attribute'], set_position.inputs['Position'])
    links.new(result.outputs['Exists'], set_position.inputs['Selection'])
    links.new(set_position.outputs[0], group_out.inputs[0])
    for i, node in enumerate((group_in, position, store_input, store_pin, store_mass, set_position, group_out)):
        node.location = (200 * i, 0)
    return ng


def node_group():
    ng = bpy.data.node_groups.get(NODE_GROUP)
    if ng is None or ng.get("drape_version") != _GROUP_VERSION or ng.bl_idname != 'GeometryNodeTree':
        ng = _build_node_group()
    return ng


def _socket_id(ng, name):
    for item in ng.interface.items_tree:
        if getattr(item, "in_out", None) == 'INPUT' and item.name == name:
            return item.identifier
    raise KeyError(name)


def find_modifier(obj):
    for mod in obj.modifiers:
        if mod.type == 'NODES' and mod.node_group is not None and mod.node_group.name.startswith(NODE_GROUP):
            return mod
    return None


def ensure_modifier(obj):
    """The Drape modifier, created (last in the stack) if missing."""
    mod = find_modifier(obj)
    if mod is None:
        mod = obj.modifiers.new(MODIFIER, 'NODES')
        mod.node_group = node_group()
        mod.show_in_editmode = False
    sync_modifier_inputs(obj)
    return mod


def needs_setup(obj, settings=None):
    """True when the modifier is missing or its group names are stale (the
    depsgraph must then re-evaluate before pins can be read)."""
    mod = find_modifier(obj)
    if mod is None:
        return True
    settings = settings if settings is not None else obj.drape
    ng = mod.node_group
    return (compat.modifier_input_get(mod, _socket_id(ng, "Pin Group")) != settings.pin_group
            or compat.modifier_input_get(mod, _socket_id(ng, "Mass Group")) != settings.mass_group)


def remove_modifier(obj):
    mod = find_modifier(obj)
    if mod is not None:
        obj.modifiers.remove(mod)
    clear_result(obj)
    for name in (ATTR_RESULT, ATTR_INPUT, ATTR_PIN, ATTR_MASS):
        attr = obj.data.attributes.get(name) if obj.type == 'MESH' else None
        if attr is not None:
            obj.data.attributes.remove(attr)


def sync_modifier_inputs(obj, settings=None):
    mod = find_modifier(obj)
    if mod is None:
        return
    ng = mod.node_group
    settings = settings if settings is not None else obj.drape
    for socket, value in (("Pin Group", settings.pin_group), ("Mass Group", settings.mass_group)):
        key = _socket_id(ng, socket)
        if compat.modifier_input_get(mod, key) != value:
            compat.modifier_input_set(mod, key, value)
    obj.update_tag()


def write_result(obj, local_positions):
    """Show ``local_positions`` (m, 3) float32 as the object's geometry."""
    mesh = obj.data
    attr = mesh.attributes.get(ATTR_RESULT)
    if attr is None or attr.domain != 'POINT' or attr.data_type != 'FLOAT_VECTOR':
        if attr is not None:
            mesh.attributes.remove(attr)
        attr = mesh.attributes.new(ATTR_RESULT, 'FLOAT_VECTOR', 'POINT')
    attr.data.foreach_set("vector", np.ascontiguousarray(local_positions, dtype=np.float32).ravel())
    mesh.update_tag()
    obj.update_tag()


def clear_result(obj):
    """Show the un-simulated mesh again."""
    if obj.type != 'MESH':
        return
    mesh = obj.data
    attr = mesh.attributes.get(ATTR_RESULT)
    if attr is not None:
        mesh.attributes.remove(attr)
        mesh.update_tag()
        obj.update_tag()
