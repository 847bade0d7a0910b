"""The broker's metrics and status page, on the HTTP listener `metrics.listener=HOST:PORT`.

    GET /metrics       Prometheus text format (prometheus_client renders it)
    GET /              the status page: server-rendered HTML, a small inline script
                       redraws its charts live (nothing loaded from anywhere else)
    GET /status.json   the same figures for scripts

With `metrics.listener.web.config.file`, a web configuration file of Prometheus'
exporters, the listener speaks TLS and asks every request for basic authentication
(broker/metrics/webconfig.py).

Metrics are designed into the components, not hooked on from here. Each component counts
what it does in its own terms and offers it through its own interface (stats.py lists
them): the server its requests and its connections per listener, the ReplicaManager its
topics' bytes and records, the purgatory its waiting requests, the LogManager its fsyncs,
the ZooKeeper client its round trips. What moves with traffic is counted only when
metrics.listener is set (each counter is then one `is None` test on the hot path), per
request or per partition of a request, never per record; the rest (partitions, ISR, logs,
controller, groups, ZooKeeper) is read when scraped. The collectors (collectors.py) read
those interfaces at scrape time and compute nothing between scrapes. exporter.py
(BrokerMetrics) holds one broker's registry and listener. docs/observability.md lists
the metrics and their Kafka counterparts.

A part of the broker that gains metrics (the transaction coordinator, authentication)
counts them itself, offers them as its own attributes or methods, and BrokerCollector
reads them: name them after Kafka's (kafka_<group>_<name>) and list them in
docs/observability.md.

This package imports nothing at its top: stats.py, the instruments, is imported by every
layer (the log, the cluster, the server), the rest sits above everything and only reads.
"""
