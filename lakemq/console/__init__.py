"""The web console (``lakemq console``): a client of the cluster and a reader of the lake.

It talks to brokers only through the admin wire codes (lakemq.client.admin) and reads the
lake with deltalake + pyarrow in a thread pool, so it never blocks a broker.
"""

from lakemq.console.app import create_app
from lakemq.console.settings import ConsoleSettings

__all__ = ["ConsoleSettings", "create_app"]
