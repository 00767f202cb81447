"""Helpers that tests share: a real server in-process (server.py) or as a child process (process.py)."""
