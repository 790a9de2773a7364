"""RocketMQ 5's wire types (``apache.rocketmq.v2``): message classes and service stubs in
``lakemq.grpc._pb``, generated at set-up time from the official definitions by
scripts/gen_grpc.py (never committed; docs/COMPATIBILITY.md)."""
