"""The JUnit XML report (SPEC section 8), the format CI systems read.

One ``testsuite`` per target and one ``testcase`` per check and variant. A failed check
carries a ``failure`` element, a check that could not complete an ``error`` element, a
skipped one a ``skipped`` element; each has the message as its ``message`` attribute and
the details (traceback, reproduce command) as its text. A check's notes, and a passing
check's message, are its ``system-out``. A target that could not be loaded or constructed
has no checks to list: its suite holds one testcase, ``load``, with an ``error`` element
giving the reason, so CI marks it red rather than empty.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from layercheck.parent.result import CheckResult, Report, RunReport, Status
from layercheck.reporting.details import details_text, input_text, interpreted_text, label, location_text, printable
from layercheck.reporting.registry import reporter

LOAD_CASE = "load"
"""Name of the testcase that stands for a target which could not be loaded or constructed."""

_ELEMENT = {Status.FAILED: "failure", Status.ERROR: "error", Status.SKIPPED: "skipped"}


@reporter("junit", title="JUnit XML, one testsuite per layer, for CI systems", suffix=".xml")
def render(report: Report) -> str:
    root = ET.Element("testsuites", name="layercheck")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for run in report.runs:
        suite = _suite(run, report)
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", _seconds(report.seconds))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _suite(run: RunReport, report: Report) -> ET.Element:
    summary = run.summary  # a load error counts as an error there
    suite = ET.Element(
        "testsuite",
        name=printable(run.target),
        tests=str(len(run.results) + (run.error is not None)),
        failures=str(summary["failed"]),
        errors=str(summary["error"]),
        skipped=str(summary["skipped"]),
        time=_seconds(run.seconds),
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in _properties(run, report):
        ET.SubElement(properties, "property", name=name, value=printable(value))
    if run.error is not None:
        case = ET.SubElement(suite, "testcase", classname=printable(run.target), name=LOAD_CASE,
                             time=_seconds(run.seconds))
        error = ET.SubElement(case, "error", message=printable(run.error), type="LoadError")
        error.text = printable(run.error)
    for result in run.results:
        suite.append(_case(run, result))
    return suite


def _case(run: RunReport, result: CheckResult) -> ET.Element:
    case = ET.Element("testcase", classname=printable(run.target), name=printable(label(result)),
                      time=_seconds(result.seconds))
    tag = _ELEMENT.get(result.status)
    if tag is not None:
        outcome = ET.SubElement(case, tag, message=printable(result.message))
        if result.status is not Status.SKIPPED:
            outcome.set("type", result.status.value)
            text = "\n\n".join(part for part in (result.message, details_text(result.details)) if part)
            outcome.text = printable(text)
    # What a passing check established, for whoever opens the report, and every check's notes.
    out = [result.message] if tag is None and result.message else []
    out += [f"note: {note}" for note in result.notes]
    if out:
        ET.SubElement(case, "system-out").text = printable("\n".join(out))
    return case


def _properties(run: RunReport, report: Report) -> list[tuple[str, str]]:
    env = report.environment
    return [
        ("kind", str(run.kind)),
        # as --layout reads them, qualifiers kept ("8,10:BT dtype=bool"); "; " between inputs
        ("inputs", "; ".join(input_text(i) for i in run.inputs)),
        ("seed", str(run.seed)),
        ("custom_backward", str(run.custom_backward).lower() if run.custom_backward is not None else "unknown"),
        ("layercheck", report.version),
        ("python", str(env.get("python", ""))),
        ("torch", str(env.get("torch", ""))),
        ("devices", " ".join(map(str, env.get("devices", [])))),
    ] + ([("location", location_text(run.location))] if run.location else []) \
      + ([("triton_interpreter", interpreted_text(run) or "")] if run.interpreter is not None else [])


def _seconds(value: float) -> str:
    return f"{value:.3f}"

