"""The web console (``lakemq console``): a client of the cluster and a reader of the lake.

It talks to brokers only through the admin wire codes (lakemq.client.admin) and reads the
lake with deltalake + pyarrow in a thread pool, so it never blocks a broker.
"""

from lakemq.console.app import ConsoleSettings, create_app

__all__ = ["ConsoleSettings", "create_app"]
