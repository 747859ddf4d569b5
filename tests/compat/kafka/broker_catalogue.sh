#!/usr/bin/env bash
# Regenerate src/tidelog/common/kafka_broker_catalogue.py from Apache Kafka's jars (the compat tier's
# reference version): every broker key with its type, default and dynamic update mode.
#   tests/compat/kafka/broker_catalogue.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
libs="$("$here/install.sh")"
version="$(basename "$(dirname "$libs")")"
out="$here/../../../src/tidelog/common/kafka_broker_catalogue.py"
java -cp "$libs/*" "$here/BrokerConfigCatalogue.java" "${version#kafka-}" >"$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out ($(grep -c '^    "' "$out") keys)"
