"""Register/unregister cycles leave nothing behind."""

import bpy


def _snapshot():
    return (
        {name for name in dir(bpy.types) if name.startswith("DRAPE_")},
        {name for name in dir(bpy.types.Object) if name.startswith("drape")},
        sum(len(getattr(bpy.app.handlers, n)) for n in dir(bpy.app.handlers)
            if isinstance(getattr(bpy.app.handlers, n), list)),
    )


def test_register_cycles_leave_nothing():
    import drape

    session_registered = hasattr(bpy.types.Object, "drape")  # the `addon` fixture of earlier tests
    if session_registered:
        drape.unregister()
    before = _snapshot()
    for _ in range(2):
        drape.register()
        drape.unregister()
        assert _snapshot() == before
    if session_registered:
        drape.register()
