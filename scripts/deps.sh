#!/usr/bin/env bash
# deps.sh installs the real services sluice's integration tests run against:
#   - ClickHouse 18.16 (Debian's clickhouse-server / clickhouse-client packages)
#   - ClickHouse 26.9 (PyPI's chdb-core, pinned, in a Python venv in the cache;
#     internal/testinfra serves it on loopback through its clickhouse-local)
#   - the Apache Kafka 4.1.1 server jars (from Maven Central, via mvn) in a cache
# and the C toolchain for guest modules written in C (guest-sdk/c): Debian's
# clang-14, lld-14, wasi-libc and libclang-rt-14-dev-wasm32.
# It is idempotent and returns quickly when everything is already present.
set -euo pipefail

KAFKA_VERSION=4.1.1
SCALA_VERSION=2.13
CHDB_VERSION=26.9.0
CACHE_DIR="${SLUICE_CACHE:-$HOME/.cache/sluice}"
CHDB_VENV="$CACHE_DIR/chdb-$CHDB_VERSION"
KAFKA_LIBS="$CACHE_DIR/kafka-$KAFKA_VERSION/libs"

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=(sudo)
	else
		echo "deps: not root and sudo not found; cannot install packages" >&2
	fi
fi

APT_UPDATED=0
apt_install() {
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "deps: apt-get not found; install these packages by hand: $*" >&2
		exit 1
	fi
	if [ "$APT_UPDATED" -eq 0 ]; then
		"${SUDO[@]}" apt-get update -qq
		APT_UPDATED=1
	fi
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# --- ClickHouse ---------------------------------------------------------------
if command -v clickhouse-server >/dev/null 2>&1 && command -v clickhouse-client >/dev/null 2>&1; then
	echo "clickhouse: already installed ($(command -v clickhouse-server))"
else
	apt_install clickhouse-server clickhouse-client
	echo "clickhouse: installed"
fi

# --- ClickHouse 26.9 (chdb-core) ----------------------------------------------
# The wheel is the ClickHouse engine as one Python extension needing only libc;
# its Python dependencies (pandas, pyarrow) are not used, hence --no-deps.
# Installs into a temporary venv under a lock, then marks it complete, so that
# concurrent runs and interrupted installs never leave a half venv in use.
chdb_ok() { [ -f "$CHDB_VENV/.complete" ] && [ -x "$CHDB_VENV/bin/python" ]; }
if chdb_ok; then
	echo "clickhouse $CHDB_VERSION (chdb-core): already installed ($CHDB_VENV)"
else
	if ! command -v python3 >/dev/null 2>&1; then
		apt_install python3 python3-venv
	fi
	probe="$(mktemp -d)"
	if ! python3 -m venv --without-pip "$probe/v" >/dev/null 2>&1; then
		apt_install python3-venv
	fi
	rm -rf "$probe"
	mkdir -p "$CACHE_DIR"
	exec 9>"$CACHE_DIR/.chdb-$CHDB_VERSION.lock"
	flock 9
	if ! chdb_ok; then
		rm -rf "$CHDB_VENV"
		python3 -m venv "$CHDB_VENV"
		if ! "$CHDB_VENV/bin/python" -m pip install -q --no-deps --disable-pip-version-check \
			"chdb-core==$CHDB_VERSION"; then
			rm -rf "$CHDB_VENV"
			echo "deps: pip failed to install chdb-core==$CHDB_VERSION" >&2
			exit 1
		fi
		if ! "$CHDB_VENV/bin/python" -c 'import importlib.machinery as m, sys; s = m.PathFinder.find_spec("chdb"); sys.exit(0 if s and m.PathFinder.find_spec("_chdb", list(s.submodule_search_locations)) else 1)'; then
			rm -rf "$CHDB_VENV"
			echo "deps: chdb-core==$CHDB_VERSION has no chdb/_chdb extension" >&2
			exit 1
		fi
		touch "$CHDB_VENV/.complete"
	fi
	exec 9>&-
	echo "clickhouse $CHDB_VERSION (chdb-core): installed ($CHDB_VENV)"
fi

# --- clang for wasm32-wasi (guest-sdk/c, examples/log-normalize-c) --------------
C_PKGS=(clang-14 lld-14 wasi-libc libclang-rt-14-dev-wasm32)
c_missing=()
for pkg in "${C_PKGS[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed"; then
		c_missing+=("$pkg")
	fi
done
if [ "${#c_missing[@]}" -eq 0 ]; then
	echo "clang (wasm32-wasi): already installed"
else
	apt_install "${c_missing[@]}"
	echo "clang (wasm32-wasi): installed ${c_missing[*]}"
fi

# --- Kafka jars ---------------------------------------------------------------
if [ -f "$KAFKA_LIBS/kafka_$SCALA_VERSION-$KAFKA_VERSION.jar" ] && [ -f "$KAFKA_LIBS/.complete" ]; then
	echo "kafka $KAFKA_VERSION jars: already installed ($KAFKA_LIBS)"
else
	if ! command -v java >/dev/null 2>&1; then
		apt_install openjdk-17-jre-headless
		echo "java: installed"
	fi
	if ! command -v mvn >/dev/null 2>&1; then
		apt_install maven
		echo "maven: installed"
	fi
	tmp="$(mktemp -d)"
	trap 'rm -rf "$tmp"' EXIT
	cat >"$tmp/pom.xml" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.sluice</groupId>
  <artifactId>kafka-server-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_$SCALA_VERSION</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
  </dependencies>
</project>
POM
	rm -rf "$KAFKA_LIBS"
	mkdir -p "$KAFKA_LIBS"
	# Maven 3.8's jansi writes stray colour resets even with -B, so keep its
	# output in a log and show it only on failure.
	if ! (cd "$tmp" && mvn -q -B -Dstyle.color=never dependency:copy-dependencies \
		-DoutputDirectory="$KAFKA_LIBS" -DincludeScope=runtime) >"$tmp/mvn.log" 2>&1; then
		cat "$tmp/mvn.log" >&2
		echo "deps: mvn failed to fetch the Kafka $KAFKA_VERSION jars" >&2
		exit 1
	fi
	if [ ! -f "$KAFKA_LIBS/kafka_$SCALA_VERSION-$KAFKA_VERSION.jar" ]; then
		echo "deps: kafka_$SCALA_VERSION-$KAFKA_VERSION.jar missing after mvn" >&2
		exit 1
	fi
	touch "$KAFKA_LIBS/.complete"
	echo "kafka $KAFKA_VERSION jars: installed ($KAFKA_LIBS)"
fi

# === guest SDK toolchains: Rust and AssemblyScript (guest-sdk/rust, guest-sdk/assemblyscript) ===
# Rust: Debian's rustc and cargo 1.63 with libstd-rust-dev-wasm32 (the
# wasm32-wasi standard library). They install to /usr/bin; a rustup toolchain
# earlier on PATH has no wasm32 target, so the builds call /usr/bin/cargo with
# RUSTC=/usr/bin/rustc. rustc brings the build machine's standard library
# (libstd-rust-dev) too, for the native builds that tests and benchmarks
# compare with the wasm ones. AssemblyScript: node and npm, then the asc
# version pinned in guest-sdk/assemblyscript/package-lock.json (npm ci).
RUST_PKGS=(rustc cargo libstd-rust-dev-wasm32)
rust_missing=()
for pkg in "${RUST_PKGS[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed"; then
		rust_missing+=("$pkg")
	fi
done
if [ "${#rust_missing[@]}" -eq 0 ]; then
	echo "rust (wasm32-wasi): already installed ($(/usr/bin/rustc --version))"
else
	apt_install "${rust_missing[@]}"
	echo "rust (wasm32-wasi): installed ${rust_missing[*]}"
fi

if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
	echo "node: already installed ($(node --version))"
else
	apt_install nodejs npm
	echo "node: installed"
fi
AS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/guest-sdk/assemblyscript"
if [ -x "$AS_DIR/node_modules/.bin/asc" ]; then
	echo "assemblyscript: already installed ($("$AS_DIR/node_modules/.bin/asc" --version))"
else
	(cd "$AS_DIR" && npm ci --no-audit --no-fund --loglevel=error)
	echo "assemblyscript: installed ($("$AS_DIR/node_modules/.bin/asc" --version))"
fi
# === end guest SDK toolchains ===
