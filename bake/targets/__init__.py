"""The bake targets: one :class:`BakeTarget` record per target, kept in one
list that everything else reads: the choices of ``Object.drape_bake.target``
and of ``drape.bake``'s ``target``, the headless tool's ``--target``, the Bake
panel, and the bake job, which calls the record's functions and has no branch
of its own per target.

A target is a module here that builds its record (``TARGET``) and one line in
:data:`_BUILT_IN`; an add-on or a test can also :func:`register` one at any
time (and :func:`unregister` it): the choices follow at once.
"""

from dataclasses import dataclass
from typing import Callable, Optional

from . import choices


@dataclass
class BakeTarget:
    """What the bake job, the UI and the headless tool need of one target.

    Every target streams its frames to a PC2 file while baking (the job's
    ``item.writer``); the functions say where, and what becomes of it.
    """

    id: str                 # the enum identifier ('PC2'); also stored as ``drape_bake.baked_target``
    label: str              # what the UI shows ("Point Cache (PC2)")
    description: str        # the tooltip
    number: int             # the enum value a .blend stores: never reuse one
    extension: str          # the cache file's ending ('.pc2'); '' when the bake lives in the .blend
    # (job, item) -> the path the frames stream to while baking.
    stream_path: Callable
    # (job, item): the swap: puts the finished bake on ``item.obj``.
    install: Callable
    # (obj, frame_count) -> None, or what a saved .blend lacks of this bake (the headless check).
    check: Callable
    # (obj) -> None; raises bake.job.BakeError when the object cannot take this target.
    validate: Optional[Callable] = None
    # (job, item): after the last frame, before any object's swap (the Alembic export).
    prepare: Optional[Callable] = None

    @property
    def writes_file(self):
        return bool(self.extension)


_targets = {}        # id -> BakeTarget, in registration order


def register(target):
    """Adds ``target`` to the list (and so to every choice of a target)."""
    if target.id in _targets:
        raise ValueError(f"a bake target '{target.id}' is registered already")
    taken = {t.number: t.id for t in _targets.values()}
    if target.number in taken:
        raise ValueError(f"bake target '{target.id}': number {target.number} is taken by '{taken[target.number]}'")
    _targets[target.id] = target
    _refresh()


def unregister(target_id):
    _targets.pop(target_id, None)
    _refresh()


# The operator's "each object's own setting" choice, then the targets
# (numbered apart from them: operator choices are never stored in a .blend).
_OBJECT_ITEM = ('OBJECT', "Object settings", "Each object's own bake target", 'NONE', 0)


def _refresh():
    listed = _targets.values()
    choices.set_items([(t.id, t.label, t.description, 'NONE', t.number) for t in listed],
                      [_OBJECT_ITEM] + [(t.id, t.label, t.description, 'NONE', k + 1) for k, t in enumerate(listed)])


def get(target_id):
    """The record of ``target_id``, or None."""
    return _targets.get(target_id)


def registered():
    """Every target, in registration order."""
    return tuple(_targets.values())


def ids():
    return tuple(_targets)


def label(target_id):
    target = _targets.get(target_id)
    return target.label if target is not None else target_id


# The callbacks of the target EnumProperties (they live in a module that reaches no bpy).
enum_items = choices.items
operator_enum_items = choices.operator_items


def _register_built_in():
    from . import alembic, point_cache, shape_keys

    for module in (shape_keys, point_cache, alembic):
        register(module.TARGET)


_register_built_in()
