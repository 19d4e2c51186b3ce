"""Crash evidence (issue 28): a fatal signal writes the signal, the thread (shard) and a
symbolised backtrace to the broker's log and to `<data_dir>/crash-report.txt` before the
process dies of that signal; the next start logs that the previous run did not exit
cleanly and `/metrics` shows `strand_previous_exit_unclean` with the signal. A kill -9
leaves no report and shows as signal="unknown"; an orderly stop shows 0. A second process
on a data directory in use is refused."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from pathlib import Path

import pytest

from strand_harness import free_port, strand_bin, tail
from test_metrics import scrape

SYS_TGKILL = 234  # x86_64
EXIT_WAIT_S = 60


def _threads(pid: int) -> dict[str, int]:
    """Thread name -> tid (the first of each name)."""
    out: dict[str, int] = {}
    for task in sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda p: int(p.name)):
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        out.setdefault(name, int(task.name))
    return out


def _tgkill(pid: int, tid: int, sig: int):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(SYS_TGKILL, pid, tid, sig) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {tid}, {sig})")


def _previous_exit(broker) -> dict[str, float]:
    fam = scrape(broker)["strand_previous_exit_unclean"]
    return {s.labels["signal"]: s.value for s in fam.samples}


def _die_of(broker, sig: int, thread_prefix: str | None) -> str:
    """Sends `sig` to the broker (to its first thread named `thread_prefix...`, or to the
    process) and waits for it to die of it; returns the name of the thread signalled."""
    pid = broker.proc.pid
    name = "strand"
    if thread_prefix is None:
        os.kill(pid, sig)
    else:
        threads = _threads(pid)
        name = next(n for n in threads if n.startswith(thread_prefix))
        _tgkill(pid, threads[name], sig)
    rc = broker.proc.wait(EXIT_WAIT_S)
    broker.proc = None
    assert rc == -sig, f"strand exited with {rc}, not by signal {sig}:\n{tail(broker.stderr_path)}"
    return name


@pytest.mark.parametrize("sig,thread_prefix", [
    (signal.SIGSEGV, "shard-"),
    (signal.SIGBUS, "shard-"),
    (signal.SIGABRT, None),
])
def test_a_fatal_signal_is_reported_and_the_next_start_shows_it(strand, sig, thread_prefix):
    b = strand(smp=2)
    assert _previous_exit(b) == {"none": 0}
    thread = _die_of(b, sig, thread_prefix)
    log = b.stderr_path.read_text(errors="replace")
    name = signal.Signals(sig).name
    first = f"strand: fatal signal {name}"
    assert first in log, tail(b.stderr_path, 80)
    if thread_prefix is not None:
        # The report names the shard that died.
        assert f"on thread {thread}" in log, tail(b.stderr_path, 80)
    assert "strand: raw frames:" in log
    # Symbolised: function names of the broker appear (release and test builds carry
    # line tables), and the report is complete.
    assert "strand: backtrace:" in log and "runtime/crash.rs" in log, tail(b.stderr_path, 80)
    assert "strand: end of crash report" in log, tail(b.stderr_path, 80)
    report = b.data_dir / "crash-report.txt"
    assert report.read_text().startswith(first)

    b.restart()
    assert _previous_exit(b) == {name: 1}
    second = b.stderr_path.read_text(errors="replace")
    assert "did not exit cleanly" in second and name in second
    assert not report.exists() and (b.data_dir / "crash-report.prev.txt").exists()

    assert b.stop() == 0
    b.restart()
    assert _previous_exit(b) == {"none": 0}


def test_a_kill9_shows_as_an_unclean_exit_of_unknown_cause(strand):
    b = strand(smp=1)
    b.kill9()
    b.restart()
    assert _previous_exit(b) == {"unknown": 1}
    assert not (b.data_dir / "crash-report.txt").exists()


def test_a_second_broker_on_a_data_directory_in_use_is_refused(strand):
    """One process per data directory (an flock held for the process's life): a second
    start on it, with ports of its own, is refused with the fix and erases nothing."""
    b = strand(smp=1)
    args = [str(strand_bin()), "--data-dir", str(b.data_dir), "--smp", "1",
            "--kafka-addr", f"127.0.0.1:{free_port()}", "--admin-addr", f"127.0.0.1:{free_port()}",
            "--native-addr", f"127.0.0.1:{free_port()}", "--native-shard-base-port", "0"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "is in use by another strand process" in r.stderr, r.stderr
    assert f"pid {b.proc.pid}" in r.stderr, r.stderr
    assert (b.data_dir / "strand.running").read_text() == f"pid {b.proc.pid}\n"
    assert _previous_exit(b) == {"none": 0}
    b.kill9()
    b.restart()
    assert _previous_exit(b) == {"unknown": 1}
