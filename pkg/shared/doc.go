// Package shared holds the wire types that botd and the worker both speak:
// error codes and the error envelope, health, desktop actions, the apply-guard
// rule and a typed botd client. It has no dependencies on either side.
package shared
