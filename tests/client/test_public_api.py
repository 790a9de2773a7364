from lakemq import client


def test_all_names_resolve_and_are_sorted() -> None:
    assert client.__all__ == sorted(client.__all__)
    for name in client.__all__:
        assert getattr(client, name) is not None, name


def test_client_imports_only_remoting_common_and_errors() -> None:
    """The house rule: the client uses remoting and common only (plus the error tree and the
    filter package shared with the broker, which itself uses common only)."""
    import ast
    from pathlib import Path

    allowed = ("lakemq.client", "lakemq.remoting", "lakemq.common", "lakemq.errors", "lakemq.filter")
    for path in Path(client.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lakemq"):
                assert node.module.startswith(allowed), f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                for alias in node.names:
                    assert not alias.name.startswith("lakemq") or alias.name.startswith(allowed), path.name
