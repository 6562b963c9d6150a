// Package envd holds the Go code generated from E2B's envd protobuf services
// (spec/envd/process/process.proto, spec/envd/filesystem/filesystem.proto):
// the message types (protoc-gen-go) and the Connect-RPC clients and handlers
// (connectrpc.com/connect's protoc-gen-connect-go). The output is checked in;
// building never needs protoc. Regenerate with `go generate` in this folder
// (needs protoc, Debian's protobuf-compiler + libprotobuf-dev, which
// scripts/provision.sh installs as a build tool; the two plugins are built from
// the module versions pinned in apps/worker/go.mod).
package envd

//go:generate bash gen.sh
