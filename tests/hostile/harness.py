"""Run a command and say what it left behind (Linux):

    python harness.py [--sigint-when PATH] -- COMMAND...

prints one JSON object: ``rc``, ``stdout``, ``stderr``, ``seconds``, ``leftover`` (processes
still alive two seconds after the command ended, which it started directly or indirectly),
``zombies`` (its descendants seen dead but not reaped for more than a second while it ran)
and ``after_sigint`` (seconds from the SIGINT to the command's end, or None). The harness
makes itself a child subreaper, so that what the command leaves behind is re-parented here,
where it can be found, and is killed before the harness exits. With ``--sigint-when PATH``,
once PATH exists the command's process group gets SIGINT, as a terminal's Ctrl-C sends it
(the command runs in a process group of its own).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

PR_SET_CHILD_SUBREAPER = 36
ZOMBIE_SECONDS = 1.0
LEFTOVER_GRACE = 2.0


def parents() -> dict[int, tuple[int, str]]:
    """Every process: pid -> (parent pid, state letter)."""
    table: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        table[int(entry)] = (int(fields[1]), fields[0])
    return table


def descendants(root: int, table: dict[int, tuple[int, str]]) -> list[int]:
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _) in table.items() if ppid == parent]
        found.extend(children)
        frontier.extend(children)
    return found


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> None:
    split = sys.argv.index("--")
    own, command = sys.argv[1:split], sys.argv[split + 1:]
    marker = own[own.index("--sigint-when") + 1] if "--sigint-when" in own else None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(command, stdout=out, stderr=err, start_new_session=True)
        first_seen_dead: dict[int, float] = {}
        zombies: set[str] = set()
        interrupted: float | None = None
        while proc.poll() is None:
            now, table = time.monotonic(), parents()
            if marker is not None and interrupted is None and os.path.exists(marker):
                os.killpg(proc.pid, signal.SIGINT)
                interrupted = now
            for pid in descendants(proc.pid, table):
                if table[pid][1] == "Z" and now - first_seen_dead.setdefault(pid, now) > ZOMBIE_SECONDS:
                    zombies.add(f"{pid} (child of {table[pid][0]})")
            time.sleep(0.05)
        seconds = time.monotonic() - start
        after_sigint = time.monotonic() - interrupted if interrupted is not None else None
        deadline = time.monotonic() + LEFTOVER_GRACE
        while True:  # orphans come here: reap those that end, wait a little for the others
            reap()
            alive = [pid for pid in descendants(os.getpid(), parents()) if pid != proc.pid]
            if not alive or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        leftover = [f"{pid}: {command_line(pid)}" for pid in alive]
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
        reap()
        out.seek(0)
        err.seek(0)
        print(json.dumps({"rc": proc.returncode, "stdout": out.read().decode(errors="replace"),
                          "stderr": err.read().decode(errors="replace"), "seconds": seconds,
                          "leftover": leftover, "zombies": sorted(zombies), "after_sigint": after_sigint}))


if __name__ == "__main__":
    main()
