"""The log-shipping agent (``tidelog agent``): tails files and writes their lines to Kafka exactly once."""
