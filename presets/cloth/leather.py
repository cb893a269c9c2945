import bpy
obj = bpy.context.object
drape = obj.drape

drape.areal_density = 0.8
drape.stretch_compliance = 1e-08
drape.shear_compliance = 1e-06
drape.bend_compliance = 200
drape.tether_compliance = 1e-10
drape.stretch_damping = 0.05
drape.shear_damping = 0.05
drape.bend_damping = 0.05
drape.air_drag = 0.05
drape.friction = 0.7
drape.static_friction = 0.9
drape.tethers = True
drape.stretch_limits = True
drape.stretch_hierarchy = False
drape.tether_scale = 1.0
drape.wind_drag = 0.8
drape.wind_lift = 0.1
drape.thickness = 0.006
drape.self_thickness = 0.006
drape.self_friction = 0.35
