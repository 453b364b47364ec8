"""The Markdown report (SPEC section 8): a summary fit for a pull-request comment.

A headline with the overall verdict and the MATLAB-style summary line; then each target that
did not pass, in the order given, with a table of the checks that did not pass (the first line of
each message; a long one whole in a ``<details>`` block below the table), how to reproduce its
failures, its passed checks folded (``<details>``) and its notes; then the targets that passed,
one table row each, and their notes. A comment on a pull request that checks hundreds of layers
stays readable, and under GitHub's step-summary limit (docs/reference/reports.md gives its size
for 100 and 1,000 layers).
"""

from __future__ import annotations

import re

from layercheck.parent.result import CheckResult, Report, RunReport, Status
from layercheck.reporting.details import (
    NOT_JUDGED,
    counts_text,
    input_text,
    interpreted_text,
    label,
    labelled_notes,
    short,
    skipped_as,
    summary_line,
)
from layercheck.reporting.registry import reporter

ICONS = {Status.PASSED: "✅", Status.FAILED: "❌", Status.ERROR: "⚠️", Status.SKIPPED: "⏭️"}

# Failures first: they are what the reader of a PR comment came for.
_ORDER = {Status.FAILED: 0, Status.ERROR: 1, Status.SKIPPED: 2, Status.PASSED: 3}

SHORT = 160
"""Characters of a message shown in a table cell; a longer one is cut there at a word, and given
whole in a ``<details>`` block under the table."""


@reporter("markdown", title="a summary for a pull-request comment", suffix=".md")
def render(report: Report) -> str:
    verdict = "passed" if report.passed else "failed"
    count = len(report.runs)
    bad = sum(run.status is not Status.PASSED for run in report.runs)
    headline = f"## {ICONS[Status.PASSED] if report.passed else ICONS[Status.FAILED]} layercheck {verdict}"
    if count > 1:
        headline += f": {count - bad} of {count} layers valid"
    env = report.environment
    lines = [
        headline,
        "",
        (f"**{summary_line(report)}** · layercheck {report.version}, torch {env.get('torch', '?')}, "
         f"python {env.get('python', '?')}, devices {', '.join(map(str, env.get('devices', []))) or '?'}"),
        "",
    ]
    lines += _scan_section(report)
    for run in report.runs:
        if run.status is not Status.PASSED:  # what the reader of a PR comment came for, first
            lines += _run_section(run)
    lines += _passed_section([run for run in report.runs if run.status is Status.PASSED])
    return "\n".join(lines).rstrip("\n") + "\n"


def _passed_section(runs: list[RunReport]) -> list[str]:
    """The targets that passed, one row each (their counts, inputs, time), then their notes."""
    if not runs:
        return []
    lines = [f"### {ICONS[Status.PASSED]} {len(runs)} passed" if len(runs) > 1 else
             f"### {ICONS[Status.PASSED]} passed", "", "| layer | checks | inputs | time |", "|---|---|---|---:|"]
    notes: list[str] = []
    for run in runs:
        labelled = labelled_notes(run.results)
        unjudged = skipped_as(run.results, NOT_JUDGED)  # a pass that did not judge everything says which
        counts = counts_text(run.summary, notes=len(labelled), nonzero=True, not_judged=len(unjudged))
        if run.interpreter is not None:
            counts += f" · **{interpreted_text(run)}**"
        inputs = ", ".join(f"`{_code(input_text(i))}`" for i in run.inputs)
        lines.append(f"| `{_code(run.target)}` | {_cell(counts)} | {inputs} | {run.seconds:.2f} s |")
        notes += [f"- `{_code(run.target)}` `{_code(name)}`: {_cell(note)}" for name, note in labelled]
        notes += [f"- `{_code(run.target)}` `{_code(label(r))}` not judged: {_cell(r.message)}" for r in unjudged]
    lines.append("")
    if notes:
        lines += ["Notes:", "", *notes, ""]
    return lines


def _scan_section(report: Report) -> list[str]:
    """A model's scan: the tree of its layers, each with its verdict (layercheck scan)."""
    if report.scan is None:
        return []
    from layercheck.reporting.scan_tree import lines, summary

    icons = {status.value: icon for status, icon in ICONS.items()}
    return [f"**Model scan**: {summary(report)}", "",
            *(f"- {icons.get(status, '')} {status} `{_code(text)}`" for _, status, text in lines(report)),
            ""]


def _run_section(run: RunReport) -> list[str]:
    lines = [f"### {ICONS[run.status]} `{_code(run.target)}`: {run.status.value}", ""]
    if run.error is not None:
        return [*lines, f"The layer could not be checked: {_cell(run.error)}", ""]
    notes = labelled_notes(run.results)
    facts = [counts_text(run.summary, notes=len(notes), nonzero=True)]
    facts.append("inputs " + ", ".join(f"`{_code(input_text(i))}`" for i in run.inputs))
    if run.custom_backward:
        facts.append("hand-written backward")
    if run.interpreter is not None:
        facts.append(f"**{interpreted_text(run)}**")
    facts.append(f"seed {run.seed}")
    facts.append(f"{run.seconds:.2f} s")
    lines += [" · ".join(f for f in facts if f), ""]
    ordered = sorted(run.results, key=lambda r: _ORDER[r.status])
    # The checks that did not pass, how to reproduce its failures, then the checks that passed, folded.
    shown = [r for r in ordered if r.status is not Status.PASSED]
    folded = ordered[len(shown):]
    if shown:
        lines += [*_table(shown), "", *_whole_messages(shown)]
        reproduce = [(label(r), r.details["reproduce"]) for r in shown if "reproduce" in r.details]
        if reproduce:
            lines += ["Reproduce:", "", "```sh", *(f"{cmd}  # {name}" for name, cmd in reproduce), "```", ""]
    if folded:
        what = f"the {len(folded)} that passed"
        lines += [f"<details><summary>{what}</summary>", "", *_table(folded), "", *_whole_messages(folded),
                  "</details>", ""]
    if notes:  # outside the fold: they are there to be read
        lines += ["Notes:", "", *(f"- `{_code(name)}`: {_cell(note)}" for name, note in notes), ""]
    return lines


def _table(results: list[CheckResult]) -> list[str]:
    rows = ["| status | check | time | message |", "|---|---|---:|---|"]
    for r in results:
        rows.append(f"| {ICONS[r.status]} {r.status.value} | `{_code(label(r))}` | {r.seconds:.2f} s "
                    f"| {_cell(short(r.message, SHORT))} |")
    return rows


def _whole_messages(results: list[CheckResult]) -> list[str]:
    """A folded block per message the table cut, holding the whole of it."""
    lines: list[str] = []
    for r in results:
        if short(r.message, SHORT) != r.message:
            summary = f"{ICONS[r.status]} <code>{_html(label(r))}</code>: the whole message"
            lines += [f"<details><summary>{summary}</summary>", "", _paragraph(r.message), "", "</details>", ""]
    return lines


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _paragraph(text: str) -> str:
    """Text as one Markdown paragraph, shown as written: raw HTML and emphasis escaped, line breaks kept."""
    text = re.sub(r"([\\`*_\[\]#~])", r"\\\1", _html(text.strip()))
    return text.replace("\r\n", "\n").replace("\n", "<br>\n")


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell: no pipes, newlines or raw HTML."""
    text = _html(text)
    return text.replace("|", "\\|").replace("\r\n", "\n").replace("\n", "<br>")


def _code(text: str) -> str:
    return text.replace("`", "'").replace("|", "\\|")
