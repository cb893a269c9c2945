"""PropertyGroups saved in the .blend: per-object cloth and collider settings."""

classes = ()


def register():
    import bpy

    for cls in classes:
        bpy.utils.register_class(cls)


def unregister():
    import bpy

    for cls in reversed(classes):
        bpy.utils.unregister_class(cls)
