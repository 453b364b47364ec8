"""The JUnit XML report (SPEC section 8), the format CI systems read.

One ``testsuite`` per target and one ``testcase`` per check and variant. A failed check
carries a ``failure`` element, a check that could not complete an ``error`` element, a
skipped one a ``skipped`` element; each has the message as its ``message`` attribute and
the details (traceback, reproduce command) as its text. A target that could not be loaded
or constructed has no checks to list: its suite holds one testcase, ``load``, with an
``error`` element giving the reason, so CI marks it red rather than empty.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from layercheck.reporting.details import details_text, label
from layercheck.result import CheckResult, Report, RunReport, Status

LOAD_CASE = "load"
"""Name of the testcase that stands for a target which could not be loaded or constructed."""

# XML 1.0 forbids most control characters, even escaped; layer messages can hold them
# (terminal colour codes in an exception text), and one would make the whole file unreadable.
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

_ELEMENT = {Status.FAILED: "failure", Status.ERROR: "error", Status.SKIPPED: "skipped"}


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
    summary = run.summary
    load_failed = run.error is not None
    suite = ET.Element(
        "testsuite",
        name=_clean(run.target),
        tests=str(len(run.results) + load_failed),
        failures=str(summary["failed"]),
        errors=str(summary["error"] + load_failed),
        skipped=str(summary["skipped"]),
        time=_seconds(run.seconds),
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in _properties(run, report):
        ET.SubElement(properties, "property", name=name, value=_clean(value))
    if run.error is not None:
        case = ET.SubElement(suite, "testcase", classname=_clean(run.target), name=LOAD_CASE, time=_seconds(run.seconds))
        error = ET.SubElement(case, "error", message=_clean(run.error), type="LoadError")
        error.text = _clean(run.error)
    for result in run.results:
        suite.append(_case(run, result))
    return suite


def _case(run: RunReport, result: CheckResult) -> ET.Element:
    case = ET.Element("testcase", classname=_clean(run.target), name=_clean(label(result)),
                      time=_seconds(result.seconds))
    tag = _ELEMENT.get(result.status)
    if tag is None:
        if result.message:  # what a passing check established, for whoever opens the report
            ET.SubElement(case, "system-out").text = _clean(result.message)
        return case
    outcome = ET.SubElement(case, tag, message=_clean(result.message))
    if result.status is not Status.SKIPPED:
        outcome.set("type", result.status.value)
        outcome.text = _clean("\n\n".join(part for part in (result.message, details_text(result.details)) if part))
    return case


def _properties(run: RunReport, report: Report) -> list[tuple[str, str]]:
    env = report.environment
    return [
        ("kind", str(run.kind)),
        ("inputs", " ".join(f"{','.join(map(str, i['size']))}:{i['format']}" for i in run.inputs)),
        ("seed", str(run.seed)),
        ("custom_backward", str(run.custom_backward).lower() if run.custom_backward is not None else "unknown"),
        ("layercheck", report.version),
        ("python", str(env.get("python", ""))),
        ("torch", str(env.get("torch", ""))),
        ("devices", " ".join(map(str, env.get("devices", [])))),
    ]


def _seconds(value: float) -> str:
    return f"{value:.3f}"


def _clean(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
