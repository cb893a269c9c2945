"""Filled in by its issue."""

classes = ()
