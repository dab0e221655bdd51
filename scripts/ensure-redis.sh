#!/usr/bin/env bash
# ensure-redis.sh: make sure a redis-server binary (>= 7) is on PATH for the
# tests, which start their own servers on free loopback ports. Installs it
# with the system package manager when run as root; otherwise says what to
# install. It never starts or touches a Redis the machine already runs.
set -euo pipefail

have_redis() {
	command -v redis-server >/dev/null 2>&1 || return 1
	local v
	v=$(redis-server --version | sed -n 's/.* v=\([0-9]*\)\..*/\1/p')
	[ -n "$v" ] && [ "$v" -ge 7 ]
}

if have_redis; then
	exit 0
fi

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "ensure-redis: installing redis-server with apt-get" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq redis-server >/dev/null
	# The package may start a system service; the tests never use it.
	have_redis && exit 0
fi

cat >&2 <<'MSG'
ensure-redis: the tests need redis-server >= 7 on PATH.
Install it, for example:
  Debian/Ubuntu: sudo apt-get install -y redis-server
  macOS:         brew install redis
The tests start their own redis-server on free loopback ports.
MSG
exit 1
