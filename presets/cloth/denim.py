import bpy
obj = bpy.context.object
drape = obj.drape

drape.areal_density = 0.4
drape.stretch_compliance = 2e-08
drape.shear_compliance = 2e-06
drape.bend_compliance = 1000
drape.tether_compliance = 2e-10
drape.stretch_damping = 0.03
drape.shear_damping = 0.03
drape.bend_damping = 0.03
drape.air_drag = 0.08
drape.friction = 0.6
drape.static_friction = 0.8
drape.tethers = True
drape.stretch_limits = True
drape.stretch_hierarchy = False
drape.tether_scale = 1.0
drape.wind_drag = 0.9
drape.wind_lift = 0.2
drape.thickness = 0.005
drape.self_thickness = 0.005
drape.self_friction = 0.3
