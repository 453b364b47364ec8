"""``layercheck scan``: every custom layer of a model found from one sample forward, and the
specs that check each at the inputs the model gave it.

One sample forward records every submodule's call and every autograd.Function applied
(:mod:`.capture`); the layers to check are chosen and grouped by kind (:mod:`.choose`); each
input's layout is inferred from forwards at another batch, time and spatial size
(:mod:`.layouts`, driven by :mod:`.model`); one spec per kind is written with its captured inputs
and its layer saved beside it (:mod:`.write`, through :mod:`layercheck.target.replay`, which the
target reads them back with). Model specs (``model:``) are read by :mod:`.modelspec`; the command
line's part is :mod:`.command` (torch-free at import). Running the specs is the engine's
(:mod:`layercheck.engine.scan` for ``check_model``; the command line runs them as ``layercheck run
DIR`` runs a folder), and the tree of module paths is the reporters'
(:mod:`layercheck.reporting.scan_tree`).

May import the target (building, seeding, replay, loading), the parent layer and the reporters'
tree; never the engine or the checks.
"""
