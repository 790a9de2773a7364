"""Peers for side-by-side benchmarks: each starts a real server on loopback and drives it with
its usual Python client (see :mod:`bench.peers.base`); lakemq and Apache RocketMQ also with
Apache RocketMQ's Java client (:mod:`bench.peers.java_bench`)."""

from __future__ import annotations

from bench.peers.base import Durability, Peer, PeerClient, TopicProducer
from bench.peers.kafka_peer import KafkaFsyncPeer, KafkaPeer
from bench.peers.lakemq_peer import LakemqAsyncPeer, LakemqSyncPeer
from bench.peers.nats_peer import NatsPeer
from bench.peers.process import PeerUnavailable
from bench.peers.rabbitmq_peer import RabbitQuorumPeer, RabbitStreamPeer
from bench.peers.redis_peer import RedisAlwaysPeer, RedisEverysecPeer
from bench.peers.rocketmq_peer import (
    LakemqAsyncJavaPeer,
    LakemqSyncJavaPeer,
    RocketMQAsyncJavaPeer,
    RocketMQAsyncPeer,
    RocketMQSyncJavaPeer,
    RocketMQSyncPeer,
)

__all__ = ["PEERS", "Durability", "Peer", "PeerClient", "PeerUnavailable", "TopicProducer"]

# lakemq first: the other rows are compared with these (the Java-driven rows with lakemq's
# Java-driven rows).
PEERS: tuple[type[Peer], ...] = (
    LakemqAsyncPeer, LakemqSyncPeer,
    RocketMQAsyncPeer, RocketMQSyncPeer,
    LakemqAsyncJavaPeer, LakemqSyncJavaPeer,
    RocketMQAsyncJavaPeer, RocketMQSyncJavaPeer,
    RedisEverysecPeer, RedisAlwaysPeer,
    RabbitStreamPeer, RabbitQuorumPeer,
    NatsPeer,
    KafkaPeer, KafkaFsyncPeer,
)
