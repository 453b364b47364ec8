"""``layercheck scan``: every custom layer of a model checked at the inputs one sample forward gives it.

One sample forward records every submodule's call and every autograd.Function applied
(:mod:`.capture`); the layers to check are chosen and grouped by kind (:mod:`.choose`); each
input's layout is inferred from forwards at another batch, time and spatial size
(:mod:`.layouts`, driven by :mod:`.model`); one spec per kind is written with its captured inputs
and its layer saved beside it (:mod:`.write`, :mod:`.replay`), and those specs run as
``layercheck run DIR`` runs a folder (:mod:`.command`, for the command line) or in this process
(:mod:`.check`, ``check_model``); the report is arranged as a tree of module paths
(:mod:`.tree`). Model specs (``model:``) are read by :mod:`.modelspec`.

Torch-free, for the parent and the reporters: :mod:`.tree`, :mod:`.modelspec` and :mod:`.command`
at import (it imports the rest inside its functions). The others import torch. The package may
import the parent layer (spec, inputs, layout, errors, result), the checks' support (subject,
seeding) and, from the engine, ``runner``, ``plan`` and ``loading``. Below the engine only
``subject`` and ``loading`` import it, reading a captured input or a saved layer through
:mod:`.replay` (which imports torch and ``inputs`` only); the reporters import :mod:`.tree`.
"""
