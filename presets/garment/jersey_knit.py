import bpy
obj = bpy.context.object
drape = obj.drape

drape.use_sewing = False
drape.sewing_compliance = 1e-08
drape.sewing_max_force = 0.0
drape.shrink = 0.0
drape.shrink_max = 0.0
drape.shrink_warp = 0.0
drape.shrink_weft = 0.0
drape.warp_stretch = 1.0
drape.weft_stretch = 4.0
drape.stretch_group_max = 1.0
drape.shear_group_max = 1.0
drape.bend_group_max = 1.0
drape.use_pressure = False
drape.pressure_volume = 1.0
drape.pressure_compliance = 0.0
drape.max_distance = 0.0
drape.backstop_radius = 0.0
drape.backstop_distance = 0.0
