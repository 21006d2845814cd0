#!/usr/bin/env bash
# Fetch Kafka Connect and Debezium's MySQL and MariaDB connectors from Maven Central into
# .services/debezium (or $REPLICAD_DEBEZIUM_DIST): lib/ for Connect, plugins/<server>/<connector>/
# for each connector (the plugin.path of that server: one class loader). Again only when a pom
# under bench/peers/debezium or this script changes. REPLICAD_MAVEN_ARGS: options for mvn (a
# mirror, a proxy, -o).
# Prints the distribution directory on stdout; one line on stderr and exit 1 when it cannot.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
# shellcheck source=../../../scripts/services-common.sh
source "$root/scripts/services-common.sh"
dist=${REPLICAD_DEBEZIUM_DIST:-$root/.services/debezium}
poms=("$here/pom.xml" "$here/mysql/pom.xml" "$here/mariadb/pom.xml")
stamp="$dist/.fetched-$(cat "${poms[@]}" "$0" | sha1sum | cut -c1-12)"
if [ -f "$stamp" ]; then echo "$dist"; exit 0; fi

command -v java >/dev/null || apt_install openjdk-17-jre-headless
command -v mvn >/dev/null || apt_install maven

first_error() { # the first Maven error line of $1, else its last line
  printf '%s\n' "$1" | sed 's/\x1b\[[0-9;]*m//g' | grep -m1 -E 'ERROR|Could not' \
    | sed 's/^\[ERROR\] *//' \
    || printf '%s\n' "$1" | tail -n1
}

copy() { # copy <pom> <output directory> [mvn option...]
  local pom=$1 dir=$2 out; shift 2
  # shellcheck disable=SC2086  # REPLICAD_MAVEN_ARGS is word-split on purpose
  if ! out=$(mvn -q -B -Dstyle.color=never ${REPLICAD_MAVEN_ARGS:-} -f "$pom" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$dir" "$@" 2>&1); then
    printf '[debezium] cannot fetch %s from Maven Central: %s\n' "${pom#"$root"/}" \
      "$(first_error "$out")" >&2
    exit 1
  fi
}

printf '[debezium] fetching Kafka Connect and Debezium from Maven Central into %s\n' "$dist" >&2
rm -rf "$dist"; mkdir -p "$dist"
copy "$here/pom.xml" "$dist/lib"
# Kafka's own jars and slf4j come from Connect (lib/): a plugin's copies would shadow them in
# its class loader (its slf4j 1.7 would log nothing, having no binding there).
plugin=(-DexcludeGroupIds=org.apache.kafka,org.slf4j)
copy "$here/mysql/pom.xml" "$dist/plugins/mysql/debezium-connector-mysql" "${plugin[@]}"
copy "$here/mariadb/pom.xml" "$dist/plugins/mariadb/debezium-connector-mariadb" "${plugin[@]}"
touch "$stamp"
echo "$dist"
