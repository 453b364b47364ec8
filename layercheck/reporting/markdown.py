"""The Markdown report (SPEC section 8): a summary fit for a pull-request comment.

A headline with the overall verdict and the MATLAB-style summary line, then per target a
table of its checks, failures and errors first, with their messages. Targets that passed
keep their table folded (``<details>``) so a long comment stays readable; the commands that
reproduce each failure, and the notes of its checks, follow its table.
"""

from __future__ import annotations

from layercheck.reporting.details import (
    counts_text,
    label,
    labelled_notes,
    summary_line,
)
from layercheck.reporting.registry import reporter
from layercheck.result import CheckResult, Report, RunReport, Status

ICONS = {Status.PASSED: "✅", Status.FAILED: "❌", Status.ERROR: "⚠️", Status.SKIPPED: "⏭️"}

# Failures first: they are what the reader of a PR comment came for.
_ORDER = {Status.FAILED: 0, Status.ERROR: 1, Status.SKIPPED: 2, Status.PASSED: 3}

MESSAGE_LIMIT = 400
"""Characters of a message shown in a table cell; the JSON and JUnit reports keep it whole."""


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
    for run in report.runs:
        lines += _run_section(run)
    return "\n".join(lines).rstrip("\n") + "\n"


def _run_section(run: RunReport) -> list[str]:
    lines = [f"### {ICONS[run.status]} `{_code(run.target)}`: {run.status.value}", ""]
    if run.error is not None:
        return [*lines, f"The layer could not be checked: {_cell(run.error, limit=None)}", ""]
    notes = labelled_notes(run.results)
    facts = [counts_text(run.summary, notes=len(notes), nonzero=True)]
    facts.append("inputs " + ", ".join(f"`{','.join(map(str, i['size']))}:{i['format']}`" for i in run.inputs))
    if run.custom_backward:
        facts.append("hand-written backward")
    facts.append(f"seed {run.seed}")
    facts.append(f"{run.seconds:.2f} s")
    lines += [" · ".join(f for f in facts if f), ""]
    table = _table(sorted(run.results, key=lambda r: _ORDER[r.status]))
    if run.status is Status.PASSED:
        lines += [f"<details><summary>the {len(run.results)} checks</summary>", "", *table, "", "</details>", ""]
    else:
        lines += [*table, ""]
        reproduce = [(label(r), r.details["reproduce"]) for r in run.results if "reproduce" in r.details]
        if reproduce:
            lines += ["Reproduce:", "", "```sh", *(f"{cmd}  # {name}" for name, cmd in reproduce), "```", ""]
    if notes:  # outside the fold: they are there to be read
        lines += ["Notes:", "", *(f"- `{_code(name)}`: {_cell(note, limit=None)}" for name, note in notes), ""]
    return lines


def _table(results: list[CheckResult]) -> list[str]:
    rows = ["| status | check | time | message |", "|---|---|---:|---|"]
    for r in results:
        rows.append(f"| {ICONS[r.status]} {r.status.value} | `{_code(label(r))}` | {r.seconds:.2f} s "
                    f"| {_cell(r.message)} |")
    return rows


def _cell(text: str, *, limit: int | None = MESSAGE_LIMIT) -> str:
    """Text safe inside a Markdown table cell: no pipes, newlines or raw HTML."""
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|").replace("\r\n", "\n").replace("\n", "<br>")


def _code(text: str) -> str:
    return text.replace("`", "'").replace("|", "\\|")
