import pytest

from broker.log.log import Log

from ._support import TP, log_config


@pytest.fixture
def make_log(tmp_path):
    """make_log(overrides=None, directory=None, broker=None, **Log.load kwargs) -> Log;
    closes every log it opened at teardown."""
    opened = []

    def make(overrides=None, directory=None, broker=None, tp=TP, **kwargs):
        cfg = log_config(tmp_path, overrides, **(broker or {}))
        lg = Log.load(str(directory or tmp_path / "t-0"), tp, cfg, **kwargs)
        opened.append(lg)
        return lg

    yield make
    for lg in opened:
        if not lg.closed:
            lg.close()
