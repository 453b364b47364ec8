"""Every problem of a spec in one pass, not the first one only: two typos, one run to find both.

The spec reader stops at its first problem. ``every_problem`` reads the spec again with the part
that was wrong taken out (an unknown or wrong optional key removed, a wrong input or required key
replaced by a valid stand-in), and again, until it reads or the same problem comes back; each
problem is said as the reader says it, naming the file and the key. So a key added to the reader
is covered with nothing to change here. Plain data, no torch.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any, TypeVar

from layercheck.parent.errors import SpecError

T = TypeVar("T")

# Stand-ins for required keys and for an input, valid wherever they are put.
_STAND_INS: dict[str, Any] = {"layer": "stand.in:Layer", "inputs": [{"layout": "1:U"}]}
_INPUT = {"layout": "1:U"}
_MOST = 50  # problems said at most (a file that is not a spec at all has one, said first)
_PATH = re.compile(r"(?P<key>[A-Za-z_][\w-]*)(?P<rest>(?:\[\d+\]|\.[^\s:]+)*):")


def every_problem(parse: Callable[..., T], data: object, *, where: str, **keywords: Any) -> T:
    """``parse(data, **keywords)``, or a SpecError whose lines are each problem ``parse`` finds
    in ``data`` (a spec read from YAML; ``where`` is how its problems name it)."""
    try:
        return parse(data, **keywords)
    except SpecError as first:
        problems = [str(first)]
    trial = copy.deepcopy(data)
    while len(problems) < _MOST and isinstance(trial, dict) and _take_out(trial, problems[-1], where):
        try:
            parse(trial, **keywords)
            break
        except SpecError as exc:
            if str(exc) in problems:
                break
            problems.append(str(exc))
    raise SpecError("\n".join(problems))


def _take_out(data: dict[Any, Any], problem: str, where: str) -> bool:
    """Take the part ``problem`` names out of ``data``; False where it names none."""
    if not problem.startswith(f"{where}: "):
        return False
    found = _PATH.match(problem.removeprefix(f"{where}: "))
    if found is None:
        return False
    key, rest = found["key"], found["rest"]
    index = re.match(r"\[(\d+)\]", rest)
    if index is not None and isinstance(data.get(key), list) and int(index[1]) < len(data[key]):
        data[key][int(index[1])] = dict(_INPUT) if key == "inputs" else None
        if key != "inputs":
            del data[key][int(index[1])]
        return True
    sub = re.match(r"\.([^.\[]+)", rest)
    if sub is not None and isinstance(data.get(key), dict):
        name = next((k for k in data[key] if str(k) == sub[1]), None)
        if name is not None:
            del data[key][name]
            return True
    if key in _STAND_INS:
        if data.get(key) == _STAND_INS[key]:
            return False
        data[key] = copy.deepcopy(_STAND_INS[key])
        return True
    if key in data:
        del data[key]
        return True
    return False
