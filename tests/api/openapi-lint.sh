#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# api/openapi.json is a valid OpenAPI 3.1 document that passes Redocly's
# recommended rules with no error and no warning (api/redocly.yaml justifies
# its one exception). Redocly's telemetry and update check are switched off.
set -eu
src=${ROCK_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${ROCK_TEST_NODE_MODULES:-$src/tests/js/node_modules}/.bin/redocly
[ -x "$bin" ] || {
    echo "openapi-lint: $bin not found (run scripts/install-deps.sh)" >&2
    exit 1
}
out=$(mktemp)
trap 'rm -f "$out" "$out.clean"' EXIT
rc=0
(cd "$src" && REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true NO_UPDATE_NOTIFIER=1 \
    "$bin" lint --config api/redocly.yaml --format=stylish api/openapi.json) >"$out" 2>&1 || rc=$?
# Drop Redocly's boxed notices (e.g. about the Node.js version).
grep -v '[║╔╚]' "$out" >"$out.clean" || true
cat "$out.clean"
[ $rc = 0 ] || {
    echo "openapi-lint: redocly lint failed ($rc)"
    exit 1
}
if grep -qi 'warning' "$out.clean"; then
    echo "openapi-lint: redocly reported warnings"
    exit 1
fi
echo "openapi-lint: api/openapi.json is valid OpenAPI 3.1, no lint problems"
