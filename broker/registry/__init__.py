"""A Confluent-compatible schema registry inside the broker (docs/schema-registry.md).

    formats/     parsing of AVRO, PROTOBUF and JSON schemas, canonical forms (no broker
                 dependency: the Spark source can decode with it)
    compat/      the compatibility rules of each type, as Confluent's checkers apply them
    records.py   the `_schemas` topic's records, in Confluent's JSON
    state.py     the view of `_schemas` every broker keeps (reads, and ids per subject)
    registry.py  what the registry answers and decides (Confluent's KafkaSchemaRegistry)
    log.py       the reader of `_schemas` and the one writer (the partition's leader)
    http.py      the HTTP/1.1 server and the client writes are forwarded with
    auth.py      basic authentication against SCRAM users, ACLs on subjects
    api.py       Confluent's REST API v1
    service.py   all of it for one broker: RegistryService

Layering: the registry uses the cluster's value types and channels, the replica layer
through a PartitionWriter, the security package; nothing below the server imports it.
"""
