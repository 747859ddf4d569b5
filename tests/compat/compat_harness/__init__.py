"""The compat tier's machinery: Apache Kafka as a subprocess, a raw wire client, scenario recording,
normalisation and field-by-field diffing, the allow-list and the report.

Nothing here is a test; the ``test_*.py`` files beside this package use it.
"""
