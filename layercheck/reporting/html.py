"""The HTML report (SPEC section 8): one self-contained page, inline CSS and inline SVG only
(no network, no script), to attach to a CI run or open from disk.

The summary and a table of the layers first; then per layer its facts (status, inputs with
their options, seed, time, custom backward, where it is defined), a table of the checks that
did not pass, failures first, with those that passed (and those that do not apply) folded
below it, its notes, and each failure and error spelled out: message, where in the layer's
code, plots of the error where a gradient check disagreed, reproduce command, the layer's
traceback, and what the check measured (its internals) folded.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from layercheck.parent.result import CheckResult, Report, RunReport, Status
from layercheck.reporting.details import (
    NOT_APPLICABLE,
    counts_text,
    input_text,
    interpreted_text,
    label,
    labelled_notes,
    location_text,
    printable,
    result_location,
    short,
    skipped_as,
    summary_line,
)
from layercheck.reporting.plots import gradient_figures
from layercheck.reporting.registry import reporter

if TYPE_CHECKING:
    from layercheck.reporting.scan_tree import Branch

MESSAGE_LIMIT = 300
"""Characters of a message in the checks table; failures below it show the whole message."""

# The order of the checks table: what needs the reader first.
_ORDER = {Status.FAILED: 0, Status.ERROR: 1, Status.SKIPPED: 2, Status.PASSED: 3}

# Shown apart from the other details: the command under the message, the traceback; where the
# check points in the layer's code.
_APART = ("reproduce", "traceback", "location")

_CSS = """
:root { --passed: #2f855a; --failed: #c53030; --error: #805ad5; --skipped: #b7791f; --note: #2b6cb0;
        --ink: #1a202c; --muted: #4a5568; --line: #e2e8f0; --shade: #f7fafc; }
* { box-sizing: border-box; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
       max-width: 1180px; margin: 0 auto; padding: 24px; }
h1 { font-size: 1.6em; margin: 0 0 .2em; } h2 { font-size: 1.3em; margin: 0 0 .5em; }
h3 { font-size: 1.05em; margin: 1.4em 0 .5em; } h4 { font-size: 1em; margin: 0 0 .4em; }
code, pre, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: .9em; }
pre { background: var(--shade); border: 1px solid var(--line); border-radius: 4px; padding: 8px 10px;
      white-space: pre-wrap; overflow-wrap: anywhere; margin: .4em 0; }
table { border-collapse: collapse; margin: .3em 0; }
th, td { text-align: left; vertical-align: top; padding: 3px 10px 3px 0; border-bottom: 1px solid var(--line); }
th { font-weight: 600; color: var(--muted); }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.message { overflow-wrap: anywhere; }
a { color: var(--note); }
.summary { font-size: 1.15em; font-weight: 600; margin: .2em 0; }
.muted, .env { color: var(--muted); }
.badge { display: inline-block; min-width: 4.6em; text-align: center; border-radius: 4px; color: white;
         font-size: .8em; font-weight: 600; padding: 1px 6px; margin-right: .4em; vertical-align: 1px; }
.badge.passed { background: var(--passed); } .badge.failed { background: var(--failed); }
.badge.error { background: var(--error); } .badge.skipped { background: var(--skipped); }
.badge.note { background: var(--note); }
section.run { border-top: 3px solid var(--line); margin-top: 28px; padding-top: 14px; }
section.run.failed { border-top-color: var(--failed); } section.run.error { border-top-color: var(--error); }
section.run.passed { border-top-color: var(--passed); }
dl.facts { display: flex; flex-wrap: wrap; gap: 2px 24px; margin: 0 0 .8em; }
dl.facts div { display: flex; gap: 8px; } dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; }
tr.failed td:first-child, tr.error td:first-child { font-weight: 600; }
ul.notes { padding-left: 1.2em; } ul.notes li { margin: .2em 0; }
article.problem { border-left: 4px solid var(--failed); background: #fffafa; padding: 10px 14px; margin: 14px 0;
                  border-radius: 0 4px 4px 0; }
article.problem.error { border-left-color: var(--error); background: #faf8ff; }
.plots { display: flex; flex-wrap: wrap; gap: 16px; margin: .6em 0; }
figure { margin: 0; background: white; border: 1px solid var(--line); border-radius: 4px; padding: 8px;
         max-width: 460px; }
figcaption { font-size: .85em; color: var(--muted); margin-top: 4px; }
figcaption b { color: var(--ink); }
details { margin: .5em 0; } summary { cursor: pointer; color: var(--muted); }
ul.tree { list-style: none; padding-left: 0; } ul.tree ul.tree { padding-left: 1.5em; }
ul.tree details { margin: 0; } ul.tree summary { color: inherit; }
p.where { margin: .3em 0; }
table.kv { font-size: .9em; } table.kv th { white-space: nowrap; padding-right: 14px; }
table.rows { font-size: .9em; } .wide { overflow-x: auto; max-width: 100%; }
footer { margin-top: 36px; color: var(--muted); font-size: .85em; }
"""


@reporter("html", title="one self-contained page, with plots where gradients disagree", suffix=".html")
def render(report: Report) -> str:
    verdict = "passed" if report.passed else "failed"
    html = ET.Element("html", lang="en")
    head = ET.SubElement(html, "head")
    ET.SubElement(head, "meta", charset="utf-8")
    ET.SubElement(head, "meta", name="viewport", content="width=device-width, initial-scale=1")
    ET.SubElement(head, "title").text = f"layercheck {verdict}: {summary_line(report)}"
    ET.SubElement(head, "style").text = _CSS
    body = ET.SubElement(html, "body")
    body.append(_header(report, verdict))
    if report.scan is not None:
        body.append(_scan_tree(report))
    if len(report.runs) > 1:
        body.append(_overview(report))
    for number, run in enumerate(report.runs, start=1):
        body.append(_run_section(run, f"run-{number}"))
    footer = ET.SubElement(body, "footer")
    footer.text = f"layercheck {report.version} · report schema {report.SCHEMA}"
    return "<!DOCTYPE html>\n" + ET.tostring(html, encoding="unicode", method="html") + "\n"


def _header(report: Report, verdict: str) -> ET.Element:
    header = ET.Element("header")
    h1 = ET.SubElement(header, "h1")
    _badge(h1, verdict)
    _tail(h1, "layercheck report")
    _element(header, "p", summary_line(report), cls="summary")
    env = report.environment
    facts = [f"layercheck {report.version}", f"torch {env.get('torch', '?')}", f"python {env.get('python', '?')}",
             f"devices {', '.join(map(str, env.get('devices', []))) or '?'}"]
    _element(header, "p", " · ".join(facts), cls="env")
    return header


def _scan_tree(report: Report) -> ET.Element:
    """A model's scan: its layers as a tree of module paths, each linking to its run's section;
    the branches holding a failure open, the others folded (as a run's passed checks are)."""
    from layercheck.reporting.scan_tree import branches, summary

    section = ET.Element("section", {"class": "scan"})
    _element(section, "h2", "Model scan")
    _element(section, "p", summary(report), cls="summary")
    anchors = {run.target: f"run-{number}" for number, run in enumerate(report.runs, start=1)}
    section.append(_tree(branches(report), anchors))
    return section


def _tree(level: Sequence[Branch], anchors: Mapping[str, str]) -> ET.Element:
    tree = ET.Element("ul", {"class": "tree"})
    for branch in level:
        item = ET.SubElement(tree, "li", {"class": branch.status})
        fold = ET.SubElement(item, "details", {"open": "open"} if branch.fails else {}) if branch.below else None
        line = item if fold is None else ET.SubElement(fold, "summary")
        _badge(line, branch.status)
        target = branch.row["target"]
        holder = ET.SubElement(line, "a", href=f"#{anchors[target]}") if target in anchors else line
        _element(holder, "code", branch.text)
        if fold is not None:
            fold.append(_tree(branch.below, anchors))
    return tree


def _overview(report: Report) -> ET.Element:
    """One row per layer, linking to its section."""
    table = ET.Element("table", {"class": "overview"})
    numbers = ["passed", "failed", "skipped", "errors", "notes", "time"]
    _head_row(table, ["layer", "status", *numbers], numeric=numbers)
    for number, run in enumerate(report.runs, start=1):
        tr = ET.SubElement(table, "tr", {"class": run.status.value})
        link = ET.SubElement(ET.SubElement(tr, "td"), "a", href=f"#run-{number}")
        _element(link, "code", run.target)
        _badge(ET.SubElement(tr, "td"), run.status.value)
        for value in (*run.summary.values(), len(labelled_notes(run.results))):
            _element(tr, "td", str(value), cls="num")
        _element(tr, "td", f"{run.seconds:.2f} s", cls="num")
    return table


def _run_section(run: RunReport, anchor: str) -> ET.Element:
    section = ET.Element("section", {"class": f"run {run.status.value}", "id": anchor})
    h2 = ET.SubElement(section, "h2")
    _badge(h2, run.status.value)
    _element(h2, "code", run.target)
    section.append(_facts(run))
    if run.error is not None:
        _element(section, "p", "The layer could not be loaded or constructed:")
        _element(section, "pre", run.error, cls="load-error")
        return section
    ordered = sorted(run.results, key=lambda r: _ORDER[r.status])
    folded = skipped_as(ordered, NOT_APPLICABLE)
    shown = [r for r in ordered if r.status is not Status.PASSED and r not in folded]
    passed = [r for r in ordered if r.status is Status.PASSED]
    if shown:
        section.append(_checks_table(shown, anchor))
    for results, what in ((passed, "passed"), (folded, "do not apply here")):
        if results:
            fold = ET.SubElement(section, "details", {"class": "checks"})
            _element(fold, "summary", f"{len(results)} check{'s' * (len(results) != 1)} {what}")
            fold.append(_checks_table(results, anchor))
    notes = labelled_notes(run.results)
    if notes:
        _element(section, "h3", "Notes")
        ul = ET.SubElement(section, "ul", {"class": "notes"})
        for name, note in notes:
            li = ET.SubElement(ul, "li")
            _element(li, "code", name)
            _tail(li, f": {note}")
    problems = [r for r in ordered if r.status in (Status.FAILED, Status.ERROR)]
    if problems:
        _element(section, "h3", "Failures and errors")
        for result in problems:
            section.append(_problem(run, result, _result_anchor(anchor, result)))
    return section


def _facts(run: RunReport) -> ET.Element:
    inputs = ", ".join(input_text(i) for i in run.inputs)
    backward = {True: "yes (hand-written)", False: "no (autograd)", None: "unknown"}[run.custom_backward]
    facts = [("status", run.status.value),
             ("summary", counts_text(run.summary, notes=len(labelled_notes(run.results)))),
             ("kind", run.kind or "unknown"), ("inputs", inputs or "none"), ("seed", str(run.seed)),
             ("time", f"{run.seconds:.2f} s"), ("custom backward", backward)]
    interpreted = interpreted_text(run)
    if interpreted is not None:
        facts.append(("kernels", interpreted))
    if run.location and run.location.get("frames"):  # the constructor raised: there, and the user's frames
        facts.append(("raised at", f"{location_text(run.location)} in {run.location.get('name')}"))
        defined = run.location.get("defined")
        if isinstance(defined, Mapping) and defined.get("file"):
            facts.append(("defined at", location_text(defined)))
    elif run.location:
        facts.append(("defined at", location_text(run.location)))
        backward_at = run.location.get("backward")
        if isinstance(backward_at, Mapping) and backward_at.get("file"):
            facts.append(("backward at", f"{location_text(backward_at)} ({backward_at.get('name', 'backward')})"))
    dl = ET.Element("dl", {"class": "facts"})
    for name, value in facts:  # each pair in a div, which HTML allows in a dl: the pairs wrap as one
        pair = ET.SubElement(dl, "div")
        _element(pair, "dt", name)
        mono = name in ("inputs", "defined at", "backward at", "raised at")
        _element(pair, "dd", value, cls="mono" if mono else None)
    return dl


def _checks_table(results: list[CheckResult], anchor: str) -> ET.Element:
    table = ET.Element("table", {"class": "checks"})
    _head_row(table, ["status", "check", "time", "message"], numeric=["time"])
    for result in results:
        tr = ET.SubElement(table, "tr", {"class": result.status.value})
        _badge(ET.SubElement(tr, "td"), result.status.value)
        cell = ET.SubElement(tr, "td")
        if result.status in (Status.FAILED, Status.ERROR):
            cell = ET.SubElement(cell, "a", href=f"#{_result_anchor(anchor, result)}")
        _element(cell, "code", label(result))
        _element(tr, "td", f"{result.seconds:.2f} s", cls="num")
        _element(tr, "td", short(result.message, MESSAGE_LIMIT), cls="message")
    return table


def _problem(run: RunReport, result: CheckResult, anchor: str) -> ET.Element:
    """A failure or error: the whole message, where in the layer's code, plots, how to reproduce
    it, the traceback, and the check's internals folded."""
    article = ET.Element("article", {"class": f"problem {result.status.value}", "id": anchor})
    h4 = ET.SubElement(article, "h4")
    _badge(h4, result.status.value)
    _element(h4, "code", label(result))
    _element(article, "pre", result.message, cls="message")
    where = result_location(run, result)
    if where is not None and where.get("file"):
        p = _element(article, "p", "Where: ", cls="where")
        _element(p, "code", location_text(where))
        if where.get("name"):
            _tail(p, f" ({where['name']})")
    if result.status is Status.FAILED:
        figures = gradient_figures(result.details)
        if figures:
            plots = ET.SubElement(article, "div", {"class": "plots"})
            for figure in figures:
                element = ET.SubElement(plots, "figure")
                element.append(figure.svg)
                caption = ET.SubElement(element, "figcaption")
                _element(caption, "b", figure.title)
                _tail(caption, f". {figure.caption}")
    if "reproduce" in result.details:
        p = _element(article, "p", "Reproduce: ", cls="reproduce")
        _element(p, "code", str(result.details["reproduce"]))
    if "traceback" in result.details:
        _element(article, "p", "Traceback:", cls="muted")
        _element(article, "pre", str(result.details["traceback"]), cls="traceback")
    rest = {k: v for k, v in result.details.items() if k not in _APART}
    if rest:  # what the check measured: for whoever digs, not the first thing to read
        folded = ET.SubElement(article, "details", {"class": "internals"})
        _element(folded, "summary", "internals: what the check measured")
        wide = ET.SubElement(folded, "div", {"class": "wide"})
        wide.append(_mapping(rest))
    return article


# -- details as key/value tables ----------------------------------------------------------------


def _mapping(data: Mapping[str, Any]) -> ET.Element:
    table = ET.Element("table", {"class": "kv"})
    for key, value in data.items():
        tr = ET.SubElement(table, "tr")
        _element(tr, "th", str(key))
        _value(ET.SubElement(tr, "td"), value)
    return table


def _value(cell: ET.Element, value: Any) -> None:
    """``value`` inside ``cell``, readable: numbers to 6 digits, lists of records as tables."""
    if isinstance(value, Mapping):
        if value:
            cell.append(_mapping(value))
        else:
            cell.text = "none"
    elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Mapping) for v in value):
        if all(_flat(v) for v in value):
            cell.append(_records(value))
        else:
            for item in value:
                cell.append(_mapping(item))
    elif isinstance(value, (list, tuple)):
        cell.text = printable(", ".join(_scalar(v) for v in value)) if value else "none"
    elif isinstance(value, str) and "\n" in value:
        _element(cell, "pre", value)
    else:
        cell.text = printable(_scalar(value))


def _records(rows: list[Mapping[str, Any]] | tuple[Mapping[str, Any], ...]) -> ET.Element:
    """Records that share keys, one row each."""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    table = ET.Element("table", {"class": "rows"})
    _head_row(table, keys)
    for row in rows:
        tr = ET.SubElement(table, "tr")
        for key in keys:
            _value(ET.SubElement(tr, "td", {"class": "mono"}), row.get(key, ""))
    return table


def _flat(record: Mapping[str, Any]) -> bool:
    """No nested records: fits a row of a table."""
    return not any(isinstance(v, Mapping) or (isinstance(v, (list, tuple)) and any(isinstance(i, Mapping) for i in v))
                   for v in record.values())


def _scalar(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return f"({', '.join(_scalar(v) for v in value)})"
    return str(value)


# -- small builders ---------------------------------------------------------------------------


def _element(parent: ET.Element, tag: str, text: str, *, cls: str | None = None) -> ET.Element:
    element = ET.SubElement(parent, tag, {"class": cls} if cls else {})
    element.text = printable(text)
    return element


def _badge(parent: ET.Element, status: str) -> None:
    _element(parent, "span", status, cls=f"badge {status}").tail = " "  # copied text keeps the words apart


def _tail(parent: ET.Element, text: str) -> None:
    """Text after the last child of ``parent`` (ElementTree keeps it in that child's tail)."""
    if len(parent):
        last = parent[-1]
        last.tail = (last.tail or "") + printable(text)
    else:
        parent.text = (parent.text or "") + printable(text)


def _head_row(table: ET.Element, names: list[str], *, numeric: Collection[str] = ()) -> None:
    tr = ET.SubElement(table, "tr")
    for name in names:
        _element(tr, "th", name, cls="num" if name in numeric else None)


def _result_anchor(anchor: str, result: CheckResult) -> str:
    return f"{anchor}-" + re.sub(r"[^A-Za-z0-9_-]+", "-", label(result)).strip("-")
