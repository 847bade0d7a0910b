"""`broker perf` on a terminal: a live progress bar (tqdm) on stderr counting the records
to the run's total, the five-second lines and the summary kept; none with --json or
when the output is not a terminal (the JSON line alone). A real broker, a real pty."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios

from tests.support.broker_proc import BrokerProcess

RECORDS = 30000


def on_a_terminal(cmd: list[str]) -> tuple[int, str]:
    """Runs cmd with stdout and stderr on a pseudo-terminal; (exit code, what it showed)."""
    main, sub = pty.openpty()
    fcntl.ioctl(sub, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # a 120-column terminal
    proc = subprocess.Popen(
        cmd, stdout=sub, stderr=sub, stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "120", "TERM": "xterm"}
    )
    os.close(sub)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the other side is closed
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    return proc.wait(120), out.decode(errors="replace")


def test_perf_shows_a_progress_bar_on_a_terminal_only(tmp_path):
    with BrokerProcess(tmp_path / "data") as broker:
        perf = [sys.executable, "-m", "broker.cli.main", "perf"]
        code, shown = on_a_terminal(
            [
                *perf,
                "produce",
                "-b",
                broker.bootstrap,
                "--topic",
                "bar",
                "--num-records",
                str(RECORDS),
                "--partitions",
                "1",
            ]
        )
        assert code == 0, shown
        # tqdm's bar: "100%|█████| 30.0k/30.0k [00:01<00:00, 25.3krec/s]", drawn as it went; the
        # rate takes tqdm's SI prefix, whatever it came to ("1.62Mrec/s" once on a quiet machine)
        assert re.search(r"100%\|[^|\r\n]*\| 30\.0k/30\.0k \[[0-9:]+<[0-9:]+, +[0-9.]+[kMGT]?rec/s\]", shown), shown
        assert "\r" in shown  # redrawn in place
        assert re.search(rf"\b{RECORDS} records sent, [0-9.]+ records/sec", shown), shown
        code, shown = on_a_terminal(
            [*perf, "consume", "-b", broker.bootstrap, "--topic", "bar", "--num-records", str(RECORDS)]
        )
        assert code == 0 and "30.0k/30.0k" in shown and f"{RECORDS} records consumed" in shown, shown
        # --json, even on a terminal: the JSON line only
        code, shown = on_a_terminal(
            [*perf, "consume", "-b", broker.bootstrap, "--topic", "bar", "--num-records", str(RECORDS), "--json"]
        )
        assert code == 0 and "rec/s" not in shown and json.loads(shown.strip())["records"] == RECORDS
        # not a terminal: no bar
        r = subprocess.run(
            [*perf, "consume", "-b", broker.bootstrap, "--topic", "bar", "--num-records", str(RECORDS)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0 and "rec/s" not in r.stdout + r.stderr and r.stderr == ""
