"""Test helpers that drive a real tidelog broker: a subprocess manager and a raw protocol client.

Importable as ``helpers`` because ``tests/`` has no ``__init__.py`` and so sits on ``sys.path`` once
pytest loads ``tests/conftest.py``.
"""
