"""Master/slave replication as RocketMQ 4.x does it, wire-compatible with its HA protocol
(docs/REPLICATION.md): the HA listener every broker runs (master), a slave's link to its
master (slave), the master's view of its slaves (progress), the slave's copy of the master's
metadata (slave_sync), and the bytes on the wire (wire)."""

from lakemq.broker.ha.config import HaConfig, check_role
from lakemq.broker.ha.master import HaServer
from lakemq.broker.ha.progress import ReplicationProgress, SlaveLink
from lakemq.broker.ha.slave import HaClient
from lakemq.broker.ha.slave_sync import SlaveSynchronize

__all__ = ["HaClient", "HaConfig", "HaServer", "ReplicationProgress", "SlaveLink", "SlaveSynchronize", "check_role"]
