"""DescribeLogDirs (35): each log directory of this broker with the partitions it holds
(size of their segments, offset lag = log end - high watermark) and, from v4, the volume's
total and usable bytes. Topics null: every partition; named partitions this broker does not
hold are left out, as Kafka does. There are no future logs (no AlterReplicaLogDirs). An
offline log dir (it failed: broker/log/manager.py) is answered KAFKA_STORAGE_ERROR with no
partitions and no sizes, as Kafka's."""

import os
import shutil
from collections import defaultdict

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.describe_log_dirs import DescribeLogDirsRequest, DescribeLogDirsResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.DESCRIBE_LOG_DIRS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 1, 4

_Result = DescribeLogDirsResponse.DescribeLogDirsResult
_Topic = DescribeLogDirsResponse.DescribeLogDirsTopic
_Partition = DescribeLogDirsResponse.DescribeLogDirsPartition


def _wanted(request: DescribeLogDirsRequest) -> dict[str, set[int]] | None:
    """None for every partition, else {topic: set of partitions}."""
    if request.topics is None:
        return None
    wanted: dict[str, set[int]] = defaultdict(set)
    for t in request.topics:
        wanted[t.topic].update(t.partitions)
    return wanted


def handle(ctx: RequestContext, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    if not ctx.has_right(RIGHTS.cluster, CLUSTER_NAME):
        return DescribeLogDirsResponse(throttle_time_ms=0, error_code=RIGHTS.cluster.error_code, results=[])
    logs = ctx.services.replicas.logs
    wanted = _wanted(request)
    by_dir: dict[str, dict[str, list[DescribeLogDirsResponse.DescribeLogDirsPartition]]] = {
        d: defaultdict(list) for d in logs.dirs
    }
    for tp, lg in sorted(logs.logs.items()):
        if wanted is not None and tp.partition not in wanted.get(tp.topic, ()):
            continue
        d = os.path.dirname(lg.dir)
        if d in by_dir:
            by_dir[d][tp.topic].append(
                _Partition(
                    partition_index=tp.partition,
                    partition_size=lg.size,
                    offset_lag=max(0, lg.log_end_offset - lg.high_watermark),
                    is_future_key=False,
                )
            )
    results = []
    for d, topics in by_dir.items():
        if d in logs.offline_dirs:
            results.append(
                _Result(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=d, total_bytes=-1, usable_bytes=-1, topics=[])
            )
            continue
        try:
            usage = shutil.disk_usage(d)
            total, usable, error = usage.total, usage.free, ErrorCode.NONE
        except OSError:
            total = usable = -1
            error = ErrorCode.KAFKA_STORAGE_ERROR
        results.append(
            _Result(
                error_code=error,
                log_dir=d,
                total_bytes=total,
                usable_bytes=usable,
                topics=[_Topic(name=name, partitions=parts) for name, parts in topics.items()],
            )
        )
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, results=results)
