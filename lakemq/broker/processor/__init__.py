"""One processor per request family, each registered in the remoting server's code ->
processor table by :mod:`lakemq.broker.processor_wiring`."""
