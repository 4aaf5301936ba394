"""Kafka into a Ray Dataset: `fastkwire.ray.read_kafka`, in place of `ray.data.read_kafka`.

    import fastkwire.ray
    ds = fastkwire.ray.read_kafka("orders", bootstrap_servers="broker:9092")

The same signature as `ray.data.read_kafka` and the same schema, through `KafkaDatasource`,
a `ray.data.Datasource` whose read tasks are offset ranges, so that one large partition is
read by several workers: by default one task per CPU of the Ray cluster, the offsets of
the read split evenly among them (and as many output blocks asked of Ray); with
`records_per_task=N`, one task per piece of at most N offsets of a partition. Each task
fetches its ranges with fastkwire's reader (`fastkwire.kafka_arrow`): Fetch answers into
Arrow, no Python object per record. Needs Ray: `pip install "fastkwire[ray]"`.

Differences from Ray's reader, all on the side of not losing data silently:
- `timeout_ms` bounds each request to a broker (a task that cannot finish fails; Ray's
  returns the rows it had as if they were all);
- every header is kept, repeated keys too (Ray's makes a dict of them);
- options fastkwire's connections cannot honour are refused by name, not ignored.
"""

try:
    import ray.data
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask
except ModuleNotFoundError as _missing:  # pragma: no cover - exercised in a child process
    if (_missing.name or "").split(".")[0] not in ("ray", "pyarrow", "numpy", "pandas"):
        raise
    raise ImportError(
        f"fastkwire.ray needs Ray Data ({_missing.name} is missing): pip install 'fastkwire[ray]'"
    ) from _missing

from . import kafka_arrow, segments

__all__ = [
    "read_kafka",
    "KafkaDatasource",
    "DEFAULT_RECORDS_PER_TASK",
    "read_segments",
    "SegmentDatasource",
]

DEFAULT_RECORDS_PER_TASK = None  # one task per CPU of the cluster

# Ray's KafkaAuthConfig fields that fastkwire's connection layer takes, under the same names.
AUTH_FIELDS = (
    "security_protocol",
    "sasl_mechanism",
    "sasl_plain_username",
    "sasl_plain_password",
    "sasl_oauth_token_provider",
    "ssl_context",
    "ssl_check_hostname",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_password",
)
# consumer_config keys (librdkafka's names) and the option each one is.
CONSUMER_KEYS = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "client.id": "client_id",
    "isolation.level": "isolation_level",
}


def _options_from(kafka_auth_config, consumer_config):
    """Our keyword options from Ray's two ways of giving them; unknown ones refused."""
    out = {}
    if kafka_auth_config is not None:
        for name, value in vars(kafka_auth_config).items():
            if value is None:
                continue
            if name not in AUTH_FIELDS:
                raise ValueError(f"kafka_auth_config.{name} is not supported by fastkwire's reader")
            out[name] = value
    for key, value in (consumer_config or {}).items():
        if key == "bootstrap.servers":
            continue
        if key not in CONSUMER_KEYS:
            raise ValueError(
                f"consumer_config[{key!r}] is not supported by fastkwire's reader "
                f"(it takes {', '.join(sorted(CONSUMER_KEYS))})"
            )
        out[CONSUMER_KEYS[key]] = value
    return out


def cluster_cpus():
    """The CPUs the Ray cluster has (Ray started here if it is not yet)."""
    if not ray.is_initialized():
        ray.init()
    return max(int(ray.cluster_resources().get("CPU", 1)), 1)


def _read_ranges(ranges, options, isolation_level, block_size, check_crc):
    import pyarrow as pa

    for batch in kafka_arrow.read_ranges(
        ranges,
        options=options,
        isolation_level=isolation_level,
        block_size=block_size,
        check_crc=check_crc,
    ):
        yield pa.Table.from_batches([batch])


class KafkaDatasource(Datasource):
    """The offset ranges of a read (`fastkwire.kafka_arrow.plan`) as ReadTasks: with
    records_per_task=None, `tasks` lists of ranges (default: one per CPU of the cluster);
    with an int, one task per range of at most that many offsets."""

    def __init__(
        self,
        topics,
        *,
        bootstrap_servers,
        start_offset="earliest",
        end_offset="latest",
        partitions=None,
        isolation_level="read_uncommitted",
        records_per_task=DEFAULT_RECORDS_PER_TASK,
        block_size=kafka_arrow.DEFAULT_BLOCK_SIZE,
        check_crc=True,
        tasks=None,
        **client,
    ):
        kafka_arrow.check_piece_size(records_per_task, "records_per_task")
        self.options = kafka_arrow.ClientOptions(bootstrap_servers, **client)
        self.isolation_level, self.block_size, self.check_crc = (
            isolation_level,
            block_size,
            check_crc,
        )
        self.ranges = kafka_arrow.plan(
            topics,
            bootstrap_servers=bootstrap_servers,
            start_offset=start_offset,
            end_offset=end_offset,
            partitions=partitions,
            isolation_level=isolation_level,
            options=self.options,
        )
        if records_per_task is not None:
            self.ranges = kafka_arrow.split_ranges(
                self.ranges, records_per_task, name="records_per_task"
            )
        if records_per_task is None:
            self.task_ranges = kafka_arrow.spread(self.ranges, tasks or cluster_cpus())
        else:
            self.task_ranges = [[r] for r in self.ranges]

    def estimate_inmemory_data_size(self):
        return None

    def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
        tasks = []
        for ranges in self.task_ranges:

            def read_fn(
                ranges=ranges,
                options=self.options,
                isolation_level=self.isolation_level,
                block_size=self.block_size,
                check_crc=self.check_crc,
            ):
                return _read_ranges(ranges, options, isolation_level, block_size, check_crc)

            tasks.append(
                ReadTask(
                    read_fn,
                    BlockMetadata(
                        num_rows=None,  # compaction and transaction markers leave gaps
                        size_bytes=None,
                        exec_stats=None,
                        input_files=tuple(
                            f"kafka://{r.topic}/{r.partition}/{r.start}-{r.end}" for r in ranges
                        ),
                    ),
                    schema=kafka_arrow.SCHEMA,
                    per_task_row_limit=per_task_row_limit,
                )
            )
        return tasks


def read_kafka(
    topics,
    *,
    bootstrap_servers,
    trigger="once",
    start_offset="earliest",
    end_offset="latest",
    kafka_auth_config=None,
    consumer_config=None,
    num_cpus=None,
    num_gpus=None,
    memory=None,
    override_num_blocks=None,
    timeout_ms=None,
    records_per_task=DEFAULT_RECORDS_PER_TASK,
    partitions=None,
    isolation_level="read_uncommitted",
    block_size=kafka_arrow.DEFAULT_BLOCK_SIZE,
    check_crc=True,
    **ray_remote_args,
):
    """A ray.data.Dataset of the records of `topics` (Ray's read_kafka's arguments, plus
    records_per_task, partitions, isolation_level, block_size, check_crc and fastkwire's
    security options under kafka-python's names; extra keywords go to Ray as remote args:
    label_selector, resources, runtime_env, ...). records_per_task=None (the default):
    one read task per CPU of the cluster; an int: one task per piece of at most that many
    offsets. Either way, as many output blocks as tasks are asked of Ray
    (override_num_blocks, unless given)."""
    if trigger != "once":
        raise ValueError(f"only trigger='once' is supported, not {trigger!r}")
    if kafka_auth_config is not None and consumer_config is not None:
        raise ValueError("give kafka_auth_config or consumer_config, not both")
    client = _options_from(kafka_auth_config, consumer_config)
    isolation_level = client.pop("isolation_level", isolation_level)
    for name in list(ray_remote_args):
        if name in kafka_arrow.SECURITY_OPTIONS or name in ("client_id", "request_timeout_ms"):
            client[name] = ray_remote_args.pop(name)
    if timeout_ms is not None:
        client["request_timeout_ms"] = timeout_ms
    source = KafkaDatasource(
        topics,
        bootstrap_servers=bootstrap_servers,
        start_offset=start_offset,
        end_offset=end_offset,
        partitions=partitions,
        isolation_level=isolation_level,
        records_per_task=records_per_task,
        block_size=block_size,
        check_crc=check_crc,
        **client,
    )
    if override_num_blocks is None:
        # Ray splits the tasks' output into more blocks unless asked for this many: with
        # records_per_task too (it cost 4 tasks twice the CPU per record of one).
        override_num_blocks = max(len(source.task_ranges), 1)
    return ray.data.read_datasource(
        source,
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        memory=memory,
        override_num_blocks=override_num_blocks,
        **ray_remote_args,
    )


# ---------------------------------------------------------------- log segments


def _read_segment(task):
    import pyarrow as pa

    for batch in segments.read_task(task):
        yield pa.Table.from_batches([batch])


class SegmentDatasource(Datasource):
    """Kafka log segments (fastkwire.segments), one ReadTask per segment file."""

    def __init__(self, paths, **options):
        self.tasks = segments.plan_segments(paths, **options)

    def estimate_inmemory_data_size(self):
        return sum(t.size for t in self.tasks)  # about the bytes on disk (uncompressed)

    def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
        return [
            ReadTask(
                lambda task=task: _read_segment(task),
                BlockMetadata(
                    num_rows=None,
                    size_bytes=task.size,
                    exec_stats=None,
                    input_files=(task.path,),
                ),
                schema=kafka_arrow.SCHEMA,
                per_task_row_limit=per_task_row_limit,
            )
            for task in self.tasks
        ]


def read_segments(
    paths,
    *,
    filesystem=None,
    partitions=None,
    start_offset=None,
    end_offset=None,
    isolation_level="read_uncommitted",
    check_crc=True,
    truncated="error",
    block_size=segments.DEFAULT_BLOCK_SIZE,
    num_cpus=None,
    num_gpus=None,
    memory=None,
    override_num_blocks=None,
    **ray_remote_args,
):
    """A ray.data.Dataset of Kafka log segments, one read task per segment file; the
    arguments are fastkwire.read_segments', plus Ray's resources and remote args."""
    source = SegmentDatasource(
        paths,
        filesystem=filesystem,
        partitions=partitions,
        start_offset=start_offset,
        end_offset=end_offset,
        isolation_level=isolation_level,
        check_crc=check_crc,
        truncated=truncated,
        block_size=block_size,
    )
    return ray.data.read_datasource(
        source,
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        memory=memory,
        override_num_blocks=override_num_blocks,
        **ray_remote_args,
    )
