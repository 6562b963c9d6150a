package shared

// Limits of a portable-home archive, shared by botd (whose import refuses
// more and whose export never produces more) and the worker (whose
// checkpoint cap may not exceed what an import accepts, or a checkpoint
// could be stored that no machine would ever restore).
const (
	// WorkspaceMaxImportBytes is the default cap on the sum of an
	// archive's entry sizes.
	WorkspaceMaxImportBytes = 50 << 30
	// WorkspaceMaxImportEntries is the default cap on its entries.
	WorkspaceMaxImportEntries = 1_000_000
)

// WorkspaceWireLimit is the most bytes an import reads for an archive whose
// content is at most maxBytes in at most maxEntries entries: tar headers,
// PAX records and padding on top of the content.
func WorkspaceWireLimit(maxBytes int64, maxEntries int) int64 {
	return maxBytes + int64(maxEntries)*4096 + 1<<20
}
