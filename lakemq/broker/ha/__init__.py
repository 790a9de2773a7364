"""Master/slave replication as RocketMQ 4.x does it, wire-compatible with its HA protocol
(docs/REPLICATION.md): the HA listener every broker runs (master), a slave's link to its
master (slave), the master's view of its slaves (progress), the slave's copy of the master's
metadata (slave_sync), and the bytes on the wire (wire).

Nothing is imported here: ``lakemq.broker.ha.config`` is read by every command that parses a
broker.conf (``lakemq sql -c`` among them), which should not pay for the HA server, the
slave's link and the store they pull in. Import each part from its own module."""
