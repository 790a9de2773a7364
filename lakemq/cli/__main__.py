"""``python -m lakemq.cli``: the ``lakemq`` command, as :func:`lakemq.launcher.lakemq_command`
starts it (a ``__main__`` with a file, as under the console script: pyspark's Connect client
takes a ``__main__`` without one, ``python -c``, for its doctests and imports its test helpers)."""

from lakemq.cli import main

main(prog_name="lakemq")
