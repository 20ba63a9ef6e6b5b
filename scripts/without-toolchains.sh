#!/usr/bin/env bash
# Runs a command with the guest toolchains absent, to check that the
# hermetic tier needs none of them (as root):
#
#   scripts/without-toolchains.sh go test -short ./...
#
# The script re-runs itself in a private mount namespace (unshare -m), so
# that nothing changes outside the command. There an overlay on /usr/bin
# whites out clang, LLVM's tools, Debian's cargo, rustc and rustdoc, node,
# npm and npx, and empty mounts hide LLVM 14, wasi-libc, the global npm
# packages and rustup's ~/.cargo/bin. gcc stays: it is the system's
# compiler for cgo, not a guest toolchain.
set -euo pipefail
if [ "${SLUICE_PRIVATE_MOUNTS:-}" != "$$" ]; then
	# A new mount namespace, always: the mounts below must not be the host's.
	exec unshare -m --propagation private bash -c 'SLUICE_PRIVATE_MOUNTS=$$ exec "$0" "$@"' "$0" "$@"
fi
start=$PWD
cd /usr/bin
names=$(ls -d clang* cargo* rustc* rustdoc* rust-* node nodejs npm npx wasm-ld* lld* ld.lld* llvm-* 2>/dev/null || true)
up=$(mktemp -d) work=$(mktemp -d)
for n in $names; do mknod "$up/$n" c 0 0; done
mount -t overlay overlay -o lowerdir=/usr/bin,upperdir="$up",workdir="$work" /usr/bin
for d in /usr/lib/llvm-14 /usr/share/wasi-sysroot /usr/lib/node_modules "$HOME/.cargo/bin"; do
	if [ -d "$d" ]; then mount -t tmpfs none "$d"; fi
done
export PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
for x in clang-14 clang cargo rustc node npm; do
	if command -v "$x" >/dev/null; then echo "still on PATH: $x" >&2; exit 1; fi
done
for x in /usr/bin/cargo /usr/bin/rustc; do
	if [ -e "$x" ]; then echo "still there: $x" >&2; exit 1; fi
done
cd "$start"
exec "$@"
