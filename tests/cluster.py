"""The tests' name for :mod:`lakemq.launcher` (real NameServer and broker processes on loopback)."""

from lakemq.launcher import SMALL_STORE, Cluster, ServerProcess, lakemq_command, spawn, start_cluster

__all__ = ["SMALL_STORE", "Cluster", "ServerProcess", "lakemq_command", "spawn", "start_cluster"]
