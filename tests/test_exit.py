"""The command line ends its process without Python's slow teardown, but with everything a normal
exit does that a user can see: the exit code, atexit handlers, flushed output, running threads."""

import subprocess
import sys

_EXIT = """
import atexit, sys, threading, time
from modelxray.cli import exit_promptly
atexit.register(lambda: print("atexit ran"))
if sys.argv[1] == "thread":
    threading.Thread(target=lambda: (time.sleep(0.5), print("thread finished", flush=True))).start()
print("buffered, no newline", end="")
exit_promptly(int(sys.argv[2]))
print("never")
"""


def _run(mode: str, code: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _EXIT, mode, str(code)], capture_output=True, text=True, timeout=60)


def test_exit_code_atexit_handlers_and_buffered_output_survive():
    proc = _run("plain", 3)
    assert proc.returncode == 3
    assert proc.stdout == "buffered, no newlineatexit ran\n"


def test_a_running_thread_is_waited_for():
    proc = _run("thread", 0)
    assert proc.returncode == 0
    assert "thread finished" in proc.stdout and "atexit ran" in proc.stdout and "never" not in proc.stdout
