// Package doccheck has no code of its own: its test holds the repository's
// Markdown (README.md, SECURITY.md, docs/*.md) to the tree it describes.
// Every relative link must reach a file (and a heading, for an anchor),
// every `make <target>` the docs show must be a Makefile target, and every
// `worker <command> [<subcommand>]` must be one the worker's CLI dispatches.
package doccheck
