"""Fixtures for tests that run inside Blender (the bpy module, or a real
Blender through pytest-blender). Solver tests never import this."""

import pytest

bpy = pytest.importorskip("bpy")


@pytest.fixture(scope="session")
def addon():
    """Drape registered once for the whole session, unregistered at the end."""
    import drape

    drape.register()
    yield drape
    drape.unregister()


@pytest.fixture
def empty_scene(addon):
    """A factory-fresh, empty file with Drape registered; returns the scene."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    yield bpy.context.scene
