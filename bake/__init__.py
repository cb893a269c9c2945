"""Baking: shape keys, PC2 point cache (+ Mesh Cache modifier), Alembic.

``register()`` adds the bake's own settings (``Object.drape_bake``) and the
handlers that keep each cache folder's record of which .blend files play its
files (``job.record_references`` on every save and load). The targets are
:mod:`.targets` (one record each, in one registry), the engine :mod:`.job`
(``BakeJob``, ``run_blocking``), the format :mod:`.pc2` (no bpy), what every
target shares in Blender data :mod:`.install`, the farm entry :mod:`.headless`.
This module imports no bpy at import time (:mod:`.pc2` is plain numpy)."""


def _on_save_post(filepath="", *_args):
    import bpy

    from . import job

    try:
        # A "save copy" passes the copy's path; bpy.data.filepath stays the open file's.
        job.record_references(filepath if isinstance(filepath, str) and filepath else None)
    except Exception as exc:  # noqa: BLE001 - a save handler must never break saving
        print(f"Drape: could not record which caches {filepath or bpy.data.filepath} plays: {exc}")


def _on_load_post(*_args):
    import bpy

    from . import job

    try:
        job.record_references()
    except Exception as exc:  # noqa: BLE001 - a load handler must never break loading
        print(f"Drape: could not record which caches {bpy.data.filepath} plays: {exc}")


_HANDLERS = (("save_post", _on_save_post), ("load_post", _on_load_post))


def register():
    import bpy
    from bpy.app.handlers import persistent

    from . import settings

    settings.register()
    for name, fn in _HANDLERS:
        handlers = getattr(bpy.app.handlers, name)
        if fn not in handlers:
            handlers.append(persistent(fn))


def unregister():
    import bpy

    from . import settings

    for name, fn in _HANDLERS:
        handlers = getattr(bpy.app.handlers, name)
        while fn in handlers:
            handlers.remove(fn)
    settings.unregister()
