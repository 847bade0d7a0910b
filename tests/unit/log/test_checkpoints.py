"""Checkpoint files: Kafka's text format, atomic writes, errors naming file and line."""

import os
import re

import pytest

from broker.log.checkpoints import (
    CheckpointError,
    LeaderEpochCheckpoint,
    OffsetCheckpoint,
    TopicPartition,
    write_atomically,
)


def test_offset_checkpoint_round_trip_in_kafkas_format(tmp_path):
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    offsets = {
        TopicPartition("clicks", 1): 1188,
        TopicPartition("clicks", 0): 1200,
        TopicPartition("a.b-c_d", 10): 0,
        TopicPartition("z", 2): 2**62,
    }
    OffsetCheckpoint(path).write(offsets)
    with open(path) as f:
        assert f.read() == ("0\n4\na.b-c_d 10 0\nclicks 0 1200\nclicks 1 1188\nz 2 4611686018427387904\n")
    assert OffsetCheckpoint(path).read() == offsets
    OffsetCheckpoint(path).write({}, fsync=False)
    with open(path) as f:
        assert f.read() == "0\n0\n"
    assert OffsetCheckpoint(path).read() == {}


def test_offset_checkpoint_written_by_kafka_is_read(tmp_path):
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text("0\n3\nmy-topic 0 42\nmy-topic 1 7\n__consumer_offsets 13 0\n")
    assert OffsetCheckpoint(str(path)).read() == {
        TopicPartition("my-topic", 0): 42,
        TopicPartition("my-topic", 1): 7,
        TopicPartition("__consumer_offsets", 13): 0,
    }


def test_leader_epoch_checkpoint_round_trip(tmp_path):
    path = str(tmp_path / "leader-epoch-checkpoint")
    LeaderEpochCheckpoint(path).write([(0, 0), (3, 120), (7, 4000)])
    with open(path) as f:
        assert f.read() == "0\n3\n0 0\n3 120\n7 4000\n"
    assert LeaderEpochCheckpoint(path).read() == [(0, 0), (3, 120), (7, 4000)]
    LeaderEpochCheckpoint(path).write(iter([]))
    assert LeaderEpochCheckpoint(path).read() == []


def test_missing_files_read_as_empty(tmp_path):
    assert OffsetCheckpoint(str(tmp_path / "nope")).read() == {}
    assert LeaderEpochCheckpoint(str(tmp_path / "nope")).read() == []


def test_atomic_write_leaves_no_temp_file_and_replaces_the_old_content(tmp_path):
    path = str(tmp_path / "cp")
    OffsetCheckpoint(path).write({TopicPartition("t", 0): 1})
    OffsetCheckpoint(path).write({TopicPartition("t", 0): 2})
    assert os.listdir(tmp_path) == ["cp"]
    assert OffsetCheckpoint(path).read() == {TopicPartition("t", 0): 2}


def test_failed_write_keeps_the_previous_file(tmp_path):
    path = str(tmp_path / "cp")
    OffsetCheckpoint(path).write({TopicPartition("t", 0): 1})
    os.mkdir(path + ".tmp")  # the temp file cannot be created
    with pytest.raises(OSError):
        OffsetCheckpoint(path).write({TopicPartition("t", 0): 2})
    assert OffsetCheckpoint(path).read() == {TopicPartition("t", 0): 1}


def test_write_atomically_into_a_relative_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_atomically("plain", "x\n")
    assert (tmp_path / "plain").read_text() == "x\n"
    assert os.listdir(tmp_path) == ["plain"]


def test_write_atomically_with_a_mode_ignores_the_umask_and_a_stale_temp_file(tmp_path):
    """The metadata file's mode (0600): set on the temp file before the text is written,
    whatever the umask, and also on a temp file a crash left with wider permissions."""
    path = tmp_path / "secret"
    (tmp_path / "secret.tmp").write_text("left by a crash")
    (tmp_path / "secret.tmp").chmod(0o644)
    old = os.umask(0o000)
    try:
        write_atomically(str(path), "keys\n", mode=0o600)
        assert path.read_text() == "keys\n" and (path.stat().st_mode & 0o777) == 0o600
        write_atomically(str(tmp_path / "plain"), "x\n")  # no mode: the umask's
        assert (tmp_path / "plain").stat().st_mode & 0o777 == 0o666
    finally:
        os.umask(old)
    assert sorted(os.listdir(tmp_path)) == ["plain", "secret"]


@pytest.mark.parametrize(
    "text, line",
    [
        ("", 1),
        ("1\n0\n", 1),
        ("version\n0\n", 1),
        ("0\n", 1),
        ("0\nx\n", 2),
        ("0\n-1\n", 2),
        ("0\n2\nt 0 1\n", 2),  # fewer entries than announced
        ("0\n1\nt 0\n", 3),
        ("0\n1\nt 0 1 2\n", 3),
        ("0\n1\nt x 5\n", 3),
        ("0\n1\nt 0 five\n", 3),
        ("0\n2\nt 0 1\nt 1 x\n", 4),
        ("0\n1\nt 0 1\nt 1 2\n", 4),  # more entries than announced
    ],
)
def test_malformed_offset_checkpoint_names_file_and_line(tmp_path, text, line):
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_text(text)
    with pytest.raises(CheckpointError) as exc:
        OffsetCheckpoint(str(path)).read()
    message = str(exc.value)
    assert message.startswith(str(path))
    assert f"line {line}:" in message


@pytest.mark.parametrize(
    "text, line",
    [
        ("0\n1\n0\n", 3),
        ("0\n1\n0 1 2\n", 3),
        ("0\n1\nx 0\n", 3),
        ("2\n0\n", 1),
        ("0\n3\n0 0\n", 2),
    ],
)
def test_malformed_leader_epoch_checkpoint_names_file_and_line(tmp_path, text, line):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(text)
    with pytest.raises(CheckpointError, match="^" + re.escape(f"{path}: line {line}:")):
        LeaderEpochCheckpoint(str(path)).read()


def test_checkpoint_error_is_a_value_error():
    assert issubclass(CheckpointError, ValueError)


def test_trailing_blank_line_is_accepted(tmp_path):
    path = tmp_path / "cp"
    path.write_text("0\n1\nt 0 5\n\n")
    assert OffsetCheckpoint(str(path)).read() == {TopicPartition("t", 0): 5}


def test_topic_partition_str_is_the_directory_name():
    assert str(TopicPartition("clicks", 3)) == "clicks-3"
