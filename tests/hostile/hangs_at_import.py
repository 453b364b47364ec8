"""The module hangs while it is imported, in a wait that no signal interrupts (a native
library waiting with signals blocked): only a limit enforced from outside ends it.

The wait is in C with every signal blocked in the importing thread. Blocking SIGALRM alone
and sleeping in Python is not such a wait: where the process has another thread, the kernel
hands the timer's SIGALRM to that thread, and Python runs its handler in the main thread at the
next bytecode, interrupting the import from inside (seen on a GPU machine, whose worker had
another thread)."""

import ctypes
import signal

from torch import nn

CHECK = None
CAUSE = "while importing the layer"

signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
while True:
    ctypes.CDLL(None).pause()


class Layer(nn.Module):
    def forward(self, x):
        return x
