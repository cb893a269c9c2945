import bpy
obj = bpy.context.object
drape = obj.drape

drape.areal_density = 0.08
drape.stretch_compliance = 2e-07
drape.shear_compliance = 5e-05
drape.bend_compliance = 500000
drape.tether_compliance = 2e-09
drape.stretch_damping = 0.01
drape.shear_damping = 0.01
drape.bend_damping = 0.01
drape.air_drag = 0.2
drape.friction = 0.2
drape.static_friction = 0.3
drape.tethers = True
drape.stretch_limits = True
drape.stretch_hierarchy = False
drape.tether_scale = 1.0
drape.wind_drag = 1.2
drape.wind_lift = 0.5
drape.thickness = 0.002
drape.self_thickness = 0.002
drape.self_friction = 0.1
