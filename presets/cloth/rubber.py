import bpy
obj = bpy.context.object
drape = obj.drape

drape.areal_density = 0.6
drape.stretch_compliance = 0.0001
drape.shear_compliance = 0.0001
drape.bend_compliance = 2000
drape.tether_compliance = 1e-06
drape.stretch_damping = 0.1
drape.shear_damping = 0.1
drape.bend_damping = 0.1
drape.air_drag = 0.05
drape.friction = 0.9
drape.static_friction = 1.1
drape.tethers = True
drape.stretch_limits = True
drape.stretch_hierarchy = False
drape.tether_scale = 1.6
drape.wind_drag = 0.8
drape.wind_lift = 0.1
drape.thickness = 0.005
drape.self_thickness = 0.005
drape.self_friction = 0.45
