"""The layer under test, made ready: its reference resolved and imported (:mod:`loading`), the
reference implementation it names built with its parameter values (:mod:`reference`), its
sizes reduced for Triton's interpreter (:mod:`triton_interpret`), what is under test and how to
build, seed and call it (:mod:`subject`, :mod:`building`, :mod:`seeding`, :mod:`calling`), walks
over what it returns (:mod:`tensors`), the layer and inputs a model scan captured
(:mod:`replay`) and which frames of a traceback are its own
(:mod:`frames`). Checks reach Subject and Target through ``layercheck.sdk``. It may import
``layercheck.parent`` only.
"""
