"""The broker's RocketMQ 5 front door: ``apache.rocketmq.v2.MessagingService`` over gRPC
(``grpcListenPort``), a second protocol face over the same broker core as remoting.

server.py (grpcio's asyncio server, handlers from the service definition), service.py (one
method per RPC, calling the shared processors), telemetry.py (the Settings exchange and
transaction check-backs), convert.py (v2 messages <-> the 4.x model), auth.py (the ACL),
status.py (v2 statuses)."""
