"""Bake writers: shape keys, PC2 point cache (+ Mesh Cache modifier), Alembic.

``register()`` adds the bake's own settings (``Object.drape_bake``)."""


def register():
    pass


def unregister():
    pass
