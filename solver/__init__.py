"""Drape's XPBD cloth solver: pure numpy + numba, never imports bpy."""
