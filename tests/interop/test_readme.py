"""The README's quick start as written: the commands of its client block run against one
broker (`make serve`'s, here the module's broker on a free port: `-b` is added where a
command relies on the default 127.0.0.1:9092, kcat's `-b` is replaced) and the records
come back through both consumers. (`make serve` and `make test` themselves are the
broker fixture and the suite; docs/pipelines.md's commands: tests/pipelines/test_docs.py.)"""

from __future__ import annotations

import re
import subprocess

from tests.pipelines.helpers import ROOT, fenced_blocks
from tests.support.deps import require_binary

README = ROOT / "README.md"


def test_the_readme_quick_start_runs_as_written(broker):
    require_binary("kcat")
    block = next(b for b in fenced_blocks(README, "sh") if any("broker topics create clicks" in line for line in b))
    commands = [re.sub(r"\s+#\s.*$", "", line).strip() for line in block]
    commands = [c for c in commands if c and not c.startswith("#")]
    assert len(commands) == 4 and commands[-1].startswith("kcat "), commands
    outputs = []
    for line in commands:
        if "127.0.0.1:9092" in line:
            cmd = line.replace("127.0.0.1:9092", broker.bootstrap)
        else:
            # the default broker: the last command of the line is a `broker` subcommand
            assert ".venv/bin/broker " in line.split("|")[-1] and " -b " not in line, line
            cmd = f"{line} -b {broker.bootstrap}"
        r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"{cmd}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        outputs.append(r.stdout)
    consumed, kcat = outputs[2], outputs[3]
    assert sorted(consumed.splitlines()) == ["user-1\thello", "user-2\tworld"], consumed
    assert sorted(kcat.split()) == ["hello", "world"], kcat
