"""The one bridge between bpy and the solver: reads inputs, writes results."""


def register():
    pass


def unregister():
    pass
