"""Bake writers: shape keys, PC2 point cache (+ Mesh Cache modifier), Alembic.

``register()`` adds the bake's own settings (``Object.drape_bake``). The
engine is :mod:`.job` (``BakeJob``, ``run_blocking``), the format :mod:`.pc2`
(no bpy), the swap into Blender data :mod:`.install`."""


def register():
    from . import settings

    settings.register()


def unregister():
    from . import settings

    settings.unregister()
