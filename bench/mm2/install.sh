#!/usr/bin/env bash
# Put Apache Kafka's MirrorMaker 2 (connect-mirror and its runtime dependencies) into a cache folder,
# for bench/mirror_bench.py --mm2 to run beside tidelog mirror.
#
#   bench/mm2/install.sh          install if needed, then print the jar folder
#
# Same arrangement as tests/compat/kafka/install.sh: `mvn dependency:copy-dependencies` on pom.xml
# beside this script, jars from Maven Central only, into
#   ${COMPAT_KAFKA_CACHE:-$HOME/.cache/tidelog}/mm2-<version>/libs
# with a stamp keyed on the pom's content. Failures exit non-zero with Maven's output.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pom="$here/pom.xml"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom" | head -n1)"
cache="${COMPAT_KAFKA_CACHE:-$HOME/.cache/tidelog}"
home="$cache/mm2-$version"
libs="$home/libs"
stamp="$home/.installed-$(sha1sum <"$pom" | cut -c1-12)"

if [ -f "$stamp" ] && [ -f "$libs/connect-mirror-$version.jar" ]; then
  echo "$libs"
  exit 0
fi
command -v java >/dev/null || { echo "install.sh: java (17+) is required" >&2; exit 1; }
command -v mvn >/dev/null || { echo "install.sh: mvn (Maven 3) is required" >&2; exit 1; }
tmp="$home/libs.partial"
rm -rf "$tmp"
mkdir -p "$tmp"
log="$home/install.log"
if ! mvn -B -q -f "$pom" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" >"$log" 2>&1; then
  echo "install.sh: could not fetch MirrorMaker 2 $version from Maven (log: $log)" >&2
  tail -n 40 "$log" >&2
  exit 1
fi
for jar in "connect-mirror-$version.jar" "connect-mirror-client-$version.jar" "connect-runtime-$version.jar"; do
  [ -f "$tmp/$jar" ] || { echo "install.sh: $jar missing after copy-dependencies" >&2; exit 1; }
done
rm -rf "$libs"
mv "$tmp" "$libs"
rm -f "$home"/.installed-*
touch "$stamp"
echo "$libs"
