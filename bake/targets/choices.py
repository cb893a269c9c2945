"""The EnumProperty items of the registered bake targets, kept by the
registry (:mod:`bake.targets`) and read by the dynamic enums' callbacks.

This module imports nothing: Blender 4.2 keeps a property's Python callbacks
alive after unregister, and a callback whose globals reach ``bpy`` keeps the
module from being freed at exit (see properties.py), so the callbacks live
where nothing leads to ``bpy``."""

# Blender keeps pointers into the strings a dynamic enum's callback returns:
# every tuple handed out stays referenced for the session.
_handed_out = []
_items = ()
_operator_items = ()


def set_items(items, operator_items):
    global _items, _operator_items
    _items, _operator_items = tuple(items), tuple(operator_items)
    _handed_out.append((_items, _operator_items))


def items(_self=None, _context=None):
    """``Object.drape_bake.target``: every registered target."""
    return _items


def operator_items(_self=None, _context=None):
    """``drape.bake``'s ``target``: 'OBJECT' (each object's own), then every target."""
    return _operator_items
