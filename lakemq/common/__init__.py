"""Shared model: messages, CommitLog record codec, names, codes and configuration."""
