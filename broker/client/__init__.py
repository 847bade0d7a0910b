"""The project's own lean Kafka client on broker.protocol: blocking connections, cluster
metadata and admin, a batching producer, an assigning consumer."""

from broker.addresses import parse_bootstrap
from broker.client.cluster import Cluster
from broker.client.connection import BrokerConnection, ClientError
from broker.client.consumer import Consumer, ConsumerRecord
from broker.client.producer import Producer
from broker.client.sender import Sender

__all__ = [
    "BrokerConnection",
    "ClientError",
    "Cluster",
    "Consumer",
    "ConsumerRecord",
    "Producer",
    "Sender",
    "parse_bootstrap",
]
