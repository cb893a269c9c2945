import bpy
obj = bpy.context.object
drape = obj.drape

drape.areal_density = 0.15
drape.stretch_compliance = 1e-07
drape.shear_compliance = 1e-05
drape.bend_compliance = 10000
drape.tether_compliance = 1e-09
drape.stretch_damping = 0.02
drape.shear_damping = 0.02
drape.bend_damping = 0.02
drape.air_drag = 0.1
drape.friction = 0.4
drape.static_friction = 0.6
drape.tethers = True
drape.stretch_limits = True
drape.stretch_hierarchy = False
drape.tether_scale = 1.0
drape.wind_drag = 1.0
drape.wind_lift = 0.3
drape.thickness = 0.004
drape.self_thickness = 0.004
drape.self_friction = 0.2
