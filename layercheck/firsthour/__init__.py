"""What a newcomer meets in their first hour with layercheck, made to say where and what.

``raised``: where the user's own code raised (the frames of their files, innermost last), for
every report that shows a failure or an error; imported by the engine only (it reads
tracebacks, and whose file a frame is needs torch's folder). ``traces``: those frames as text
for the reporters, the API and the pytest plugin; plain data, no torch. Neither imports any
other part of layercheck but ``frames`` and ``locations``.
"""
