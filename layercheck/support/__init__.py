"""What the checks share beyond the SDK's stable surface: the shared float32/float64 runs
(:mod:`runs`), comparisons and their tolerances (:mod:`compare`, :mod:`calibration`), the
layer's side effects held in (:mod:`containment`), where a layer is defined (:mod:`locations`),
the accelerators (:mod:`accelerators`) and the Context a check is handed (:mod:`context`). It
may import ``layercheck.parent`` and ``layercheck.target``; never ``numerics`` (which builds on
it), ``engine`` or ``checks``.
"""
