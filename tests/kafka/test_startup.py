"""Start-up and restart of the broker process itself."""

from __future__ import annotations

import socket

import pytest

from strand_harness import BrokerStartError, StartupPanic, api_versions_v0, tail


def tail_line(text: str, prefer: str = "") -> str:
    lines = text.strip().splitlines() or [""]
    for line in lines:
        if prefer and prefer in line:
            return line.strip()
    return lines[-1].strip()


STARTS = 30


def test_smp2_start_then_sigterm_is_clean_every_time(strand):
    """STARTS times: start with --smp 2, and SIGTERM as soon as a request is answered.
    Every start must serve, and every SIGTERM must exit 0 within 5 s (a clean stop takes
    well under 100 ms).

    Regression test for a start-up race: every shard used to write, open and delete the
    same `<data-dir>/.strand-iopoll-probe` file (storage::io::prime_device_probe), so a
    shard could panic in glommio's DmaFile::open_at (`statfs(path).unwrap()`: ENOENT);
    the broker then never listened, or served on the surviving shard and exited 1 on
    SIGTERM (about one start in five on a 2-core machine).

    FIXME(broker bug): a SIGTERM that arrives while shard 0 is still creating
    `__consumer_offsets` (ensure_offsets_topic, after the first requests are already
    answered) hangs the process: shard 1 logs "shard stopped", shard 0 never does, and
    strand does not exit (about one start in ten here)."""
    failures = []
    tried = 0
    for i in range(STARTS):
        if len(failures) >= 3:  # enough to show the bug; each hang costs the stop deadline
            break
        tried += 1
        b = strand(name=f"s{i}", smp=2, start=False)
        try:
            b.start()
        except StartupPanic as e:
            failures.append(f"start {i}: shard panic: {e.first_line()}")
            b.kill9()
            continue
        except BrokerStartError as e:
            failures.append(f"start {i}: {tail_line(str(e))}")
            b.kill9()
            continue
        try:
            rc = b.stop(deadline_s=5)
        except AssertionError as e:
            failures.append(f"start {i}: {str(e).splitlines()[0]}; last log line: "
                            f"{tail_line(str(e))}")
            continue
        if rc != 0:
            failures.append(f"start {i}: exit {rc} after SIGTERM: "
                            f"{tail_line(tail(b.stderr_path, 200), 'panicked at')}")
        else:
            b.cleanup()  # keep only the data dirs of failed starts
    assert not failures, f"{len(failures)} of {tried} starts failed:\n" + "\n".join(failures)


@pytest.mark.parametrize("how", ["kill9", "sigterm"])
def test_restart_on_the_same_port_with_connections_in_time_wait(strand, how):
    """A broker restarted on its old address must come up at once, as Kafka does, even
    though the old process's accepted connections are in TIME_WAIT.

    FIXME(broker bug): the start-up check `preflight::check` binds a std TcpListener
    (SO_REUSEADDR only), but the old listeners were glommio ones (SO_REUSEPORT only), so
    the kernel refuses the bind while their sockets are in TIME_WAIT (60 s) and strand
    exits with "cannot listen on ...: another process uses the port"."""
    b = strand(smp=1)
    port = b.port
    # An idle client connection that the broker side closes first (kill -9 / shutdown):
    # the broker's end of it goes through FIN_WAIT to TIME_WAIT.
    c = socket.create_connection(("127.0.0.1", port), timeout=5)
    api_versions_v0(c)
    if how == "kill9":
        b.kill9()
    else:
        assert b.stop() == 0
    # Wait until our end sees the close, then close it too.
    c.settimeout(10)
    assert c.recv(1) == b""
    c.close()
    b.restart(same_port=True)
    assert b.port == port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.settimeout(5)
        err, ranges = api_versions_v0(s)
        assert err == 0 and ranges
