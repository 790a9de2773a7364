"""Coverage-guided fuzzing of every decoder a peer can reach (docs/FUZZING.md).

``fuzz/targets`` holds one module per target, each with ``ALLOWED`` (the lakemq errors its
decoder documents) and ``one_input(data)``; ``fuzz/run.py`` drives one under atheris
(``scripts/fuzz.sh TARGET SECONDS``); ``fuzz/corpus/TARGET`` holds its seeds.
"""
