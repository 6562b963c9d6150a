#!/usr/bin/env bash
# Regenerates process/ and filesystem/ from ../spec/envd/*.proto (see generate.go).
set -euo pipefail
cd "$(dirname "$0")"
command -v protoc >/dev/null || { echo "gen.sh: protoc missing (apt-get install protobuf-compiler libprotobuf-dev, or bash scripts/provision.sh)" >&2; exit 1; }
mod=github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
# The plugins at the versions apps/worker/go.mod pins (google.golang.org/protobuf,
# connectrpc.com/connect), so the generated code matches the runtime it links.
go build -o "$bin/" google.golang.org/protobuf/cmd/protoc-gen-go connectrpc.com/connect/cmd/protoc-gen-connect-go
inc=()
[ -f /usr/include/google/protobuf/timestamp.proto ] && inc=(-I /usr/include)
rm -rf process filesystem
protoc -I ../spec/envd "${inc[@]}" \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" \
  --plugin=protoc-gen-connect-go="$bin/protoc-gen-connect-go" \
  --go_out=. --go_opt=paths=source_relative \
  --go_opt=Mprocess/process.proto=$mod/process \
  --go_opt=Mfilesystem/filesystem.proto=$mod/filesystem \
  --connect-go_out=. --connect-go_opt=paths=source_relative \
  --connect-go_opt=Mprocess/process.proto=$mod/process \
  --connect-go_opt=Mfilesystem/filesystem.proto=$mod/filesystem \
  process/process.proto filesystem/filesystem.proto
