"""Constructor arguments that cannot fit the constructor: the user's mistake, said before anything
is built (exit status 2), with "did you mean" where a keyword is a spelling away from one the
constructor takes. No torch: it reads the class's signature."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from layercheck.parent.errors import did_you_mean


def arguments_problem(cls: type, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
    """Why ``cls(*args, **kwargs)`` cannot be called, from its signature (a keyword it does not
    take, too many or too few arguments); None where they fit or the signature is unknown."""
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):  # a builtin or an extension type: its call says
        return None
    parameters = signature.parameters.values()
    if not any(p.kind is p.VAR_KEYWORD for p in parameters):
        names = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        unknown = [key for key in kwargs if key not in names]
        if unknown:
            key = unknown[0]
            takes = f"its keywords: {', '.join(names)}" if names else "it takes none"
            return f"{cls.__name__}() takes no keyword argument {key!r}{did_you_mean(key, names)} ({takes})"
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        return f"{cls.__name__}{signature}: {exc}"
    return None
