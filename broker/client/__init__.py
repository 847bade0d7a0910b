"""The project's own lean Kafka client on broker.protocol: blocking connections, cluster
metadata and admin, a batching producer, an assigning consumer."""
from broker.client.cluster import Cluster
from broker.client.connection import BrokerConnection, ClientError, parse_bootstrap
from broker.client.consumer import Consumer, ConsumerRecord
from broker.client.producer import Producer, murmur2, partition_for_key

__all__ = ["BrokerConnection", "ClientError", "Cluster", "Consumer", "ConsumerRecord", "Producer", "murmur2",
           "parse_bootstrap", "partition_for_key"]
