#!/usr/bin/env bash
# Put Apache Kafka's jars (broker, tools, Java client and their runtime dependencies) into a cache
# folder, for tidelog's compat tier to use as the reference broker and reference client.
#
#   tests/compat/kafka/install.sh          install if needed, then print the jar folder
#
# The jars come from Maven Central through `mvn dependency:copy-dependencies` on pom.xml beside
# this script: nothing is built, nothing else is downloaded. The folder is
#   ${COMPAT_KAFKA_CACHE:-$HOME/.cache/tidelog}/kafka-${COMPAT_KAFKA_VERSION:-<pom default>}/libs
# and a stamp file keyed on the pom's content makes a second run return at once. Any failure exits
# non-zero with Maven's output, so a machine that cannot get Kafka fails loudly.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pom="$here/pom.xml"
default_version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom" | head -n1)"
version="${COMPAT_KAFKA_VERSION:-$default_version}"
cache="${COMPAT_KAFKA_CACHE:-$HOME/.cache/tidelog}"
home="$cache/kafka-$version"
libs="$home/libs"
stamp="$home/.installed-$(sha1sum <"$pom" | cut -c1-12)"

if [ -f "$stamp" ] && [ -f "$libs/kafka_2.13-$version.jar" ]; then
  echo "$libs"
  exit 0
fi

command -v java >/dev/null || { echo "install.sh: java (17+) is required" >&2; exit 1; }
command -v mvn >/dev/null || { echo "install.sh: mvn (Maven 3) is required" >&2; exit 1; }

tmp="$home/libs.partial"
rm -rf "$tmp"
mkdir -p "$tmp"
log="$home/install.log"
if ! mvn -B -q -f "$pom" -Dkafka.version="$version" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$tmp" >"$log" 2>&1; then
  echo "install.sh: could not fetch Apache Kafka $version from Maven (log: $log)" >&2
  tail -n 40 "$log" >&2
  exit 1
fi
for jar in "kafka_2.13-$version.jar" "kafka-server-$version.jar" "kafka-tools-$version.jar" "kafka-clients-$version.jar"; do
  [ -f "$tmp/$jar" ] || { echo "install.sh: $jar missing after copy-dependencies" >&2; exit 1; }
done
rm -rf "$libs"
mv "$tmp" "$libs"
rm -f "$home"/.installed-*
touch "$stamp"
echo "$libs"
