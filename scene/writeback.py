"""How the simulated result reaches the viewport and renders.

Every Drape cloth gets one Geometry Nodes modifier named ``Drape``, running
the shared node group ``Drape Cloth``. It sits where the artist puts it in the
stack (added after the leading deform modifiers): what is above it is the
simulated mesh, what is below it works on the simulated result, as with
Blender's own Cloth modifier.

    geometry ─► Store "drape_input" = position        (rest shape and pin targets)
             ─► Store "drape_pin"   = attribute <pin group>   (weights, as animated)
             ─► Store "drape_mass"  = attribute <mass group>
             ─► Set Position(position = the result object's point [index],
                             selection = the result has as many points)

The result lives in a small vertex-only mesh of its own, held by a hidden
object (``<cloth> Drape result``, in no scene; the modifier's ``Result``
input points to it) that the node group reads with Object Info and Sample
Index. The simulation writes its dense result there, in the cloth's local
space, with one foreach_set, whatever the topology the modifiers above give
the mesh at Drape's point (a Mirror, a Subdivision Surface). The stored
attributes are written *before* Set Position, so the result never feeds
itself: the next frame reads them back as pin targets and pin weights.

An empty result mesh shows the un-simulated mesh.
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
RESULT_SUFFIX = " Drape result"
_GROUP_VERSION = 2
# The stored attributes Drape's node group adds at its place in the stack.
ATTRIBUTES = (ATTR_INPUT, ATTR_PIN, ATTR_MASS)


def _available(sockets, name):
    """The socket called ``name`` that the node's data type shows (some
    Blender versions keep one hidden socket of that name per data type)."""
    for socket in sockets:
        if socket.name == name and socket.enabled:
            return socket
    return sockets[name]


def _build_node_group():
    ng = bpy.data.node_groups.new(NODE_GROUP, 'GeometryNodeTree')
    ng["drape_version"] = _GROUP_VERSION
    iface = ng.interface
    iface.new_socket(name="Geometry", in_out='INPUT', socket_type='NodeSocketGeometry')
    iface.new_socket(name="Pin Group", in_out='INPUT', socket_type='NodeSocketString')
    iface.new_socket(name="Mass Group", in_out='INPUT', socket_type='NodeSocketString')
    iface.new_socket(name="Result", in_out='INPUT', socket_type='NodeSocketObject')
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
    result_info = nodes.new('GeometryNodeObjectInfo')
    result_info.transform_space = 'ORIGINAL'
    sample = nodes.new('GeometryNodeSampleIndex')
    sample.data_type = 'FLOAT_VECTOR'
    sample.domain = 'POINT'
    index = nodes.new('GeometryNodeInputIndex')
    result_size = nodes.new('GeometryNodeAttributeDomainSize')
    input_size = nodes.new('GeometryNodeAttributeDomainSize')
    same = nodes.new('FunctionNodeCompare')
    same.data_type = 'FLOAT'  # point counts: exact in float up to 2^24
    same.operation = 'EQUAL'
    set_position = nodes.new('GeometryNodeSetPosition')

    links.new(group_in.outputs[0], store_input.inputs['Geometry'])
    links.new(position.outputs[0], store_input.inputs['Value'])
    links.new(store_input.outputs[0], store_pin.inputs['Geometry'])
    links.new(group_in.outputs[1], pin_weight.inputs['Name'])
    links.new(pin_weight.outputs['Attribute'], store_pin.inputs['Value'])
    links.new(store_pin.outputs[0], store_mass.inputs['Geometry'])
    links.new(group_in.outputs[2], mass_weight.inputs['Name'])
    links.new(mass_weight.outputs['Attribute'], store_mass.inputs['Value'])
    links.new(group_in.outputs[3], result_info.inputs['Object'])
    links.new(result_info.outputs['Geometry'], sample.inputs['Geometry'])
    links.new(position.outputs[0], _available(sample.inputs, 'Value'))
    links.new(index.outputs[0], sample.inputs['Index'])
    links.new(result_info.outputs['Geometry'], result_size.inputs[0])
    links.new(group_in.outputs[0], input_size.inputs[0])
    links.new(result_size.outputs['Point Count'], _available(same.inputs, 'A'))
    links.new(input_size.outputs['Point Count'], _available(same.inputs, 'B'))
    links.new(store_mass.outputs[0], set_position.inputs['Geometry'])
    links.new(_available(sample.outputs, 'Value'), set_position.inputs['Position'])
    links.new(same.outputs[0], set_position.inputs['Selection'])
    links.new(set_position.outputs[0], group_out.inputs[0])
    for i, node in enumerate((group_in, position, store_input, store_pin, store_mass, set_position, group_out)):
        node.location = (200 * i, 0)
    for i, node in enumerate((result_info, index, sample, result_size, input_size, same)):
        node.location = (200 * i, -300)
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


def default_index(obj):
    """Where a new Drape modifier goes: after the leading deform-only
    modifiers (the rig, hooks, lattices: they move the pins), before the
    first one that changes the topology or post-processes the result
    (Subdivision Surface, Solidify, Mirror...). The artist moves it like any
    modifier."""
    from .meshdata import DEFORM_ONLY

    index = 0
    for mod in obj.modifiers:
        if mod.type not in DEFORM_ONLY:
            break
        index += 1
    return index


def ensure_modifier(obj):
    """The Drape modifier, created (at :func:`default_index`) if missing."""
    mod = find_modifier(obj)
    if mod is None:
        index = default_index(obj)
        mod = obj.modifiers.new(MODIFIER, 'NODES')
        mod.node_group = node_group()
        mod.show_in_editmode = False
        current = len(obj.modifiers) - 1
        if current != index:
            obj.modifiers.move(current, index)
    sync_modifier_inputs(obj)
    return mod


def modifier_index(obj):
    """The Drape modifier's index in the stack, or None."""
    mod = find_modifier(obj)
    return None if mod is None else list(obj.modifiers).index(mod)


def _owned_result(obj, mod):
    """The result object ``mod`` points to, if it is this cloth's own (a
    duplicated cloth copies the pointer; its own uid tells them apart)."""
    helper = compat.modifier_input_get(mod, _socket_id(mod.node_group, "Result"))
    if helper is None or helper.type != 'MESH':
        return None
    owner = helper.get("drape_uid")
    if owner is not None and owner != obj.drape.uid:
        return None
    return helper


def result_object(obj, create=False):
    """The hidden object holding ``obj``'s result (created when ``create``)."""
    mod = find_modifier(obj)
    if mod is None:
        return None
    helper = _owned_result(obj, mod)
    if helper is None and create:
        mesh = bpy.data.meshes.new(obj.name + RESULT_SUFFIX)
        helper = bpy.data.objects.new(obj.name + RESULT_SUFFIX, mesh)
        helper["drape_uid"] = obj.drape.uid
        compat.modifier_input_set(mod, _socket_id(mod.node_group, "Result"), helper)
        obj.update_tag()
    return helper


def needs_setup(obj, settings=None):
    """True when the modifier is missing, runs an older node group, or its
    group names are stale (the depsgraph must then re-evaluate before pins
    can be read)."""
    mod = find_modifier(obj)
    if mod is None or mod.node_group.get("drape_version") != _GROUP_VERSION:
        return True
    settings = settings if settings is not None else obj.drape
    ng = mod.node_group
    return (compat.modifier_input_get(mod, _socket_id(ng, "Pin Group")) != settings.pin_group
            or compat.modifier_input_get(mod, _socket_id(ng, "Mass Group")) != settings.mass_group)


def _remove_result_object(helper):
    mesh = helper.data
    bpy.data.objects.remove(helper)
    if mesh is not None and mesh.users == 0:
        bpy.data.meshes.remove(mesh)


def remove_modifier(obj):
    mod = find_modifier(obj)
    if mod is not None:
        helper = _owned_result(obj, mod)
        obj.modifiers.remove(mod)
        if helper is not None and not helper.users_collection:
            _remove_result_object(helper)
    if obj.type == 'MESH':
        for name in ATTRIBUTES + (ATTR_RESULT,):
            attr = obj.data.attributes.get(name)
            if attr is not None:
                obj.data.attributes.remove(attr)


def sync_modifier_inputs(obj, settings=None):
    mod = find_modifier(obj)
    if mod is None:
        return
    if mod.node_group.get("drape_version") != _GROUP_VERSION:
        mod.node_group = node_group()  # a file saved by an older Drape: the current group
    ng = mod.node_group
    settings = settings if settings is not None else obj.drape
    for socket, value in (("Pin Group", settings.pin_group), ("Mass Group", settings.mass_group)):
        key = _socket_id(ng, socket)
        if compat.modifier_input_get(mod, key) != value:
            compat.modifier_input_set(mod, key, value)
    obj.update_tag()


def write_result(obj, local_positions):
    """Show ``local_positions`` (m, 3) float32, one row per vertex of the
    mesh at Drape's place in the stack, as the object's geometry there."""
    helper = result_object(obj, create=True)
    if helper is None:  # no Drape modifier: nothing can show a result
        return
    mesh = helper.data
    n = int(local_positions.shape[0])
    if len(mesh.vertices) != n:
        mesh.clear_geometry()
        mesh.vertices.add(n)
    mesh.vertices.foreach_set("co", np.ascontiguousarray(local_positions, dtype=np.float32).ravel())
    mesh.update_tag()
    helper.update_tag()
    obj.update_tag()


def has_result(obj):
    """True while a simulated result is shown."""
    if obj is None or obj.type != 'MESH':
        return False
    helper = result_object(obj)
    return helper is not None and len(helper.data.vertices) > 0


def read_result(obj):
    """The result shown now, (m, 3) float32 in the cloth's local space, or None."""
    if not has_result(obj):
        return None
    mesh = result_object(obj).data
    out = np.empty(len(mesh.vertices) * 3, np.float32)
    mesh.vertices.foreach_get("co", out)
    return out.reshape(-1, 3)


def clear_result(obj):
    """Show the un-simulated mesh again."""
    if obj.type != 'MESH':
        return
    helper = result_object(obj)
    if helper is not None and len(helper.data.vertices):
        helper.data.clear_geometry()
        helper.data.update_tag()
        helper.update_tag()
        obj.update_tag()
    attr = obj.data.attributes.get(ATTR_RESULT)  # written by older versions of Drape
    if attr is not None:
        obj.data.attributes.remove(attr)
        obj.data.update_tag()
        obj.update_tag()
