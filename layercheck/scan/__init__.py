"""``layercheck scan``: every custom layer of a model checked at the inputs one sample forward gives it.

One sample forward records every submodule's call (:mod:`.capture`); the layers to check are
chosen and grouped by kind (:mod:`.choose`); each input's layout is inferred from a second
forward at another batch size (:mod:`.layouts`); one spec per kind is written with its captured
inputs and its layer saved beside it (:mod:`.write`, :mod:`.replay`), and those specs run as
``layercheck run DIR`` runs a folder; the report is arranged as a tree of module paths
(:mod:`.tree`). The model spec (``model:``) is read by :mod:`.modelspec`.

Nothing here imports torch at import time but :mod:`.capture`, :mod:`.choose`, :mod:`.layouts`,
:mod:`.write` and :mod:`.replay`, which the parent imports only inside the scan command. The
package may import the parent layer (spec, inputs, layout, errors, result) and, from the engine,
``runner`` and ``loading`` (:mod:`.check`); nothing below the engine imports it but ``subject``
and ``loading``, which read a captured input or a saved layer through :mod:`.replay` (which
imports torch and ``inputs`` only).
"""
