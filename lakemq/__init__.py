"""lakemq: a RocketMQ-compatible broker whose history lives in a Delta lake."""

__version__ = "0.1.0"
