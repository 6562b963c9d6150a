#!/usr/bin/env bash
# Generates schema.d.ts (the TypeScript types of the worker's API) from
# ../openapi.json with openapi-typescript, at the version package-lock.json
# pins. `go generate ./internal/openapi/` runs it; the Go test
# TestOpenAPITypeScriptClient fails when the committed schema.d.ts is not
# what this makes.
#   generate.sh           write schema.d.ts
#   generate.sh OUT       write OUT instead (the staleness check)
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x node_modules/.bin/openapi-typescript ]; then
	npm ci --no-fund --no-audit >&2
fi
node_modules/.bin/openapi-typescript ../openapi.json --output "${1:-schema.d.ts}" >&2
