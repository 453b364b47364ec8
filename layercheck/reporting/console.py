"""The terminal report: per target a line of counts and one line per check that did not pass
(the whole table under --verbose), failures spelled out, the MATLAB-style summary."""

from __future__ import annotations

import contextlib
import io
import textwrap
from collections.abc import Iterator, Mapping
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.padding import Padding
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from layercheck.parent.result import Report, RunReport, Status
from layercheck.parent.traces import trace_text
from layercheck.reporting.details import (
    NOT_APPLICABLE,
    NOT_JUDGED,
    counts_text,
    details_text,
    interpreted_text,
    label,
    labelled_notes,
    skipped_as,
    summary_line,
)
from layercheck.reporting.registry import reporter

STYLES = {
    Status.PASSED: "green",
    Status.FAILED: "bold red",
    Status.SKIPPED: "yellow",
    Status.ERROR: "bold magenta",
}
NOTE_STYLE = "cyan"


def run_lines(run: RunReport) -> RenderableType:
    """The compact view of one target: its status and counts, then one line per check that did
    not pass and per note, cut to the terminal's width (the failures are spelled out below)."""
    notes = labelled_notes(run.results)
    title = Text.assemble((run.target, "bold"), " ", (run.status.value, STYLES[run.status]))
    if run.error is not None:
        return Group(title, Padding(Text.assemble(("error: ", STYLES[Status.ERROR]), run.error), (0, 0, 0, 2),
                                    expand=False), *_raised(run))
    not_judged = len(skipped_as(run.results, NOT_JUDGED))
    title.append(f"  {counts_text(run.summary, notes=len(notes), nonzero=True, not_judged=not_judged)} "
                 f"({run.seconds:.1f}s)")
    if run.interpreter is not None:  # its Triton kernels were not compiled: a CI reader must see it
        title.append(f"  [{interpreted_text(run)}]", NOTE_STYLE)
    # Checks that do not apply (no GPU, no custom operator) share one line; --verbose lists them.
    folded = skipped_as(run.results, NOT_APPLICABLE)
    # Checks skipped for the same reason share a line (op_schema, op_fake, ...: no custom operator).
    rows: dict[tuple[str, str], list[str]] = {}
    for r in run.results:
        if r.status is not Status.PASSED and r not in folded:
            rows.setdefault((r.status.value, " ".join(r.message.split())), []).append(label(r))
    for name, note in notes:
        rows.setdefault(("note", " ".join(note.split())), []).append(name)
    lines = [Text.assemble("  ", (f"{status:<8}", NOTE_STYLE if status == "note" else STYLES[Status(status)]),
                           (", ".join(names), "bold"), ": ", message, no_wrap=True, overflow="ellipsis")
             for (status, message), names in rows.items()]
    if folded:
        lines.append(Text.assemble("  ", (f"{'skipped':<8}", STYLES[Status.SKIPPED]),
                                   f"{len(folded)} that do not apply (-v lists them): ",
                                   (", ".join(label(r) for r in folded), "dim"), no_wrap=True, overflow="ellipsis"))
    return Group(title, *lines)


def run_table(run: RunReport, *, verbose: bool = False, width: int | None = None) -> RenderableType:
    """Every check of one target, one row each; where ``width`` leaves the message column fewer
    than MESSAGE_ROOM characters, each message goes on its own lines under its row."""
    title = f"{run.target} [{run.status.value}]" + (f" [{interpreted_text(run)}]" if run.interpreter else "")
    if run.error is not None:
        return Group(Text.assemble((title, "bold"), "\n", ("error: ", STYLES[Status.ERROR]), run.error), *_raised(run))
    if width is not None and _message_room(run, width) < MESSAGE_ROOM:
        return _stacked(run, title)
    table = Table(title=Text(title), title_justify="left", show_lines=False, expand=False)  # not markup: "[passed]"
    table.add_column("check", no_wrap=True)
    table.add_column("variant", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("message", overflow="fold")
    for r in run.results:
        message = r.message if verbose or len(r.message) <= 300 else r.message[:297] + "..."
        table.add_row(r.check, r.variant, Text(r.status.value, style=STYLES[r.status]),
                      f"{r.seconds:.2f}s", escape(message))
    return table


def _raised(run: RunReport) -> list[RenderableType]:
    """Where the user's code raised when the layer could not be built: their frames, whole lines."""
    trace = trace_text(run.location)
    return [Text(trace, style="dim", no_wrap=True)] if trace else []


MESSAGE_ROOM = 40
"""Characters the table's message column needs; a narrower terminal gets messages under their rows."""


def _message_room(run: RunReport, width: int) -> int:
    """The width run_table's message column would get: what the other columns and the borders leave."""
    fixed = [max([len(r.check) for r in run.results] + [5]), max([len(r.variant) for r in run.results] + [7]),
             len("skipped"), max([len(f"{r.seconds:.2f}s") for r in run.results] + [4])]
    return width - sum(fixed) - 3 * (len(fixed) + 1) - 1


def _stacked(run: RunReport, title: str) -> RenderableType:
    """The table's rows for a narrow terminal: check, status and time on a line, the message
    wrapped at word boundaries under it."""
    names = [label(r) for r in run.results]
    first = max(len(name) for name in names) if names else 0
    parts: list[RenderableType] = [Text(title, style="bold")]
    for name, r in zip(names, run.results):
        parts.append(Text.assemble("  ", (name.ljust(first), "bold"), "  ",
                                   (f"{r.status.value:<7}", STYLES[r.status]), f"  {r.seconds:.2f}s"))
        if r.message:
            parts.append(Padding(Text(r.message), (0, 0, 0, 4)))
    return Group(*parts)


def run_notes(run: RunReport) -> RenderableType | None:
    """The run's notes below its table, one per line, wrapped beside the check they belong to."""
    notes = labelled_notes(run.results)
    if not notes:
        return None
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, style=NOTE_STYLE)
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for name, note in notes:
        grid.add_row("note", Text(name), Text(note))
    return grid


def print_failures(report: Report, console: Console, *, verbose: bool = False) -> None:
    """Each failure or error with its whole message (wrapped at word boundaries, indented),
    the layer's traceback and how to reproduce it (one line each however long, so that they
    can be copied)."""
    for run, r in report.failures():
        console.print(Text.assemble((f"{r.status.value.upper()} ", STYLES[r.status]), (label(r), "bold"),
                                    f" ({run.target}):"))
        console.print(Padding(Text(r.message), (0, 0, 0, 2), expand=False))
        internals = _internals(r.details) if verbose else ""
        if internals:
            console.print(Padding(Text(internals, style="dim"), (0, 0, 0, 4), expand=False))
        trace = r.details.get("traceback")
        if trace and (verbose or r.status is Status.FAILED):
            console.print(Text(str(trace).rstrip("\n"), style="dim"), soft_wrap=True)
        if "reproduce" in r.details:
            command = reproduce_lines(str(r.details["reproduce"]), console.width)
            console.print(Text("\n".join(command), style="cyan"), soft_wrap=True)


# Details a failure's message leaves out, shown under --verbose where they are short: the
# allowance a comparison exceeded (its rounding floor and where that comes from), tolerances.
_NOT_INTERNALS = ("traceback", "reproduce", "output", "warnings")


def _internals(details: Mapping[str, Any]) -> str:
    """The short plain details of a failure (numbers and one-line texts), one ``key: value`` a line."""
    return details_text({key: value for key, value in details.items() if key not in _NOT_INTERNALS
                         and isinstance(value, (str, int, float)) and len(str(value)) <= 200})


def reproduce_lines(command: str, width: int) -> list[str]:
    """``  reproduce: COMMAND`` on one line where it fits in ``width``, else a shell command
    broken between its words with ``\\`` continuations, so that it still pastes into a shell
    and no word is cut by the terminal. A Python expression (the API's) is left whole."""
    lead = "  reproduce: "
    if len(lead) + len(command) <= width or not command.startswith("layercheck "):
        return [lead + command]
    lines: list[str] = []
    line, empty = lead.rstrip(), True
    for word in _shell_words(command):
        if not empty and len(line) + 1 + len(word) + 2 > width:  # room for " \\"
            lines.append(line + " \\")
            line = "     "
        line, empty = f"{line} {word}", False
    return [*lines, line]


def _shell_words(command: str) -> list[str]:
    """``command`` split at the spaces outside quotes, each word as written (quotes kept)."""
    words, word, quote = [], "", ""
    for char in command:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == " ":
            if word:
                words.append(word)
            word = ""
            continue
        word += char
    return [*words, word] if word else words


def printed_and_warned(report: Report) -> RenderableType | None:
    """What the layer printed and warned during each check (the details ``output`` and
    ``warnings``), for --verbose."""
    lines: list[RenderableType] = []
    for run in report.runs:
        for r in run.results:
            output, warned = str(r.details.get("output") or ""), r.details.get("warnings") or []
            if output:
                lines.append(Text.assemble(("output ", NOTE_STYLE), (label(r), "bold"), f" ({run.target}):"))
                lines.append(Text(textwrap.indent(output.rstrip("\n"), "  "), style="dim"))
            for warning in warned:
                lines.append(Text.assemble(("warning ", STYLES[Status.SKIPPED]), (label(r), "bold"),
                                           f" ({run.target}): ", str(warning)))
    return Group(*lines) if lines else None


def print_report(report: Report, console: Console, *, verbose: bool = False, quiet: bool = False) -> None:
    """Compact by default (run_lines), the whole table per target under ``verbose``, only the
    failures under ``quiet``; then the failures spelled out and the summary line."""
    if not quiet:
        for run in report.runs:
            if verbose:
                console.print(run_table(run, verbose=True, width=console.width))
                notes = run_notes(run)
                if notes is not None:
                    console.print(notes)
            else:
                console.print(run_lines(run))
    for run in report.runs:
        if quiet and run.error is not None:
            console.print(Group(Text.assemble((f"ERROR {run.target}: ", STYLES[Status.ERROR]), run.error),
                                *_raised(run)))
    effects = printed_and_warned(report) if verbose else None
    if effects is not None:
        console.print(effects, soft_wrap=True)
    print_failures(report, console, verbose=verbose)
    startup = report.environment.get("startup_seconds")
    if startup is not None and not quiet:  # a run of several targets: not in the first one's time
        console.print(Text(f"start-up {float(startup):.1f}s (Python, torch and the checks imported once, before the "
                           "first target; in no target's time)", style="dim"))
    if report.scan is not None:
        console.print(scan_tree(report))
    style = "green" if report.passed else "red"
    console.print(Text(summary_line(report), style=f"bold {style}"))


def scan_tree(report: Report) -> RenderableType:
    """A model's scan as a tree of module paths, each kind of layer with its verdict."""
    from layercheck.reporting.scan_tree import lines, summary

    words = {"passed": Status.PASSED, "failed": Status.FAILED, "error": Status.ERROR, "skipped": Status.SKIPPED}
    rows: list[RenderableType] = [Text("model scan: " + summary(report), style="bold")]
    for depth, status, text in lines(report):
        style = STYLES[words[status]] if status in words else ""
        rows.append(Text.assemble("  " * (depth + 1), (f"{status:<8}", style), " ", text))
    return Group(*rows)


def render_text(report: Report, *, width: int = 120, verbose: bool = False) -> str:
    """The terminal report as plain text (no colour)."""
    buffer = io.StringIO()
    print_report(report, Console(file=buffer, width=width, color_system=None, force_terminal=False), verbose=verbose)
    return "".join(line.rstrip(" ") + "\n" for line in buffer.getvalue().splitlines())  # no padding in a file


@reporter("table", title="the terminal's tables as plain text, whole messages and tracebacks", suffix=".txt")
def render(report: Report) -> str:
    return render_text(report, verbose=True)


@contextlib.contextmanager
def progress_display(console: Console, *, enabled: bool = True) -> Iterator[object]:
    """A transient progress bar on ``console`` while checks run; yields the runner's callback."""
    if not enabled or not console.is_terminal:
        yield None
        return
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=console, transient=True)
    tasks: dict[str, TaskID] = {}

    def update(target: str, check: str, index: int, total: int) -> None:
        if target not in tasks:
            tasks[target] = bar.add_task(target, total=total or None)  # 0: not known yet (starting)
        bar.update(tasks[target], completed=index, total=total or None, description=f"{target}: {check}")

    with bar:
        yield update
